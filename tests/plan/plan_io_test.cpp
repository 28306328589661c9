// SPDX-License-Identifier: Apache-2.0
// Frequency plans as JSON: the format, the round trip and every reading error.
#include "joule/plan/plan_io.hpp"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace joule::plan {
namespace {

using nlohmann::json;

class PlanJson : public ::testing::Test {
 protected:
  PipelineDag dag_ = build_pipeline(4, 8, Schedule::k1F1B).value();

  // A different clock for every computation, so that a mix-up shows.
  FrequencyPlan mixed_plan() const {
    FrequencyPlan plan(dag_.computations.size());
    for (size_t v = 0; v < plan.size(); ++v) {
      plan[v] = static_cast<uint32_t>(1410 - 15 * (v % 41));
    }
    return plan;
  }
  json written() const { return plan_to_json(dag_, mixed_plan(), PlanCost{0.74, 852.27}); }
};

TEST_F(PlanJson, Format) {
  const json document = written();
  EXPECT_EQ(document.at("schedule"), "1f1b");
  EXPECT_EQ(document.at("stages"), 4);
  EXPECT_EQ(document.at("microbatches"), 8);
  EXPECT_DOUBLE_EQ(document.at("time_s").get<double>(), 0.74);
  EXPECT_DOUBLE_EQ(document.at("energy_j").get<double>(), 852.27);
  ASSERT_EQ(document.at("stages_plan").size(), 4u);
  const json& stage0 = document.at("stages_plan")[0];
  EXPECT_EQ(stage0.at("stage"), 0);
  ASSERT_EQ(stage0.at("computations").size(), 16u);
  // Execution order: F0 F1 F2 F3 B0 …
  const json& fifth = stage0.at("computations")[4];
  EXPECT_EQ(
      fifth,
      (json{{"instruction", "backward"},
            {"microbatch", 0},
            {"frequency_mhz", mixed_plan()[static_cast<size_t>(dag_.node(0, Instruction::kBackward, 0))]}}));
  EXPECT_EQ(document.at("stages_plan")[3].at("computations")[1].at("instruction"), "backward");
  JOULE_EXPECT_THROW_MESSAGE(plan_to_json(dag_, FrequencyPlan(3, 1410), {}), ErrorCode::kInvalidArgument,
                             "the plan has 3 frequencies but the DAG has 64 computations");
}

TEST_F(PlanJson, RoundTrip) {
  EXPECT_EQ(plan_from_json(dag_, written()).value(), mixed_plan());
  // Through text, and for GPipe.
  EXPECT_EQ(plan_from_json(dag_, json::parse(written().dump())).value(), mixed_plan());
  const PipelineDag gpipe = build_pipeline(3, 5, Schedule::kGPipe).value();
  const FrequencyPlan plan = uniform_plan(gpipe, 1005);
  const json document = plan_to_json(gpipe, plan, {});
  EXPECT_EQ(document.at("schedule"), "gpipe");
  EXPECT_EQ(plan_from_json(gpipe, document).value(), plan);
  // Extra keys are ignored; time_s and energy_j are not needed to read a plan.
  json extra = written();
  extra["note"] = "hand-tuned";
  extra.erase("time_s");
  extra.erase("energy_j");
  EXPECT_EQ(plan_from_json(dag_, extra).value(), mixed_plan());
}

TEST_F(PlanJson, ShapeErrors) {
  JOULE_EXPECT_ERROR(plan_from_json(dag_, json::array()), ErrorCode::kParse,
                     "plan JSON: expected an object, got an array");
  json document = written();
  document.erase("stages_plan");
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "plan JSON: missing key \"stages_plan\"");
  document = written();
  document["stages_plan"] = json::object();
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan: expected an array, got an object");
  document = written();
  document["stages_plan"].erase(3);
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan: 3 entries, expected 4 (one per stage)");
  document = written();
  document["stages_plan"][1] = 7;
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[1]: expected an object, got an integer");
  document = written();
  std::swap(document["stages_plan"][1], document["stages_plan"][2]);
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[1].stage: expected 1 (stages in order), got 2");
  document = written();
  document["stages_plan"][0]["computations"][2]["frequency_mhz"] = 1410.5;
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[0].computations[2].frequency_mhz: expected a positive integer (MHz), got 1410.5");
  document["stages_plan"][0]["computations"][2]["frequency_mhz"] = -5;
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[0].computations[2].frequency_mhz: expected a positive integer (MHz), got -5");
  document["stages_plan"][0]["computations"][2]["frequency_mhz"] = "fast";
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[0].computations[2].frequency_mhz: expected a positive integer (MHz), got \"fast\"");
  document = written();
  document["stages_plan"][0]["computations"][2].erase("microbatch");
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[0].computations[2]: missing key \"microbatch\"");
  document = written();
  document["stages_plan"][0]["computations"][2]["microbatch"] = 8;
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[0].computations[2].microbatch: expected an integer in [0, 8), got 8");
  document["stages_plan"][0]["computations"][2]["microbatch"] = "2";
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[0].computations[2].microbatch: expected an integer, got a string");
}

TEST_F(PlanJson, PipelineMismatch) {
  json document = written();
  document["schedule"] = "gpipe";
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "schedule: the plan is for a gpipe schedule, the pipeline runs 1f1b");
  document["schedule"] = "interleaved";
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "schedule: unknown schedule \"interleaved\": expected 1f1b or gpipe");
  document["schedule"] = 1;
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "schedule: expected a string, got an integer");
  document = written();
  document["stages"] = 5;
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages: the plan has 5 stages, the pipeline has 4");
  document = written();
  document["microbatches"] = 16;
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "microbatches: the plan has 16 microbatches, the pipeline has 8");
}

TEST_F(PlanJson, ComputationErrors) {
  json document = written();
  document["stages_plan"][2]["computations"][5]["instruction"] = "recompute";
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[2].computations[5].instruction: unknown instruction \"recompute\": expected forward "
      "or backward");
  // Stage 0 runs F0 F1 F2 F3 B0 F4 …: swapping B0 and F4 breaks the order.
  document = written();
  std::swap(document["stages_plan"][0]["computations"][4], document["stages_plan"][0]["computations"][5]);
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[0].computations[4]: expected backward of microbatch 0 (next in the 1f1b order), got "
      "forward of microbatch 4");
  // The last computation missing.
  document = written();
  document["stages_plan"][3]["computations"].erase(15);
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[3].computations: 15 computations, expected 16; the first missing is backward of "
      "microbatch 7");
  // A computation in the middle missing shows as an order mismatch where it should be.
  document = written();
  document["stages_plan"][1]["computations"].erase(3);
  JOULE_EXPECT_ERROR(
      plan_from_json(dag_, document), ErrorCode::kParse,
      "stages_plan[1].computations[3]: expected backward of microbatch 0 (next in the 1f1b order), got "
      "forward of microbatch 3");
  // One too many.
  document = written();
  document["stages_plan"][1]["computations"].push_back(document["stages_plan"][1]["computations"][0]);
  JOULE_EXPECT_ERROR(plan_from_json(dag_, document), ErrorCode::kParse,
                     "stages_plan[1].computations: 17 computations, expected 16");
}

}  // namespace
}  // namespace joule::plan
