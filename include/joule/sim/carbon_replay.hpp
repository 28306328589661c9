// SPDX-License-Identifier: Apache-2.0
// joule/sim/carbon_replay.hpp — Chase's carbon replay (optimize::replay_carbon) of a Zeus-trace workload: how
// much work a run is (epochs to the target metric from the Zeus training trace), and the forms of the
// replay's result (text, JSON, CSV, and the SVG of the intensity and the chosen limits). What `joule carbon
// replay` prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/chase.hpp"

namespace joule::sim {

/// @return the mean number of epochs the Zeus training trace needs to reach `workload`'s target metric at
/// `batch_size` on `gpu` (over the trace's repeated runs at the maximum power limit), rounded up.
/// kNotFound when the trace has no such run (then give the work explicitly).
Result<int> epochs_to_target(const std::string& gpu, const std::string& workload, int batch_size);

/// The work of a replay.
struct CarbonReplayWork {
  int batch_size = 0;           ///< the batch size the trace workload runs at
  int64_t work_iterations = 0;  ///< iterations of that batch size
  double epochs = 0;            ///< the same work in epochs
};

/// The work of `workload` on the simulated `gpu` (names as device::sim::find_workload() and find_gpu_model()
/// take them) at `batch_size` (default: the paper's b0): `iterations` when given, else `epochs`, else the
/// epochs to the target metric (epochs_to_target()). Errors: kNotFound for an unknown name, a batch size the
/// trace lacks or a trace without a run that reaches the target; kInvalidArgument for epochs ≤ 0.
Result<CarbonReplayWork> replay_work(const std::string& gpu, const std::string& workload,
                                     std::optional<int> batch_size, std::optional<double> epochs,
                                     std::optional<int64_t> iterations);

/// What a replay's report says besides its result: the settings as given.
struct ReplaySettings {
  double epochs = 0;
  double eta = 0.5;
  double zeus_eta = 0.5;
  double period_min = 30;
  double max_intensity_g_per_kwh = 750;
  std::string forecaster;
};

/// @return the strategy named `name` ("max_power_limit", "zeus", "chase"). @throws joule::Exception
/// (kInternal) when the result has none: replay_carbon() always returns the three.
const optimize::StrategyResult& replay_strategy(const optimize::CarbonReplayResult& result,
                                                std::string_view name);

/// The replay as a table: each strategy's carbon, energy and time, and Chase against the two others.
std::string render_replay_text(const optimize::CarbonReplayResult& result, const ReplaySettings& settings);
/// The replay as a JSON document (2-space indent, final newline), with Chase's decisions and the frontier.
std::string render_replay_json(const optimize::CarbonReplayResult& result, const ReplaySettings& settings);
/// strategy,carbon_g,energy_j,time_s (6 decimals).
std::string render_replay_csv(const optimize::CarbonReplayResult& result);
/// Two stacked charts in one SVG: the intensity (actual and Chase's forecast) and each strategy's limit, on
/// one time axis.
std::string replay_plot_svg(const optimize::CarbonReplayResult& result);

}  // namespace joule::sim
