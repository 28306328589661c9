// SPDX-License-Identifier: Apache-2.0
// joule/plan/execution.hpp — a plan run on simulated GPUs, measured against its prediction (`joule plan
// --execute`), the forms of that comparison (text, CSV, JSON), and the forms of a planned frontier (rows as
// CSV and JSON, the SVG chart `joule plan --plot` writes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/plan/planner.hpp"

namespace joule::plan {

/// What N iterations of a plan measured on one simulated GPU per stage (PipelineExecutor), next to the plan's
/// prediction.
struct PlanExecution {
  int iterations = 0;
  PlanCost planned;                         ///< the model's time and energy of one iteration
  std::vector<double> planned_stage_end_s;  ///< per stage: when its last computation ends, s
  std::vector<double> planned_stage_energy_j;
  // Measured, averaged over the iterations.
  double time_s = 0;
  double energy_j = 0;
  std::vector<double> stage_end_s;
  std::vector<double> stage_energy_j;
  size_t clock_locks = 0;  ///< SM clock locks over all iterations and stages
};

/// Runs `iterations` (≥ 1) iterations of `plan` on a PipelineExecutor. Errors: those of
/// PipelineExecutor::create() and run_iteration() (a plan that does not fit the profile).
Result<PlanExecution> execute_plan(const PipelineDag& dag, const Profile& profile, const FrequencyPlan& plan,
                                   double p_blocking_w, int iterations);

/// @return (measured − planned) / planned; 0 when planned is 0.
double relative_error(double measured, double planned);

/// The execution as JSON: iterations, planned and measured totals, their relative errors, clock locks and
/// one entry per stage.
nlohmann::json execution_json(const PlanExecution& execution);
/// The execution as CSV: one row per stage (planned and measured end and energy), then "all".
std::string execution_csv(const PlanExecution& execution);
/// The execution as a table a human reads, starting with an empty line.
std::string execution_text(const PlanExecution& execution);

/// The frontier as CSV (point,time_s,energy_j), least energy first: point 0 is the slowest plan.
std::string frontier_csv(const Frontier<FrequencyPlan>& frontier);
/// The same rows as a JSON array.
nlohmann::json frontier_json(const Frontier<FrequencyPlan>& frontier);

/// @return an SVG of `result`'s frontier (iteration time against energy) titled `title`, with the
/// all-at-`max_clock_mhz` baseline, the `chosen` plan and, for a target, its time.
std::string frontier_chart_svg(const PlannerResult& result, const PlanChoice& chosen, uint32_t max_clock_mhz,
                               const std::string& title);

/// One planning of `joule plan`: what was planned and what came of it.
struct Planning {
  Schedule schedule;
  const PipelineDag& dag;
  const Profile& profile;
  std::string profile_name;  ///< the profile's file, as given
  double p_blocking_w = 0;   ///< power of a GPU blocking on communication, W
  double unit_time_s = 0;    ///< the planner's time unit, s
  PlannerResult result;
  double planning_s = 0;  ///< how long planning took, s
  PlanChoice chosen;      ///< the plan chosen for the target (choose_plan)
  std::optional<PlanExecution> execution;
  /// @return the chosen frontier point.
  const FrontierPoint<FrequencyPlan>& point() const { return result.frontier.points()[chosen.index]; }
};

/// The planning as a JSON document (2-space indent, final newline): pipeline, max-clock figures, the
/// frontier, the chosen point (numbered from the least-energy end, as Perseus) with its target figures, the
/// execution.
std::string planning_json(const Planning& planning);
/// The planning as a human reads it: the pipeline, all at the top clock, the frontier's ends, the intrinsic
/// bloat removed, the target's plan, the planning time, then one line per file `written` (what, path).
std::string planning_text(const Planning& planning,
                          const std::vector<std::pair<std::string_view, std::string>>& written);

}  // namespace joule::plan
