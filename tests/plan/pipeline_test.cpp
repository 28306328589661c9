// SPDX-License-Identifier: Apache-2.0
// The computation DAG (1F1B, GPipe), ASAP timelines and plan costs (Perseus §1.2–§1.5).
#include "joule/plan/pipeline.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::plan {
namespace {

std::string order_text(const PipelineDag& dag, int stage) {
  std::string text;
  for (const int node : dag.stage_order[static_cast<size_t>(stage)]) {
    if (!text.empty()) {
      text.push_back(' ');
    }
    text.append(short_label(dag.computations[static_cast<size_t>(node)]));
  }
  return text;
}

bool has_edge(const PipelineDag& dag, int from, int to) {
  return std::find(dag.edges.begin(), dag.edges.end(), std::pair{from, to}) != dag.edges.end();
}

// Forward t = 1 s / 10 J and backward t = 2 s / 20 J on every stage, at one clock (1000 MHz).
Profile unit_profile(int stages) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(static_cast<size_t>(stages));
  for (auto& stage : options) {
    stage[0] = {{1000, 1.0, 10.0}};
    stage[1] = {{1000, 2.0, 20.0}};
  }
  return value_or_throw(Profile::from_options(std::move(options)));
}

TEST(Names, RoundTripAndErrors) {
  EXPECT_EQ(to_string(Instruction::kForward), "forward");
  EXPECT_EQ(to_string(Instruction::kBackward), "backward");
  EXPECT_EQ(parse_instruction("backward").value(), Instruction::kBackward);
  JOULE_EXPECT_ERROR(parse_instruction("fwd"), ErrorCode::kParse,
                     "unknown instruction \"fwd\": expected forward or backward");
  EXPECT_EQ(to_string(Schedule::k1F1B), "1f1b");
  EXPECT_EQ(to_string(Schedule::kGPipe), "gpipe");
  EXPECT_EQ(parse_schedule("gpipe").value(), Schedule::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b").value(), Schedule::k1F1B);
  JOULE_EXPECT_ERROR(parse_schedule("zb"), ErrorCode::kParse,
                     "unknown schedule \"zb\": expected 1f1b or gpipe");
  EXPECT_EQ(to_string(Computation{2, Instruction::kBackward, 7}), "stage 2 backward of microbatch 7");
  EXPECT_EQ(short_label(Computation{2, Instruction::kBackward, 7}), "B7");
  EXPECT_EQ(short_label(Computation{0, Instruction::kForward, 12}), "F12");
}

TEST(BuildPipeline, OneFOneBOrdersOfSection12) {
  const PipelineDag dag = build_pipeline(4, 8, Schedule::k1F1B).value();
  EXPECT_EQ(order_text(dag, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order_text(dag, 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(order_text(dag, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(order_text(dag, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST(BuildPipeline, OneFOneBWithFewerMicrobatchesThanStages) {
  const PipelineDag dag = build_pipeline(4, 2, Schedule::k1F1B).value();
  EXPECT_EQ(order_text(dag, 0), "F0 F1 B0 B1");
  EXPECT_EQ(order_text(dag, 2), "F0 F1 B0 B1");
  EXPECT_EQ(order_text(dag, 3), "F0 B0 F1 B1");
  EXPECT_EQ(dag.edges.size(), 4u * 3 + 2u * 2 * 3);
  EXPECT_EQ(dag.topological_order.size(), 16u);
}

TEST(BuildPipeline, NodeAndEdgeCounts) {
  for (const auto& [stages, microbatches, nodes, edges] : std::vector<std::tuple<int, int, size_t, size_t>>{
           {4, 8, 64, 108}, {8, 128, 2048, 3832}, {1, 1, 2, 1}}) {
    for (const Schedule schedule : {Schedule::k1F1B, Schedule::kGPipe}) {
      const PipelineDag dag = build_pipeline(stages, microbatches, schedule).value();
      EXPECT_EQ(dag.computations.size(), nodes) << stages << "x" << microbatches;
      EXPECT_EQ(dag.edges.size(), edges) << stages << "x" << microbatches;
      EXPECT_EQ(dag.topological_order.size(), nodes);  // acyclic
      EXPECT_EQ(dag.predecessor_offsets.size(), nodes + 1);
      EXPECT_EQ(dag.predecessors.size(), edges);
      const std::set<std::pair<int, int>> distinct(dag.edges.begin(), dag.edges.end());
      EXPECT_EQ(distinct.size(), edges);
    }
  }
}

TEST(BuildPipeline, NodeLayoutAndComputations) {
  const PipelineDag dag = build_pipeline(3, 5, Schedule::k1F1B).value();
  EXPECT_EQ(dag.stages, 3);
  EXPECT_EQ(dag.microbatches, 5);
  EXPECT_EQ(dag.schedule, Schedule::k1F1B);
  for (int s = 0; s < 3; ++s) {
    for (int m = 0; m < 5; ++m) {
      for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
        const int node = dag.node(s, instruction, m);
        EXPECT_EQ(dag.computations[static_cast<size_t>(node)], (Computation{s, instruction, m}));
      }
    }
  }
  EXPECT_EQ(dag.node(1, Instruction::kBackward, 2), 1 * 10 + 5 + 2);
  JOULE_EXPECT_THROW_MESSAGE(
      dag.node(3, Instruction::kForward, 0), ErrorCode::kOutOfRange,
      "no computation for stage 3 forward of microbatch 0 in a pipeline of 3 stages × 5 "
      "microbatches");
  JOULE_EXPECT_THROW_MESSAGE(
      dag.node(0, Instruction::kBackward, -1), ErrorCode::kOutOfRange,
      "no computation for stage 0 backward of microbatch -1 in a pipeline of 3 stages × 5 "
      "microbatches");
}

TEST(BuildPipeline, EdgesOfAllThreeKinds) {
  const PipelineDag dag = build_pipeline(4, 8, Schedule::k1F1B).value();
  using enum Instruction;
  EXPECT_TRUE(has_edge(dag, dag.node(0, kForward, 3), dag.node(0, kBackward, 0)));   // stage order
  EXPECT_TRUE(has_edge(dag, dag.node(3, kForward, 0), dag.node(3, kBackward, 0)));   // last stage F → B
  EXPECT_TRUE(has_edge(dag, dag.node(1, kForward, 5), dag.node(2, kForward, 5)));    // forward P2P
  EXPECT_TRUE(has_edge(dag, dag.node(3, kBackward, 7), dag.node(2, kBackward, 7)));  // backward P2P
  EXPECT_FALSE(has_edge(dag, dag.node(2, kForward, 5), dag.node(1, kForward, 5)));
  // Only F(0,0) has no predecessor and only B(0,M−1) no successor.
  std::vector<int> in_degree(dag.computations.size());
  std::vector<int> out_degree(dag.computations.size());
  for (const auto& [from, to] : dag.edges) {
    ++out_degree[static_cast<size_t>(from)];
    ++in_degree[static_cast<size_t>(to)];
  }
  for (size_t v = 0; v < dag.computations.size(); ++v) {
    EXPECT_EQ(in_degree[v] == 0, static_cast<int>(v) == dag.node(0, kForward, 0)) << v;
    EXPECT_EQ(out_degree[v] == 0, static_cast<int>(v) == dag.node(0, kBackward, 7)) << v;
  }
  // The topological order puts every edge forwards.
  std::vector<size_t> position(dag.computations.size());
  for (size_t i = 0; i < dag.topological_order.size(); ++i) {
    position[static_cast<size_t>(dag.topological_order[i])] = i;
  }
  for (const auto& [from, to] : dag.edges) {
    EXPECT_LT(position[static_cast<size_t>(from)], position[static_cast<size_t>(to)]);
  }
}

TEST(BuildPipeline, GPipeOrder) {
  const PipelineDag dag = build_pipeline(3, 4, Schedule::kGPipe).value();
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(order_text(dag, s), "F0 F1 F2 F3 B3 B2 B1 B0");
  }
  EXPECT_EQ(dag.schedule, Schedule::kGPipe);
  EXPECT_EQ(dag.edges.size(), 3u * 7 + 2u * 4 * 2);
  EXPECT_EQ(dag.topological_order.size(), 24u);
}

TEST(BuildPipeline, Errors) {
  JOULE_EXPECT_ERROR(
      build_pipeline(0, 8, Schedule::k1F1B), ErrorCode::kInvalidArgument,
      "a pipeline needs at least 1 stage and 1 microbatch, got 0 stage(s) and 8 microbatch(es)");
  JOULE_EXPECT_ERROR(
      build_pipeline(4, -1, Schedule::kGPipe), ErrorCode::kInvalidArgument,
      "a pipeline needs at least 1 stage and 1 microbatch, got 4 stage(s) and -1 microbatch(es)");
  JOULE_EXPECT_ERROR(build_pipeline(65536, 1024, Schedule::k1F1B), ErrorCode::kInvalidArgument,
                     "a pipeline of 65536 stages × 1024 microbatches has more than 67108864 computations");
}

TEST(IndexDag, DetectsCyclesAndBadEdges) {
  PipelineDag dag = build_pipeline(2, 2, Schedule::k1F1B).value();
  using enum Instruction;
  dag.edges.emplace_back(dag.node(0, kBackward, 1), dag.node(0, kForward, 1));
  JOULE_EXPECT_ERROR(index_dag(dag), ErrorCode::kInvalidArgument,
                     "the DAG's edges form a cycle through stage 0 forward of microbatch 1");
  dag.edges.back() = {0, 8};
  JOULE_EXPECT_ERROR(index_dag(dag), ErrorCode::kInvalidArgument,
                     "edge 10 (0 -> 8) names a node outside the DAG's 8 computations");
  // A stale index is rebuilt on the fly; an invalid one is reported.
  EXPECT_THROW(schedule_times(dag, std::vector<double>(8, 1.0)), Exception);
  dag.edges.pop_back();
  dag.topological_order.clear();
  EXPECT_DOUBLE_EQ(schedule_times(dag, std::vector<double>(8, 1.0)).time_s, 6);
  ASSERT_TRUE(index_dag(dag).has_value());
  EXPECT_EQ(dag.topological_order.size(), 8u);
}

TEST(ScheduleTimes, AsapByHand) {
  // S=2, M=2, every computation 1 s. Stage 0: F0 F1 B0 B1; stage 1: F0 B0 F1 B1.
  const PipelineDag dag = build_pipeline(2, 2, Schedule::k1F1B).value();
  const Timeline timeline = schedule_times(dag, std::vector<double>(8, 1.0));
  using enum Instruction;
  const auto start = [&](int s, Instruction i, int m) {
    return timeline.start_s[static_cast<size_t>(dag.node(s, i, m))];
  };
  EXPECT_DOUBLE_EQ(start(0, kForward, 0), 0);
  EXPECT_DOUBLE_EQ(start(0, kForward, 1), 1);
  EXPECT_DOUBLE_EQ(start(1, kForward, 0), 1);
  EXPECT_DOUBLE_EQ(start(1, kBackward, 0), 2);
  EXPECT_DOUBLE_EQ(start(1, kForward, 1), 3);
  EXPECT_DOUBLE_EQ(start(0, kBackward, 0), 3);
  EXPECT_DOUBLE_EQ(start(1, kBackward, 1), 4);
  EXPECT_DOUBLE_EQ(start(0, kBackward, 1), 5);
  EXPECT_DOUBLE_EQ(timeline.time_s, 6);
  for (size_t v = 0; v < 8; ++v) {
    EXPECT_DOUBLE_EQ(timeline.end_s[v], timeline.start_s[v] + 1);
  }
  JOULE_EXPECT_THROW_MESSAGE(schedule_times(dag, {1.0}), ErrorCode::kInvalidArgument,
                             "1 computation times given for a DAG of 8 computations");
}

TEST(Evaluate, ByHand) {
  // Forward 1 s / 10 J, backward 2 s / 20 J: F00 [0,1] F01 [1,2] F10 [1,2] B10 [2,4] F11 [4,5] B00 [4,6]
  // B11 [5,7] B01 [7,9]. T = 9 s; Σe = 120 J, Σt = 12 s; E = 120 + 5 × (2 × 9 − 12) = 150 J.
  const PipelineDag dag = build_pipeline(2, 2, Schedule::k1F1B).value();
  const Profile profile = unit_profile(2);
  const PlanCost cost = evaluate(dag, profile, uniform_plan(dag, 1000), 5).value();
  EXPECT_DOUBLE_EQ(cost.time_s, 9);
  EXPECT_DOUBLE_EQ(cost.energy_j, 150);
  EXPECT_DOUBLE_EQ(evaluate(dag, profile, uniform_plan(dag, 1000), 0).value().energy_j, 120);
  // GPipe, both stages F0 F1 B1 B0: F00 [0,1] F01 [1,2] F10 [1,2] F11 [2,3] B11 [3,5] B10 [5,7]; B01 waits
  // for F01 and B11: [5,7]; B00 waits for B01 and B10: [7,9]. T = 9 s.
  const PipelineDag gpipe = build_pipeline(2, 2, Schedule::kGPipe).value();
  EXPECT_DOUBLE_EQ(evaluate(gpipe, profile, uniform_plan(gpipe, 1000), 5).value().time_s, 9);
  // A profile with more stages than the DAG is fine.
  EXPECT_TRUE(evaluate(dag, unit_profile(3), uniform_plan(dag, 1000), 5).has_value());
}

// Clocks in uneven steps: the lookup must not trust the first step.
TEST(Evaluate, UnevenClockSteps) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(2);
  for (auto& stage : options) {
    stage[0] = {{1410, 1.0, 10.0}, {1395, 1.5, 9.0}, {1200, 2.0, 8.0}};
    stage[1] = {{1410, 2.0, 20.0}, {1395, 3.0, 18.0}, {1200, 4.0, 16.0}};
  }
  const Profile profile = value_or_throw(Profile::from_options(std::move(options)));
  const PipelineDag dag = build_pipeline(2, 2, Schedule::k1F1B).value();
  const FrequencyPlan plan = {1200, 1410, 1395, 1200, 1395, 1395, 1410, 1200};
  std::vector<double> times_s;
  double energy_j = 0;
  double busy_s = 0;
  for (size_t v = 0; v < plan.size(); ++v) {
    const ProfileOption option = option_at(profile, dag.computations[v], plan[v]).value();
    times_s.push_back(option.time_s);
    busy_s += option.time_s;
    energy_j += option.energy_j;
  }
  const double time_s = schedule_times(dag, times_s).time_s;
  const PlanCost cost = evaluate(dag, profile, plan, 7).value();
  EXPECT_DOUBLE_EQ(cost.time_s, time_s);
  EXPECT_DOUBLE_EQ(cost.energy_j, energy_j + 7 * (2 * time_s - busy_s));
  JOULE_EXPECT_ERROR(evaluate(dag, profile, uniform_plan(dag, 1380), 7), ErrorCode::kNotFound,
                     "the profile has no option at 1380 MHz for stage 0 forward of microbatch 0 (it has 3 "
                     "frequencies from 1200 to 1410 MHz)");
}

TEST(Evaluate, Errors) {
  const PipelineDag dag = build_pipeline(2, 2, Schedule::k1F1B).value();
  const Profile profile = unit_profile(2);
  JOULE_EXPECT_ERROR(evaluate(dag, profile, FrequencyPlan(7, 1000), 5), ErrorCode::kInvalidArgument,
                     "the plan has 7 frequencies but the DAG has 8 computations");
  JOULE_EXPECT_ERROR(evaluate(dag, unit_profile(1), uniform_plan(dag, 1000), 5), ErrorCode::kInvalidArgument,
                     "the profile has 1 stage but the pipeline has 2");
  JOULE_EXPECT_ERROR(evaluate(dag, profile, uniform_plan(dag, 1000), -1), ErrorCode::kInvalidArgument,
                     "the blocking power must be finite and non-negative, got -1 W");
  FrequencyPlan plan = uniform_plan(dag, 1000);
  plan[static_cast<size_t>(dag.node(1, Instruction::kBackward, 1))] = 900;
  JOULE_EXPECT_ERROR(
      evaluate(dag, profile, plan, 5), ErrorCode::kNotFound,
      "the profile has no option at 900 MHz for stage 1 backward of microbatch 1 (it has only 1000 MHz)");
  plan.assign(8, 0);
  JOULE_EXPECT_ERROR(
      evaluate(dag, profile, plan, 5), ErrorCode::kNotFound,
      "the profile has no option at 0 MHz for stage 0 forward of microbatch 0 (it has only 1000 MHz)");
}

TEST(OptionAt, FindsAndNames) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(1);
  options[0][0] = {{1400, 1.0, 10.0}, {1000, 2.0, 8.0}};
  options[0][1] = {{1000, 4.0, 16.0}, {1400, 3.0, 19.0}};
  const Profile profile = value_or_throw(Profile::from_options(std::move(options)));
  const ProfileOption option = option_at(profile, {0, Instruction::kBackward, 3}, 1000).value();
  EXPECT_EQ(option.frequency_mhz, 1000u);
  EXPECT_DOUBLE_EQ(option.time_s, 4.0);
  EXPECT_DOUBLE_EQ(option.energy_j, 16.0);
  JOULE_EXPECT_ERROR(option_at(profile, {0, Instruction::kForward, 0}, 1200), ErrorCode::kNotFound,
                     "the profile has no option at 1200 MHz for stage 0 forward of microbatch 0 (it has 2 "
                     "frequencies from 1000 to 1400 MHz)");
  JOULE_EXPECT_ERROR(
      option_at(profile, {1, Instruction::kForward, 0}, 1400), ErrorCode::kNotFound,
      "the profile has no stage 1 (it has 1 stages), needed for stage 1 forward of microbatch 0 at "
      "1400 MHz");
}

TEST(UniformPlan, OneFrequencyEverywhere) {
  const PipelineDag dag = build_pipeline(3, 4, Schedule::k1F1B).value();
  const FrequencyPlan plan = uniform_plan(dag, 1230);
  EXPECT_EQ(plan.size(), 24u);
  EXPECT_TRUE(std::all_of(plan.begin(), plan.end(), [](uint32_t f) { return f == 1230; }));
}

TEST(Evaluate, ExampleAtMaxClockMatchesDataReadme) {
  const Profile profile = Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv").value();
  const PipelineDag dag = build_pipeline(4, 8, Schedule::k1F1B).value();
  const PlanCost cost = evaluate(dag, profile, uniform_plan(dag, 1410), 75).value();
  EXPECT_NEAR(cost.time_s, 0.740, 1e-3);
  EXPECT_NEAR(cost.energy_j, 852.27, 0.01);
  // Agrees with the ASAP timeline.
  std::vector<double> times_s;
  for (const Computation& computation : dag.computations) {
    times_s.push_back(option_at(profile, computation, 1410).value().time_s);
  }
  EXPECT_DOUBLE_EQ(schedule_times(dag, times_s).time_s, cost.time_s);
}

// Evaluating one plan on the 8 × 128 DAG (2048 computations) is what the planner does thousands of times.
TEST(Evaluate, FastOnLargeDag) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(8);
  for (size_t s = 0; s < 8; ++s) {
    for (size_t i = 0; i < 2; ++i) {
      for (uint32_t f = 1410; f >= 810; f -= 15) {
        const double scale = 1410.0 / f;
        options[s][i].push_back({f, 0.02 * (1 + static_cast<double>(i)) * scale, 7.0 / scale});
      }
    }
  }
  const Profile profile = value_or_throw(Profile::from_options(std::move(options)));
  const PipelineDag dag = build_pipeline(8, 128, Schedule::k1F1B).value();
  FrequencyPlan plan = uniform_plan(dag, 1410);
  for (size_t v = 0; v < plan.size(); ++v) {
    plan[v] = static_cast<uint32_t>(1410 - 15 * (v % 41));
  }
  constexpr int kCalls = 2000;
  double checksum = 0;
  const auto microseconds_per_call = [&](const FrequencyPlan& evaluated) {
    const auto begin = std::chrono::steady_clock::now();
    for (int call = 0; call < kCalls; ++call) {
      checksum += evaluate(dag, profile, evaluated, 75).value().energy_j;
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count() /
           kCalls;
  };
  const double mixed_us = microseconds_per_call(plan);
  const double uniform_us = microseconds_per_call(uniform_plan(dag, 1410));
  RecordProperty("evaluate_8x128_mixed_us", std::to_string(mixed_us));
  RecordProperty("evaluate_8x128_uniform_us", std::to_string(uniform_us));
  std::printf(
      "evaluate() on the 8x128 DAG: %.1f us per call (a clock change at every node), %.1f us (one clock)\n",
      mixed_us, uniform_us);
  EXPECT_GT(checksum, 0);
  EXPECT_LT(mixed_us, 2000);  // generous: sanitizer and debug builds run this too
}

}  // namespace
}  // namespace joule::plan
