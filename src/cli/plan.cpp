// SPDX-License-Identifier: Apache-2.0
// `joule plan`: the iteration time–energy frontier of a pipeline and the frequency plan to run (Perseus).
#include <chrono>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/plan/execution.hpp"
#include "joule/plan/plan_io.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/timeline_plot.hpp"

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
  const plan::PlanExecution execution =
      value_or_throw(plan::execute_plan(dag, profile, *saved, flags.p_blocking_w, iterations));
  switch (flags.format) {
    case Format::kCsv:
      std::cout << plan::execution_csv(execution);
      break;
    case Format::kJson:
      std::cout << nlohmann::json({{"plan", flags.plan_in},
                                   {"time_s", cost.time_s},
                                   {"energy_j", cost.energy_j},
                                   {"execution", plan::execution_json(execution)}})
                       .dump(2)
                << "\n";
      break;
    case Format::kText:
      std::cout << fmt::format("Plan {}: {:.4f} s, {:.2f} J per iteration on {} (blocking power {:g} W)\n",
                               flags.plan_in, cost.time_s, cost.energy_j, flags.profile, flags.p_blocking_w);
      std::cout << plan::execution_text(execution);
      break;
  }
  return 0;
}

plan::PlannerOptions planner_options(const PlanFlags& flags) {
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
  return options;
}

// The files asked for: the plan, the frontier's chart, the chosen plan's timeline. Every output is tried; one
// that fails is named on stderr. @return what was written where, and whether all were.
std::pair<std::vector<std::pair<std::string_view, std::string>>, bool> write_outputs(
    const PlanFlags& flags, const plan::Planning& planned, std::optional<OutputFile>& plan_out,
    std::optional<OutputFile>& plot_out, std::optional<OutputFile>& timeline_out) {
  const auto& point = planned.point();
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
    nlohmann::json out = plan::plan_to_json(planned.dag, point.knob, {point.time_s, point.energy_j});
    out["p_blocking_w"] = flags.p_blocking_w;
    if (planned.chosen.target_time_s) {
      out["target_time_s"] = *planned.chosen.target_time_s;
      out["energy_at_target_j"] = planned.chosen.energy_j;
    }
    write(plan_out, "plan", out.dump(2) + "\n");
  }
  if (plot_out) {
    const std::string title =
        fmt::format("Iteration time–energy frontier: {} stages × {} microbatches ({})", flags.stages,
                    flags.microbatches, plan::to_string(planned.schedule));
    write(plot_out, "plot",
          plan::frontier_chart_svg(planned.result, planned.chosen, planned.profile.frequencies_mhz().front(),
                                   title));
  }
  if (timeline_out) {
    const std::string title = fmt::format("One iteration, {:.4f} s, {:.1f} J", point.time_s, point.energy_j);
    write(timeline_out, "timeline",
          plan::timeline_chart(planned.dag, planned.profile, point.knob, title).svg());
  }
  return {std::move(written), all_written};
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
  const plan::PlannerOptions options = planner_options(flags);
  // plan_frontier() refuses the same way; checked here first to name the flags that raise the bound.
  if (auto bounded = plan::check_planning_units(dag, profile, options); !bounded) {
    throw Exception(bounded.error().code(),
                    fmt::format("plan: {} (--unit-time-s, --max-planning-units)", bounded.error().message()));
  }
  const auto started = std::chrono::steady_clock::now();
  plan::Planning planned{.schedule = schedule,
                         .dag = dag,
                         .profile = profile,
                         .profile_name = flags.profile,
                         .p_blocking_w = flags.p_blocking_w,
                         .unit_time_s = flags.unit_time_s,
                         .result = value_or_throw(plan::plan_frontier(dag, profile, options)),
                         .planning_s = 0,
                         .chosen = {},
                         .execution = std::nullopt};
  planned.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The plan to run: for a target (a straggler's pace), the cheapest until the target; else the fastest
  // plan, which removes the intrinsic bloat at no slowdown.
  planned.chosen =
      value_or_throw(plan::choose_plan(planned.result.frontier, planned.result.max_clock,
                                       {.time_s = flags.target_time_s, .slowdown = flags.straggler_slowdown},
                                       flags.p_blocking_w, flags.stages));
  const auto [written, all_written] = write_outputs(flags, planned, plan_out, plot_out, timeline_out);
  if (flags.execute > 0) {
    planned.execution = value_or_throw(
        plan::execute_plan(dag, profile, planned.point().knob, flags.p_blocking_w, flags.execute));
  }
  switch (flags.format) {
    case Format::kCsv:
      // With --execute, the execution's table (the frontier is in --format json).
      std::cout << (planned.execution ? plan::execution_csv(*planned.execution)
                                      : plan::frontier_csv(planned.result.frontier));
      break;
    case Format::kJson:
      std::cout << plan::planning_json(planned);
      break;
    case Format::kText:
      std::cout << plan::planning_text(planned, written);
      break;
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
