// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/training_run.hpp"

#include <memory>

#include <fmt/format.h>

#include "joule/core/clock.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/power_limit_card.hpp"
#include "joule/viz/frontier_plot.hpp"

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

Result<JitTrainingRun> run_jit_training(const device::sim::Spec& spec, int64_t steps,
                                        const JitTrainingOptions& jit_options) {
  const auto job = JOULE_TRY(open_job(spec));
  device::sim::TrainingJob training(job->sim_gpus, *job->clock);
  measure::EnergyMonitor monitor(job->monitored, {}, *job->clock);
  optimize::PowerLimitOptions options;
  options.restore_on_signals = false;  // the GPUs are simulated: nothing to restore on a signal
  options.policy = jit_options.policy;
  if (!jit_options.card_path.empty()) {
    options.card = JOULE_TRY(optimize::read_card_for(jit_options.card_path, *job->gpus.front()));
    options.card_source = jit_options.card_path;
  }
  optimize::PowerLimitOptimizer optimizer(monitor, options);
  JitTrainingRun run;
  run.steps = steps;
  run.card = jit_options.card_path;
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
  run.profiling_steps = optimizer.profiling_steps();
  run.card_path_taken = optimizer.card_path_taken();
  run.card_reason = optimizer.card_reason();
  run.at_max = JOULE_TRY(fixed_limit_run(spec, run.max_mw, steps));
  run.at_chosen = JOULE_TRY(fixed_limit_run(spec, run.chosen_mw, steps));
  return run;
}

namespace {

std::string watts(uint32_t power_limit_mw) {
  return fmt::format("{:g} W", power_limit_mw / 1e3);
}

}  // namespace

std::string jit_run_plot_svg(const JitTrainingRun& run, const device::sim::Spec& spec) {
  std::vector<FrontierPoint<uint32_t>> measured;
  for (const auto& m : run.measurements) {
    measured.push_back({m.power_limit_mw, m.time_per_step_s(), m.energy_per_step_j()});
  }
  const auto frontier = Frontier<uint32_t>::from_points(measured);
  viz::FrontierPlotOptions plot_options{
      .title = fmt::format("JIT power-limit profile: {} on {}", run.workload, spec.model->key),
      .x_label = "Time per iteration (s)",
      .y_label = "Energy per iteration (J)",
      .measured_label = "profiled limits"};
  auto plot = viz::frontier_plot(frontier, watts, plot_options, measured);
  for (const auto& point : measured) {
    if (point.knob == run.chosen_mw) {
      plot.highlight(viz::highlight_point(point, fmt::format("chosen {}", watts(run.chosen_mw)), "#d55e00",
                                          watts, plot_options));
    }
    if (point.knob == run.max_mw) {
      plot.highlight(viz::highlight_point(point, fmt::format("max {}", watts(point.knob)), "#222222", watts,
                                          plot_options));
    }
  }
  return plot.svg();
}

std::string jit_run_text(const JitTrainingRun& run, const device::sim::Spec& spec) {
  std::string out = fmt::format(
      "joule demo, part 1: the JIT power-limit optimizer on {} simulated {} GPU{} ({}) training {}\n"
      "(virtual clock: {} iterations of simulated training)\n\n",
      spec.count, spec.model->key, spec.count == 1 ? "" : "s", run.gpu_name, run.workload, run.steps);
  if (run.card.empty()) {
    out += fmt::format(
        "  It tried {} limits from {} down, 10 warm-up + 40 measured iterations each, and was done "
        "after {} iterations:\n\n",
        run.candidates_mw.size(), watts(run.candidates_mw.front()), run.profiled_until_step);
  } else {
    out += fmt::format(
        "  Starting from the card {}, it measured {} of {} limits (10 warm-up iterations at {}, then windows "
        "sized by the card's figures) and was done after {} iterations ({} measuring).\n  Card path: {}: "
        "{}.\n\n",
        run.card, run.measurements.size(), run.candidates_mw.size(), watts(run.candidates_mw.front()),
        run.profiled_until_step, run.profiling_steps, optimize::to_string(run.card_path_taken),
        run.card_reason);
  }
  out += fmt::format("  {:>11}  {:>16}  {:>18}  {:>10}\n", "power limit", "time/iter (ms)", "energy/iter (J)",
                     "frontier");
  for (const auto& m : run.measurements) {
    bool on_frontier = false;
    for (const auto& point : run.frontier.points()) {
      on_frontier = on_frontier || point.knob == m.power_limit_mw;
    }
    out += fmt::format("  {:>11}  {:>16.1f}  {:>18.2f}  {:>10}{}\n", watts(m.power_limit_mw),
                       m.time_per_step_s() * 1e3, m.energy_per_step_j(), on_frontier ? "yes" : "",
                       m.power_limit_mw == run.chosen_mw ? "   <- chosen" : "");
  }
  const double energy_saved = 1 - run.at_chosen.energy_j / run.at_max.energy_j;
  const double time_added = run.at_chosen.time_s / run.at_max.time_s - 1;
  out += fmt::format(
      "\n  Chosen by {}: {}.\n"
      "  {} iterations at {}: {:.1f} s, {:.1f} kJ; at the maximum {}: {:.1f} s, {:.1f} kJ.\n"
      "  The chosen limit saves {:.1f}% energy for {:.1f}% more time (profiling included, the whole run "
      "took {:.1f} s and {:.1f} kJ).\n",
      describe(run.policy), watts(run.chosen_mw), run.steps, watts(run.chosen_mw), run.at_chosen.time_s,
      run.at_chosen.energy_j / 1e3, watts(run.max_mw), run.at_max.time_s, run.at_max.energy_j / 1e3,
      energy_saved * 100, time_added * 100, run.with_zeus.time_s, run.with_zeus.energy_j / 1e3);
  return out;
}

nlohmann::json jit_run_json(const JitTrainingRun& run) {
  const auto figures = [](const RunFigures& f) {
    return nlohmann::json{{"time_s", f.time_s}, {"energy_j", f.energy_j}};
  };
  nlohmann::json profile = nlohmann::json::array();
  for (const auto& m : run.measurements) {
    profile.push_back({{"power_limit_w", m.power_limit_mw / 1e3},
                       {"time_per_step_s", m.time_per_step_s()},
                       {"energy_per_step_j", m.energy_per_step_j()}});
  }
  nlohmann::json out = {
      {"profiled_until_step", run.profiled_until_step}, {"profile", std::move(profile)},
      {"chosen_power_limit_w", run.chosen_mw / 1e3},    {"with_zeus", figures(run.with_zeus)},
      {"at_max_power_limit", figures(run.at_max)},      {"at_chosen_power_limit", figures(run.at_chosen)}};
  if (!run.card.empty()) {
    out["card"] = {{"path", run.card},
                   {"path_taken", optimize::to_string(run.card_path_taken)},
                   {"reason", run.card_reason},
                   {"profiling_steps", run.profiling_steps}};
  }
  return out;
}

}  // namespace joule::sim
