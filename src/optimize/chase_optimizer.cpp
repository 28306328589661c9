// SPDX-License-Identifier: Apache-2.0
// Chase as a training-loop callback: PowerLimitOptimizer's profile, then ChaseController's decisions set
// through the profile's guard.
#include "joule/optimize/chase_optimizer.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "joule/core/log.hpp"

namespace joule::optimize {

namespace chase_optimizer_detail {

constexpr int64_t kNsPerS = 1'000'000'000;

int64_t unix_now_ns(const Clock& clock) {
  return clock.to_unix_ns(clock.now());
}

int64_t floor_div(int64_t value, int64_t divisor) {
  return value / divisor - ((value % divisor != 0) && ((value < 0) != (divisor < 0)) ? 1 : 0);
}

}  // namespace chase_optimizer_detail

Result<void> validate(const ChaseOptimizerOptions& options) {
  JOULE_TRY(validate(options.profile));
  JOULE_TRY(validate(options.chase));
  const auto& names = forecaster_names();
  if (std::find(names.begin(), names.end(), options.forecaster) == names.end()) {
    return fail(ErrorCode::kInvalidArgument, "chase: unknown forecaster '{}' (known: {})", options.forecaster,
                fmt::join(names, ", "));
  }
  if (options.training_samples < 3) {
    return fail(ErrorCode::kInvalidArgument,
                "chase: the forecaster needs at least 3 training samples, got {}", options.training_samples);
  }
  return {};
}

ChaseOptimizer::ChaseOptimizer(measure::EnergyMonitor& monitor, carbon::CarbonSignal& signal,
                               ChaseOptimizerOptions options)
    : monitor_(monitor), signal_(signal), options_(std::move(options)) {
  value_or_throw(validate(options_));
  // The controller only decides; every limit goes through the profile's guard, so one restore contract
  // (restore_to, signals, exit) covers the whole run.
  options_.chase.restore_on_signals = false;
  profiler_ = std::make_unique<PowerLimitOptimizer>(monitor_, options_.profile);
}

ChaseOptimizer::~ChaseOptimizer() {
  controller_.reset();
  profiler_.reset();
}

const std::vector<ChaseDecision>& ChaseOptimizer::decisions() const {
  static const std::vector<ChaseDecision> none;
  return controller_ ? controller_->decisions() : none;
}

std::string ChaseOptimizer::forecaster_name() const {
  return forecaster_ ? forecaster_->name() : "";
}

std::optional<double> ChaseOptimizer::next_decision_unix_s() const {
  if (!next_decision_ns_) {
    return std::nullopt;
  }
  return static_cast<double>(*next_decision_ns_) / 1e9;
}

void ChaseOptimizer::on_step_begin() {
  profiler_->on_step_begin();
  if (profiler_->state() != PowerLimitState::kDone) {
    return;
  }
  const int64_t now_ns = chase_optimizer_detail::unix_now_ns(monitor_.clock());
  const int64_t now_s = chase_optimizer_detail::floor_div(now_ns, chase_optimizer_detail::kNsPerS);
  if (!controller_) {
    start_chase(now_s);
    next_decision_ns_ = now_ns;
  }
  if (now_ns >= *next_decision_ns_) {
    decide(now_s);
    next_decision_ns_ = now_ns + options_.chase.period_s * chase_optimizer_detail::kNsPerS;
  }
}

void ChaseOptimizer::on_step_end() {
  profiler_->on_step_end();
}

void ChaseOptimizer::on_epoch_end() {
  profiler_->on_epoch_end();
}

void ChaseOptimizer::start_chase(int64_t now_unix_s) {
  forecaster_ = value_or_throw(make_forecaster(options_.forecaster));
  // Fitted on the signal's completed periods before now, as replay_carbon() fits on those before its start.
  const int64_t period_s = signal_.period_s();
  const int64_t current = carbon::floor_to_period(now_unix_s, period_s);
  const int64_t from = current - static_cast<int64_t>(options_.training_samples) * period_s;
  auto history = signal_.history(from, current);
  Result<void> fitted =
      history ? forecaster_->fit(*history) : Result<void>(tl::make_unexpected(history.error()));
  if (!fitted) {
    log().warn("chase: cannot fit the {} forecaster on {} ({}); forecasting the last value instead",
               forecaster_->name(), signal_.describe(), fitted.error().message());
    forecaster_ = std::make_unique<LastValueForecaster>();
  }
  ChaseOptions chase = options_.chase;
  chase.monitor_only = true;
  chase.restore_on_signals = false;
  if (chase.max_power_w == 0) {
    uint32_t largest_mw = 0;
    for (const auto& point : profiler_->frontier().points()) {
      largest_mw = std::max(largest_mw, point.knob);
    }
    const int world_size = options_.profile.aggregator ? options_.profile.aggregator->world_size() : 1;
    chase.max_power_w = static_cast<double>(largest_mw) / 1000.0 *
                        static_cast<double>(std::max<size_t>(1, monitor_.gpus().size())) *
                        static_cast<double>(std::max(1, world_size));
    options_.chase.max_power_w = chase.max_power_w;
  }
  controller_ =
      std::make_unique<ChaseController>(profiler_->frontier(), monitor_.gpus(), *forecaster_, chase);
}

Result<double> ChaseOptimizer::previous_intensity(int64_t now_unix_s) {
  const int64_t period_s = signal_.period_s();
  const int64_t previous = carbon::floor_to_period(now_unix_s, period_s) - period_s;
  auto points = signal_.history(previous, previous + period_s);
  if (points) {
    auto value = carbon::intensity_for(*points, period_s, previous, period_s, signal_.describe());
    if (value) {
      return value->intensity_g_per_kwh;
    }
  }
  // The last period is often not published yet: the freshest value stands in for it.
  const auto latest = JOULE_TRY(signal_.latest());
  return latest.intensity_g_per_kwh;
}

void ChaseOptimizer::decide(int64_t now_unix_s) {
  const auto previous = previous_intensity(now_unix_s);
  if (!previous) {
    log().warn("chase: no carbon intensity from {} ({}); keeping {} W until the next period",
               signal_.describe(), previous.error().message(),
               static_cast<double>(profiler_->current_power_limit_mw()) / 1000.0);
    return;
  }
  const auto ticked = controller_->tick(now_unix_s, *previous, signal_.period_s());
  if (!ticked) {
    // As for a missing intensity: the job goes on at the limit in force, and the next period tries again.
    log().warn("chase: cannot decide this period ({}); keeping {} W until the next period",
               ticked.error().message(), static_cast<double>(profiler_->current_power_limit_mw()) / 1000.0);
    return;
  }
  const auto& decision = *ticked;
  log().debug("chase: {} g/kWh before, {:.1f} g/kWh forecast: {} W", *previous, decision.forecast_g_per_kwh,
              static_cast<double>(decision.power_limit_mw) / 1000.0);
  if (!options_.chase.monitor_only && decision.power_limit_mw != profiler_->current_power_limit_mw()) {
    profiler_->override_power_limit_mw(decision.power_limit_mw);
  }
}

}  // namespace joule::optimize
