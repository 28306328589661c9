// SPDX-License-Identifier: Apache-2.0
// `joule plan`: the iteration time–energy frontier of a pipeline and the frequency plan to run (Perseus).
#include <chrono>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/plan/plan_io.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/runtime.hpp"
#include "joule/plan/timeline_plot.hpp"
#include "joule/viz/frontier_plot.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct PlanFlags {
  std::string profile;
  int stages = 0;
  int microbatches = 0;
  std::string schedule = "1f1b";
  double p_blocking_w = 70;
  double unit_time_s = 1e-3;
  double max_planning_units = plan::kDefaultMaxPlanningUnits;
  std::optional<double> target_time_s;
  std::optional<double> straggler_slowdown;
  std::string max_flow = "dinic";
  Format format = Format::kText;
  std::string plan_out;
  std::string plot;
  std::string timeline;
  int execute = 0;      // iterations to run the chosen plan on simulated GPUs (0: none)
  std::string plan_in;  // run this plan (plan_io.hpp JSON) instead of planning
};

// What `--execute N` measured: N iterations of the plan on one simulated GPU per stage.
struct Execution {
  int iterations = 0;
  plan::PlanCost planned;
  std::vector<double> planned_stage_end_s;  // per stage: when its last computation ends, s
  std::vector<double> planned_stage_energy_j;
  // Measured, averaged over the iterations.
  double time_s = 0;
  double energy_j = 0;
  std::vector<double> stage_end_s;
  std::vector<double> stage_energy_j;
  size_t clock_locks = 0;  // over all iterations and stages
};

Execution execute_plan(const plan::PipelineDag& dag, const plan::Profile& profile,
                       const plan::FrequencyPlan& chosen, double p_blocking_w, int iterations) {
  Execution execution;
  execution.iterations = iterations;
  auto executor = value_or_throw(plan::PipelineExecutor::create(dag, profile, p_blocking_w));
  const auto stages = static_cast<size_t>(dag.stages);
  const auto stage_end = [&](const plan::Timeline& timeline) {
    std::vector<double> end_s(stages, 0.0);
    for (size_t stage = 0; stage < stages; ++stage) {
      for (const int node : dag.stage_order[stage]) {
        end_s[stage] = std::max(end_s[stage], timeline.end_s[static_cast<size_t>(node)]);
      }
    }
    return end_s;
  };
  execution.stage_end_s.assign(stages, 0.0);
  execution.stage_energy_j.assign(stages, 0.0);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    const plan::IterationMeasurement measured = value_or_throw(executor.run_iteration(chosen));
    if (iteration == 0) {
      execution.planned = measured.predicted;
      execution.planned_stage_energy_j = measured.predicted_stage_energy_j;
      std::vector<double> times_s;
      for (size_t node = 0; node < dag.computations.size(); ++node) {
        times_s.push_back(
            value_or_throw(plan::option_at(profile, dag.computations[node], chosen[node])).time_s);
      }
      execution.planned_stage_end_s = stage_end(plan::schedule_times(dag, times_s));
    }
    const std::vector<double> end_s = stage_end(measured.timeline);
    for (size_t stage = 0; stage < stages; ++stage) {
      execution.stage_end_s[stage] += end_s[stage] / iterations;
      execution.stage_energy_j[stage] += measured.stage_energy_j[stage] / iterations;
      execution.clock_locks += measured.clock_locks[stage];
    }
    execution.time_s += measured.time_s / iterations;
    execution.energy_j += measured.energy_j / iterations;
  }
  return execution;
}

double relative_error(double measured, double planned) {
  return planned == 0 ? 0 : (measured - planned) / planned;
}

nlohmann::json execution_json(const Execution& execution) {
  nlohmann::json stages = nlohmann::json::array();
  for (size_t stage = 0; stage < execution.stage_end_s.size(); ++stage) {
    stages.push_back({{"stage", stage},
                      {"planned_end_s", execution.planned_stage_end_s[stage]},
                      {"measured_end_s", execution.stage_end_s[stage]},
                      {"planned_energy_j", execution.planned_stage_energy_j[stage]},
                      {"measured_energy_j", execution.stage_energy_j[stage]}});
  }
  return {{"iterations", execution.iterations},
          {"planned", {{"time_s", execution.planned.time_s}, {"energy_j", execution.planned.energy_j}}},
          {"measured", {{"time_s", execution.time_s}, {"energy_j", execution.energy_j}}},
          {"time_error", relative_error(execution.time_s, execution.planned.time_s)},
          {"energy_error", relative_error(execution.energy_j, execution.planned.energy_j)},
          {"clock_locks", execution.clock_locks},
          {"stages", stages}};
}

void print_execution_csv(const Execution& execution) {
  std::ostringstream out;
  csv::write_row(out, {"stage", "planned_end_s", "measured_end_s", "planned_energy_j", "measured_energy_j"});
  for (size_t stage = 0; stage < execution.stage_end_s.size(); ++stage) {
    csv::write_row(out, {std::to_string(stage), csv::format_exact(execution.planned_stage_end_s[stage]),
                         csv::format_exact(execution.stage_end_s[stage]),
                         csv::format_exact(execution.planned_stage_energy_j[stage]),
                         csv::format_exact(execution.stage_energy_j[stage])});
  }
  csv::write_row(out,
                 {"all", csv::format_exact(execution.planned.time_s), csv::format_exact(execution.time_s),
                  csv::format_exact(execution.planned.energy_j), csv::format_exact(execution.energy_j)});
  std::cout << out.str();
}

void print_execution_text(const Execution& execution) {
  std::cout << fmt::format(
      "\nExecuted on simulated GPUs ({} iteration{}; one GPU per stage, clocks locked per computation, "
      "energy "
      "from the GPUs' counters):\n",
      execution.iterations, execution.iterations == 1 ? "" : "s");
  std::cout << fmt::format("  {:>5}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}  {:>8}\n", "stage", "planned end",
                           "measured", "error", "planned J", "measured J", "error");
  for (size_t stage = 0; stage < execution.stage_end_s.size(); ++stage) {
    std::cout << fmt::format(
        "  {:>5}  {:>10.4f} s  {:>10.4f} s  {:>+7.3f}%  {:>12.3f}  {:>12.3f}  {:>+7.3f}%\n", stage,
        execution.planned_stage_end_s[stage], execution.stage_end_s[stage],
        relative_error(execution.stage_end_s[stage], execution.planned_stage_end_s[stage]) * 100,
        execution.planned_stage_energy_j[stage], execution.stage_energy_j[stage],
        relative_error(execution.stage_energy_j[stage], execution.planned_stage_energy_j[stage]) * 100);
  }
  std::cout << fmt::format(
      "  {:>5}  {:>10.4f} s  {:>10.4f} s  {:>+7.3f}%  {:>12.3f}  {:>12.3f}  {:>+7.3f}%\n", "all",
      execution.planned.time_s, execution.time_s,
      relative_error(execution.time_s, execution.planned.time_s) * 100, execution.planned.energy_j,
      execution.energy_j, relative_error(execution.energy_j, execution.planned.energy_j) * 100);
  std::cout << fmt::format("  {} SM clock locks over {} iteration{} (a lock only where the clock changes)\n",
                           execution.clock_locks, execution.iterations, execution.iterations == 1 ? "" : "s");
}

// `--plan-in FILE`: a saved plan, evaluated on the profile and (with --execute) run; no planning.
int run_saved_plan(const PlanFlags& flags, const plan::PipelineDag& dag, const plan::Profile& profile) {
  const std::string text = value_or_throw(read_text_file(flags.plan_in, read_limits::kPipelineProfile));
  const auto document = nlohmann::json::parse(text, nullptr, false);
  if (document.is_discarded()) {
    throw Exception(ErrorCode::kParse, fmt::format("plan: --plan-in {}: not JSON", flags.plan_in));
  }
  auto saved = plan::plan_from_json(dag, document);
  if (!saved) {
    throw Exception(saved.error().with_context(fmt::format("plan: --plan-in {}", flags.plan_in)));
  }
  const plan::PlanCost cost = value_or_throw(plan::evaluate(dag, profile, *saved, flags.p_blocking_w));
  const int iterations = std::max(flags.execute, 1);
  const Execution execution = execute_plan(dag, profile, *saved, flags.p_blocking_w, iterations);
  switch (flags.format) {
    case Format::kCsv:
      print_execution_csv(execution);
      break;
    case Format::kJson:
      std::cout << nlohmann::json({{"plan", flags.plan_in},
                                   {"time_s", cost.time_s},
                                   {"energy_j", cost.energy_j},
                                   {"execution", execution_json(execution)}})
                       .dump(2)
                << "\n";
      break;
    case Format::kText:
      std::cout << fmt::format("Plan {}: {:.4f} s, {:.2f} J per iteration on {} (blocking power {:g} W)\n",
                               flags.plan_in, cost.time_s, cost.energy_j, flags.profile, flags.p_blocking_w);
      print_execution_text(execution);
      break;
  }
  return 0;
}

std::string point_label(const FrontierPoint<plan::FrequencyPlan>& point) {
  return fmt::format("{:.4f} s, {:.2f} J", point.time_s, point.energy_j);
}

int run_plan(const PlanFlags& flags) {
  if (flags.target_time_s && flags.straggler_slowdown) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "plan: give --target-time-s or --straggler-slowdown, not both");
  }
  const auto parsed_schedule = plan::parse_schedule(flags.schedule);
  if (!parsed_schedule) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("plan: --schedule: {}", parsed_schedule.error().message()));
  }
  const plan::Schedule schedule = *parsed_schedule;
  const plan::PipelineDag dag =
      value_or_throw(plan::build_pipeline(flags.stages, flags.microbatches, schedule));
  const plan::Profile profile = value_or_throw(plan::Profile::read(flags.profile));
  if (profile.stage_count() != flags.stages) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("plan: {} profiles {} stages, but --stages is {}", flags.profile,
                                profile.stage_count(), flags.stages));
  }
  if (!flags.plan_in.empty()) {
    return run_saved_plan(flags, dag, profile);
  }
  // The outputs are checked before planning, which can take minutes: a path that cannot be written costs
  // nothing.
  std::optional<OutputFile> plan_out = open_output(flags.plan_out, "--plan-out");
  std::optional<OutputFile> plot_out = open_output(flags.plot, "--plot");
  std::optional<OutputFile> timeline_out = open_output(flags.timeline, "--timeline");
  plan::PlannerOptions options;
  options.p_blocking_w = flags.p_blocking_w;
  options.unit_time_s = flags.unit_time_s;
  options.max_planning_units = flags.max_planning_units;
  if (flags.max_flow == "boost") {
    options.max_flow = plan::MaxFlowAlgorithm::kBoostPushRelabel;
  } else if (flags.max_flow != "dinic") {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("plan: --max-flow '{}' is not dinic or boost", flags.max_flow));
  }
  value_or_throw(plan::validate(options));
  // plan_frontier() refuses the same way; checked here first to name the flags that raise the bound.
  if (auto bounded = plan::check_planning_units(dag, profile, options); !bounded) {
    throw Exception(bounded.error().code(),
                    fmt::format("plan: {} (--unit-time-s, --max-planning-units)", bounded.error().message()));
  }
  const auto started = std::chrono::steady_clock::now();
  const plan::PlannerResult result = value_or_throw(plan::plan_frontier(dag, profile, options));
  const double planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto& frontier = result.frontier;

  // The plan to run: for a target (a straggler's pace), the cheapest until the target; else the fastest
  // plan, which removes the intrinsic bloat at no slowdown.
  const plan::PlanChoice chosen = value_or_throw(plan::choose_plan(
      frontier, result.max_clock, {.time_s = flags.target_time_s, .slowdown = flags.straggler_slowdown},
      flags.p_blocking_w, flags.stages));
  const auto& point = frontier.points()[chosen.index];

  // Every output is tried; one that fails is named on stderr and the exit code is 1.
  bool all_written = true;
  std::vector<std::pair<std::string_view, std::string>> written;
  const auto write = [&](std::optional<OutputFile>& output, std::string_view what, std::string_view content) {
    if (write_or_report(*output, content, false)) {
      written.emplace_back(what, output->path());
    } else {
      all_written = false;
    }
  };
  if (plan_out) {
    nlohmann::json out = plan::plan_to_json(dag, point.knob, {point.time_s, point.energy_j});
    out["p_blocking_w"] = flags.p_blocking_w;
    if (chosen.target_time_s) {
      out["target_time_s"] = *chosen.target_time_s;
      out["energy_at_target_j"] = chosen.energy_j;
    }
    write(plan_out, "plan", out.dump(2) + "\n");
  }
  if (plot_out) {
    const auto label = [](const plan::FrequencyPlan& plan) {
      uint32_t low = plan.front();
      uint32_t high = plan.front();
      for (const uint32_t f : plan) {
        low = std::min(low, f);
        high = std::max(high, f);
      }
      return low == high ? fmt::format("all at {} MHz", low) : fmt::format("{}–{} MHz", low, high);
    };
    viz::FrontierPlotOptions plot_options{
        .title = fmt::format("Iteration time–energy frontier: {} stages × {} microbatches ({})", flags.stages,
                             flags.microbatches, plan::to_string(schedule)),
        .x_label = "Iteration time (s)",
        .y_label = "Iteration energy (J)"};
    auto chart = viz::frontier_plot(frontier, label, plot_options);
    chart.highlight({.x = result.max_clock.time_s,
                     .y = result.max_clock.energy_j,
                     .label = fmt::format("all at {} MHz", profile.frequencies_mhz().front()),
                     .color = "#222222",
                     .marker = viz::Marker::kSquare});
    chart.highlight(
        viz::highlight_point(point, chosen.target_time_s ? "chosen for the target" : "chosen: no slowdown",
                             "#d55e00", label, plot_options));
    if (chosen.target_time_s) {
      chart.reference({.orientation = viz::Orientation::kVertical,
                       .value = *chosen.target_time_s,
                       .label = fmt::format("target {:.3f} s", *chosen.target_time_s)});
    }
    write(plot_out, "plot", chart.svg());
  }
  if (timeline_out) {
    const std::string title = fmt::format("One iteration, {:.4f} s, {:.1f} J", point.time_s, point.energy_j);
    write(timeline_out, "timeline", plan::timeline_chart(dag, profile, point.knob, title).svg());
  }

  std::optional<Execution> execution;
  if (flags.execute > 0) {
    execution = execute_plan(dag, profile, point.knob, flags.p_blocking_w, flags.execute);
  }
  const auto& points = frontier.points();
  switch (flags.format) {
    case Format::kCsv: {
      if (execution) {
        print_execution_csv(*execution);  // the frontier is in --format json
        break;
      }
      std::ostringstream out;
      csv::write_row(out, {"point", "time_s", "energy_j"});
      for (size_t i = points.size(); i-- > 0;) {
        csv::write_row(out, {std::to_string(points.size() - 1 - i), csv::format_exact(points[i].time_s),
                             csv::format_exact(points[i].energy_j)});
      }
      std::cout << out.str();
      break;
    }
    case Format::kJson: {
      nlohmann::json rows = nlohmann::json::array();
      for (size_t i = points.size(); i-- > 0;) {
        rows.push_back({{"point", points.size() - 1 - i},
                        {"time_s", points[i].time_s},
                        {"energy_j", points[i].energy_j}});
      }
      nlohmann::json out = {
          {"stages", flags.stages},
          {"microbatches", flags.microbatches},
          {"schedule", plan::to_string(schedule)},
          {"p_blocking_w", flags.p_blocking_w},
          {"unit_time_s", flags.unit_time_s},
          {"max_clock", {{"time_s", result.max_clock.time_s}, {"energy_j", result.max_clock.energy_j}}},
          {"frontier", rows},
          {"cuts", result.iterations},
          {"planning_time_s", planning_s},
          {"chosen",
           {{"point", points.size() - 1 - chosen.index},
            {"time_s", point.time_s},
            {"energy_j", point.energy_j}}}};
      if (execution) {
        out["execution"] = execution_json(*execution);
      }
      if (chosen.target_time_s) {
        out["chosen"]["target_time_s"] = *chosen.target_time_s;
        out["chosen"]["energy_at_target_j"] = chosen.energy_j;
        out["chosen"]["max_clock_energy_at_target_j"] = chosen.max_clock_energy_j;
      }
      std::cout << out.dump(2) << "\n";
      break;
    }
    case Format::kText: {
      const auto& clocks = profile.frequencies_mhz();
      std::cout << fmt::format(
          "Perseus plan: {} stages x {} microbatches ({}); {} ({} clocks, {}-{} MHz); blocking power {:g} W; "
          "unit "
          "{:g} ms\n\n",
          flags.stages, flags.microbatches, plan::to_string(schedule), flags.profile, clocks.size(),
          clocks.back(), clocks.front(), flags.p_blocking_w, flags.unit_time_s * 1e3);
      std::cout << fmt::format("  all at {} MHz:     {:.4f} s, {:.2f} J per iteration\n", clocks.front(),
                               result.max_clock.time_s, result.max_clock.energy_j);
      std::cout << fmt::format("  frontier:          {} plans, from {} (fastest) to {} (least energy)\n",
                               frontier.size(), point_label(frontier.fastest()),
                               point_label(frontier.least_energy()));
      std::cout << fmt::format(
          "  no slowdown:       {}: {:.1f}% less energy than all at {} MHz (intrinsic bloat)\n",
          point_label(frontier.fastest()),
          (1 - frontier.fastest().energy_j / result.max_clock.energy_j) * 100, clocks.front());
      if (chosen.target_time_s) {
        std::cout << fmt::format(
            "  target {:.4f} s:   plan at {}; {:.2f} J with blocking until the target: {:.1f}% less than all "
            "at {} "
            "MHz waiting for it\n",
            *chosen.target_time_s, point_label(point), chosen.energy_j,
            (1 - chosen.energy_j / chosen.max_clock_energy_j) * 100, clocks.front());
      }
      std::cout << fmt::format("  planned in {:.3f} s ({} minimum cuts)\n", planning_s, result.iterations);
      for (const auto& [what, path] : written) {
        std::cout << fmt::format("  {} written to {}\n", what, path);
      }
      if (execution) {
        print_execution_text(*execution);
      }
      break;
    }
  }
  return all_written ? kExitOk : kExitFailure;
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto flags = std::make_shared<PlanFlags>();
  auto* command = app.add_subcommand(
      "plan",
      "Plan a GPU frequency for every forward and backward of a pipeline-parallel iteration (Perseus)");
  command->add_option("--profile", flags->profile, "CSV: stage,instruction,frequency_mhz,time_s,energy_j")
      ->option_text("FILE")
      ->required();
  command->add_option("--stages", flags->stages, "Pipeline stages S")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("S")
      ->required();
  command->add_option("--microbatches", flags->microbatches, "Microbatches per iteration M")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("M")
      ->required();
  command->add_option("--schedule", flags->schedule, "1f1b (default) or gpipe")->option_text("1f1b|gpipe");
  command
      ->add_option("--p-blocking-w", flags->p_blocking_w,
                   "Power of a GPU blocked on communication (default 70)")
      ->check(number(quantity::power_w()))
      ->option_text("W");
  command->add_option("--unit-time-s", flags->unit_time_s, "Time unit of the planner (default 0.001)")
      ->check(number(quantity::iteration_time_s()))
      ->option_text("T");
  command
      ->add_option(
          "--max-planning-units", flags->max_planning_units,
          fmt::format("Refuse a profile whose slowest iteration lasts more than N time units (default "
                      "{:.0f}): the planner's work grows with it",
                      plan::kDefaultMaxPlanningUnits))
      ->option_text("N");
  command
      ->add_option("--target-time-s", flags->target_time_s,
                   "Plan for this iteration time (e.g. a straggler's), blocking until it")
      ->check(number(quantity::iteration_time_s()))
      ->option_text("T'");
  command
      ->add_option("--straggler-slowdown", flags->straggler_slowdown,
                   "Plan for an iteration X times the fastest (X >= 1)")
      ->check(number(NumberRule{.min = 1}))
      ->option_text("X");
  command->add_option("--max-flow", flags->max_flow, "dinic (default) or boost (Boost.Graph push-relabel)")
      ->option_text("dinic|boost");
  add_format_option(*command, flags->format, {Format::kText, Format::kCsv, Format::kJson});
  command->add_option("--plan-out", flags->plan_out, "Write the chosen plan as JSON")
      ->option_text("FILE.json");
  command->add_option("--plot", flags->plot, "Write the frontier as SVG, with the all-max-clock baseline")
      ->option_text("FILE.svg");
  command
      ->add_option("--timeline", flags->timeline,
                   "Write one iteration of the chosen plan as an SVG Gantt chart")
      ->option_text("FILE.svg");
  command
      ->add_option("--execute", flags->execute,
                   "Run N iterations of the chosen plan on simulated GPUs (one per stage) and print measured "
                   "against planned time and energy per stage (--format csv: that table)")
      ->check(number(NumberRule{.min = 1, .max = 1000, .integer = true}))
      ->option_text("N");
  command
      ->add_option("--plan-in", flags->plan_in,
                   "Check a saved plan (--plan-out's JSON) instead of planning: its time and energy on the "
                   "profile, and one (or --execute N) iterations of it on simulated GPUs")
      ->option_text("FILE.json");
  set_examples(*command, {"joule plan --profile data/perseus/example_s4_m8_profile.csv --stages 4 "
                          "--microbatches 8 --plot frontier.svg",
                          "joule plan --profile data/perseus/example_s4_m8_profile.csv --stages 4 "
                          "--microbatches 8 --straggler-slowdown 1.2 --plan-out plan.json"});
  command->callback([&exit_code, flags] { exit_code = run_plan(*flags); });
}

}  // namespace joule::cli
