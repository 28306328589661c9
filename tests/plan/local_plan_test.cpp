// SPDX-License-Identifier: Apache-2.0
// The plan of a stage runtime without a server (Python's PipelineFrequencyOptimizer with profile= or plan=).
#include "joule/plan/local_plan.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/plan/plan_io.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

std::string local_plan_profile() {
  return std::string(JOULE_PERSEUS_DATA_DIR) + "/example_s4_m8_profile.csv";
}

PlannerOptions local_plan_options() {
  PlannerOptions options;
  options.p_blocking_w = 75;
  return options;
}

TEST(LocalPlan, PlansTheFastestAndASlowerPlanWithTheirPredictions) {
  const Profile profile = value_or_throw(Profile::read(local_plan_profile()));
  const auto fastest = plan_locally(profile, 8, 4, "1f1b", local_plan_options(), std::nullopt, std::nullopt);
  ASSERT_TRUE(fastest) << fastest.error().message();
  EXPECT_EQ(fastest->stages, 4);
  EXPECT_EQ(fastest->schedules.size(), 4u);
  EXPECT_EQ(fastest->schedules[0].size(), 16u) << "8 forwards and 8 backwards";
  EXPECT_EQ(fastest->target_time_s, std::nullopt);
  EXPECT_LE(fastest->iteration_time_s, *fastest->max_clock_time_s + 1e-9);
  EXPECT_LT(fastest->iteration_energy_j, *fastest->max_clock_energy_j);
  EXPECT_FALSE(fastest->frontier.empty());
  const auto slower = plan_locally(profile, 8, 4, "1f1b", local_plan_options(), std::nullopt, 1.2);
  ASSERT_TRUE(slower);
  EXPECT_NEAR(*slower->target_time_s, 1.2 * fastest->iteration_time_s, 1e-9);
  JOULE_EXPECT_ERROR(plan_locally(profile, 8, 4, "1f1b", local_plan_options(), 1.0, 1.2),
                     ErrorCode::kInvalidArgument, "give target_time_s or slowdown, not both");
}

TEST(LocalPlan, ReadsAPlanFileAndEvaluatesItOnTheProfile) {
  const Profile profile = value_or_throw(Profile::read(local_plan_profile()));
  const LocalPlan planned =
      value_or_throw(plan_locally(profile, 8, 4, "1f1b", local_plan_options(), std::nullopt, std::nullopt));
  const PipelineDag dag = value_or_throw(build_pipeline(4, 8, Schedule::k1F1B));
  const std::string path = (std::filesystem::temp_directory_path() / "joule_local_plan_test.json").string();
  {
    std::ofstream out(path);
    out << plan_to_json(dag, planned.plan, {planned.iteration_time_s, planned.iteration_energy_j}).dump();
  }
  const auto own = read_plan_file(path, nullptr, std::nullopt);
  ASSERT_TRUE(own) << own.error().message();
  EXPECT_EQ(own->plan, planned.plan);
  EXPECT_EQ(own->max_clock_time_s, std::nullopt) << "the max-clock figures need the profile";
  const auto evaluated = read_plan_file(path, &profile, 75.0);
  ASSERT_TRUE(evaluated);
  EXPECT_NEAR(evaluated->iteration_time_s, planned.iteration_time_s, 1e-9);
  EXPECT_NEAR(evaluated->iteration_energy_j, planned.iteration_energy_j, 1e-6);
  EXPECT_NEAR(*evaluated->max_clock_energy_j, *planned.max_clock_energy_j, 1e-6);
  // The model of the same schedules, one stage twice as slow: time and energy both grow.
  const PlanCost same = value_or_throw(
      evaluate_stage_schedules(profile, 8, "1f1b", planned.schedules, 75.0, std::vector<double>(4, 1.0)));
  EXPECT_NEAR(same.time_s, planned.iteration_time_s, 1e-9);
  const PlanCost slowed =
      value_or_throw(evaluate_stage_schedules(profile, 8, "1f1b", planned.schedules, 75.0, {{1, 1, 1, 2}}));
  EXPECT_GT(slowed.time_s, same.time_s);
  JOULE_EXPECT_ERROR(evaluate_stage_schedules(profile, 8, "1f1b", planned.schedules, 75.0, {{1, 1}}),
                     ErrorCode::kInvalidArgument, "2 slowdowns for 4 stages");
  std::vector<StageSchedule> swapped = planned.schedules;
  std::swap(swapped[3][0], swapped[3][1]);
  JOULE_EXPECT_ERROR(evaluate_stage_schedules(profile, 8, "1f1b", swapped, 75.0, std::nullopt),
                     ErrorCode::kInvalidArgument,
                     "stage 3's schedule has backward as computation 1, the pipeline forward");
  {
    std::ofstream out(path, std::ios::trunc);
    out << "{\"stages\": 4}";
  }
  const auto bad = read_plan_file(path, nullptr, std::nullopt);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::kParse);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace joule::plan
