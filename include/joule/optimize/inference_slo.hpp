// SPDX-License-Identifier: Apache-2.0
// joule/optimize/inference_slo.hpp — the GPU knob of an LLM serving replica (its SM clock, or its power
// limit where clocks cannot be locked), chosen online: least energy while p99 time-to-first-token and
// time-per-output-token meet their SLOs. Plus the baselines it is compared with (a fixed knob, a
// utilisation governor).
//
//   SloClockController controller({.ttft_s = 0.5, .tpot_s = 0.05}, gpu.supported_sm_clocks_mhz().value());
//   // serving loop, per iteration:
//   uint32_t clock = controller.clock_mhz();               // lock it (SettingsGuard) if it changed
//   ... run the iteration, measure its time and energy ...
//   controller.on_iteration({.start_s = t0, .end_s = t1, .energy_j = e, .knob = Knob::sm_clock_mhz(clock),
//   …}); controller.on_request_done({.finish_s = t1, .ttft_s = …, .tpot_s = …});
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/probe/prior.hpp"

namespace joule::optimize {

/// What a serving policy turns: the SM clock (locked), or the power limit on GPUs whose clocks cannot be
/// locked.
enum class KnobKind {
  kSmClockMhz,   ///< an SM clock lock, MHz
  kPowerLimitW,  ///< a power limit, W
};

/// @return the unit of a knob's value: "MHz" or "W".
std::string_view knob_unit(KnobKind kind);
/// @return the knob's name with its unit, "sm_clock_mhz" or "power_limit_w": the stem of every output field
/// that carries a knob value (e.g. `joule infer replay`'s JSON `best_fixed_power_limit_w`).
std::string_view knob_field(KnobKind kind);
/// @return "clock" or "power limit", for messages.
std::string_view knob_noun(KnobKind kind);

/// One setting of the knob: a value and what it is.
struct Knob {
  KnobKind kind = KnobKind::kSmClockMhz;
  uint32_t value = 0;  ///< in knob_unit(kind): MHz or W

  static Knob sm_clock_mhz(uint32_t clock_mhz) { return {KnobKind::kSmClockMhz, clock_mhz}; }
  static Knob power_limit_w(uint32_t power_limit_w) { return {KnobKind::kPowerLimitW, power_limit_w}; }
  bool operator==(const Knob&) const = default;
};

/// Per-request latency objectives.
struct ServingSlo {
  double ttft_s = 0;         ///< p-th percentile time to first token, s (> 0)
  double tpot_s = 0;         ///< p-th percentile time per output token after the first, s (> 0)
  double attainment = 0.99;  ///< the share of requests that must meet both, in (0, 1]

  /// @return whether a request with this TTFT and TPOT (none: one output token) met both SLOs.
  bool met(double request_ttft_s, std::optional<double> request_tpot_s) const {
    return request_ttft_s <= ttft_s && (!request_tpot_s || *request_tpot_s <= tpot_s);
  }
};

/// @return kInvalidArgument naming the bad field.
Result<void> validate(const ServingSlo& slo);

/// One measured iteration of the serving loop.
struct IterationSample {
  double start_s = 0;
  double end_s = 0;
  double energy_j = 0;           ///< of the whole replica
  Knob knob{};                   ///< the knob it ran at (a sample of another kind is not learned from)
  int64_t decode_requests = 0;   ///< requests that decoded a token
  int64_t prefill_tokens = 0;    ///< prompt tokens processed
  int64_t waiting_requests = 0;  ///< requests queued, not yet admitted, after it
  double oldest_waiting_s = 0;   ///< how long the oldest queued request has waited at end_s, s
  /// Prompt tokens not yet prefilled after it, of every request without its first token (queued, or
  /// admitted with its prompt partly prefilled); 0 if unknown. What the next first tokens wait for.
  int64_t pending_prompt_tokens = 0;
  double oldest_pending_s = 0;  ///< how long the oldest request without its first token has waited, s
};

/// A finished request's latency.
struct RequestSample {
  double finish_s = 0;
  double ttft_s = 0;
  std::optional<double> tpot_s;  ///< none for a request with one output token
  int64_t prompt_tokens = 0;     ///< 0 if unknown; lets the controller predict long prompts' TTFT
};

/// @return kInvalidArgument naming the first bad field of a sample from outside (e.g. Python): a start_s
/// that is not finite, an end_s before it, a negative energy_j, count or oldest_waiting_s.
Result<void> validate(const IterationSample& sample);
/// @return kInvalidArgument naming a finish_s that is not finite, or a negative ttft_s, tpot_s or
/// prompt_tokens.
Result<void> validate(const RequestSample& sample);

/// What chooses the knob (SM clock or power limit) of a serving replica. Called by one serving loop (not
/// thread-safe).
class ServingKnobPolicy {
 public:
  virtual ~ServingKnobPolicy() = default;
  /// @return e.g. "joule", "max_clock".
  virtual std::string name() const = 0;
  /// @return the knob the next iteration should run at (one of the values given at construction, of the
  /// kind given there).
  virtual Knob knob() const = 0;
  /// @return knob().kind.
  KnobKind knob_kind() const { return knob().kind; }
  /// @return the SM clock the next iteration should run at, MHz. @throws joule::Exception (kState) when the
  /// policy turns the power limit.
  uint32_t clock_mhz() const;
  /// @return the power limit the next iteration should run under, W. @throws joule::Exception (kState) when
  /// the policy turns the SM clock.
  uint32_t power_limit_w() const;
  virtual void on_iteration(const IterationSample& sample) = 0;
  virtual void on_request_done(const RequestSample& /*sample*/) {}
  /// The replica idled over [from_s, to_s] drawing `energy_j` (all its GPUs).
  virtual void on_idle(double /*from_s*/, double /*to_s*/, double /*energy_j*/) {}
};

/// Always the same knob.
class FixedKnobPolicy final : public ServingKnobPolicy {
 public:
  FixedKnobPolicy(std::string name, Knob knob) : name_(std::move(name)), knob_(knob) {}
  std::string name() const override { return name_; }
  Knob knob() const override { return knob_; }
  void on_iteration(const IterationSample& /*sample*/) override {}

 private:
  std::string name_;
  Knob knob_;
};

/// A utilisation governor (like Linux's schedutil): every interval, knob = current knob × busy share /
/// target share, rounded up to a supported value. It knows nothing of latency.
class UtilizationGovernor final : public ServingKnobPolicy {
 public:
  struct Options {
    double interval_s = 1.0;
    double target_utilization = 0.8;  ///< in (0, 1]
  };
  /// @param values the supported knob values of `kind` (any order, not empty). @throws joule::Exception
  /// (kInvalidArgument) for no values or bad options.
  UtilizationGovernor(KnobKind kind, std::vector<uint32_t> values, Options options);
  UtilizationGovernor(KnobKind kind, std::vector<uint32_t> values)
      : UtilizationGovernor(kind, std::move(values), Options{}) {}
  /// Over SM clocks, MHz.
  UtilizationGovernor(std::vector<uint32_t> clocks_mhz, Options options)
      : UtilizationGovernor(KnobKind::kSmClockMhz, std::move(clocks_mhz), options) {}
  explicit UtilizationGovernor(std::vector<uint32_t> clocks_mhz)
      : UtilizationGovernor(KnobKind::kSmClockMhz, std::move(clocks_mhz), Options{}) {}
  std::string name() const override { return "utilization_governor"; }
  Knob knob() const override { return {kind_, values_[level_]}; }
  void on_iteration(const IterationSample& sample) override;
  void on_idle(double from_s, double to_s, double energy_j) override;

 private:
  void tick(double now_s);
  KnobKind kind_;
  std::vector<uint32_t> values_;  // highest first
  Options options_;
  size_t level_ = 0;
  double window_start_s_ = -1;
  double busy_s_ = 0;
};

/// How SloClockController decides.
struct SloControllerOptions {
  double interval_s = 1.0;       ///< how often it re-decides, s of serving time
  double window_s = 20.0;        ///< the latency window its percentiles come from, s
  double margin = 0.85;          ///< aim at margin × SLO at first; then the error budget's pace moves it
  double min_margin = 0.5;       ///< the margin's floor
  int min_samples = 8;           ///< iterations at a level before its model is trusted
  int max_step_down = 4;         ///< levels it may go down per decision (up: any)
  size_t candidate_levels = 24;  /// knob values it considers, spread evenly over the supported ones
  /// GPUs the knob is set on together (a tensor-parallel group): a power limit applies to each GPU, while
  /// the samples' energy is of them all. Only power-limit mode reads it.
  int knob_gpus = 1;
  double max_margin = 2.0;  ///< the margin's ceiling (> 1: the predicted tails may pass the SLO)
  /// With a card (SloClockController::start_from_card): how far a level it went to on the card's word may
  /// turn out slower or hungrier than the card predicted, or the card's fit to the measured levels may be
  /// off (its time residual), before the card is dropped, as a share (0.1 = 10%).
  double card_tolerance = 0.10;
};

/// What the controller does with its card (SloClockController::card_use()).
struct CardUse {
  enum class State {
    kNone,     ///< no card: unmeasured levels are predicted pessimistically
    kActive,   ///< unmeasured levels are predicted by the card, fitted to the measured ones
    kDropped,  ///< the card disagreed with a measurement: back to the pessimistic predictions
  };
  State state = State::kNone;
  std::string why;  ///< one sentence for a log line: which path and why ("" without a card)
};

/// One knob level's learned model (for reports and tests).
struct KnobModel {
  Knob knob{};
  int64_t samples = 0;
  double predicted_time_s = 0;   ///< of the current mean iteration
  double predicted_power_w = 0;  ///< of the replica, busy
  bool measured = false;         ///< false: predicted from a neighbour (pessimistic in time)
};

/// Reads the card at `path` (probe::read_card against `device`) and makes its prior of the knob `kind`
/// turns (probe::CardKnob::kSmClock for clocks, kPowerLimit for power limits), for
/// SloClockController::start_from_card. Errors: read_card()'s (a card for another model or driver, naming
/// both; a newer schema; not a card) and KnobPrior::from_card()'s (no curves of that knob).
Result<probe::KnobPrior> read_card_prior(const std::string& path, const probe::DeviceIdentity& device,
                                         KnobKind kind);

/// The share of its error budget the SLO controller aims to spend: the margin is 1 there.
inline constexpr double kPaceTargetBudgetUse = 0.6;

/// The SLO controller's margin for the share of the error budget spent (`budget_use`: misses / the misses
/// the SLO allows; 0 = none, 1 = all): `max_margin` at 0, 1 at kPaceTargetBudgetUse, `min_margin` at 1 or
/// more, log-linear in between, clamped to [min_margin, max_margin]. Continuous and non-increasing.
double pace_margin_at(double budget_use, double min_margin, double max_margin);

/// The SLO-aware clock controller: it turns the SM clock (or, built with KnobKind::kPowerLimitW, the power
/// limit; "clock" below reads "knob value" then). It learns, per clock level, iteration time and power as
/// linear functions of the batch (decode requests, prefill tokens) by recursive least squares from the
/// measured iterations — no offline profile needed; seed() takes one to start from. A lower level is never
/// predicted hungrier than a faster one it has measured, nor faster than its own model or the faster
/// measured levels' isotonic fit (weighted by samples, so one level measured briefly in a burst cannot hold
/// every lower level up). Every interval it predicts, for each
/// level, the p99.5 TTFT and TPOT (the window's measured tails scaled by the predicted iteration time ratio;
/// the TPOT tail never under the mean iteration time of the last 2 s nor the current level's predicted one,
/// since finished requests show the pace of seconds ago)
/// and the mean power (busy share × busy power + idle share × idle power; a continuously busy replica gains
/// no idle time at a faster level), and picks the least-power level whose predictions are within margin ×
/// SLO (ties within 0.5% go to the lower level). Levels never measured are predicted by a card when it was
/// given one (start_from_card()), else pessimistically (a
/// clock as fully compute-bound, time ∝ 1/clock; a power limit below what the GPUs draw by the square root
/// of the dynamic power it leaves, per GPU: options.knob_gpus), so it explores downward only while even that
/// meets the SLO, one level beyond the deepest it has measured and at most max_step_down levels at a time.
/// The margin paces the error budget: it is pace_margin_at() of the share of the misses the SLO allows that
/// the requests of the last minutes (or the whole run, once over budget) spent.
///
/// Bursts, every iteration: when the oldest request without its first token plus the pending prompt tokens
/// at this level's prefill cost would pass 80% of the TTFT SLO, it goes up at once to the lowest level that
/// prefills them within 60%; when a request the engine has not admitted has waited half the TTFT SLO, or the
/// window's attainment falls below the target, to the highest clock (and not down again until requests
/// finished there give it tails to judge by). When the highest clock itself misses
/// the SLO for a whole window, slo_unattainable() turns true (it stays at the highest clock until the SLO is
/// met again).
class SloClockController final : public ServingKnobPolicy {
 public:
  /// @param values the supported knob values of `kind` (any order); @throws joule::Exception
  /// (kInvalidArgument) for a bad SLO, no values or bad options.
  SloClockController(ServingSlo slo, KnobKind kind, std::vector<uint32_t> values,
                     SloControllerOptions options = {});
  /// Over SM clocks, MHz.
  SloClockController(ServingSlo slo, std::vector<uint32_t> clocks_mhz, SloControllerOptions options = {})
      : SloClockController(slo, KnobKind::kSmClockMhz, std::move(clocks_mhz), options) {}
  ~SloClockController() override;
  SloClockController(const SloClockController&) = delete;
  SloClockController& operator=(const SloClockController&) = delete;

  std::string name() const override { return "joule"; }
  Knob knob() const override;
  void on_iteration(const IterationSample& sample) override;
  void on_request_done(const RequestSample& sample) override;
  void on_idle(double from_s, double to_s, double energy_j) override;

  /// Starts from a card (docs/inference.md, "Starting from a card"): until the card is dropped, a level
  /// never measured is predicted by `prior` (probe::KnobPrior of the card's kSmClock curves in clock mode,
  /// kPowerLimit in power-limit mode), fitted every decision to the measured levels' time and power of the
  /// current mean iteration, instead of pessimistically; so the controller may go down to the level the
  /// card predicts in one decision. Every safety stays: a lower level is still never predicted faster nor
  /// hungrier than a faster measured one, prefill (token cost, TTFT) is still predicted pessimistically,
  /// and the bursts' and error budget's rules are unchanged. The card is dropped for good (card_use() says
  /// why) when a level reached on its word runs slower, or draws more, than it predicted by more than
  /// options.card_tolerance, or when its fit to the measured levels is worse than that.
  /// @throws joule::Exception (kInvalidArgument) when the prior's knob is not the controller's.
  void start_from_card(probe::KnobPrior prior);
  /// @return whether a card is used, and why (or why it was dropped).
  CardUse card_use() const;
  /// Seeds the models with profiled iterations (e.g. a previous run's), as if measured.
  void seed(const std::vector<IterationSample>& samples);
  /// @return true while even the highest knob value misses the SLO.
  bool slo_unattainable() const;
  /// @return the window's share of requests meeting both SLOs (1 with none finished).
  double window_attainment() const;
  /// @return each candidate level's model for the current mean iteration, highest value first.
  std::vector<KnobModel> models() const;
  const ServingSlo& slo() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace joule::optimize
