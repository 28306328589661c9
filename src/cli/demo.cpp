// SPDX-License-Identifier: Apache-2.0
// `joule demo`: Zeus end to end on simulated GPUs. The JIT power-limit optimizer profiles a training job live
// (virtual clock), picks a limit and the rest of training runs with it; then the trace-driven simulator
// shows what batch size and power limit together save on every GPU and workload. Plots go to out/.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/power_limit.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/timeline_plot.hpp"
#include "joule/sim/simulator.hpp"
#include "joule/viz/frontier_plot.hpp"

#include "common.hpp"
#include "simulate_report.hpp"
#include "usage.hpp"

namespace joule::embedded {
std::optional<std::string_view> perseus_example(std::string_view file_name);
}

namespace joule::cli {

namespace {

constexpr std::string_view kDefaultDemoSpec = "v100:imagenet";

struct DemoFlags {
  int64_t steps = 1000;
  std::string out_dir = "out";
  bool no_simulation = false;
  Format format = Format::kText;
};

struct RunFigures {
  double time_s = 0;
  double energy_j = 0;
};

// A simulated job: GPUs on their own virtual clock, a monitor, and the training loop's iteration.
struct SimulatedJob {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::vector<device::sim::SimulatedGpu*> sim_gpus;
  std::vector<device::Gpu*> monitored;

  explicit SimulatedJob(const device::sim::Spec& spec) {
    gpus = value_or_throw(device::sim::open_sim_gpus(spec, clock));
    for (auto& gpu : gpus) {
      sim_gpus.push_back(gpu.get());
      monitored.push_back(gpu.get());
    }
  }
};

// Runs `steps` iterations at a fixed limit on a fresh simulated job: the comparison run.
RunFigures fixed_limit_run(const device::sim::Spec& spec, uint32_t power_limit_mw, int64_t steps) {
  SimulatedJob job(spec);
  for (auto* gpu : job.sim_gpus) {
    value_or_throw(gpu->set_power_limit_mw(power_limit_mw));
  }
  measure::EnergyMonitor monitor(job.monitored, {}, *job.clock);
  device::sim::TrainingJob training(job.sim_gpus, *job.clock);
  monitor.begin_window("run");
  training.run_iterations(steps);
  const auto m = monitor.end_window("run");
  return {m.time_s, m.total_gpu_energy_j()};
}

std::string watts(uint32_t power_limit_mw) {
  return fmt::format("{:g} W", power_limit_mw / 1e3);
}

int run_demo(const GlobalOptions& global, const DemoFlags& flags) {
  if (flags.steps < 400) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("demo: --steps must be at least 400, enough to profile every limit (got {})",
                                flags.steps));
  }
  auto options = value_or_throw(discovery_options(global));
  const std::string spec_text = options.sim_spec.value_or(std::string(kDefaultDemoSpec));
  const device::sim::Spec spec = value_or_throw(device::sim::parse_spec(spec_text));
  // The plots' folder is made, and each plot's file checked, before the demo runs.
  std::error_code made;
  std::filesystem::create_directories(flags.out_dir, made);
  if (made && !std::filesystem::is_directory(flags.out_dir)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("--out {}: cannot make the folder: {}", flags.out_dir, made.message()));
  }
  const auto plot_path = [&](std::string_view name) {
    return (std::filesystem::path(flags.out_dir) / name).string();
  };
  const std::string frontier_svg = plot_path("demo_power_limit_frontier.svg");
  const std::string plan_svg = plot_path("demo_pipeline_frontier.svg");
  const std::string timeline_svg = plot_path("demo_pipeline_timeline.svg");
  std::optional<OutputFile> frontier_out = open_output(frontier_svg, "--out");
  std::optional<OutputFile> plan_out = open_output(plan_svg, "--out");
  std::optional<OutputFile> timeline_out = open_output(timeline_svg, "--out");
  // The simulation's plot shows the demo's GPU (its trace, else the A40's) and workload.
  const std::string sim_gpu = spec.model->trace == spec.model->key ? spec.model->key : "a40";
  std::string simulation_svg;
  std::optional<OutputFile> simulation_out;
  if (!flags.no_simulation) {
    simulation_svg = plot_path(fmt::format("demo_simulation_{}_{}.svg", sim_gpu, spec.workload->key));
    simulation_out = open_output(simulation_svg, "--out");
  }
  bool all_written = true;
  const auto write = [&all_written](std::optional<OutputFile>& output, const std::string& svg) {
    all_written = write_or_report(*output, svg, false) && all_written;
  };

  // 1. The JIT power-limit optimizer, live on the simulated GPUs.
  SimulatedJob job(spec);
  device::sim::TrainingJob training(job.sim_gpus, *job.clock);
  measure::EnergyMonitor monitor(job.monitored, {}, *job.clock);
  optimize::PowerLimitOptions plo_options;
  plo_options.restore_on_signals = false;  // the demo's GPUs are simulated: nothing to restore on a signal
  optimize::PowerLimitOptimizer optimizer(monitor, plo_options);
  monitor.begin_window("training");
  int64_t done_at_step = -1;
  for (int64_t step = 0; step < flags.steps; ++step) {
    optimizer.on_step_begin();
    training.run_iterations(1);
    optimizer.on_step_end();
    if (done_at_step < 0 && optimizer.state() == optimize::PowerLimitState::kDone) {
      done_at_step = step + 1;
    }
  }
  const measure::Measurement with_zeus = monitor.end_window("training");
  const uint32_t chosen_mw = optimizer.chosen_power_limit_mw().value_or(0);
  const RunFigures at_max = fixed_limit_run(spec, optimizer.constraints().max_mw, flags.steps);
  const RunFigures at_chosen = fixed_limit_run(spec, chosen_mw, flags.steps);

  const std::string workload = job.gpus.front()->workload()->description();
  {
    std::vector<FrontierPoint<uint32_t>> measured;
    for (const auto& m : optimizer.measurements()) {
      measured.push_back({m.power_limit_mw, m.time_per_step_s(), m.energy_per_step_j()});
    }
    const auto frontier = Frontier<uint32_t>::from_points(measured);
    viz::FrontierPlotOptions plot_options{
        .title = fmt::format("JIT power-limit profile: {} on {}", workload, spec.model->key),
        .x_label = "Time per iteration (s)",
        .y_label = "Energy per iteration (J)",
        .measured_label = "profiled limits"};
    auto plot = viz::frontier_plot(frontier, watts, plot_options, measured);
    for (const auto& point : measured) {
      if (point.knob == chosen_mw) {
        plot.highlight(viz::highlight_point(point, fmt::format("chosen {}", watts(chosen_mw)), "#d55e00",
                                            watts, plot_options));
      }
      if (point.knob == optimizer.constraints().max_mw) {
        plot.highlight(viz::highlight_point(point, fmt::format("max {}", watts(point.knob)), "#222222", watts,
                                            plot_options));
      }
    }
    write(frontier_out, plot.svg());
  }

  // 2. Batch size and power limit together, across recurrences: the trace-driven simulator.
  std::vector<SavingsRow> rows;
  bool simulation_plotted = false;
  if (!flags.no_simulation) {
    sim::SimulationOptions sim_options;
    for (const std::string& gpu : sim::trace_gpus()) {
      const sim::Trace trace = value_or_throw(sim::gpu_trace(gpu));
      const sim::Simulator simulator = sim::zeus_simulator(trace, sim_options);
      for (const std::string& name : sim::paper_workloads()) {
        rows.push_back(
            {gpu, name, value_or_throw(simulator.simulate(value_or_throw(sim::paper_job(trace, name))))});
      }
    }
    for (const auto& row : rows) {
      if (row.gpu == sim_gpu && row.workload == spec.workload->key) {
        write(simulation_out, simulation_plot_svg(row.gpu, row.result));
        simulation_plotted = true;
      }
    }
  }

  // 3. Pipeline parallelism: the Perseus planner on the example pipeline (4 stages × 8 microbatches, 1F1B).
  constexpr double kBlockingW = 75;
  const auto example_csv = joule::embedded::perseus_example("example_s4_m8_profile.csv");
  const plan::Profile example =
      value_or_throw(plan::Profile::parse(*example_csv, "<example_s4_m8_profile.csv>"));
  const plan::PipelineDag pipeline = value_or_throw(plan::build_pipeline(4, 8, plan::Schedule::k1F1B));
  plan::PlannerOptions planner_options;
  planner_options.p_blocking_w = kBlockingW;
  const auto planning_started = std::chrono::steady_clock::now();
  const plan::PlannerResult planned = value_or_throw(plan::plan_frontier(pipeline, example, planner_options));
  const double planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - planning_started).count();
  const auto& pipeline_frontier = planned.frontier;
  {
    const auto clocks = [](const plan::FrequencyPlan& plan) {
      const auto [low, high] = std::minmax_element(plan.begin(), plan.end());
      return *low == *high ? fmt::format("all at {} MHz", *low) : fmt::format("{}-{} MHz", *low, *high);
    };
    viz::FrontierPlotOptions plot_options{
        .title = "Perseus: iteration time-energy frontier, 4 stages x 8 microbatches",
        .x_label = "Iteration time (s)",
        .y_label = "Iteration energy (J)"};
    auto chart = viz::frontier_plot(pipeline_frontier, clocks, plot_options);
    chart.highlight({.x = planned.max_clock.time_s,
                     .y = planned.max_clock.energy_j,
                     .label = "all at 1410 MHz",
                     .color = "#222222",
                     .marker = viz::Marker::kSquare});
    chart.highlight(
        viz::highlight_point(pipeline_frontier.fastest(), "no slowdown", "#d55e00", clocks, plot_options));
    write(plan_out, chart.svg());
    write(timeline_out, plan::timeline_chart(pipeline, example, pipeline_frontier.fastest().knob,
                                             "One iteration without slowdown: intrinsic energy bloat removed")
                            .svg());
  }

  const double energy_saved = 1 - at_chosen.energy_j / at_max.energy_j;
  const double time_added = at_chosen.time_s / at_max.time_s - 1;
  if (flags.format == Format::kJson) {
    nlohmann::json profile = nlohmann::json::array();
    for (const auto& m : optimizer.measurements()) {
      profile.push_back({{"power_limit_w", m.power_limit_mw / 1e3},
                         {"time_per_step_s", m.time_per_step_s()},
                         {"energy_per_step_j", m.energy_per_step_j()}});
    }
    nlohmann::json out = {
        {"gpu", spec.model->key},
        {"gpu_count", spec.count},
        {"workload", spec.workload->key},
        {"steps", flags.steps},
        {"profiled_until_step", done_at_step},
        {"profile", profile},
        {"chosen_power_limit_w", chosen_mw / 1e3},
        {"with_zeus", {{"time_s", with_zeus.time_s}, {"energy_j", with_zeus.total_gpu_energy_j()}}},
        {"at_max_power_limit", {{"time_s", at_max.time_s}, {"energy_j", at_max.energy_j}}},
        {"at_chosen_power_limit", {{"time_s", at_chosen.time_s}, {"energy_j", at_chosen.energy_j}}},
        {"plots", {frontier_svg}}};
    out["pipeline"] = {
        {"max_clock", {{"time_s", planned.max_clock.time_s}, {"energy_j", planned.max_clock.energy_j}}},
        {"no_slowdown",
         {{"time_s", pipeline_frontier.fastest().time_s},
          {"energy_j", pipeline_frontier.fastest().energy_j}}},
        {"least_energy",
         {{"time_s", pipeline_frontier.least_energy().time_s},
          {"energy_j", pipeline_frontier.least_energy().energy_j}}},
        {"plans", pipeline_frontier.size()}};
    out["plots"].push_back(plan_svg);
    out["plots"].push_back(timeline_svg);
    if (simulation_plotted) {
      out["plots"].push_back(simulation_svg);
      out["simulation"] =
          nlohmann::json::parse(render_savings_table(rows, sim::SimulationOptions{}, Format::kJson));
    }
    std::cout << out.dump(2) << "\n";
    return all_written ? kExitOk : kExitFailure;
  }

  std::cout << fmt::format(
      "joule demo, part 1: the JIT power-limit optimizer on {} simulated {} GPU{} ({}) training {}\n"
      "(virtual clock: {} iterations of simulated training)\n\n",
      spec.count, spec.model->key, spec.count == 1 ? "" : "s", job.gpus.front()->info().name, workload,
      flags.steps);
  std::cout << fmt::format(
      "  It tried {} limits from {} down, 10 warm-up + 40 measured iterations each, and was done "
      "after {} iterations:\n\n",
      optimizer.candidates_mw().size(), watts(optimizer.candidates_mw().front()), done_at_step);
  std::cout << fmt::format("  {:>11}  {:>16}  {:>18}  {:>10}\n", "power limit", "time/iter (ms)",
                           "energy/iter (J)", "frontier");
  const auto& frontier = optimizer.frontier();
  for (const auto& m : optimizer.measurements()) {
    bool on_frontier = false;
    for (const auto& point : frontier.points()) {
      on_frontier = on_frontier || point.knob == m.power_limit_mw;
    }
    std::cout << fmt::format("  {:>11}  {:>16.1f}  {:>18.2f}  {:>10}{}\n", watts(m.power_limit_mw),
                             m.time_per_step_s() * 1e3, m.energy_per_step_j(), on_frontier ? "yes" : "",
                             m.power_limit_mw == chosen_mw ? "   <- chosen" : "");
  }
  std::cout << fmt::format(
      "\n  Chosen by {}: {}.\n"
      "  {} iterations at {}: {:.1f} s, {:.1f} kJ; at the maximum {}: {:.1f} s, {:.1f} kJ.\n"
      "  The chosen limit saves {:.1f}% energy for {:.1f}% more time (profiling included, the whole run "
      "took {:.1f} s and {:.1f} kJ).\n",
      describe(optimizer.policy()), watts(chosen_mw), flags.steps, watts(chosen_mw), at_chosen.time_s,
      at_chosen.energy_j / 1e3, watts(optimizer.constraints().max_mw), at_max.time_s, at_max.energy_j / 1e3,
      energy_saved * 100, time_added * 100, with_zeus.time_s, with_zeus.total_gpu_energy_j() / 1e3);
  if (!rows.empty()) {
    std::cout << "\njoule demo, part 2: batch size and power limit together, on the NSDI'23 traces ("
                 "`joule simulate --all`)\n\n";
    std::cout << render_savings_table(rows, sim::SimulationOptions{}, Format::kText);
  }
  std::cout << fmt::format(
      "\njoule demo, part 3: pipeline parallelism (Perseus) on the example pipeline, 4 stages x 8 "
      "microbatches, "
      "1F1B, blocking power {:g} W\n\n"
      "  all computations at 1410 MHz: {:.4f} s, {:.2f} J per iteration\n"
      "  no slowdown:                  {:.4f} s, {:.2f} J: {:.1f}% less energy (slower clocks off the "
      "critical path)\n"
      "  least energy:                 {:.4f} s, {:.2f} J: {:.1f}% less energy, {:.1f}% more time\n"
      "  ({} plans on the frontier, planned in {:.3f} s; `joule plan` plans any profile, also for a "
      "straggler's "
      "pace)\n",
      kBlockingW, planned.max_clock.time_s, planned.max_clock.energy_j, pipeline_frontier.fastest().time_s,
      pipeline_frontier.fastest().energy_j,
      (1 - pipeline_frontier.fastest().energy_j / planned.max_clock.energy_j) * 100,
      pipeline_frontier.least_energy().time_s, pipeline_frontier.least_energy().energy_j,
      (1 - pipeline_frontier.least_energy().energy_j / planned.max_clock.energy_j) * 100,
      (pipeline_frontier.least_energy().time_s / planned.max_clock.time_s - 1) * 100,
      pipeline_frontier.size(), planning_s);
  std::cout << fmt::format("\nPlots: {}{}, {}, {}\n", frontier_svg,
                           simulation_plotted ? ", " + simulation_svg : "", plan_svg, timeline_svg);
  return all_written ? kExitOk : kExitFailure;
}

}  // namespace

void add_demo_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<DemoFlags>();
  auto* command = app.add_subcommand(
      "demo", fmt::format("Zeus end to end on simulated GPUs: the JIT power-limit optimizer live, then the "
                          "trace-driven savings table; plots go to out/ (default --sim {})",
                          kDefaultDemoSpec));
  command->add_option("--steps", flags->steps, "Training iterations of the live run (default 1000)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command->add_option("--out", flags->out_dir, "Directory for the SVG plots (default out)")
      ->option_text("DIR");
  command->add_flag("--no-simulation", flags->no_simulation, "Skip part 2 (the trace-driven simulations)");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson});
  set_examples(*command, {"joule demo --out plots", "joule --sim 4xa40:squad demo --no-simulation"});
  command->callback([&global, &exit_code, flags] { exit_code = run_demo(global, *flags); });
}

}  // namespace joule::cli
