// SPDX-License-Identifier: Apache-2.0
// joule/optimize/power_limit.hpp — the just-in-time GPU power-limit optimizer (Zeus NSDI'23 §4, "JIT
// profiling"): during the first iterations of a training job (or the first request batches of an inference
// server) it runs a few steps at each candidate power limit, measures time and energy, builds the
// time–energy frontier of one step, lets a Policy pick a point from it and keeps that limit.
//
// Typical use (one process per node or per GPU; the hooks are called by the training loop):
//
//   joule::measure::EnergyMonitor monitor(gpus, {}, joule::SteadyClock::instance());
//   joule::optimize::PowerLimitOptimizer optimizer(monitor, {.profile_dir = "/shared/joule",
//                                                            .job_key = "resnet50-imagenet"});
//   for (epoch …) {
//     for (batch …) {
//       optimizer.on_step_begin();
//       train_step(batch);
//       optimizer.on_step_end();
//     }
//     optimizer.on_epoch_end();
//   }
//
// See docs/optimize.md for the options, the profile file and the signal handling in prose.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/settings_guard.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/steady_state.hpp"
#include "joule/probe/card.hpp"

namespace joule::optimize {

/// Combines one rank's measurement of a profile window with the other ranks' (data-parallel training with
/// one process per GPU or per node). Every rank's optimizer calls the collective methods in the same
/// order, so an implementation may use blocking collectives: an MPI or torch.distributed all-reduce
/// (`sum` for energy, `max` for time) plugs in here; the Python bindings provide a torch.distributed one.
///
/// The job is assumed homogeneous: every rank monitors the same number of GPUs of the same model.
class RankAggregator {
 public:
  virtual ~RankAggregator() = default;

  /// @return this process's rank, in [0, world_size()).
  virtual int rank() const = 0;
  /// @return the number of ranks (≥ 1).
  virtual int world_size() const = 0;

  /// Collective. @param energy_j this rank's energy over a profile window (summed over its GPUs), J.
  /// @param time_s this rank's duration of the window, s.
  /// @return {energy summed over all ranks, J; time maximised over all ranks, s}.
  virtual std::pair<double, double> aggregate(double energy_j, double time_s) = 0;

  /// Collective. @return true if `value` is true on every rank. Used once at construction, when a profile
  /// store is configured and world_size() > 1, so that either every rank uses the stored profile or every
  /// rank profiles (ranks that disagreed would deadlock in aggregate()). The default implementation
  /// calls aggregate(value ? 1 : 0, 0) and checks that the sum equals world_size().
  virtual bool all_ranks(bool value);
};

/// The aggregator of a job that runs as one process: rank 0 of 1; aggregate() returns its input.
class SingleProcessAggregator final : public RankAggregator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::pair<double, double> aggregate(double energy_j, double time_s) override { return {energy_j, time_s}; }
  bool all_ranks(bool value) override { return value; }
};

/// Where the optimizer is in its profile.
enum class PowerLimitState {
  kReady,      ///< waiting (wait_steps at the start, or one step after an epoch end interrupted a profile)
  kWarmup,     ///< running steps at a candidate limit before measuring it
  kProfiling,  ///< a profile window at a candidate limit is open
  kDone,       ///< the chosen limit is set; the hooks do nothing more
};

/// @return "ready", "warmup", "profiling" or "done".
std::string_view to_string(PowerLimitState state);

/// What the GPUs are set back to when the optimizer stops (destruction, process exit, SIGINT/SIGTERM/
/// SIGHUP).
enum class RestoreTarget {
  kDefault,  ///< the board's default power limit (PowerLimitConstraints::default_mw), as Zeus does
  /// the limit each GPU had when the optimizer was constructed (e.g. a site-wide cap); the default for a
  /// GPU whose limit cannot be read
  kInitial,
};

struct PowerLimitOptions {
  /// Steps to let pass before the first candidate is set (≥ 0).
  int wait_steps = 1;
  /// Steps run at a candidate before its profile window opens (≥ 0). 0 opens the window in the same
  /// on_step_begin() that sets the limit: fine for simulation, not recommended on real GPUs, whose first
  /// step after a change is transitional. (Upstream Zeus accepts 0 and then never leaves warmup.)
  int warmup_steps = 10;
  /// Steps measured per candidate (≥ 1).
  int profile_steps = 40;
  /// After the warm-up steps, also wait for a thermal steady state before each candidate's window opens
  /// (measure/steady_state.hpp): a cold GPU draws less leakage power than a warm one, and a GPU takes a
  /// minute or more to settle after its limit changes. Default: on (kSteady) for real GPUs, off for simulated
  /// ones. With several ranks, every rank waits until all are ready (one all_ranks() per step while waiting).
  measure::SteadyStateOptions steady_state;
  /// Distance between candidates, W (≥ 0.001, i.e. 1 mW).
  double step_w = 25;
  /// Picks the limit from the per-step frontier. ZeusCost with max_power_w == 0 (the default) means
  /// "derive it": max_power_w = the largest profiled limit (W) × GPUs in the monitor × aggregator
  /// world_size(), because the energy it is weighed against is summed over all those GPUs.
  Policy policy = ZeusCost{0.5, 0};
  /// Combines measurements across ranks; null means SingleProcessAggregator.
  std::shared_ptr<RankAggregator> aggregator;
  /// Folder of the profile store; empty disables it. The profile of `job_key` is the file
  /// `<profile_dir>/<job_key>.json` (format in PowerLimitOptimizer's documentation). The folder is
  /// created when the profile is saved.
  std::string profile_dir;
  /// Names the job in the store (required with profile_dir): letters, digits, '.', '_', '-'; not
  /// starting with '.'.
  std::string job_key;
  /// What the GPUs are set back to.
  RestoreTarget restore_to = RestoreTarget::kDefault;
  /// Restore the limits on SIGINT, SIGTERM and SIGHUP before the signal takes its course (see the class
  /// documentation). Destruction and normal process exit restore regardless.
  bool restore_on_signals = true;
  /// A frontier card of the GPUs' model (`joule probe`; read it with read_card_for()). With a card the
  /// optimizer starts from it (docs/optimize.md, "Starting from a frontier card"): it measures the maximum
  /// limit as usual, sizes the later windows from the card's counter and settling figures, measures only the
  /// limits the card's prior (probe::KnobPrior) cannot rule out, and falls back to measuring every limit when
  /// the card does not describe the workload. Without one (the default) nothing changes. With several ranks,
  /// give every rank the same card (they check it with one collective at construction).
  std::optional<probe::Card> card;
  /// Names the card in messages and logs (its path); "the card" if empty.
  std::string card_source;
};

/// @return kInvalidArgument naming the first invalid option and its valid range; the policy's own errors
/// (see joule::validate(const Policy&)) after substituting a positive max_power_w for a ZeusCost whose
/// max_power_w is 0.
Result<void> validate(const PowerLimitOptions& options);

/// One candidate's profile window, aggregated over GPUs and ranks.
struct PowerLimitMeasurement {
  uint32_t power_limit_mw = 0;  ///< the candidate limit, mW
  double energy_j = 0;          ///< energy of the window: Σ over the monitor's GPUs, Σ over ranks, J
  double time_s = 0;            ///< duration of the window: max over ranks, s
  int steps = 0;                ///< steps the window covered (profile_steps when it was measured)

  /// @return energy of one step, J (what the policy sees).
  double energy_per_step_j() const { return energy_j / steps; }
  /// @return time of one step, s (what the policy sees).
  double time_per_step_s() const { return time_s / steps; }
};

/// @return the candidate limits for `constraints`, highest first: max, max − step, … while ≥ min, and
/// then min itself if the grid skipped it (upstream Zeus may skip the exact minimum). An empty list if
/// min > max. @param step_mw > 0.
std::vector<uint32_t> power_limit_candidates_mw(const device::PowerLimitConstraints& constraints,
                                                uint32_t step_mw);

class CardGuide;  // joule/optimize/power_limit_card.hpp

/// How a card was used.
enum class CardPath {
  kNone,       ///< no card was given (or the choice came from a stored profile)
  kSearching,  ///< measuring the limits the card's prior cannot rule out
  kPredicted,  ///< done: every limit left unmeasured was predicted worse than the choice by a safe margin
  kFallback,   ///< the card did not describe the workload: every limit was measured, as without a card
};

/// @return "none", "searching", "predicted" or "fallback".
std::string_view to_string(CardPath path);

/// The just-in-time power-limit optimizer. It sets ONE power limit on every GPU of the monitor (and, with
/// an aggregator, the same limit on every rank), so the GPUs must be identical (same name and power-limit
/// constraints).
///
/// **State machine** (driven by on_step_begin() and on_epoch_end()):
/// - Ready(steps = wait_steps + 1) at construction, with every GPU at its maximum limit. Each
///   on_step_begin() counts one step down; at 0 the next candidate is set → Warmup.
/// - Warmup(steps = warmup_steps): each on_step_begin() counts down; at 0 the profile window
///   "__joule_power_limit_<W>" opens on the monitor → Profiling.
/// - Profiling(steps = profile_steps): each on_step_begin() counts down; at 0 the window closes and its
///   measurement is recorded (energy summed over the GPUs, then aggregate()d across ranks). The next
///   candidate is set → Warmup; after the last one the frontier is built, the policy picks, the chosen
///   limit is set and logged, the profile is saved → Done.
/// - on_epoch_end() during Warmup or Profiling cancels the window, sets the maximum limit and goes to
///   Ready(steps = 1), so the interrupted candidate restarts its warmup at the next step (the epoch
///   boundary's evaluation and checkpointing do not pollute a profile). In Ready or Done it does nothing.
///
/// With the defaults, each candidate costs 50 steps and the first is set at the second step: a V100
/// (250 → 100 W, 7 candidates) is done at the on_step_begin() after 1 + 7·50 = 351 steps.
///
/// **What the policy sees**: per-step figures (window energy and time ÷ profile_steps). A profile step
/// may be a training iteration or, for inference, a request batch; then `Deadline{latency_s}` bounds the
/// per-batch latency and the optimizer picks the least-energy limit that meets it. ZeusCost and
/// MaxSlowdown choose the same point per step as per window. If no profiled limit meets a Deadline, the
/// fastest limit is chosen and a warning is logged (the job keeps running). MaxSlowdown's reference is
/// the fastest profiled limit (Zeus uses the highest limit; the two differ only through noise).
///
/// **Profile store** (`<profile_dir>/<job_key>.json`, written atomically by rank 0 after profiling):
/// @code{.json}
/// {"format": "joule-power-limit-profile", "version": 1, "job_key": "resnet50-imagenet",
///  "gpu_name": "Tesla V100-PCIE-32GB", "gpu_count": 1, "world_size": 1,
///  "constraints": {"min_w": 100, "max_w": 250, "default_w": 250}, "profile_steps": 40,
///  "measurements": [{"power_limit_w": 250, "energy_j": 4012.5, "time_s": 20.1}, …]}
/// @endcode
/// energy_j and time_s are per window of profile_steps steps, aggregated as above. At construction a
/// stored profile whose job_key, gpu_name, gpu_count, world_size and constraints match is used instead
/// of profiling: the policy picks from it, the limit is set, the state is Done. A file that cannot be
/// read or parsed, or that does not match, is reported with a warning on joule::log() and the job is
/// profiled again (and the file rewritten); a failed save is a warning too. Neither stops the job.
///
/// **Restoring the limits** (to options.restore_to): the optimizer changes limits only through a
/// device::SettingsGuard, so they are restored once (never twice) after the optimizer last changed a limit,
/// on whichever comes first: destruction; normal process exit while the optimizer is still alive; SIGINT,
/// SIGTERM or SIGHUP (if options.restore_on_signals), after which the signal takes its course as
/// device::SettingsGuard describes (the default disposition: the process dies of the signal; a handler
/// function, e.g. Python's: it is called from the restorer thread and our handler stays installed). If
/// the process lives on, the next on_step_begin() re-applies the optimizer's limit, and an interrupted
/// profile window is re-measured as after an epoch end. A forked child restores nothing. After process
/// exit started, limits are never changed again.
/// Only power limits are restored: this optimizer never changes SM clocks.
///
/// **Thread-safety**: call the hooks and accessors from one thread (the training loop). Destruction,
/// exit and signal restores synchronise internally. The monitor and its GPUs must outlive the optimizer.
/// Two optimizers must not control the same GPUs.
class PowerLimitOptimizer {
 public:
  /// Reads the GPUs' constraints, sets every GPU to the maximum limit (or to the stored profile's choice)
  /// and installs the restore hooks.
  /// @throws joule::Exception kInvalidArgument for invalid options (see validate()), a monitor without
  /// GPUs or GPUs that are not identical; a device's error (e.g. kPermissionDenied: setting power limits
  /// needs root or CAP_SYS_ADMIN) if its constraints cannot be read or its limit cannot be set.
  PowerLimitOptimizer(measure::EnergyMonitor& monitor, PowerLimitOptions options = {});
  /// Cancels an open profile window and restores the limits. Never throws.
  ~PowerLimitOptimizer();
  PowerLimitOptimizer(const PowerLimitOptimizer&) = delete;
  PowerLimitOptimizer& operator=(const PowerLimitOptimizer&) = delete;

  /// Call at the start of every step (training iteration, request batch).
  /// @throws joule::Exception if a window cannot be read or a limit cannot be set.
  void on_step_begin();
  /// Call at the end of every step. Does nothing now; exists so that loops need not change later.
  void on_step_end();
  /// Call at the end of every epoch (before evaluation). @throws as on_step_begin().
  void on_epoch_end();
  /// Replaces the chosen limit with `power_limit_mw`, one of the profiled candidates (ChaseOptimizer
  /// re-picks it from frontier() as the grid's carbon intensity changes). It is set through the same guard,
  /// so the restore contract is unchanged, and becomes chosen_power_limit_mw() (re-applied after a signal
  /// restore). @throws joule::Exception kState before Done, kInvalidArgument for a limit that is not a
  /// candidate, and as on_step_begin() if a limit cannot be set.
  void override_power_limit_mw(uint32_t power_limit_mw);

  PowerLimitState state() const { return state_; }
  /// @return the candidates, highest first.
  const std::vector<uint32_t>& candidates_mw() const { return candidates_mw_; }
  /// @return the candidate being warmed up or profiled (or next, in Ready); the chosen limit in Done.
  uint32_t current_power_limit_mw() const;
  /// @return the measurements so far, in profiling order (or those of the stored profile).
  const std::vector<PowerLimitMeasurement>& measurements() const { return measurements_; }
  /// @return the per-step frontier of the measurements; empty until Done.
  const Frontier<uint32_t>& frontier() const { return frontier_; }
  /// @return the limit the policy chose, mW; nullopt until Done.
  std::optional<uint32_t> chosen_power_limit_mw() const { return chosen_mw_; }
  /// @return the policy in use, with a derived ZeusCost max_power_w filled in.
  const Policy& policy() const { return policy_; }
  /// @return the GPUs' common constraints.
  const device::PowerLimitConstraints& constraints() const { return constraints_; }
  /// @return the profile file, or nullopt without a profile store.
  const std::optional<std::string>& profile_path() const { return profile_path_; }
  /// @return how the optimizer waits before measuring each candidate (options' steady_state, resolved).
  measure::SteadyStateMode steady_state_mode() const { return steady_->mode(); }
  /// @return true if the choice came from a stored profile (no profiling was done).
  bool loaded_from_profile() const { return loaded_from_profile_; }
  /// @return how the card was used (kNone without a card).
  CardPath card_path_taken() const { return card_path_; }
  /// @return why the card path was taken, as logged ("" without a card).
  const std::string& card_reason() const { return card_reason_; }
  /// @return the steps run while a candidate was being warmed up or measured (wait steps excluded, steps an
  /// epoch end interrupted included): what a card shortens.
  int64_t profiling_steps() const { return profiling_steps_; }

 private:
  void apply(uint32_t power_limit_mw);
  void start_candidate();  // sets candidates_mw_[index_] and enters Warmup (or Profiling if warmup is 0)
  void start_from_card();  // checks and reads options_.card; one collective with several ranks
  void next_with_card();   // after a measurement with a card: the next candidate, or choose()
  void begin_profile();
  bool warmed_up();  // collective with several ranks
  void finish_profile();
  void interrupt();
  void choose();
  bool try_load_profile();
  void save_profile() const;
  std::string window_name() const;

  measure::EnergyMonitor& monitor_;
  PowerLimitOptions options_;
  std::shared_ptr<RankAggregator> aggregator_;
  Policy policy_;
  device::PowerLimitConstraints constraints_;
  std::string gpu_name_;
  std::vector<uint32_t> candidates_mw_;
  std::optional<std::string> profile_path_;

  PowerLimitState state_ = PowerLimitState::kReady;
  size_t index_ = 0;  // candidate being warmed up / profiled / next
  int64_t steps_left_ = 0;
  std::vector<PowerLimitMeasurement> measurements_;
  Frontier<uint32_t> frontier_;
  std::optional<uint32_t> chosen_mw_;
  bool loaded_from_profile_ = false;

  std::unique_ptr<device::SettingsGuard> guard_;
  std::unique_ptr<measure::SteadyStateDetector> steady_;

  // The windows of the candidate in progress (the options', or the card's after the first measurement).
  int warmup_steps_ = 0;
  int profile_steps_ = 0;
  int64_t profiling_steps_ = 0;
  bool extending_anchor_ = false;  // with a card: the first window is being extended
  std::unique_ptr<CardGuide> card_guide_;
  CardPath card_path_ = CardPath::kNone;
  std::string card_reason_;
};

}  // namespace joule::optimize
