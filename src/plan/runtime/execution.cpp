// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/execution.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/plan/runtime.hpp"
#include "joule/viz/frontier_plot.hpp"

namespace joule::plan {

// What `--execute N` measured: N iterations of the plan on one simulated GPU per stage.
Result<PlanExecution> execute_plan(const PipelineDag& dag, const Profile& profile,
                                   const FrequencyPlan& chosen, double p_blocking_w, int iterations) {
  PlanExecution execution;
  execution.iterations = iterations;
  auto executor = JOULE_TRY(PipelineExecutor::create(dag, profile, p_blocking_w));
  const auto stages = static_cast<size_t>(dag.stages);
  const auto stage_end = [&](const Timeline& timeline) {
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
    const IterationMeasurement measured = JOULE_TRY(executor.run_iteration(chosen));
    if (iteration == 0) {
      execution.planned = measured.predicted;
      execution.planned_stage_energy_j = measured.predicted_stage_energy_j;
      std::vector<double> times_s;
      for (size_t node = 0; node < dag.computations.size(); ++node) {
        times_s.push_back(JOULE_TRY(option_at(profile, dag.computations[node], chosen[node])).time_s);
      }
      execution.planned_stage_end_s = stage_end(schedule_times(dag, times_s));
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

nlohmann::json execution_json(const PlanExecution& execution) {
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

std::string execution_csv(const PlanExecution& execution) {
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
  return out.str();
}

std::string execution_text(const PlanExecution& execution) {
  std::string out = fmt::format(
      "\nExecuted on simulated GPUs ({} iteration{}; one GPU per stage, clocks locked per computation, "
      "energy "
      "from the GPUs' counters):\n",
      execution.iterations, execution.iterations == 1 ? "" : "s");
  out += fmt::format("  {:>5}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}  {:>8}\n", "stage", "planned end",
                     "measured", "error", "planned J", "measured J", "error");
  for (size_t stage = 0; stage < execution.stage_end_s.size(); ++stage) {
    out += fmt::format(
        "  {:>5}  {:>10.4f} s  {:>10.4f} s  {:>+7.3f}%  {:>12.3f}  {:>12.3f}  {:>+7.3f}%\n", stage,
        execution.planned_stage_end_s[stage], execution.stage_end_s[stage],
        relative_error(execution.stage_end_s[stage], execution.planned_stage_end_s[stage]) * 100,
        execution.planned_stage_energy_j[stage], execution.stage_energy_j[stage],
        relative_error(execution.stage_energy_j[stage], execution.planned_stage_energy_j[stage]) * 100);
  }
  out += fmt::format("  {:>5}  {:>10.4f} s  {:>10.4f} s  {:>+7.3f}%  {:>12.3f}  {:>12.3f}  {:>+7.3f}%\n",
                     "all", execution.planned.time_s, execution.time_s,
                     relative_error(execution.time_s, execution.planned.time_s) * 100,
                     execution.planned.energy_j, execution.energy_j,
                     relative_error(execution.energy_j, execution.planned.energy_j) * 100);
  out += fmt::format("  {} SM clock locks over {} iteration{} (a lock only where the clock changes)\n",
                     execution.clock_locks, execution.iterations, execution.iterations == 1 ? "" : "s");
  return out;
}

std::string frontier_csv(const Frontier<FrequencyPlan>& frontier) {
  const auto& points = frontier.points();
  std::ostringstream out;
  csv::write_row(out, {"point", "time_s", "energy_j"});
  for (size_t i = points.size(); i-- > 0;) {
    csv::write_row(out, {std::to_string(points.size() - 1 - i), csv::format_exact(points[i].time_s),
                         csv::format_exact(points[i].energy_j)});
  }
  return out.str();
}

nlohmann::json frontier_json(const Frontier<FrequencyPlan>& frontier) {
  const auto& points = frontier.points();
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = points.size(); i-- > 0;) {
    rows.push_back(
        {{"point", points.size() - 1 - i}, {"time_s", points[i].time_s}, {"energy_j", points[i].energy_j}});
  }
  return rows;
}

std::string frontier_chart_svg(const PlannerResult& result, const PlanChoice& chosen, uint32_t max_clock_mhz,
                               const std::string& title) {
  const auto label = [](const FrequencyPlan& plan) {
    uint32_t low = plan.front();
    uint32_t high = plan.front();
    for (const uint32_t f : plan) {
      low = std::min(low, f);
      high = std::max(high, f);
    }
    return low == high ? fmt::format("all at {} MHz", low) : fmt::format("{}–{} MHz", low, high);
  };
  viz::FrontierPlotOptions plot_options{
      .title = title, .x_label = "Iteration time (s)", .y_label = "Iteration energy (J)"};
  auto chart = viz::frontier_plot(result.frontier, label, plot_options);
  chart.highlight({.x = result.max_clock.time_s,
                   .y = result.max_clock.energy_j,
                   .label = fmt::format("all at {} MHz", max_clock_mhz),
                   .color = "#222222",
                   .marker = viz::Marker::kSquare});
  const auto& point = result.frontier.points()[chosen.index];
  chart.highlight(viz::highlight_point(point,
                                       chosen.target_time_s ? "chosen for the target" : "chosen: no slowdown",
                                       "#d55e00", label, plot_options));
  if (chosen.target_time_s) {
    chart.reference({.orientation = viz::Orientation::kVertical,
                     .value = *chosen.target_time_s,
                     .label = fmt::format("target {:.3f} s", *chosen.target_time_s)});
  }
  return chart.svg();
}

namespace {

std::string point_label(const FrontierPoint<FrequencyPlan>& point) {
  return fmt::format("{:.4f} s, {:.2f} J", point.time_s, point.energy_j);
}

}  // namespace

std::string planning_json(const Planning& planned) {
  const auto& points = planned.result.frontier.points();
  const auto& point = planned.point();
  const auto& chosen = planned.chosen;
  nlohmann::json out = {
      {"stages", planned.dag.stages},
      {"microbatches", planned.dag.microbatches},
      {"schedule", to_string(planned.schedule)},
      {"p_blocking_w", planned.p_blocking_w},
      {"unit_time_s", planned.unit_time_s},
      {"max_clock",
       {{"time_s", planned.result.max_clock.time_s}, {"energy_j", planned.result.max_clock.energy_j}}},
      {"frontier", frontier_json(planned.result.frontier)},
      {"cuts", planned.result.iterations},
      {"planning_time_s", planned.planning_s},
      {"chosen",
       {{"point", points.size() - 1 - chosen.index},
        {"time_s", point.time_s},
        {"energy_j", point.energy_j}}}};
  if (planned.execution) {
    out["execution"] = execution_json(*planned.execution);
  }
  if (chosen.target_time_s) {
    out["chosen"]["target_time_s"] = *chosen.target_time_s;
    out["chosen"]["energy_at_target_j"] = chosen.energy_j;
    out["chosen"]["max_clock_energy_at_target_j"] = chosen.max_clock_energy_j;
  }
  return out.dump(2) + "\n";
}

std::string planning_text(const Planning& planned,
                          const std::vector<std::pair<std::string_view, std::string>>& written) {
  const auto& result = planned.result;
  const auto& frontier = result.frontier;
  const auto& chosen = planned.chosen;
  const auto& clocks = planned.profile.frequencies_mhz();
  std::string out = fmt::format(
      "Perseus plan: {} stages x {} microbatches ({}); {} ({} clocks, {}-{} MHz); blocking power {:g} W; "
      "unit "
      "{:g} ms\n\n",
      planned.dag.stages, planned.dag.microbatches, to_string(planned.schedule), planned.profile_name,
      clocks.size(), clocks.back(), clocks.front(), planned.p_blocking_w, planned.unit_time_s * 1e3);
  out += fmt::format("  all at {} MHz:     {:.4f} s, {:.2f} J per iteration\n", clocks.front(),
                     result.max_clock.time_s, result.max_clock.energy_j);
  out += fmt::format("  frontier:          {} plans, from {} (fastest) to {} (least energy)\n",
                     frontier.size(), point_label(frontier.fastest()), point_label(frontier.least_energy()));
  out += fmt::format("  no slowdown:       {}: {:.1f}% less energy than all at {} MHz (intrinsic bloat)\n",
                     point_label(frontier.fastest()),
                     (1 - frontier.fastest().energy_j / result.max_clock.energy_j) * 100, clocks.front());
  if (chosen.target_time_s) {
    out += fmt::format(
        "  target {:.4f} s:   plan at {}; {:.2f} J with blocking until the target: {:.1f}% less than all "
        "at {} "
        "MHz waiting for it\n",
        *chosen.target_time_s, point_label(planned.point()), chosen.energy_j,
        (1 - chosen.energy_j / chosen.max_clock_energy_j) * 100, clocks.front());
  }
  out += fmt::format("  planned in {:.3f} s ({} minimum cuts)\n", planned.planning_s, result.iterations);
  for (const auto& [what, path] : written) {
    out += fmt::format("  {} written to {}\n", what, path);
  }
  if (planned.execution) {
    out += execution_text(*planned.execution);
  }
  return out;
}

}  // namespace joule::plan
