// SPDX-License-Identifier: Apache-2.0
// A pipeline's profile measured on the device layer's simulated GPUs (joule/plan/sim_stage_profile.hpp).
#include "joule/plan/sim_stage_profile.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "joule/core/clock.hpp"
#include "joule/probe/sim_kernel.hpp"

namespace joule::plan {

namespace {

Result<void> check_shape(const SimKernelPart& part, int stage) {
  const SimKernelShape& shape = part.shape;
  if (!(shape.clock_bound_share > 0 && shape.clock_bound_share <= 1) ||
      !(shape.dynamic_share > 0 && shape.dynamic_share <= 1) ||
      !(shape.clock_free_power >= 0 && shape.clock_free_power < 1) ||
      !(std::isfinite(part.time_share) && part.time_share > 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "stage {}: a kernel needs clock_bound_share and dynamic_share in (0, 1], clock_free_power in "
                "[0, 1) and a positive time_share, got {}, {}, {} and {}",
                stage, shape.clock_bound_share, shape.dynamic_share, shape.clock_free_power, part.time_share);
  }
  return {};
}

// The computation's time and energy at every supported clock of a SimulatedGpu running it: its trace
// workload, or its kernels one after the other.
Result<std::vector<ProfileOption>> measure_sim_computation(const device::sim::GpuModel& model,
                                                           const SimComputation& computation, int stage) {
  if (!std::isfinite(computation.time_at_max_clock_s) || computation.time_at_max_clock_s <= 0) {
    return fail(ErrorCode::kInvalidArgument,
                "stage {}: time_at_max_clock_s must be positive and finite, got {}", stage,
                computation.time_at_max_clock_s);
  }
  // (workload, its share of the time at the highest clock)
  std::vector<std::pair<std::shared_ptr<const device::sim::Workload>, double>> parts;
  if (computation.kernels.empty()) {
    const device::sim::WorkloadInfo* info = JOULE_TRY(device::sim::find_workload(computation.workload));
    parts.emplace_back(JOULE_TRY(device::sim::make_trace_workload(model, *info, std::nullopt)), 1.0);
  } else {
    double total = 0;
    for (const SimKernelPart& part : computation.kernels) {
      JOULE_TRY(check_shape(part, stage));
      total += part.time_share;
    }
    for (const SimKernelPart& part : computation.kernels) {
      parts.emplace_back(
          probe::make_sim_kernel_workload(
              model,
              {1.0, part.shape.clock_bound_share, part.shape.dynamic_share, part.shape.clock_free_power},
              fmt::format("a stage computation (clock-bound share {}, dynamic share {}, "
                          "clock-free power {})",
                          part.shape.clock_bound_share, part.shape.dynamic_share,
                          part.shape.clock_free_power)),
          part.time_share / total);
    }
  }
  auto clock = std::make_shared<VirtualClock>();
  device::sim::SimulatedGpu gpu(model, parts.front().first, clock, stage);
  std::vector<uint32_t> clocks = JOULE_TRY(gpu.supported_sm_clocks_mhz());
  std::sort(clocks.rbegin(), clocks.rend());
  // Per part: seconds of the computation per second of the workload's own iteration at the highest clock.
  std::vector<double> scales;
  for (const auto& [workload, share] : parts) {
    gpu.set_workload(workload);
    JOULE_TRY(gpu.reset_sm_clocks());
    scales.push_back(computation.time_at_max_clock_s * share / gpu.operating_point().iteration_time_s);
  }
  std::vector<ProfileOption> options;
  options.reserve(clocks.size());
  for (const uint32_t mhz : clocks) {
    JOULE_TRY(gpu.lock_sm_clocks(mhz, mhz));
    double time_s = 0;
    const double before_mj = gpu.exact_energy_mj();
    for (size_t i = 0; i < parts.size(); ++i) {
      gpu.set_workload(parts[i].first);
      const double part_s = gpu.operating_point().iteration_time_s * scales[i];
      clock->advance(Nanos(std::llround(part_s * 1e9)));
      time_s += part_s;
    }
    options.push_back({mhz, time_s, (gpu.exact_energy_mj() - before_mj) / 1000});
  }
  return options;
}

}  // namespace

Result<Profile> simulated_stage_profile(const device::sim::GpuModel& model,
                                        std::span<const SimStage> stages) {
  if (stages.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a simulated pipeline needs at least one stage");
  }
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(stages.size());
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const int index = static_cast<int>(stage);
    options[stage][0] = JOULE_TRY(measure_sim_computation(model, stages[stage].forward, index));
    options[stage][1] = JOULE_TRY(measure_sim_computation(model, stages[stage].backward, index));
  }
  return Profile::from_options(std::move(options));
}

}  // namespace joule::plan
