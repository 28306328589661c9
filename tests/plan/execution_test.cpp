// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/execution.hpp"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::plan {
namespace {

const std::string kExampleProfile = std::string(JOULE_PERSEUS_DATA_DIR) + "/example_s4_m8_profile.csv";

TEST(PlanExecution, MeasuresWhatTheModelPredictsStageByStage) {
  const Profile profile = value_or_throw(Profile::read(kExampleProfile));
  const PipelineDag dag = value_or_throw(build_pipeline(4, 2, Schedule::k1F1B));
  const FrequencyPlan plan = uniform_plan(dag, profile.frequencies_mhz().front());
  const PlanExecution execution = value_or_throw(execute_plan(dag, profile, plan, 75, 2));
  EXPECT_EQ(execution.iterations, 2);
  ASSERT_EQ(execution.stage_end_s.size(), 4U);
  ASSERT_EQ(execution.planned_stage_end_s.size(), 4U);
  const PlanCost predicted = value_or_throw(evaluate(dag, profile, plan, 75));
  EXPECT_DOUBLE_EQ(execution.planned.time_s, predicted.time_s);
  EXPECT_NEAR(execution.time_s, predicted.time_s, 1e-6);
  EXPECT_NEAR(execution.energy_j, predicted.energy_j, 0.01 * predicted.energy_j);
  // The stage that ends last (the first, with its last backward) ends at the iteration's end.
  EXPECT_NEAR(*std::max_element(execution.planned_stage_end_s.begin(), execution.planned_stage_end_s.end()),
              predicted.time_s, 1e-9);
}

TEST(PlanExecution, FormsListEveryStageThenTheTotal) {
  PlanExecution execution;
  execution.iterations = 1;
  execution.planned = {2.0, 100.0};
  execution.planned_stage_end_s = {1.0, 2.0};
  execution.planned_stage_energy_j = {50.0, 50.0};
  execution.time_s = 2.2;
  execution.energy_j = 110.0;
  execution.stage_end_s = {1.1, 2.2};
  execution.stage_energy_j = {55.0, 55.0};
  execution.clock_locks = 3;
  EXPECT_EQ(execution_csv(execution),
            "stage,planned_end_s,measured_end_s,planned_energy_j,measured_energy_j\n"
            "0,1,1.1000000000000001,50,55\n"
            "1,2,2.2000000000000002,50,55\n"
            "all,2,2.2000000000000002,100,110\n");
  const nlohmann::json json = execution_json(execution);
  EXPECT_NEAR(json["time_error"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(json["stages"].size(), 2U);
  EXPECT_EQ(json["clock_locks"], 3);
  const std::string text = execution_text(execution);
  EXPECT_NE(text.find("(1 iteration;"), std::string::npos) << text;
  EXPECT_NE(text.find("+10.000%"), std::string::npos) << text;
  EXPECT_NE(text.find("3 SM clock locks over 1 iteration "), std::string::npos) << text;
}

TEST(PlanExecution, RelativeErrorIsZeroAgainstNothing) {
  EXPECT_DOUBLE_EQ(relative_error(1.5, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(relative_error(1.5, 0.0), 0.0);
}

TEST(PlanFrontierForms, ListTheSlowestPlanFirstAndChartTheChoice) {
  PlannerResult result;
  result.frontier =
      Frontier<FrequencyPlan>::from_points({{{1410, 1410}, 1.0, 10.0}, {{1000, 1410}, 1.5, 8.0}});
  result.max_clock = {1.0, 12.0};
  EXPECT_EQ(frontier_csv(result.frontier), "point,time_s,energy_j\n0,1.5,8\n1,1,10\n");
  const nlohmann::json rows = frontier_json(result.frontier);
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0]["point"], 0);
  EXPECT_EQ(rows[0]["time_s"], 1.5);
  PlanChoice chosen;
  chosen.index = 1;
  chosen.target_time_s = 1.5;
  const std::string svg = frontier_chart_svg(result, chosen, 1410, "A frontier");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("A frontier"), std::string::npos);
  EXPECT_NE(svg.find("all at 1410 MHz"), std::string::npos);
  EXPECT_NE(svg.find("chosen for the target"), std::string::npos);
  EXPECT_NE(svg.find("target 1.500 s"), std::string::npos);
}

}  // namespace
}  // namespace joule::plan

namespace joule::plan {
namespace {

TEST(Planning, JsonAndTextSayWhatWasPlannedAndChosen) {
  const Profile profile = value_or_throw(Profile::read(kExampleProfile));
  const PipelineDag dag = value_or_throw(build_pipeline(4, 2, Schedule::k1F1B));
  Planning planning{.schedule = Schedule::k1F1B,
                    .dag = dag,
                    .profile = profile,
                    .profile_name = "example.csv",
                    .p_blocking_w = 75,
                    .unit_time_s = 0.001,
                    .result = value_or_throw(plan_frontier(dag, profile, {})),
                    .planning_s = 0,
                    .chosen = {},
                    .execution = std::nullopt};
  planning.chosen = value_or_throw(choose_plan(planning.result.frontier, planning.result.max_clock, {},
                                               planning.p_blocking_w, dag.stages));
  const nlohmann::json json = nlohmann::json::parse(planning_json(planning));
  EXPECT_EQ(json["stages"], 4);
  EXPECT_EQ(json["microbatches"], 2);
  EXPECT_EQ(json["schedule"], "1f1b");
  EXPECT_EQ(json["frontier"].size(), planning.result.frontier.size());
  // Numbered from the least-energy end, as Perseus numbers its frontier.
  EXPECT_EQ(json["chosen"]["point"], planning.result.frontier.size() - 1 - planning.chosen.index);
  EXPECT_FALSE(json["chosen"].contains("target_time_s"));
  EXPECT_FALSE(json.contains("execution"));
  const std::string text = planning_text(planning, {{"plan", "p.json"}});
  EXPECT_EQ(text.rfind("Perseus plan: 4 stages x 2 microbatches (1f1b); example.csv (", 0), 0U) << text;
  EXPECT_NE(text.find("intrinsic bloat"), std::string::npos) << text;
  EXPECT_NE(text.find("  plan written to p.json\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace joule::plan
