// SPDX-License-Identifier: Apache-2.0
// The brute-force frontier of a tiny pipeline, checked against plans worked out by hand, and the gap measure.
#include "joule/plan/exact.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::plan {
namespace {

// Both stages alike. Forward: 1 / 1.5 / 2 s and 10 / 9 / 8.5 J at 1400 / 1200 / 1000 MHz; backward: 2 / 3 / 4
// s and 20 / 18 / 17 J.
Profile tiny_profile() {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(2);
  for (auto& stage : options) {
    stage[0] = {{1400, 1.0, 10.0}, {1200, 1.5, 9.0}, {1000, 2.0, 8.5}};
    stage[1] = {{1400, 2.0, 20.0}, {1200, 3.0, 18.0}, {1000, 4.0, 17.0}};
  }
  return value_or_throw(Profile::from_options(std::move(options)));
}

class ExactFrontier : public ::testing::Test {
 protected:
  PipelineDag dag_ = build_pipeline(2, 2, Schedule::k1F1B).value();
  Profile profile_ = tiny_profile();

  // At 1400 MHz: F00 [0,1] F01 [1,2] F10 [1,2] B10 [2,4] F11 [4,5] B00 [4,6] B11 [5,7] B01 [7,9]; T = 9 s on
  // the chain F00 F10 B10 F11 B11 B01. Off it, F01 has 2 s of slack (F11 and B00 start at 4) and B00 1 s
  // (B01 starts at 7), so at T = 9 s the cheapest plan runs F01 at 1000 MHz and B00 at 1200 MHz.
  FrequencyPlan fastest_cheapest_plan() const {
    FrequencyPlan plan = uniform_plan(dag_, 1400);
    plan[static_cast<size_t>(dag_.node(0, Instruction::kForward, 1))] = 1000;
    plan[static_cast<size_t>(dag_.node(0, Instruction::kBackward, 0))] = 1200;
    return plan;
  }
};

TEST_F(ExactFrontier, EndsWorkedOutByHandWithoutBlockingPower) {
  const Frontier<FrequencyPlan> frontier = exact_frontier(dag_, profile_, 0).value();
  ASSERT_GE(frontier.size(), 2u);
  // Fastest: T = 9 s, Σe = 120 − 1.5 − 2 = 116.5 J.
  EXPECT_DOUBLE_EQ(frontier.fastest().time_s, 9);
  EXPECT_DOUBLE_EQ(frontier.fastest().energy_j, 116.5);
  EXPECT_EQ(frontier.fastest().knob, fastest_cheapest_plan());
  // Least energy with P_block = 0: every computation at its cheapest clock (1000 MHz), 4 × 8.5 + 4 × 17 J,
  // and T = 2 × 9 s (every time doubled).
  EXPECT_DOUBLE_EQ(frontier.least_energy().energy_j, 102);
  EXPECT_DOUBLE_EQ(frontier.least_energy().time_s, 18);
  EXPECT_EQ(frontier.least_energy().knob, uniform_plan(dag_, 1000));
  // All at 1200 MHz: T = 13.5 s, 108 J; the frontier has a point at least as good.
  const auto& points = frontier.points();
  EXPECT_TRUE(std::any_of(points.begin(), points.end(),
                          [](const auto& p) { return p.time_s <= 13.5 && p.energy_j <= 108; }));
}

TEST_F(ExactFrontier, FastestWithBlockingPower) {
  // P = 5 W: E = Σe + 5 (2T − Σt). At T = 9 s, Σt = 12 + 1 + 1 = 14 s: 116.5 + 5 × 4 = 136.5 J (all-1400: 150
  // J).
  const Frontier<FrequencyPlan> frontier = exact_frontier(dag_, profile_, 5).value();
  EXPECT_DOUBLE_EQ(frontier.fastest().time_s, 9);
  EXPECT_DOUBLE_EQ(frontier.fastest().energy_j, 136.5);
  EXPECT_EQ(frontier.fastest().knob, fastest_cheapest_plan());
  EXPECT_DOUBLE_EQ(evaluate(dag_, profile_, uniform_plan(dag_, 1400), 5).value().energy_j, 150);
}

TEST_F(ExactFrontier, PointsArePlansOnTheFrontier) {
  const Frontier<FrequencyPlan> frontier = exact_frontier(dag_, profile_, 3).value();
  const auto& points = frontier.points();
  for (size_t i = 0; i < points.size(); ++i) {
    const PlanCost cost = evaluate(dag_, profile_, points[i].knob, 3).value();
    EXPECT_DOUBLE_EQ(cost.time_s, points[i].time_s);
    EXPECT_DOUBLE_EQ(cost.energy_j, points[i].energy_j);
    if (i > 0) {
      EXPECT_LT(points[i - 1].time_s, points[i].time_s);
      EXPECT_GT(points[i - 1].energy_j, points[i].energy_j);
    }
  }
  // No uniform plan beats it.
  for (const uint32_t f : profile_.frequencies_mhz()) {
    const PlanCost cost = evaluate(dag_, profile_, uniform_plan(dag_, f), 3).value();
    EXPECT_TRUE(std::any_of(points.begin(), points.end(), [&](const auto& p) {
      return p.time_s <= cost.time_s && p.energy_j <= cost.energy_j;
    })) << f;
  }
}

TEST_F(ExactFrontier, RefusesTooManyPlans) {
  EXPECT_TRUE(exact_frontier(dag_, profile_, 0, 6561).has_value());  // 3^8 exactly
  JOULE_EXPECT_ERROR(exact_frontier(dag_, profile_, 0, 6560), ErrorCode::kInvalidArgument,
                     "3 frequencies for each of 8 computations make 3^8 plans, more than max_plans = 6560");
  const Profile example = Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv").value();
  const PipelineDag big = build_pipeline(4, 8, Schedule::k1F1B).value();
  JOULE_EXPECT_ERROR(
      exact_frontier(big, example, 75), ErrorCode::kInvalidArgument,
      "41 frequencies for each of 64 computations make 41^64 plans, more than max_plans = 5000000");
  JOULE_EXPECT_ERROR(exact_frontier(build_pipeline(3, 1, Schedule::k1F1B).value(), profile_, 0),
                     ErrorCode::kInvalidArgument, "the profile has 2 stages but the pipeline has 3");
  JOULE_EXPECT_ERROR(exact_frontier(dag_, profile_, -1), ErrorCode::kInvalidArgument,
                     "the blocking power must be finite and non-negative, got -1 W");
}

TEST_F(ExactFrontier, GapToItselfIsZero) {
  const Frontier<FrequencyPlan> exact = exact_frontier(dag_, profile_, 0).value();
  const FrontierGap gap = compare_to_exact(exact, exact);
  EXPECT_EQ(gap.matched, exact.size());
  EXPECT_EQ(gap.unmatched, 0u);
  EXPECT_DOUBLE_EQ(gap.max_gap, 0);
  EXPECT_DOUBLE_EQ(gap.mean_gap, 0);
}

TEST_F(ExactFrontier, GapOfMaxClockOnly) {
  const Frontier<FrequencyPlan> exact = exact_frontier(dag_, profile_, 0).value();
  // Only the all-1400 plan (9 s, 120 J): every exact point is matched by it; the worst is the least-energy
  // point, 120 / 102 − 1.
  const auto max_clock = Frontier<FrequencyPlan>::from_points({{uniform_plan(dag_, 1400), 9, 120}});
  const FrontierGap gap = compare_to_exact(exact, max_clock);
  EXPECT_EQ(gap.matched, exact.size());
  EXPECT_EQ(gap.unmatched, 0u);
  EXPECT_DOUBLE_EQ(gap.max_gap, 120.0 / 102 - 1);
  EXPECT_DOUBLE_EQ(gap.worst_time_s, 18);
  double sum = 0;
  for (const auto& point : exact.points()) {
    sum += 120 / point.energy_j - 1;
  }
  EXPECT_NEAR(gap.mean_gap, sum / static_cast<double>(exact.size()), 1e-12);
  EXPECT_GT(gap.mean_gap, 0);
  EXPECT_LT(gap.mean_gap, gap.max_gap);
}

TEST_F(ExactFrontier, GapWithPointsTooSlow) {
  const Frontier<FrequencyPlan> exact = exact_frontier(dag_, profile_, 0).value();
  // Only the slowest plan: it matches the least-energy point exactly and nothing faster.
  const auto slow = Frontier<FrequencyPlan>::from_points({{uniform_plan(dag_, 1000), 18, 102}});
  const FrontierGap gap = compare_to_exact(exact, slow);
  EXPECT_EQ(gap.matched, 1u);
  EXPECT_EQ(gap.unmatched, exact.size() - 1);
  EXPECT_DOUBLE_EQ(gap.max_gap, 0);
  EXPECT_DOUBLE_EQ(gap.worst_time_s, 18);
  // An empty frontier matches nothing.
  const FrontierGap none = compare_to_exact(exact, Frontier<FrequencyPlan>());
  EXPECT_EQ(none.matched, 0u);
  EXPECT_EQ(none.unmatched, exact.size());
  EXPECT_DOUBLE_EQ(none.max_gap, 0);
  EXPECT_DOUBLE_EQ(none.mean_gap, 0);
  // The tolerance lets a point a hair slower count.
  const auto hair = Frontier<FrequencyPlan>::from_points({{uniform_plan(dag_, 1400), 9 + 1e-12, 120}});
  EXPECT_EQ(compare_to_exact(exact, hair).unmatched, 0u);
  EXPECT_EQ(compare_to_exact(exact, hair, 0).unmatched, 1u);
}

}  // namespace
}  // namespace joule::plan
