// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/inference_slo.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "joule/core/numeric.hpp"
#include "joule/core/validate.hpp"

namespace joule::optimize {

Result<void> validate(const ServingSlo& slo) {
  if (!std::isfinite(slo.ttft_s) || slo.ttft_s <= 0) {
    return fail(ErrorCode::kInvalidArgument, "the TTFT SLO must be a positive number of seconds, got {}",
                slo.ttft_s);
  }
  if (!std::isfinite(slo.tpot_s) || slo.tpot_s <= 0) {
    return fail(ErrorCode::kInvalidArgument, "the TPOT SLO must be a positive number of seconds, got {}",
                slo.tpot_s);
  }
  if (!(slo.attainment > 0 && slo.attainment <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "the SLO attainment target must be in (0, 1], got {}",
                slo.attainment);
  }
  return {};
}

Result<void> validate(const IterationSample& sample) {
  JOULE_TRY(check_number(sample.start_s, NumberRule::any_finite(), "start_s"));
  JOULE_TRY(check_number(sample.end_s, NumberRule{.min = sample.start_s}, "end_s"));
  JOULE_TRY(check_number(sample.energy_j, NumberRule::non_negative(), "energy_j"));
  JOULE_TRY(check_number(static_cast<double>(sample.decode_requests), NumberRule::non_negative(),
                         "decode_requests"));
  JOULE_TRY(
      check_number(static_cast<double>(sample.prefill_tokens), NumberRule::non_negative(), "prefill_tokens"));
  JOULE_TRY(check_number(static_cast<double>(sample.waiting_requests), NumberRule::non_negative(),
                         "waiting_requests"));
  JOULE_TRY(check_number(sample.oldest_waiting_s, NumberRule::non_negative(), "oldest_waiting_s"));
  JOULE_TRY(check_number(static_cast<double>(sample.pending_prompt_tokens), NumberRule::non_negative(),
                         "pending_prompt_tokens"));
  JOULE_TRY(check_number(sample.oldest_pending_s, NumberRule::non_negative(), "oldest_pending_s"));
  return {};
}

Result<void> validate(const RequestSample& sample) {
  JOULE_TRY(check_number(sample.finish_s, NumberRule::any_finite(), "finish_s"));
  JOULE_TRY(check_number(sample.ttft_s, NumberRule::non_negative(), "ttft_s"));
  if (sample.tpot_s) {
    JOULE_TRY(check_number(*sample.tpot_s, NumberRule::non_negative(), "tpot_s"));
  }
  JOULE_TRY(
      check_number(static_cast<double>(sample.prompt_tokens), NumberRule::non_negative(), "prompt_tokens"));
  return {};
}

double pace_margin_at(double budget_use, double min_margin, double max_margin) {
  const double use = std::max(budget_use, 0.0);
  const double log_margin =
      use <= kPaceTargetBudgetUse
          ? std::log(max_margin) * (1 - use / kPaceTargetBudgetUse)
          : std::log(min_margin) * std::min((use - kPaceTargetBudgetUse) / (1 - kPaceTargetBudgetUse), 1.0);
  return std::clamp(std::exp(log_margin), min_margin, max_margin);
}

std::string_view knob_unit(KnobKind kind) {
  return kind == KnobKind::kSmClockMhz ? "MHz" : "W";
}

std::string_view knob_field(KnobKind kind) {
  return kind == KnobKind::kSmClockMhz ? "sm_clock_mhz" : "power_limit_w";
}

std::string_view knob_noun(KnobKind kind) {
  return kind == KnobKind::kSmClockMhz ? "clock" : "power limit";
}

uint32_t ServingKnobPolicy::clock_mhz() const {
  const Knob current = knob();
  if (current.kind != KnobKind::kSmClockMhz) {
    throw Exception(ErrorCode::kState,
                    fmt::format("{} turns the power limit, not the SM clock: it has no clock_mhz", name()));
  }
  return current.value;
}

uint32_t ServingKnobPolicy::power_limit_w() const {
  const Knob current = knob();
  if (current.kind != KnobKind::kPowerLimitW) {
    throw Exception(
        ErrorCode::kState,
        fmt::format("{} turns the SM clock, not the power limit: it has no power_limit_w", name()));
  }
  return current.value;
}

namespace {

// The knob values highest first, without duplicates.
std::vector<uint32_t> sorted_knob_values(std::vector<uint32_t> values, KnobKind kind, const char* who) {
  if (values.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("{} needs at least one {}", who, knob_noun(kind)));
  }
  std::sort(values.begin(), values.end(), std::greater<>());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

}  // namespace

UtilizationGovernor::UtilizationGovernor(KnobKind kind, std::vector<uint32_t> values, Options options)
    : kind_(kind),
      values_(sorted_knob_values(std::move(values), kind, "the utilization governor")),
      options_(options) {
  if (!(options_.interval_s > 0) || !(options_.target_utilization > 0 && options_.target_utilization <= 1)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("utilization governor: interval_s must be > 0 and target_utilization in (0, 1], got "
                    "{} and {}",
                    options_.interval_s, options_.target_utilization));
  }
}

void UtilizationGovernor::tick(double now_s) {
  if (window_start_s_ < 0) {
    window_start_s_ = now_s;
  }
  const double span_s = now_s - window_start_s_;
  if (span_s < options_.interval_s) {
    return;
  }
  const double utilization = std::clamp(busy_s_ / span_s, 0.0, 1.0);
  const double wanted = values_[level_] * utilization / options_.target_utilization;
  // The lowest supported value at or above the wanted one (values are highest first).
  size_t level = 0;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i] >= wanted) {
      level = i;
    }
  }
  level_ = level;
  window_start_s_ = now_s;
  busy_s_ = 0;
}

void UtilizationGovernor::on_iteration(const IterationSample& sample) {
  if (window_start_s_ < 0) {
    window_start_s_ = sample.start_s;
  }
  busy_s_ += sample.end_s - sample.start_s;
  tick(sample.end_s);
}

void UtilizationGovernor::on_idle(double from_s, double to_s, double /*energy_j*/) {
  if (window_start_s_ < 0) {
    window_start_s_ = from_s;
  }
  tick(to_s);
}

namespace {

// Recursive least squares on features (1, decode requests / 100, prefill tokens / 1000), with forgetting,
// so that a level's model follows slow drifts (thermal, context growth).
class Rls {
 public:
  Rls() {
    for (size_t i = 0; i < 3; ++i) {
      p_[i][i] = 1e4;
    }
  }
  void add(const std::array<double, 3>& x, double y) {
    std::array<double, 3> px{};
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3; ++j) {
        px[i] += p_[i][j] * x[j];
      }
    }
    double denominator = kForget;
    for (size_t i = 0; i < 3; ++i) {
      denominator += x[i] * px[i];
    }
    const double error = y - predict(x);
    for (size_t i = 0; i < 3; ++i) {
      theta_[i] += px[i] / denominator * error;
    }
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3; ++j) {
        p_[i][j] = (p_[i][j] - px[i] * px[j] / denominator) / kForget;
      }
    }
    ++samples_;
  }
  double predict(const std::array<double, 3>& x) const {
    return theta_[0] * x[0] + theta_[1] * x[1] + theta_[2] * x[2];
  }
  /// @return coefficient i (0: per iteration, 1: per 100 decode requests, 2: per 1000 prefill tokens).
  double coefficient(size_t i) const { return theta_[i]; }
  int64_t samples() const { return samples_; }
  /// The samples its estimate rests on: the count, up to the forgetting factor's memory (1 / (1 − forget)).
  double weight() const { return std::min(static_cast<double>(samples_), 1 / (1 - kForget)); }

 private:
  static constexpr double kForget = 0.998;
  std::array<double, 3> theta_{};
  std::array<std::array<double, 3>, 3> p_{};
  int64_t samples_ = 0;
};

std::array<double, 3> features(double decode_requests, double prefill_tokens) {
  return {1.0, decode_requests / 100.0, prefill_tokens / 1000.0};
}

struct WindowIteration {
  double end_s;
  double busy_s;
  double decode_requests;
  double prefill_tokens;
  bool queued;  // requests were left waiting after it (the engine could not admit them)
};

double percentile(std::vector<double> values, double share) {
  return numeric::nearest_rank_percentile(values, share).value_or(0.0);
}

}  // namespace

// The share of a level's compute throughput the load may use: beyond it, bursts queue.
constexpr double kMaxComputeShare = 0.75;
constexpr double kWaitTrigger = 0.5;
constexpr double kPendingTrigger = 0.8;
constexpr double kPendingTarget = 0.6;
// Busy this share of the window: continuously batching, never idle.
constexpr double kContinuouslyBusy = 0.98;
constexpr double kBurstSpanS = 2.0;
// Power within this share of another level's is a tie, broken towards the lower knob.
constexpr double kTiePowerShare = 0.005;
// Finished requests a latency tail is taken from; with fewer, the predicted iteration time stands in.
constexpr size_t kMinTailRequests = 5;
// The error budget's pacing (pace_margin()).
constexpr double kPaceWindowS = 300;
constexpr int64_t kPaceMinRequests = 100;
// A prefill-heavy batch, tokens: what a power limit caps first.
constexpr double kPrefillProbeTokens = 2000;

struct SloClockController::State {
  ServingSlo slo;
  SloControllerOptions options;
  KnobKind kind = KnobKind::kSmClockMhz;
  std::vector<uint32_t> levels;  // candidate knob values, highest first
  std::vector<Rls> time_models;
  std::vector<Rls> power_models;
  size_t level = 0;
  double margin = 0;
  double next_decision_s = -1;
  double recent_finished = 0;      // decayed over kPaceWindowS
  double level_token_cost_s = -1;  // token_cost(level), cached until the level or a decision changes it
  double recent_violated = 0;
  double recent_at_s = -1;
  double window_start_s = -1;
  std::deque<WindowIteration> iterations;
  std::deque<RequestSample> requests;
  double idle_power_w = -1;  // unknown until the replica idles
  int64_t finished_requests = 0;
  int64_t violated_requests = 0;
  bool unattainable = false;
  double at_top_since_s = -1;
  bool recovering = false;  // since an emergency, until enough requests have finished to judge a lower knob
  // The card (start_from_card()): its prior, what is done with it, its fit to the measured levels of the
  // last decision's mean iteration (none: no card, dropped, or nothing measured yet), and the level reached
  // on its word until measured there.
  std::optional<probe::KnobPrior> prior;
  CardUse card;
  std::optional<probe::PriorFit> card_fit;
  struct CardCheck {
    size_t level;        // the level the card sent it to
    size_t from;         // the faster measured level the prediction was scaled from
    double time_ratio;   // predicted time at `level` / time at `from`, for the mean batch
    double power_ratio;  // the same for busy power
    bool one_sample;     // predicted from one measured level (its compute share placed by power alone)
    // The iterations run at `level` since: measured, and as the card predicted them (`from`'s model of
    // each one's batch, scaled by the ratios), so that the check compares like with like.
    int64_t iterations = 0;
    double measured_s = 0;
    double predicted_s = 0;
    double measured_j = 0;
    double predicted_j = 0;
  };
  std::optional<CardCheck> card_check;

  std::optional<size_t> level_of(Knob knob) const {
    if (knob.kind != kind) {
      return std::nullopt;
    }
    for (size_t i = 0; i < levels.size(); ++i) {
      if (levels[i] == knob.value) {
        return i;
      }
    }
    return std::nullopt;
  }
  bool measured(size_t level_index) const {
    return time_models[level_index].samples() >= options.min_samples;
  }

  // How much slower level k runs than the faster, measured level j for the batch x (>= 1). Clock mode: as if
  // fully compute-bound, time ∝ 1/clock (pessimistic). Power-limit mode: a limit above what level j draws
  // changes nothing; below it, the GPUs slow until they draw the limit: dynamic power goes as the clock
  // squared at least (cubed with voltage), so the clock falls at most as the square root of the dynamic
  // power's share that is left (pessimistic, and far less so than taking the limit's ratio for a clock's).
  double slowdown(size_t k, size_t j, const std::array<double, 3>& x) const {
    if (kind == KnobKind::kSmClockMhz) {
      return static_cast<double>(levels[j]) / levels[k];
    }
    const double drawn = std::max(power_models[j].predict(x), 0.0);
    const double limit = static_cast<double>(levels[k]) * options.knob_gpus;
    if (limit >= drawn) {
      return 1.0;
    }
    const double idle = idle_power_w >= 0 ? std::min(idle_power_w, 0.9 * drawn) : 0.3 * drawn;
    const double dynamic_share = std::clamp((limit - idle) / std::max(drawn - idle, 1e-9), 0.05, 1.0);
    return 1.0 / std::sqrt(dynamic_share);
  }

  bool card_active() const { return card.state == CardUse::State::kActive && card_fit.has_value(); }

  // The card's predicted {time, busy power} at level k relative to level j, for the fitted mean iteration.
  std::pair<double, double> card_ratios(size_t k, size_t j) const {
    const probe::KnobSample at_k = prior->predict(*card_fit, levels[k]);
    const probe::KnobSample at_j = prior->predict(*card_fit, levels[j]);
    return {at_k.time_s / at_j.time_s, (at_k.energy_j / at_k.time_s) / (at_j.energy_j / at_j.time_s)};
  }

  // A measured level's iteration time for the batch x split in two: {the prompt tokens' part (compute-bound,
  // predicted pessimistically at other levels), the rest (what the card predicts)}.
  std::pair<double, double> split_time(size_t level_index, const std::array<double, 3>& x) const {
    const double total = std::max(time_models[level_index].predict(x), 1e-6);
    const double prefill = std::clamp(time_models[level_index].coefficient(2) * x[2], 0.0, total);
    return {prefill, total - prefill};
  }

  // The card's time at level k for the batch x, from the measured faster level j: the prompt tokens'
  // part scaled by slowdown(), the rest by the card's time ratio.
  double card_time(size_t k, size_t j, const std::array<double, 3>& x, double time_ratio) const {
    const auto [prefill, rest] = split_time(j, x);
    return std::max(prefill * slowdown(k, j, x) + rest * time_ratio, 1e-6);
  }

  // Each measured level's time for the batch x (0 at the others), fitted so that a lower knob never runs
  // faster: the isotonic fit of the levels' own models, each weighted by the samples it rests on: what the
  // levels below a measured one are bounded by (predict_time()). A level measured briefly, in a burst, can
  // predict the mean batch badly; under the bound this replaced (every faster level's own model), one such
  // model held every lower level up, and with them the knob, for as long as that level was not measured
  // again (session 37: 325 W of 400 W through a diurnal trace's peak where a fixed 110 W held the SLO, and
  // 270 W through a short-chat trace where 100 W did). Weighted by evidence, it is pooled with its
  // well-measured neighbours instead.
  std::vector<double> monotone_times(const std::array<double, 3>& x) const {
    std::vector<size_t> indices;
    std::vector<double> times;
    std::vector<double> weights;
    for (size_t k = 0; k < levels.size(); ++k) {
      if (measured(k)) {
        indices.push_back(k);
        times.push_back(std::max(time_models[k].predict(x), 1e-6));
        weights.push_back(time_models[k].weight());
      }
    }
    const std::vector<double> fitted = numeric::isotonic_non_decreasing(times, weights);
    std::vector<double> by_level(levels.size(), 0.0);
    for (size_t i = 0; i < indices.size(); ++i) {
      by_level[indices[i]] = fitted[i];
    }
    return by_level;
  }

  // Iteration time at a level not measured, for the batch x (`fitted`: monotone_times(x)): a measured faster
  // level's fitted time scaled by the card (for the mean batch, `by_card`, while the card is used) or by
  // slowdown() (pessimistic), else a measured slower level's (not faster).
  double unmeasured_time(size_t level_index, const std::array<double, 3>& x,
                         const std::vector<double>& fitted, bool by_card) const {
    for (size_t k = level_index; k-- > 0;) {
      if (measured(k)) {
        if (by_card && card_active()) {
          const double scale = fitted[k] / std::max(time_models[k].predict(x), 1e-6);
          return card_time(level_index, k, x, card_ratios(level_index, k).first) * scale;
        }
        return fitted[k] * slowdown(level_index, k, x);
      }
    }
    for (size_t k = level_index + 1; k < levels.size(); ++k) {
      if (measured(k)) {
        return fitted[k];
      }
    }
    return 1.0;
  }

  // Busy power of the replica at a level: its model, else a measured neighbour's dynamic part scaled by the
  // clock ratio squared (a conservative stand-in for the cubic law, which would promise more); under a
  // power limit, the nearest faster measured level's power capped by the limit.
  double own_power(size_t level_index, const std::array<double, 3>& x) const {
    if (measured(level_index)) {
      return std::max(power_models[level_index].predict(x), 0.0);
    }
    if (card_active()) {
      for (size_t k = level_index; k-- > 0;) {
        if (measured(k)) {
          const double power = std::max(power_models[k].predict(x), 0.0) * card_ratios(level_index, k).second;
          return kind == KnobKind::kPowerLimitW
                     ? std::min(power, static_cast<double>(levels[level_index]) * options.knob_gpus)
                     : power;
        }
      }
    }
    if (kind == KnobKind::kPowerLimitW) {
      for (size_t k = level_index; k-- > 0;) {
        if (measured(k)) {
          return std::min(std::max(power_models[k].predict(x), 0.0),
                          static_cast<double>(levels[level_index]) * options.knob_gpus);
        }
      }
    }
    const double idle = std::max(idle_power_w, 0.0);
    size_t nearest = levels.size();
    for (size_t k = 0; k < levels.size(); ++k) {
      if (measured(k) && (nearest == levels.size() ||
                          std::abs(static_cast<double>(k) - static_cast<double>(level_index)) <
                              std::abs(static_cast<double>(nearest) - static_cast<double>(level_index)))) {
        nearest = k;
      }
    }
    if (nearest == levels.size()) {
      return 0;
    }
    const double ratio = static_cast<double>(levels[level_index]) / levels[nearest];
    const double dynamic = std::max(power_models[nearest].predict(x) - idle, 0.0);
    return idle + dynamic * ratio * ratio;
  }

  // A lower knob never runs faster nor draws more for the same batch. Time: a level's own prediction (its
  // model when measured, else unmeasured_time()), never under the nearest faster measured level's fitted
  // time (monotone_times()). Its own model stays the floor: pooling a measured level down with slower ones
  // that look faster would trust a few calm samples there (a near-capacity trace's bursts then found it too
  // low). Power: each level's prediction is bounded by the faster levels'.
  // `by_card`: whether the card may predict it (the mean batch; a prefill-heavy batch is compute-bound, which
  // the pessimistic rule predicts exactly in clock mode).
  double predict_time(size_t level_index, const std::array<double, 3>& x, bool by_card = true) const {
    return predict_time(level_index, x, monotone_times(x), by_card);
  }
  // The same with monotone_times(x) computed once by the caller, for a decision that predicts every level
  // for one batch.
  double predict_time(size_t level_index, const std::array<double, 3>& x, const std::vector<double>& fitted,
                      bool by_card = true) const {
    double time = measured(level_index) ? std::max(time_models[level_index].predict(x), 1e-6)
                                        : unmeasured_time(level_index, x, fitted, by_card);
    for (size_t k = level_index; k-- > 0;) {
      if (measured(k)) {
        time = std::max(time, fitted[k]);
        break;
      }
    }
    return time;
  }
  double predict_power(size_t level_index, const std::array<double, 3>& x) const {
    double power = own_power(level_index, x);
    for (size_t k = 0; k < level_index; ++k) {
      if (measured(k)) {
        power = std::min(power, own_power(k, x));
      }
    }
    return power;
  }

  // Time per prompt token at a level, s: prefill is compute-bound, so this is the level's token throughput
  // limit (decode tokens cost the same FLOPs). The measured levels' own costs (their models' prompt-token
  // coefficients, where positive) are fitted to never fall at a lower knob, weighted by evidence as
  // monotone_times() does. Unmeasured levels scale the nearest faster level's fitted cost by slowdown() for a
  // prefill-heavy batch, which is exact for compute-bound work at a clock; never under it.
  double token_cost(size_t level_index) const {
    const auto own = [&](size_t k) { return std::max(time_models[k].coefficient(2) / 1000.0, 0.0); };
    std::vector<size_t> indices;
    std::vector<double> costs;
    std::vector<double> weights;
    for (size_t k = 0; k < levels.size(); ++k) {
      if (measured(k) && own(k) > 0) {
        indices.push_back(k);
        costs.push_back(own(k));
        weights.push_back(time_models[k].weight());
      }
    }
    if (indices.empty()) {
      return 0;
    }
    const std::vector<double> fitted = numeric::isotonic_non_decreasing(costs, weights);
    const auto at = std::lower_bound(indices.begin(), indices.end(), level_index);
    if (at != indices.end() && *at == level_index) {
      return fitted[static_cast<size_t>(at - indices.begin())];
    }
    if (at == indices.begin()) {
      return fitted.front();  // only slower levels measured: not faster than they are
    }
    const auto faster = static_cast<size_t>(at - indices.begin()) - 1;
    return fitted[faster] *
           std::max(slowdown(level_index, indices[faster], features(0, kPrefillProbeTokens)), 1.0);
  }

  size_t deepest_measured() const {
    size_t deepest = 0;
    for (size_t k = 0; k < levels.size(); ++k) {
      if (measured(k)) {
        deepest = k;
      }
    }
    return deepest;
  }

  void trim(double now_s) {
    const double oldest = now_s - options.window_s;
    while (!iterations.empty() && iterations.front().end_s < oldest) {
      iterations.pop_front();
    }
    while (!requests.empty() && requests.front().finish_s < oldest) {
      requests.pop_front();
    }
  }

  double attainment() const {
    if (requests.empty()) {
      return 1;
    }
    size_t met = 0;
    for (const RequestSample& request : requests) {
      if (slo.met(request.ttft_s, request.tpot_s)) {
        ++met;
      }
    }
    return static_cast<double>(met) / static_cast<double>(requests.size());
  }

  // Up at once, to the lowest knob above the current one that `enough` accepts (else the top), without
  // forgetting the window: a burst met in time is not a violation.
  template <typename Enough>
  void boost(double now_s, Enough enough) {
    size_t target = 0;
    for (size_t k = level; k-- > 0;) {
      if (enough(k)) {
        target = k;
        break;
      }
    }
    level = target;
    level_token_cost_s = -1;
    next_decision_s = now_s + options.interval_s;
  }

  // To the top clock at once.
  void emergency(double now_s) {
    level = 0;
    level_token_cost_s = -1;
    next_decision_s = now_s + options.interval_s;
    // The violations are answered (top clock, tighter margin); judge what comes next on its own, and go
    // down again only once requests finished since show the latencies there are.
    requests.clear();
    recovering = true;
  }

  // Safety first. @return true when that decided: the top clock after violations, or while no clock meets
  // the SLO.
  bool guard_attainment(double now_s) {
    const double observed_attainment = attainment();
    const bool enough_requests = requests.size() >= 20;
    if (level == 0) {
      if (at_top_since_s < 0) {
        at_top_since_s = now_s;
      }
    } else {
      at_top_since_s = -1;
    }
    // One violation among a window's requests is noise at a 99% target; two below the target are a trend.
    const auto violations =
        static_cast<size_t>(std::lround((1 - observed_attainment) * static_cast<double>(requests.size())));
    if (enough_requests && observed_attainment < slo.attainment && violations >= 2) {
      // At the top clock for a whole window and still missing: nothing a clock can do.
      if (level == 0 && at_top_since_s >= 0 && now_s - at_top_since_s >= options.window_s) {
        unattainable = true;
      }
      emergency(now_s);
      return true;
    }
    if (unattainable && enough_requests && observed_attainment >= slo.attainment) {
      unattainable = false;
    }
    if (unattainable) {
      level = 0;
      return true;
    }
    return false;
  }

  // The margin paces the error budget: the SLO allows (1 − attainment) of requests to miss, and the best
  // fixed knob in hindsight spends nearly all of it. The margin follows the share of the budget spent, over
  // the last kPaceWindowS and over the whole run (the larger): at none, max_margin (the predictions are tails
  // of a short window and may pass the SLO); at kTargetBudgetUse, 1; at all of it or more, min_margin;
  // log-linear between. A function of the use, not its integral: the use already integrates the misses, and
  // a margin that also integrated it (each decision moving it by the gap to the target) swung between its
  // bounds, its knob with it, and the saving depended chaotically on the target (docs/inference.md).
  void pace_margin() {
    if (finished_requests < kPaceMinRequests) {
      return;
    }
    const double miss_share = 1 - slo.attainment;
    const auto use = [&](double violated, double finished) {
      const double budget = miss_share * finished;
      return budget > 0 ? violated / budget : (violated > 0 ? 1e9 : 0.0);
    };
    // The whole run's use counts once it is over budget: early violations alone must not pin the margin to
    // its floor for the rest of a long run.
    const double run_spent =
        use(static_cast<double>(violated_requests), static_cast<double>(finished_requests));
    const double spent = std::max(use(recent_violated, recent_finished), run_spent > 1 ? run_spent : 0.0);
    margin = pace_margin_at(spent, options.min_margin, options.max_margin);
  }

  void count_request(double finish_s, bool met) {
    if (recent_at_s >= 0 && finish_s > recent_at_s) {
      const double decay = std::exp(-(finish_s - recent_at_s) / kPaceWindowS);
      recent_finished *= decay;
      recent_violated *= decay;
    }
    recent_at_s = std::max(recent_at_s, finish_s);
    recent_finished += 1;
    recent_violated += met ? 0 : 1;
  }

  // The window's load (iterations not empty).
  struct WindowLoad {
    double decode_mean = 0;   // decode requests per iteration
    double prefill_mean = 0;  // prefill tokens per iteration
    double utilization = 0;
    double tokens_per_s = 0;       // what the load asks for
    double peak_tokens_per_s = 0;  // over the busiest kBurstSpanS
    bool saturated = false;
    double recent_iteration_s = 0;  // the mean iteration time over the last kBurstSpanS, s (0: none)
  };

  WindowLoad window_load(double now_s) const {
    double decode = 0;
    double prefill = 0;
    double busy = 0;
    size_t queued = 0;
    for (const WindowIteration& iteration : iterations) {
      decode += iteration.decode_requests;
      prefill += iteration.prefill_tokens;
      busy += iteration.busy_s;
      if (iteration.queued) {
        ++queued;
      }
    }
    WindowLoad load;
    const auto count = static_cast<double>(iterations.size());
    load.decode_mean = decode / count;
    load.prefill_mean = prefill / count;
    const double span = std::max(now_s - std::max(window_start_s, now_s - options.window_s), 1e-9);
    load.utilization = std::clamp(busy / span, 0.0, 1.0);
    // Tokens per second the load asks for; a level whose token throughput cannot keep a margin above it
    // would let the batch and the queue grow without bound.
    load.tokens_per_s = (decode + prefill) / span;
    // Bursts: the busiest stretch of kBurstSpanS within the window must fit the level's whole throughput.
    double stretch_tokens = 0;
    size_t first = 0;
    for (size_t i = 0; i < iterations.size(); ++i) {
      stretch_tokens += iterations[i].decode_requests + iterations[i].prefill_tokens;
      while (iterations[i].end_s - iterations[first].end_s > kBurstSpanS) {
        stretch_tokens -= iterations[first].decode_requests + iterations[first].prefill_tokens;
        ++first;
      }
      load.peak_tokens_per_s = std::max(load.peak_tokens_per_s, stretch_tokens / kBurstSpanS);
    }
    // With continuous batching a busy GPU is not a saturated one: slowing iterations grows the batch, not the
    // queue, as long as the engine admits every arrival. Requests left waiting are the sign of saturation;
    // then it never goes lower.
    load.saturated = static_cast<double>(queued) > 0.05 * count;
    double recent_busy_s = 0;
    size_t recent = 0;
    for (auto it = iterations.rbegin(); it != iterations.rend() && it->end_s > now_s - kBurstSpanS; ++it) {
      recent_busy_s += it->busy_s;
      ++recent;
    }
    load.recent_iteration_s = recent > 0 ? recent_busy_s / static_cast<double>(recent) : 0;
    return load;
  }

  // The window's latency tails, at a quantile halfway beyond the target: the window holds a few hundred
  // requests, so that the tail it has not seen yet is covered. With too few finished requests, the
  // predicted iteration time stands in for TPOT and TTFT is unknown (0).
  struct LatencyTails {
    double tpot_s = 0;
    double ttft_s = 0;
    double prompt_tokens = 0;
  };

  LatencyTails latency_tails(double current_time_s) const {
    std::vector<double> ttfts;
    std::vector<double> tpots;
    std::vector<double> prompts;
    for (const RequestSample& request : requests) {
      ttfts.push_back(request.ttft_s);
      if (request.tpot_s) {
        tpots.push_back(*request.tpot_s);
      }
      if (request.prompt_tokens > 0) {
        prompts.push_back(static_cast<double>(request.prompt_tokens));
      }
    }
    const double p_share = 1 - (1 - slo.attainment) / 2;
    return {.tpot_s = tpots.size() >= kMinTailRequests ? percentile(tpots, p_share) : current_time_s,
            .ttft_s = ttfts.size() >= kMinTailRequests ? percentile(ttfts, p_share) : 0.0,
            .prompt_tokens = prompts.size() >= kMinTailRequests ? percentile(prompts, p_share) : 0.0};
  }

  // The least-power level predicted to meet margin × SLO, within the levels it may explore.
  void choose_level(const WindowLoad& load) {
    const std::array<double, 3> x = features(load.decode_mean, load.prefill_mean);
    const std::vector<double> fitted_x = monotone_times(x);
    const double current_time = predict_time(level, x, fitted_x);
    LatencyTails tails = latency_tails(current_time);
    // A request's TPOT is known when it ends, seconds after the knob or the load that set its pace changed;
    // a request decoding now gets about the iterations' time now per token. So the TPOT tail is never taken
    // under it, neither as measured over the last seconds (in a burst, the iterations lengthen long before
    // the requests that see it finish) nor as this level's model predicts it for the window's mean batch (a
    // step down is judged before the requests slowed by the last one have finished).
    tails.tpot_s = std::max({tails.tpot_s, load.recent_iteration_s, current_time});
    if (recovering && requests.size() >= kMinTailRequests) {
      recovering = false;
    }
    const double idle = std::max(idle_power_w, 0.0);
    // The TTFT tail: a request that arrives while a long prompt is prefilled waits for that iteration, then
    // runs its own prefill beside the batch (head-of-line blocking): two iterations with a long prompt.
    const std::array<double, 3> long_prompt_x =
        features(load.decode_mean, load.prefill_mean + tails.prompt_tokens);
    const std::vector<double> fitted_long_prompt = monotone_times(long_prompt_x);
    const auto ttft_model = [&](size_t k) {
      return 2 * predict_time(k, long_prompt_x, fitted_long_prompt, /*by_card=*/false);
    };
    // Measured against modelled at the current level: what the model misses (chunking, queueing) carries
    // over.
    const double ttft_calibration = tails.prompt_tokens > 0 && tails.ttft_s > 0
                                        ? std::clamp(tails.ttft_s / ttft_model(level), 0.5, 4.0)
                                        : 1.0;

    // With a card, any level: the card predicts them all, and the level it goes to is measured (checked)
    // before anything is decided from it.
    const size_t lowest_allowed =
        load.saturated ? level
        : card_active()
            ? levels.size() - 1
            : std::min({levels.size() - 1, deepest_measured() + 1,
                        std::max(level + static_cast<size_t>(options.max_step_down), deepest_measured())});
    std::vector<double> powers(lowest_allowed + 1, std::numeric_limits<double>::infinity());
    double least_power = std::numeric_limits<double>::infinity();
    double current_power = std::numeric_limits<double>::infinity();
    bool current_feasible = false;
    for (size_t k = 0; k <= lowest_allowed; ++k) {
      // TPOT scales with the iteration time, and slower iterations hold more requests (Little's law): the
      // decode batch grows with the time, which the second prediction accounts for.
      const double first = predict_time(k, x, fitted_x) / current_time;
      const double ratio =
          predict_time(k, features(load.decode_mean * std::max(first, 1.0), load.prefill_mean)) /
          current_time;
      const double ttft_k =
          tails.prompt_tokens > 0
              ? ttft_calibration * ttft_model(k)
              : tails.ttft_s * std::max(ratio, static_cast<double>(levels[level]) / levels[k]);
      // The busiest kBurstSpanS may ask more than the level's throughput if the backlog it leaves, in
      // seconds of work, fits in what the TTFT SLO leaves above the level's predicted TTFT: a loose TTFT SLO
      // absorbs bursts, a tight one needs the headroom (a fixed share, 120%, was too much for the one and too
      // little for the other).
      const double peak_share = load.peak_tokens_per_s * token_cost(k);
      const bool burst_fits =
          peak_share <= 1.0 || (peak_share - 1.0) * kBurstSpanS <= margin * slo.ttft_s - ttft_k;
      const bool keeps_up = load.tokens_per_s * token_cost(k) <= kMaxComputeShare && burst_fits;
      const bool feasible = k == 0 || (keeps_up && tails.tpot_s * ratio <= margin * slo.tpot_s &&
                                       ttft_k <= margin * slo.ttft_s);
      // Mean power: busy at the level's power for the (scaled) busy share, idle otherwise.
      // A replica busy all the time batches continuously: a faster level shrinks the batches, not the busy
      // time, so it gains no idle time (and two levels' models differ by noise, not by idle shares).
      const double rho =
          load.utilization >= kContinuouslyBusy ? 1.0 : std::min(load.utilization * ratio, 1.0);
      const double power = rho * predict_power(k, x) + (1 - rho) * idle;
      if (k == level) {
        current_power = power;
        current_feasible = feasible;
      }
      if (feasible) {
        powers[k] = power;
        least_power = std::min(least_power, power);
      }
    }
    // Among levels within kTiePowerShare of the least power, the lowest knob: where a lower knob costs no
    // more (a power limit above what the GPUs draw), going lower is free, and it is how the controller finds
    // where the knob starts to bite.
    std::optional<size_t> best;
    double best_power = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k <= lowest_allowed; ++k) {
      if (powers[k] <= least_power * (1 + kTiePowerShare)) {
        best = k;
        best_power = powers[k];
      }
    }
    if (!current_feasible) {
      // Predicted over the margin here: go up, to the best feasible level if it is above, else a few levels.
      level =
          best && *best < level ? *best : level - std::min(level, static_cast<size_t>(options.max_step_down));
      return;
    }
    // Move only for a clear gain: the models are noisy, and every move perturbs the batch it learns from.
    // Not down while recovering from an emergency: the tails it would judge by are not there yet.
    if (best && *best != level && !(recovering && *best > level) &&
        (best_power < current_power * 0.97 ||
         (*best > level && best_power <= current_power * (1 + kTiePowerShare)))) {
      level = *best;
      if (card_active() && !measured(level)) {
        expect_card_check();
      }
    }
  }

  // The level just chosen was predicted by the card: remember what it predicted there, relative to the
  // nearest faster measured level, to check once the level is measured.
  void expect_card_check() {
    for (size_t k = level; k-- > 0;) {
      if (measured(k)) {
        const auto [time_ratio, power_ratio] = card_ratios(level, k);
        const auto measured_levels =
            std::count_if(time_models.begin(), time_models.end(),
                          [&](const Rls& model) { return model.samples() >= options.min_samples; });
        card_check = CardCheck{.level = level,
                               .from = k,
                               .time_ratio = time_ratio,
                               .power_ratio = power_ratio,
                               .one_sample = measured_levels == 1};
        return;
      }
    }
  }

  // An iteration at `level_index` for the batch x: what the pending check compares.
  void count_card_check(size_t level_index, const std::array<double, 3>& x, double busy_s, double energy_j) {
    if (!card_check || card_check->level != level_index) {
      return;
    }
    CardCheck& check = *card_check;
    const double predicted_s = card_time(check.level, check.from, x, check.time_ratio);
    const double predicted_w = std::max(power_models[check.from].predict(x), 0.0) * check.power_ratio;
    ++check.iterations;
    check.measured_s += busy_s;
    check.predicted_s += predicted_s;
    check.measured_j += energy_j;
    check.predicted_j += predicted_s * predicted_w;
  }

  void drop_card(std::string why) {
    card.state = CardUse::State::kDropped;
    card.why = fmt::format("card dropped: {}; levels not measured are predicted pessimistically again", why);
    card_fit.reset();
    card_check.reset();
  }

  // Checks the card (the level reached on its word against what it predicted there), then refits it to
  // the measured levels for the mean batch x.
  void update_card(const std::array<double, 3>& x, double now_s) {
    if (!prior || card.state != CardUse::State::kActive) {
      return;
    }
    const double tolerance = options.card_tolerance;
    if (card_check && card_check->iterations >= options.min_samples) {
      const CardCheck check = *card_check;
      card_check.reset();
      const double slower = check.measured_s / check.predicted_s - 1;
      const double hungrier =
          (check.measured_j / check.measured_s) / (check.predicted_j / check.predicted_s) - 1;
      // Slower than predicted: the SLO is at stake. Hungrier: the energy the move was for; but a card
      // fitted to one level places the workload by its power alone, which says little about how its power
      // falls: the level just measured refits it.
      if (slower > tolerance || (!check.one_sample && hungrier > tolerance)) {
        drop_card(fmt::format(
            "at {} {} its {} iterations took {:+.1f}% the time and drew {:+.1f}% the power the card "
            "predicted "
            "from {} {} (tolerance {:.0f}%{}), {:.1f} s into serving",
            levels[check.level], knob_unit(kind), check.iterations, slower * 100, hungrier * 100,
            levels[check.from], knob_unit(kind), tolerance * 100, check.one_sample ? " in time" : "",
            now_s - (window_start_s < 0 ? now_s : window_start_s)));
        return;
      }
    }
    std::vector<probe::KnobSample> samples;
    for (size_t k = 0; k < levels.size(); ++k) {
      if (measured(k)) {
        // The card describes the iterations without their prompt tokens (decode: memory-bound mostly).
        const double time_s = std::max(split_time(k, x).second, 1e-6);
        const double power_w = std::max(power_models[k].predict(x), 1e-6);
        samples.push_back({static_cast<double>(levels[k]), time_s, time_s * power_w});
      }
    }
    card_fit.reset();
    if (samples.empty()) {
      return;
    }
    auto fit = prior->fit(samples);
    if (!fit) {
      return;  // a sample that is not positive: the pessimistic rule this decision
    }
    card_fit = *fit;
  }

  void decide(double now_s) {
    level_token_cost_s = -1;
    next_decision_s = now_s + options.interval_s;
    trim(now_s);
    if (guard_attainment(now_s)) {
      return;
    }
    pace_margin();
    if (!iterations.empty()) {
      const WindowLoad load = window_load(now_s);
      update_card(features(load.decode_mean, load.prefill_mean), now_s);
      choose_level(load);
    }
  }
};

SloClockController::SloClockController(ServingSlo slo, KnobKind kind, std::vector<uint32_t> values,
                                       SloControllerOptions options)
    : state_(std::make_unique<State>()) {
  value_or_throw(validate(slo));
  if (!(options.interval_s > 0) || !(options.window_s >= options.interval_s) || !(options.margin > 0) ||
      options.margin > 1 || !(options.min_margin > 0) || options.min_margin > options.margin ||
      options.min_samples < 1 || options.max_step_down < 1 || options.candidate_levels < 2) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        "SLO controller options: need interval_s > 0, window_s >= interval_s, 0 < min_margin <= margin <= "
        "1, min_samples >= 1, max_step_down >= 1, candidate_levels >= 2");
  }
  if (!(options.max_margin >= options.margin)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("SLO controller options: max_margin must be at least margin ({}), got {}",
                                options.margin, options.max_margin));
  }
  if (options.knob_gpus < 1) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("SLO controller options: knob_gpus must be at least 1, got {}", options.knob_gpus));
  }
  const std::vector<uint32_t> clocks =
      sorted_knob_values(std::move(values), kind, "the SLO clock controller");
  State& state = *state_;
  state.slo = slo;
  state.kind = kind;
  state.options = options;
  state.margin = options.margin;
  // Candidate levels spread evenly over the supported clocks, the highest and lowest included.
  const size_t count = std::min(options.candidate_levels, clocks.size());
  for (size_t i = 0; i < count; ++i) {
    const size_t index = count == 1 ? 0 : i * (clocks.size() - 1) / (count - 1);
    if (state.levels.empty() || state.levels.back() != clocks[index]) {
      state.levels.push_back(clocks[index]);
    }
  }
  state.time_models.resize(state.levels.size());
  state.power_models.resize(state.levels.size());
}

SloClockController::~SloClockController() = default;

Knob SloClockController::knob() const {
  return {state_->kind, state_->levels[state_->level]};
}

void SloClockController::on_iteration(const IterationSample& sample) {
  State& state = *state_;
  const double busy_s = sample.end_s - sample.start_s;
  if (state.window_start_s < 0) {
    state.window_start_s = sample.start_s;
  }
  if (const auto level = state.level_of(sample.knob); level && busy_s > 0) {
    const auto x =
        features(static_cast<double>(sample.decode_requests), static_cast<double>(sample.prefill_tokens));
    state.time_models[*level].add(x, busy_s);
    state.power_models[*level].add(x, sample.energy_j / busy_s);
    state.count_card_check(*level, x, busy_s, sample.energy_j);
  }
  state.iterations.push_back({sample.end_s, busy_s, static_cast<double>(sample.decode_requests),
                              static_cast<double>(sample.prefill_tokens), sample.waiting_requests > 0});
  if (state.next_decision_s < 0) {
    state.next_decision_s = sample.end_s + state.options.interval_s;
  }
  // A burst cannot wait for the next decision: a request the engine has not admitted that has waited half
  // its TTFT budget is about to miss it (the top knob at once); so is the oldest request without its first
  // token when the prompts pending now, prefilled at this level's token cost, would take it past
  // kPendingTrigger × TTFT (the lowest knob that prefills them within kPendingTarget × TTFT).
  if (state.level != 0 && sample.oldest_waiting_s > kWaitTrigger * state.slo.ttft_s) {
    state.emergency(sample.end_s);
    return;
  }
  if (state.level != 0 && sample.pending_prompt_tokens > 0) {
    if (state.level_token_cost_s < 0) {
      state.level_token_cost_s = state.token_cost(state.level);
    }
    const auto pending_ttft_s = [&](double token_cost_s) {
      return sample.oldest_pending_s + static_cast<double>(sample.pending_prompt_tokens) * token_cost_s;
    };
    if (pending_ttft_s(state.level_token_cost_s) > kPendingTrigger * state.slo.ttft_s) {
      state.boost(sample.end_s, [&](size_t k) {
        return pending_ttft_s(state.token_cost(k)) <= kPendingTarget * state.slo.ttft_s;
      });
      return;
    }
  }
  if (sample.end_s >= state.next_decision_s) {
    state.decide(sample.end_s);
  }
}

void SloClockController::on_request_done(const RequestSample& sample) {
  State& state = *state_;
  ++state.finished_requests;
  const bool met = state.slo.met(sample.ttft_s, sample.tpot_s);
  if (!met) {
    ++state.violated_requests;
  }
  state.count_request(sample.finish_s, met);
  state.requests.push_back(sample);
}

void SloClockController::on_idle(double from_s, double to_s, double energy_j) {
  State& state = *state_;
  if (to_s > from_s && energy_j >= 0) {
    const double power = energy_j / (to_s - from_s);
    state.idle_power_w = state.idle_power_w < 0 ? power : 0.9 * state.idle_power_w + 0.1 * power;
  }
  if (state.window_start_s < 0) {
    state.window_start_s = from_s;
  }
  if (state.next_decision_s >= 0 && to_s >= state.next_decision_s) {
    state.decide(to_s);
  }
}

void SloClockController::start_from_card(probe::KnobPrior prior) {
  const probe::CardKnob wanted =
      state_->kind == KnobKind::kSmClockMhz ? probe::CardKnob::kSmClock : probe::CardKnob::kPowerLimit;
  if (prior.knob() != wanted) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("the SLO controller turns the {} and needs a card's {} prior, got its {} prior",
                    knob_noun(state_->kind), probe::to_string(wanted), probe::to_string(prior.knob())));
  }
  State& state = *state_;
  state.prior = std::move(prior);
  state.card_fit.reset();
  state.card_check.reset();
  state.card = {
      CardUse::State::kActive,
      fmt::format("starting from the card: {}s not yet measured are predicted by its {} curves, fitted "
                  "to the measured ones",
                  knob_noun(state.kind), probe::to_string(wanted))};
}

Result<probe::KnobPrior> read_card_prior(const std::string& path, const probe::DeviceIdentity& device,
                                         KnobKind kind) {
  const probe::Card card = JOULE_TRY(probe::read_card(path, device));
  return probe::KnobPrior::from_card(
      card, kind == KnobKind::kSmClockMhz ? probe::CardKnob::kSmClock : probe::CardKnob::kPowerLimit, path);
}

CardUse SloClockController::card_use() const {
  return state_->card;
}

void SloClockController::seed(const std::vector<IterationSample>& samples) {
  State& state = *state_;
  for (const IterationSample& sample : samples) {
    const double busy_s = sample.end_s - sample.start_s;
    const auto level = state.level_of(sample.knob);
    if (!level || !(busy_s > 0)) {
      continue;
    }
    const auto x =
        features(static_cast<double>(sample.decode_requests), static_cast<double>(sample.prefill_tokens));
    state.time_models[*level].add(x, busy_s);
    state.power_models[*level].add(x, sample.energy_j / busy_s);
  }
}

bool SloClockController::slo_unattainable() const {
  return state_->unattainable;
}

double SloClockController::window_attainment() const {
  return state_->attainment();
}

std::vector<KnobModel> SloClockController::models() const {
  const State& state = *state_;
  double decode = 0;
  double prefill = 0;
  for (const WindowIteration& iteration : state.iterations) {
    decode += iteration.decode_requests;
    prefill += iteration.prefill_tokens;
  }
  const double count = std::max<double>(1.0, static_cast<double>(state.iterations.size()));
  const auto x = features(decode / count, prefill / count);
  std::vector<KnobModel> models;
  for (size_t k = 0; k < state.levels.size(); ++k) {
    models.push_back({{state.kind, state.levels[k]},
                      state.time_models[k].samples(),
                      state.predict_time(k, x),
                      state.predict_power(k, x),
                      state.measured(k)});
  }
  return models;
}

const ServingSlo& SloClockController::slo() const {
  return state_->slo;
}

}  // namespace joule::optimize
