// SPDX-License-Identifier: Apache-2.0
// joule/optimize/chase_optimizer.hpp — Chase as a training-loop callback: the just-in-time profile of
// PowerLimitOptimizer (once), then every `chase.period_s` of the monitor's clock a ChaseController decision
// from the grid's carbon intensity (a CarbonSignal) and its forecast, set through the profile's guard.
//
//   joule::measure::EnergyMonitor monitor(gpus, {}, clock);
//   auto signal = joule::carbon::make_carbon_signal({.country = "auto"}, clock);
//   joule::optimize::ChaseOptimizer chase(monitor, **signal, {.chase = {.eta = 0.5}});
//   for (…) { chase.on_step_begin(); train_step(); chase.on_step_end(); }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/carbon/signal.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/chase.hpp"
#include "joule/optimize/chase_forecast.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::optimize {

struct ChaseOptimizerOptions {
  /// The profile: wait/warmup/profile steps, step_w, profile store, aggregator, restore_to and
  /// restore_on_signals as in PowerLimitOptimizer. Its policy picks the limit only until the first Chase
  /// decision, in the same on_step_begin() that ends the profile.
  PowerLimitOptions profile;
  /// eta, max_intensity_g_per_kwh, period_s (how often the limit is re-decided, s of the monitor's clock),
  /// max_power_w (0: the largest profiled limit × GPUs × ranks, as the profile's energies are summed over
  /// them) and monitor_only. restore_on_signals is the profile's.
  ChaseOptions chase;
  /// "ridge", "svr" or "last" (see make_forecaster()).
  std::string forecaster = "ridge";
  /// The forecaster is fitted once, at the first decision, on this many of the signal's periods before
  /// it (Chase: 48 half hours). A signal that cannot give them (a live provider without history) falls
  /// back to the last value as the forecast, with a warning.
  size_t training_samples = 48;
};

/// @return kInvalidArgument naming the first bad option (the profile's, Chase's, the forecaster's name).
Result<void> validate(const ChaseOptimizerOptions& options);

/// Profiles the power limits once (PowerLimitOptimizer), then re-picks the limit from the per-step frontier
/// every chase.period_s with ChaseController's carbon-weighted cost at the forecast intensity.
///
/// **Decisions**: the first at the on_step_begin() that ends the profile (or the first one, with a stored
/// profile), then at the first on_step_begin() at least period_s after the previous decision — the same
/// schedule as replay_carbon(). Each decision reads the intensity of the signal's period before the one in
/// force now (history(); latest() if history lacks it) and forecasts from it. A signal error keeps the
/// current limit, is logged, and is retried at the next period.
///
/// **Restoring**: limits change only through the profile's device::SettingsGuard, so the GPUs go back to
/// profile.restore_to on close()/destruction, at process exit and on SIGINT/SIGTERM/SIGHUP, exactly as
/// with PowerLimitOptimizer.
///
/// Not thread-safe: call the hooks from the training loop. The monitor, its GPUs and the signal must
/// outlive the optimizer.
class ChaseOptimizer {
 public:
  /// @throws joule::Exception as PowerLimitOptimizer's constructor, and kInvalidArgument for bad options.
  ChaseOptimizer(measure::EnergyMonitor& monitor, carbon::CarbonSignal& signal,
                 ChaseOptimizerOptions options = {});
  /// Restores the limits. Never throws.
  ~ChaseOptimizer();
  ChaseOptimizer(const ChaseOptimizer&) = delete;
  ChaseOptimizer& operator=(const ChaseOptimizer&) = delete;

  /// Call at the start of every step. @throws as PowerLimitOptimizer::on_step_begin().
  void on_step_begin();
  void on_step_end();
  /// Call at the end of every epoch: an interrupted profile restarts (decisions are unaffected).
  void on_epoch_end();

  /// @return the profile (state, candidates, measurements, frontier, constraints).
  const PowerLimitOptimizer& profiler() const { return *profiler_; }
  /// @return the decisions so far, oldest first.
  const std::vector<ChaseDecision>& decisions() const;
  /// @return the options in force (chase.max_power_w filled in once derived).
  const ChaseOptimizerOptions& options() const { return options_; }
  /// @return the forecaster in use ("last" after a fallback); empty before the first decision.
  std::string forecaster_name() const;
  /// @return the monitor's clock as Unix time, s, of the next decision; nullopt until the profile is done.
  std::optional<double> next_decision_unix_s() const;

 private:
  void start_chase(int64_t now_unix_s);
  void decide(int64_t now_unix_s);
  Result<double> previous_intensity(int64_t now_unix_s);

  measure::EnergyMonitor& monitor_;
  carbon::CarbonSignal& signal_;
  ChaseOptimizerOptions options_;
  std::unique_ptr<PowerLimitOptimizer> profiler_;  // owns the guard every limit goes through
  std::unique_ptr<CarbonForecaster> forecaster_;
  std::unique_ptr<ChaseController> controller_;  // decides only (monitor_only): it never sets a limit
  std::optional<int64_t> next_decision_ns_;      // on the monitor's clock, as Unix ns
};

}  // namespace joule::optimize
