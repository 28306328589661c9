// SPDX-License-Identifier: Apache-2.0
// joule/sim/training_run.hpp — Zeus's JIT power-limit optimizer live on a simulated training job (virtual
// clock), and the same job at fixed limits to compare with: the first part of `joule demo`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::sim {

/// Time and GPU energy of a whole run.
struct RunFigures {
  double time_s = 0;
  double energy_j = 0;
};

/// Runs `steps` iterations of `spec`'s training job at a fixed power limit on fresh simulated GPUs.
/// Errors: GPUs that cannot be opened, a limit they refuse.
Result<RunFigures> fixed_limit_run(const device::sim::Spec& spec, uint32_t power_limit_mw, int64_t steps);

/// What the JIT optimizer did over a run, and the same run at the maximum and at the chosen limit.
struct JitTrainingRun {
  std::string gpu_name;  ///< the first simulated GPU's name
  std::string workload;  ///< the workload's description
  int64_t steps = 0;
  int64_t profiled_until_step = -1;  ///< the step after which the optimizer was done; -1 if never
  std::vector<optimize::PowerLimitMeasurement> measurements;  ///< one per profiled limit
  std::vector<uint32_t> candidates_mw;                        ///< the limits it was to profile, highest first
  Frontier<uint32_t> frontier;                                ///< of the measurements
  Policy policy;
  uint32_t max_mw = 0;          ///< the GPUs' maximum limit
  uint32_t chosen_mw = 0;       ///< the limit chosen (0 if none)
  RunFigures with_zeus;         ///< the whole run, profiling included
  RunFigures at_max;            ///< the same steps at max_mw
  RunFigures at_chosen;         ///< the same steps at chosen_mw
  int64_t profiling_steps = 0;  ///< steps run while a limit was warmed up or measured
  std::string card;             ///< the card's path; "" without one
  optimize::CardPath card_path_taken = optimize::CardPath::kNone;  ///< how the card was used
  std::string card_reason;  ///< why that path (PowerLimitOptimizer::card_reason())
};

/// How run_jit_training() runs the optimizer.
struct JitTrainingOptions {
  /// A frontier card for the simulated GPUs (PowerLimitOptions::card), read with
  /// optimize::read_card_for() against the first GPU; "" for none.
  std::string card_path;
  /// The optimizer's policy (PowerLimitOptions::policy).
  Policy policy = ZeusCost{0.5, 0};
};

/// Trains `spec`'s job for `steps` iterations under a PowerLimitOptimizer (default options but `options`'s,
/// no signal handlers: the GPUs are simulated), then runs the comparisons. Errors: the card's (those of
/// optimize::read_card_for(): another GPU model's card, a newer schema, a file that cannot be read), those of
/// fixed_limit_run().
Result<JitTrainingRun> run_jit_training(const device::sim::Spec& spec, int64_t steps,
                                        const JitTrainingOptions& options = {});

/// @return `run`'s plot (SVG): the profiled limits, their frontier, the chosen and the maximum limit.
std::string jit_run_plot_svg(const JitTrainingRun& run, const device::sim::Spec& spec);
/// @return `run` as `joule demo` tells it: the GPUs, the limits profiled (time and energy per iteration,
/// which are on the frontier, the chosen one), and the whole run against the same steps at the maximum limit.
std::string jit_run_text(const JitTrainingRun& run, const device::sim::Spec& spec);

/// @return `run` as JSON: profiled_until_step, profile [{power_limit_w, time_per_step_s, energy_per_step_j}],
/// chosen_power_limit_w, and {time_s, energy_j} of with_zeus, at_max_power_limit, at_chosen_power_limit.
nlohmann::json jit_run_json(const JitTrainingRun& run);

}  // namespace joule::sim
