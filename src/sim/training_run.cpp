// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/training_run.hpp"

#include <memory>

#include "joule/core/clock.hpp"
#include "joule/measure/energy_monitor.hpp"

namespace joule::sim {

namespace {

// A simulated job: GPUs on their own virtual clock, and the views the monitor and training loop take.
struct SimulatedJob {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::vector<device::sim::SimulatedGpu*> sim_gpus;
  std::vector<device::Gpu*> monitored;
};

Result<std::unique_ptr<SimulatedJob>> open_job(const device::sim::Spec& spec) {
  auto job = std::make_unique<SimulatedJob>();
  job->gpus = JOULE_TRY(device::sim::open_sim_gpus(spec, job->clock));
  for (auto& gpu : job->gpus) {
    job->sim_gpus.push_back(gpu.get());
    job->monitored.push_back(gpu.get());
  }
  return job;
}

}  // namespace

Result<RunFigures> fixed_limit_run(const device::sim::Spec& spec, uint32_t power_limit_mw, int64_t steps) {
  const auto job = JOULE_TRY(open_job(spec));
  for (auto* gpu : job->sim_gpus) {
    JOULE_TRY(gpu->set_power_limit_mw(power_limit_mw));
  }
  measure::EnergyMonitor monitor(job->monitored, {}, *job->clock);
  device::sim::TrainingJob training(job->sim_gpus, *job->clock);
  monitor.begin_window("run");
  training.run_iterations(steps);
  const auto m = monitor.end_window("run");
  return RunFigures{m.time_s, m.total_gpu_energy_j()};
}

Result<JitTrainingRun> run_jit_training(const device::sim::Spec& spec, int64_t steps) {
  const auto job = JOULE_TRY(open_job(spec));
  device::sim::TrainingJob training(job->sim_gpus, *job->clock);
  measure::EnergyMonitor monitor(job->monitored, {}, *job->clock);
  optimize::PowerLimitOptions options;
  options.restore_on_signals = false;  // the GPUs are simulated: nothing to restore on a signal
  optimize::PowerLimitOptimizer optimizer(monitor, options);
  JitTrainingRun run;
  run.steps = steps;
  monitor.begin_window("training");
  for (int64_t step = 0; step < steps; ++step) {
    optimizer.on_step_begin();
    training.run_iterations(1);
    optimizer.on_step_end();
    if (run.profiled_until_step < 0 && optimizer.state() == optimize::PowerLimitState::kDone) {
      run.profiled_until_step = step + 1;
    }
  }
  const measure::Measurement with_zeus = monitor.end_window("training");
  run.with_zeus = {with_zeus.time_s, with_zeus.total_gpu_energy_j()};
  run.gpu_name = job->gpus.front()->info().name;
  run.workload = job->gpus.front()->workload()->description();
  run.measurements = optimizer.measurements();
  run.candidates_mw = optimizer.candidates_mw();
  run.frontier = optimizer.frontier();
  run.policy = optimizer.policy();
  run.max_mw = optimizer.constraints().max_mw;
  run.chosen_mw = optimizer.chosen_power_limit_mw().value_or(0);
  run.at_max = JOULE_TRY(fixed_limit_run(spec, run.max_mw, steps));
  run.at_chosen = JOULE_TRY(fixed_limit_run(spec, run.chosen_mw, steps));
  return run;
}

}  // namespace joule::sim
