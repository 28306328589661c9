// SPDX-License-Identifier: Apache-2.0
// joule/plan/local_plan.hpp — the plan a pipeline's stage runtime follows without a server (Python's
// PipelineFrequencyOptimizer with profile= or plan=): planned here from a profile, or read from a plan file
// written by `joule plan --plan-out`, as per-stage schedules with the model's predictions; and the model's
// cost of per-stage schedules run with stragglers (what simulated stage devices measure).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/runtime.hpp"

namespace joule::plan {

/// A pipeline's plan as its stages run it, with what the model predicts for one iteration.
struct LocalPlan {
  int stages = 0;
  int microbatches = 0;
  std::string schedule;                  ///< the pipeline schedule's name, as given ("1f1b", "gpipe")
  FrequencyPlan plan;                    ///< node id → MHz
  std::vector<StageSchedule> schedules;  ///< per stage, its computations in execution order
  double iteration_time_s = 0;           ///< predicted: the target if there is one, else the plan's own time
  double iteration_energy_j = 0;         ///< predicted, J (blocking until the target included)
  std::optional<double> max_clock_time_s;  ///< every computation at the highest clock, s (needs the profile)
  std::optional<double> max_clock_energy_j;         ///< the same, J
  std::optional<double> target_time_s;              ///< the target iteration time, s; none: the fastest plan
  std::vector<std::pair<double, double>> frontier;  ///< planned here: every (time_s, energy_j), fastest first
};

/// Plans `stages` stages (of `profile`) of `microbatches` microbatches under `schedule`: the fastest plan, or
/// the cheapest for `target_time_s`, or for `slowdown` × the fastest time. Errors: the schedule's, the
/// planner options' and the planner's; kInvalidArgument for both a target and a slowdown, or a slowdown < 1.
Result<LocalPlan> plan_locally(const Profile& profile, int microbatches, int stages,
                               const std::string& schedule, const PlannerOptions& options,
                               std::optional<double> target_time_s, std::optional<double> slowdown);

/// Reads a plan file of `joule plan --plan-out` at `path`, checked against its own pipeline. Its predictions
/// are the file's own unless `profile` is given: then they are evaluated (with the max-clock figures) at
/// `p_blocking_w` (default: the file's, else 70 W). Errors: the file's (kIo, kTooLarge); kParse if it is not
/// JSON or lacks integer stages and microbatches and a schedule name; plan_from_json's, prefixed by the path.
Result<LocalPlan> read_plan_file(const std::string& path, const Profile* profile,
                                 std::optional<double> p_blocking_w);

/// The model's cost of one iteration of `schedules` (one per stage, as a plan's stages run them) with each
/// stage's computations stretched by its slowdown (same power, slowdown × the time; nullopt: none). Errors:
/// kInvalidArgument for as many slowdowns as stages, a schedule that does not match the pipeline's order (its
/// length or an instruction), or a slowdown that is not positive; evaluate()'s.
Result<PlanCost> evaluate_stage_schedules(const Profile& profile, int microbatches,
                                          const std::string& schedule,
                                          const std::vector<StageSchedule>& schedules, double p_blocking_w,
                                          const std::optional<std::vector<double>>& slowdowns);

}  // namespace joule::plan
