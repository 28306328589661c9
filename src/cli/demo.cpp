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
#include "joule/plan/planner.hpp"
#include "joule/plan/timeline_plot.hpp"
#include "joule/sim/report.hpp"
#include "joule/sim/simulator.hpp"
#include "joule/sim/training_run.hpp"
#include "joule/viz/frontier_plot.hpp"

#include "common.hpp"
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
  std::string card;
  Format format = Format::kText;
};

// The plots' files, made and checked before the demo runs.
struct DemoPlots {
  std::string frontier_svg, plan_svg, timeline_svg, simulation_svg;
  std::optional<OutputFile> frontier_out, plan_out, timeline_out, simulation_out;
  bool all_written = true;
  void write(std::optional<OutputFile>& output, const std::string& svg) {
    all_written = write_or_report(*output, svg, false) && all_written;
  }
};

void open_plots(DemoPlots& plots, const DemoFlags& flags, const device::sim::Spec& spec,
                const std::string& sim_gpu) {
  std::error_code made;
  std::filesystem::create_directories(flags.out_dir, made);
  if (made && !std::filesystem::is_directory(flags.out_dir)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("--out {}: cannot make the folder: {}", flags.out_dir, made.message()));
  }
  const auto plot_path = [&](std::string_view name) {
    return (std::filesystem::path(flags.out_dir) / name).string();
  };
  plots.frontier_svg = plot_path("demo_power_limit_frontier.svg");
  plots.plan_svg = plot_path("demo_pipeline_frontier.svg");
  plots.timeline_svg = plot_path("demo_pipeline_timeline.svg");
  plots.frontier_out = open_output(plots.frontier_svg, "--out");
  plots.plan_out = open_output(plots.plan_svg, "--out");
  plots.timeline_out = open_output(plots.timeline_svg, "--out");
  if (!flags.no_simulation) {
    plots.simulation_svg = plot_path(fmt::format("demo_simulation_{}_{}.svg", sim_gpu, spec.workload->key));
    plots.simulation_out = open_output(plots.simulation_svg, "--out");
  }
}

// Part 3: the Perseus planner on the example pipeline (4 stages × 8 microbatches, 1F1B).
constexpr double kBlockingW = 75;

struct PipelinePart {
  plan::PlannerResult planned;
  double planning_s = 0;
};

PipelinePart plan_example_pipeline(DemoPlots& plots) {
  const auto example_csv = joule::embedded::perseus_example("example_s4_m8_profile.csv");
  const plan::Profile example =
      value_or_throw(plan::Profile::parse(*example_csv, "<example_s4_m8_profile.csv>"));
  const plan::PipelineDag pipeline = value_or_throw(plan::build_pipeline(4, 8, plan::Schedule::k1F1B));
  plan::PlannerOptions planner_options;
  planner_options.p_blocking_w = kBlockingW;
  const auto planning_started = std::chrono::steady_clock::now();
  PipelinePart part{value_or_throw(plan::plan_frontier(pipeline, example, planner_options)), 0.0};
  part.planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - planning_started).count();
  const auto& pipeline_frontier = part.planned.frontier;
  const auto clocks = [](const plan::FrequencyPlan& plan) {
    const auto [low, high] = std::minmax_element(plan.begin(), plan.end());
    return *low == *high ? fmt::format("all at {} MHz", *low) : fmt::format("{}-{} MHz", *low, *high);
  };
  viz::FrontierPlotOptions plot_options{
      .title = "Perseus: iteration time-energy frontier, 4 stages x 8 microbatches",
      .x_label = "Iteration time (s)",
      .y_label = "Iteration energy (J)"};
  auto chart = viz::frontier_plot(pipeline_frontier, clocks, plot_options);
  chart.highlight({.x = part.planned.max_clock.time_s,
                   .y = part.planned.max_clock.energy_j,
                   .label = "all at 1410 MHz",
                   .color = "#222222",
                   .marker = viz::Marker::kSquare});
  chart.highlight(
      viz::highlight_point(pipeline_frontier.fastest(), "no slowdown", "#d55e00", clocks, plot_options));
  plots.write(plots.plan_out, chart.svg());
  plots.write(plots.timeline_out,
              plan::timeline_chart(pipeline, example, pipeline_frontier.fastest().knob,
                                   "One iteration without slowdown: intrinsic energy bloat removed")
                  .svg());
  return part;
}

nlohmann::json figures_json(double time_s, double energy_j) {
  return {{"time_s", time_s}, {"energy_j", energy_j}};
}

void print_demo_json(const DemoFlags& flags, const device::sim::Spec& spec, const sim::JitTrainingRun& run,
                     const std::vector<sim::SavingsRow>& rows, const PipelinePart& pipeline,
                     const DemoPlots& plots, bool simulation_plotted) {
  nlohmann::json out = {{"gpu", spec.model->key},
                        {"gpu_count", spec.count},
                        {"workload", spec.workload->key},
                        {"steps", flags.steps},
                        {"plots", {plots.frontier_svg}}};
  out.update(sim::jit_run_json(run));
  const auto& planned = pipeline.planned;
  out["pipeline"] = {
      {"max_clock", figures_json(planned.max_clock.time_s, planned.max_clock.energy_j)},
      {"no_slowdown", figures_json(planned.frontier.fastest().time_s, planned.frontier.fastest().energy_j)},
      {"least_energy",
       figures_json(planned.frontier.least_energy().time_s, planned.frontier.least_energy().energy_j)},
      {"plans", planned.frontier.size()}};
  out["plots"].push_back(plots.plan_svg);
  out["plots"].push_back(plots.timeline_svg);
  if (simulation_plotted) {
    out["plots"].push_back(plots.simulation_svg);
    out["simulation"] = nlohmann::json::parse(sim::render_savings_json(rows, sim::SimulationOptions{}));
  }
  std::cout << out.dump(2) << "\n";
}

void print_pipeline_text(const PipelinePart& pipeline) {
  const auto& planned = pipeline.planned;
  const auto& pipeline_frontier = planned.frontier;
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
      pipeline_frontier.size(), pipeline.planning_s);
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
  // The simulation's plot shows the demo's GPU (its trace, else the A40's) and workload.
  const std::string sim_gpu = spec.model->trace == spec.model->key ? spec.model->key : "a40";
  DemoPlots plots;
  open_plots(plots, flags, spec, sim_gpu);

  // 1. The JIT power-limit optimizer, live on the simulated GPUs.
  const sim::JitTrainingRun run =
      value_or_throw(sim::run_jit_training(spec, flags.steps, {.card_path = flags.card}));
  plots.write(plots.frontier_out, sim::jit_run_plot_svg(run, spec));

  // 2. Batch size and power limit together, across recurrences: the trace-driven simulator.
  std::vector<sim::SavingsRow> rows;
  bool simulation_plotted = false;
  if (!flags.no_simulation) {
    rows = value_or_throw(sim::simulate_paper_workloads(sim::SimulationOptions{}));
    for (const auto& row : rows) {
      if (row.gpu == sim_gpu && row.workload == spec.workload->key) {
        plots.write(plots.simulation_out, sim::simulation_plot_svg(row.gpu, row.result));
        simulation_plotted = true;
      }
    }
  }

  // 3. Pipeline parallelism.
  const PipelinePart pipeline = plan_example_pipeline(plots);
  if (flags.format == Format::kJson) {
    print_demo_json(flags, spec, run, rows, pipeline, plots, simulation_plotted);
    return plots.all_written ? kExitOk : kExitFailure;
  }
  std::cout << sim::jit_run_text(run, spec);
  if (!rows.empty()) {
    std::cout << "\njoule demo, part 2: batch size and power limit together, on the NSDI'23 traces ("
                 "`joule simulate --all`)\n\n";
    std::cout << sim::render_savings_text(rows, sim::SimulationOptions{});
  }
  print_pipeline_text(pipeline);
  std::cout << fmt::format("\nPlots: {}{}, {}, {}\n", plots.frontier_svg,
                           simulation_plotted ? ", " + plots.simulation_svg : "", plots.plan_svg,
                           plots.timeline_svg);
  return plots.all_written ? kExitOk : kExitFailure;
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
  command
      ->add_option(
          "--card", flags->card,
          "A frontier card of the simulated GPU (data/cards/sim-MODEL.json, or one `joule probe` made): "
          "the power-limit optimizer starts from it and measures fewer limits (docs/optimize.md)")
      ->option_text("FILE");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson});
  set_examples(*command, {"joule demo --out plots", "joule --sim 4xa40:squad demo --no-simulation",
                          "joule demo --no-simulation --card data/cards/sim-v100.json"});
  command->callback([&global, &exit_code, flags] { exit_code = run_demo(global, *flags); });
}

}  // namespace joule::cli
