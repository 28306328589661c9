// SPDX-License-Identifier: Apache-2.0
// A training job on simulated GPUs on a virtual clock, stepped under a PowerLimitOptimizer: the fixture of
// the power-limit optimizer's tests, with and without a frontier card.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::test {

// Each step is one iteration of the simulated training job.
struct SimTrainingJob {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::unique_ptr<measure::EnergyMonitor> monitor;
  std::unique_ptr<device::sim::TrainingJob> training;

  /// `spec` as `joule --sim` takes it, e.g. "v100:imagenet".
  explicit SimTrainingJob(std::string_view spec) {
    gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec), clock));
    std::vector<device::Gpu*> raw;
    std::vector<device::sim::SimulatedGpu*> sims;
    for (auto& gpu : gpus) {
      raw.push_back(gpu.get());
      sims.push_back(gpu.get());
    }
    monitor = std::make_unique<measure::EnergyMonitor>(raw, std::vector<device::Cpu*>{}, *clock);
    training = std::make_unique<device::sim::TrainingJob>(sims, *clock);
  }

  void step(optimize::PowerLimitOptimizer& optimizer, int64_t count = 1) {
    for (int64_t i = 0; i < count; ++i) {
      optimizer.on_step_begin();
      training->run_iterations(1);
      optimizer.on_step_end();
    }
  }

  // Steps until the optimizer is done; @return the steps taken.
  int64_t run_until_done(optimize::PowerLimitOptimizer& optimizer, int64_t limit = 100'000) {
    int64_t steps = 0;
    while (optimizer.state() != optimize::PowerLimitState::kDone && steps < limit) {
      step(optimizer);
      ++steps;
    }
    return steps;
  }
};

}  // namespace joule::test
