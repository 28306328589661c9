// SPDX-License-Identifier: Apache-2.0
// The plan of a pipeline's stage runtime without a server: planned here, or read from a plan file; and the
// model's cost of per-stage schedules with stragglers.
#include "joule/plan/local_plan.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/file.hpp"
#include "joule/core/validate.hpp"
#include "joule/plan/plan_io.hpp"

namespace joule::plan {

namespace {

Result<PipelineDag> local_plan_dag(int stages, int microbatches, const std::string& schedule) {
  const Schedule parsed = JOULE_TRY(parse_schedule(schedule));
  return build_pipeline(stages, microbatches, parsed);
}

// The plan's per-stage schedules, from its DAG.
Result<LocalPlan> local_plan_of(const PipelineDag& dag, int stages, int microbatches, std::string schedule,
                                FrequencyPlan plan) {
  LocalPlan local;
  local.stages = stages;
  local.microbatches = microbatches;
  local.schedule = std::move(schedule);
  local.schedules = JOULE_TRY(stage_schedules(dag, plan));
  local.plan = std::move(plan);
  return local;
}

Result<nlohmann::json> plan_document(const std::string& path) {
  const std::string text = JOULE_TRY(read_text_file(path, read_limits::kPipelineProfile));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    return fail(ErrorCode::kParse, "{} is not valid JSON: {}", path, error.what());
  }
  if (!json.is_object() || !json.contains("stages") || !json["stages"].is_number_integer() ||
      !json.contains("microbatches") || !json["microbatches"].is_number_integer() ||
      !json.contains("schedule") || !json["schedule"].is_string()) {
    return fail(
        ErrorCode::kParse,
        "{}: a plan needs integer 'stages' and 'microbatches' and a 'schedule' (write it with `joule plan "
        "--plan-out`)",
        path);
  }
  return json;
}

// The profile with every computation of stage s stretched by slowdowns[s] (same power: time and energy
// scale).
Result<Profile> slowed_profile(const Profile& profile, int stages, const std::vector<double>& slowdowns) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options;
  for (int stage = 0; stage < profile.stage_count(); ++stage) {
    double factor = 1.0;
    if (!slowdowns.empty() && stage < stages) {
      factor =
          JOULE_TRY(check_number(slowdowns[static_cast<size_t>(stage)], NumberRule::positive(), "slowdown"));
    }
    auto& stage_options = options.emplace_back();
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      for (ProfileOption option : profile.options(stage, instruction)) {
        option.time_s *= factor;
        option.energy_j *= factor;
        stage_options[instruction == Instruction::kForward ? 0 : 1].push_back(option);
      }
    }
  }
  return Profile::from_options(std::move(options));
}

}  // namespace

Result<LocalPlan> plan_locally(const Profile& profile, int microbatches, int stages,
                               const std::string& schedule, const PlannerOptions& options,
                               std::optional<double> target_time_s, std::optional<double> slowdown) {
  const PipelineDag dag = JOULE_TRY(local_plan_dag(stages, microbatches, schedule));
  JOULE_TRY(validate(options));
  const PlannerResult result = JOULE_TRY(plan_frontier(dag, profile, options));
  const auto& frontier = result.frontier;
  if (target_time_s && slowdown) {
    return fail(ErrorCode::kInvalidArgument, "give target_time_s or slowdown, not both");
  }
  if (slowdown) {
    JOULE_TRY(check_number(*slowdown, NumberRule{.min = 1.0}, "slowdown"));
  }
  const PlanChoice choice =
      JOULE_TRY(choose_plan(frontier, result.max_clock, {.time_s = target_time_s, .slowdown = slowdown},
                            options.p_blocking_w, stages));
  const auto& point = frontier.points()[choice.index];
  LocalPlan local = JOULE_TRY(local_plan_of(dag, stages, microbatches, schedule, point.knob));
  local.iteration_time_s = choice.time_s;
  local.iteration_energy_j = choice.energy_j;
  local.max_clock_time_s = result.max_clock.time_s;
  local.max_clock_energy_j = result.max_clock.energy_j;
  local.target_time_s = choice.target_time_s;
  for (const auto& frontier_point : frontier.points()) {
    local.frontier.emplace_back(frontier_point.time_s, frontier_point.energy_j);
  }
  return local;
}

Result<LocalPlan> read_plan_file(const std::string& path, const Profile* profile,
                                 std::optional<double> p_blocking_w) {
  const nlohmann::json json = JOULE_TRY(plan_document(path));
  const int stages = json["stages"].get<int>();
  const int microbatches = json["microbatches"].get<int>();
  const PipelineDag dag =
      JOULE_TRY(local_plan_dag(stages, microbatches, json["schedule"].get<std::string>()));
  Result<FrequencyPlan> parsed = plan_from_json(dag, json);
  if (!parsed) {
    return fail(parsed.error().code(), "{}: {}", path, parsed.error().message());
  }
  LocalPlan local = JOULE_TRY(
      local_plan_of(dag, stages, microbatches, json["schedule"].get<std::string>(), *std::move(parsed)));
  if (json.contains("target_time_s")) {
    local.target_time_s = json["target_time_s"].get<double>();
  }
  local.iteration_time_s = json.value("target_time_s", json.value("time_s", 0.0));
  local.iteration_energy_j = json.value("energy_at_target_j", json.value("energy_j", 0.0));
  if (profile == nullptr) {
    return local;
  }
  const double blocking_w = p_blocking_w.value_or(json.value("p_blocking_w", 70.0));
  const PlanCost cost = JOULE_TRY(evaluate(dag, *profile, local.plan, blocking_w));
  const PlanCost max_clock =
      JOULE_TRY(evaluate(dag, *profile, uniform_plan(dag, profile->frequencies_mhz().front()), blocking_w));
  // Blocking until the file's target, if it is later than the plan's own time.
  const double target_s = json.value("target_time_s", cost.time_s);
  local.iteration_time_s = std::max(target_s, cost.time_s);
  local.iteration_energy_j = cost.energy_j + blocking_w * stages * std::max(0.0, target_s - cost.time_s);
  local.max_clock_time_s = max_clock.time_s;
  local.max_clock_energy_j = max_clock.energy_j;
  return local;
}

Result<PlanCost> evaluate_stage_schedules(const Profile& profile, int microbatches,
                                          const std::string& schedule,
                                          const std::vector<StageSchedule>& schedules, double p_blocking_w,
                                          const std::optional<std::vector<double>>& slowdowns) {
  const auto stages = static_cast<int>(schedules.size());
  const PipelineDag dag = JOULE_TRY(local_plan_dag(stages, microbatches, schedule));
  if (slowdowns && slowdowns->size() != schedules.size()) {
    return fail(ErrorCode::kInvalidArgument, "{} slowdowns for {} stages", slowdowns->size(),
                schedules.size());
  }
  JOULE_TRY(check_inputs(dag, profile, p_blocking_w));
  FrequencyPlan frequency_plan(dag.computations.size(), 0);
  for (size_t stage = 0; stage < schedules.size(); ++stage) {
    const auto& order = dag.stage_order[stage];
    const StageSchedule& entries = schedules[stage];
    if (entries.size() != order.size()) {
      return fail(ErrorCode::kInvalidArgument, "stage {}'s schedule has {} computations, the pipeline {}",
                  stage, entries.size(), order.size());
    }
    for (size_t i = 0; i < order.size(); ++i) {
      const Computation& computation = dag.computations[static_cast<size_t>(order[i])];
      if (entries[i].instruction != computation.instruction) {
        return fail(ErrorCode::kInvalidArgument,
                    "stage {}'s schedule has {} as computation {}, the pipeline {}", stage,
                    to_string(entries[i].instruction), i + 1, to_string(computation.instruction));
      }
      frequency_plan[static_cast<size_t>(order[i])] = entries[i].frequency_mhz;
    }
  }
  const Profile slowed =
      JOULE_TRY(slowed_profile(profile, stages, slowdowns.value_or(std::vector<double>{})));
  return evaluate(dag, slowed, frequency_plan, p_blocking_w);
}

}  // namespace joule::plan
