// SPDX-License-Identifier: Apache-2.0
// joule/optimize/chase.hpp — Chase (Yang et al., ICLR'23 workshop): every period of training time,
// forecast the grid's carbon intensity of the next period and set the power limit that minimises the
// carbon-weighted cost (joule::CarbonCost) over the profiled per-iteration Frontier; and a deterministic
// replay of a whole training run on simulated GPUs under a carbon trace, comparing the maximum power
// limit, Zeus's fixed choice and Chase.
//
//   joule::optimize::ChaseController chase(frontier, gpus, forecaster, {.eta = 0.25});
//   every 30 min: chase.tick(now_unix_s, intensity_of_the_period_that_ended);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/carbon/signal.hpp"
#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/settings_guard.hpp"
#include "joule/optimize/chase_forecast.hpp"

namespace joule::optimize {

struct ChaseOptions {
  double eta = 0.25;                     ///< Chase's example script; in [0, 1]
  double max_intensity_g_per_kwh = 750;  ///< normalises the intensity (> 0); intensities above are clamped
  int64_t period_s = 1800;               ///< how often the limit is re-decided, s of training time (> 0)
  /// Converts time into energy in the cost, W; 0 = the frontier's largest power limit × GPUs.
  double max_power_w = 0;
  bool monitor_only = false;  ///< decide and log, but never change the power limit
  /// Restore the limits on SIGINT, SIGTERM and SIGHUP too (device::SettingsGuard); destruction and normal
  /// process exit restore regardless.
  bool restore_on_signals = true;
};

/// @return kInvalidArgument naming the first bad option.
Result<void> validate(const ChaseOptions& options);

/// One decision.
struct ChaseDecision {
  int64_t time_unix_s = 0;        ///< when it was made (the start of the period it is for)
  double previous_g_per_kwh = 0;  ///< the actual intensity of the period that just ended
  double forecast_g_per_kwh = 0;  ///< the forecaster's prediction for the coming period
  double effective_eta = 0;       ///< CarbonCost::effective_eta() at the forecast
  uint32_t power_limit_mw = 0;    ///< the chosen limit
};

/// Re-picks the power limit of a set of identical GPUs from a per-iteration frontier keyed by power limit
/// (mW), as the Zeus power-limit profiler builds it. It changes limits only through a
/// device::SettingsGuard: each GPU goes back to the limit it had before the first tick() changed it on
/// destruction, at normal process exit and (options.restore_on_signals) on SIGINT/SIGTERM/SIGHUP. Not
/// thread-safe; the GPUs and the forecaster must outlive it.
class ChaseController {
 public:
  /// @throws joule::Exception kInvalidArgument for invalid options or an empty frontier.
  ChaseController(Frontier<uint32_t> frontier, std::vector<device::Gpu*> gpus, CarbonForecaster& forecaster,
                  ChaseOptions options = {});
  /// Restores the limits it changed (failures are logged). Never throws.
  ~ChaseController();
  ChaseController(const ChaseController&) = delete;
  ChaseController& operator=(const ChaseController&) = delete;
  /// @return the cost the limit is picked with at `intensity_g_per_kwh`.
  CarbonCost cost_at(double intensity_g_per_kwh) const;
  /// @return the frontier index CarbonCost picks at `intensity_g_per_kwh`.
  Result<size_t> choose(double intensity_g_per_kwh) const;
  /// One period: forecasts the intensity of [now, now + period) from `previous_g_per_kwh` (recursively, if
  /// the period spans several of the signal's periods, of length `signal_period_s`), picks the limit and
  /// sets it on every GPU (unless monitor_only). @return the decision, or the GPUs' errors.
  Result<ChaseDecision> tick(int64_t now_unix_s, double previous_g_per_kwh, int64_t signal_period_s);
  const std::vector<ChaseDecision>& decisions() const { return decisions_; }
  const Frontier<uint32_t>& frontier() const { return frontier_; }
  const ChaseOptions& options() const { return options_; }

 private:
  Frontier<uint32_t> frontier_;
  std::vector<device::Gpu*> gpus_;
  CarbonForecaster& forecaster_;
  ChaseOptions options_;
  std::vector<ChaseDecision> decisions_;
  std::unique_ptr<device::SettingsGuard> guard_;
};

/// What to replay.
struct CarbonReplayOptions {
  std::string gpu = "v100";           ///< a simulated GPU model
  std::string workload = "imagenet";  ///< a Zeus-trace workload
  std::optional<int> batch_size;      ///< default: the paper's b0 on that GPU
  int gpu_count = 1;                  ///< data-parallel GPUs (≥ 1)
  int64_t work_iterations = 0;        ///< the fixed amount of work (> 0)
  ChaseOptions chase;                 ///< eta, period, max intensity; max_power_w 0 = max limit × GPUs
  std::optional<double> zeus_eta;     ///< Zeus's eta; default chase.eta
  double step_w = 5;                  ///< candidate spacing, W (Chase: 5)
  int profile_iterations = 40;        ///< iterations measured per candidate (Zeus: 40)
  std::string forecaster = "ridge";   ///< see make_forecaster(); ridge measures better than svr here
  size_t training_samples = 48;       ///< the forecaster is fitted on the samples just before the start
  /// The run starts here (UTC); default: the trace's start + training_samples periods.
  std::optional<int64_t> start_unix_s;
};

/// One point of a strategy's timeline: a decision.
struct ReplayTick {
  double time_s = 0;  ///< training time since the start
  int64_t time_unix_s = 0;
  double intensity_g_per_kwh = 0;  ///< the trace's value in force
  double forecast_g_per_kwh = 0;   ///< Chase's forecast (the intensity for the fixed strategies)
  double power_limit_w = 0;
};

struct StrategyResult {
  std::string name;  ///< "max_power_limit", "zeus" or "chase"
  double carbon_g = 0;
  double energy_j = 0;
  double time_s = 0;
  std::vector<ReplayTick> timeline;
};

struct CarbonReplayResult {
  std::string gpu_name;
  std::string workload;
  int batch_size = 0;
  int gpu_count = 1;
  int64_t work_iterations = 0;
  int64_t start_unix_s = 0;
  std::string trace_source;
  Frontier<uint32_t> frontier;  ///< per iteration, keyed by power limit (mW)
  uint32_t zeus_power_limit_mw = 0;
  double max_power_w = 0;
  std::vector<StrategyResult> strategies;  ///< max_power_limit, zeus, chase
};

/// Replays the run three times on fresh simulated GPUs on a virtual clock that starts at the start time:
/// at the maximum limit, at ZeusCost{eta, max_power_w}'s choice, and under a ChaseController that decides
/// every period from the forecaster's prediction (fitted on the samples before the start; never the true
/// future). Energy comes from the GPUs' energy counters; carbon from a CarbonMonitor with buckets of the
/// trace's period. Deterministic. @return kInvalidArgument / kNotFound for bad options (unknown GPU,
/// workload or forecaster), kOutOfRange if the trace does not cover the training window before the start
/// or the whole run ("the trace ends at …").
Result<CarbonReplayResult> replay_carbon(const carbon::CarbonTrace& trace,
                                         const CarbonReplayOptions& options);

}  // namespace joule::optimize
