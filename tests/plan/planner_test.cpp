// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>

#include "joule/core/csv.hpp"
#include "joule/core/log.hpp"
#include "joule/plan/exact.hpp"
#include "joule/plan/runtime.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

constexpr const char* kDataDir = JOULE_PERSEUS_DATA_DIR;

struct ReferencePoint {
  double time_s;
  double energy_j;
};

std::vector<ReferencePoint> reference_frontier() {
  const auto table = csv::read_file(std::string(kDataDir) + "/example_s4_m8_reference_frontier.csv");
  EXPECT_TRUE(table) << table.error().message();
  std::vector<ReferencePoint> points;
  const size_t time = *table->column("time_s");
  const size_t energy = *table->column("energy_j");
  for (size_t r = 0; r < table->row_count(); ++r) {
    points.push_back({*table->row(r).number(time), *table->row(r).number(energy)});
  }
  return points;
}

struct Example {
  Profile profile;
  PipelineDag dag;
};

Example example(int microbatches = 8, Schedule schedule = Schedule::k1F1B) {
  auto profile = Profile::read(std::string(kDataDir) + "/example_s4_m8_profile.csv");
  EXPECT_TRUE(profile) << profile.error().message();
  auto dag = build_pipeline(4, microbatches, schedule);
  EXPECT_TRUE(dag) << dag.error().message();
  return {std::move(*profile), std::move(*dag)};
}

// The energy of the best point of `frontier` no slower than `time_s`, or +inf.
double best_energy_within(const Frontier<FrequencyPlan>& frontier, double time_s) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& point : frontier.points()) {
    if (point.time_s <= time_s) {
      best = std::min(best, point.energy_j);
    }
  }
  return best;
}

TEST(Planner, AtLeastAsGoodAsTheReferenceEverywhere) {
  const Example e = example();
  PlannerOptions options;
  options.unit_time_s = 1e-3;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result) << result.error().message();
  const auto& frontier = result->frontier;
  ASSERT_FALSE(frontier.empty());
  EXPECT_NEAR(result->max_clock.time_s, 0.740, 1e-3);
  EXPECT_NEAR(result->max_clock.energy_j, 852.27, 0.01);
  const auto reference = reference_frontier();
  ASSERT_EQ(reference.size(), 336u);
  double worst_energy_ratio = 0;
  for (const ReferencePoint& point : reference) {
    // Some point no slower (within 0.2%) with no more energy (within 0.5%).
    const double ours = best_energy_within(frontier, point.time_s * 1.002);
    EXPECT_LE(ours, point.energy_j * 1.005)
        << "reference point " << point.time_s << " s, " << point.energy_j << " J";
    worst_energy_ratio = std::max(worst_energy_ratio, ours / point.energy_j);
  }
  // Both ends: the fastest point (0.740 s) and the all-slowest end.
  EXPECT_LE(frontier.fastest().time_s, 0.740 * 1.002);
  EXPECT_LE(frontier.fastest().energy_j, reference.back().energy_j * 1.005);
  EXPECT_LE(best_energy_within(frontier, reference.front().time_s * 1.002),
            reference.front().energy_j * 1.005);
  RecordProperty("worst_energy_ratio_vs_reference", fmt::format("{:.5f}", worst_energy_ratio));
  RecordProperty("points", static_cast<int>(frontier.size()));
  RecordProperty("iterations", static_cast<int>(result->iterations));
}

}  // namespace
}  // namespace joule::plan

namespace joule::plan {
namespace {

// A profile of the example's stages restricted to a few clocks, so that every plan can be enumerated.
Profile small_profile(int stages, const std::vector<uint32_t>& clocks) {
  const Example e = example();
  std::vector<std::array<std::vector<ProfileOption>, 2>> options;
  for (int stage = 0; stage < stages; ++stage) {
    const int source = stage == stages - 1 ? 3 : stage;
    std::array<std::vector<ProfileOption>, 2> pair;
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      for (const ProfileOption& option : e.profile.options(source, instruction)) {
        if (std::find(clocks.begin(), clocks.end(), option.frequency_mhz) != clocks.end()) {
          pair[instruction == Instruction::kForward ? 0 : 1].push_back(option);
        }
      }
    }
    options.push_back(std::move(pair));
  }
  return *Profile::from_options(std::move(options));
}

TEST(Planner, CloseToTheExactOptimumOnTinyPipelines) {
  for (const auto& [stages, microbatches, clocks] : std::vector<std::tuple<int, int, std::vector<uint32_t>>>{
           {2, 2, {1410, 1200, 1005, 810}}, {2, 3, {1410, 1110, 810}}, {3, 2, {1410, 1110, 810}}}) {
    SCOPED_TRACE(fmt::format("{}x{}", stages, microbatches));
    const Profile profile = small_profile(stages, clocks);
    const PipelineDag dag = *build_pipeline(stages, microbatches, Schedule::k1F1B);
    PlannerOptions options;
    options.p_blocking_w = 75;
    options.unit_time_s = 1e-4;
    const auto planned = plan_frontier(dag, profile, options);
    ASSERT_TRUE(planned) << planned.error().message();
    const auto exact = exact_frontier(dag, profile, 75);
    ASSERT_TRUE(exact) << exact.error().message();
    const FrontierGap gap = compare_to_exact(*exact, planned->frontier);
    // The ends are exact: the fastest plan, and (past the least-energy point) nothing beats it.
    EXPECT_EQ(gap.unmatched, 0u);
    EXPECT_NEAR(planned->frontier.fastest().time_s, exact->fastest().time_s, 1e-12);
    // Measured: at most 2.4% more energy than the optimum at equal time, 0.6% on average: the planner works
    // on the convex hull of each computation's options, so mixes the hull cannot express are missed.
    EXPECT_LE(gap.max_gap, 0.03) << "at " << gap.worst_time_s << " s";
    EXPECT_LE(gap.mean_gap, 0.01);
    RecordProperty(
        fmt::format("gap_{}x{}", stages, microbatches),
        fmt::format("max {:.4f}, mean {:.4f} over {} exact points", gap.max_gap, gap.mean_gap, gap.matched));
  }
}

TEST(Planner, BoostAndDinicFindTheSameCuts) {
  const Example e = example();
  PlannerOptions dinic;
  dinic.p_blocking_w = 75;
  PlannerOptions boost = dinic;
  boost.max_flow = MaxFlowAlgorithm::kBoostPushRelabel;
  const auto a = plan_frontier(e.dag, e.profile, dinic);
  const auto b = plan_frontier(e.dag, e.profile, boost);
  ASSERT_TRUE(a && b);
  // Of several minimum cuts, both take the one with the smallest source side (what a maximum flow leaves in
  // reach of the source, whichever maximum flow it is), so they walk the same steps to the same frontier.
  EXPECT_EQ(a->iterations, b->iterations);
  ASSERT_EQ(a->frontier.size(), b->frontier.size());
  for (size_t i = 0; i < a->frontier.size(); ++i) {
    EXPECT_EQ(a->frontier.points()[i].time_s, b->frontier.points()[i].time_s);
    EXPECT_EQ(a->frontier.points()[i].energy_j, b->frontier.points()[i].energy_j);
    EXPECT_EQ(a->frontier.points()[i].knob, b->frontier.points()[i].knob);
  }
}

// Issue 11, part 4: `joule plan --max-flow boost` was ignored (every cut ran Dinic). The planner's debug log
// names the algorithm of every cut it computes.
TEST(Planner, TheChosenMaxFlowAlgorithmComputesTheCuts) {
  const Example e = example(2);
  auto stream = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*stream);
  auto logger = std::make_shared<spdlog::logger>("planner-test", sink);
  logger->set_level(spdlog::level::debug);
  set_logger(logger);
  PlannerOptions options;
  options.p_blocking_w = 75;
  for (const auto algorithm : {MaxFlowAlgorithm::kBoostPushRelabel, MaxFlowAlgorithm::kDinic}) {
    stream->str("");
    options.max_flow = algorithm;
    const auto result = plan_frontier(e.dag, e.profile, options);
    ASSERT_TRUE(result) << result.error().message();
    ASSERT_GT(result->iterations, 0u);
    const std::string log_text = stream->str();
    const bool boost = algorithm == MaxFlowAlgorithm::kBoostPushRelabel;
    EXPECT_NE(log_text.find(boost ? "(boost push-relabel)" : "(dinic)"), std::string::npos) << log_text;
    EXPECT_EQ(log_text.find(boost ? "(dinic)" : "(boost push-relabel)"), std::string::npos) << log_text;
  }
  set_logger(std::make_shared<spdlog::logger>("joule", std::make_shared<spdlog::sinks::null_sink_mt>()));
}

// Issue 11: one time_s at a lower clock made planning take 55 s (and 10 GB): the old bound looked only at
// the highest clock. The bound now counts the slowest row of every computation, whatever its clock.
TEST(Planner, RefusesWorkBeyondTheUnitLimitFromEveryRow) {
  // One stage runs its four computations one after another: at the slowest rows, 2 × (0.03 + 1000) s.
  std::array<std::vector<ProfileOption>, 2> options_of_stage = {
      std::vector<ProfileOption>{{1410, 0.02, 7.8}, {810, 0.03, 6.5}},
      std::vector<ProfileOption>{{1410, 0.04, 15}, {810, 1000, 13}}};
  const Profile profile = *Profile::from_options({options_of_stage});
  const PipelineDag dag = *build_pipeline(1, 2, Schedule::k1F1B);
  PlannerOptions options;
  const std::string message =
      "the planner would walk 2e+06 time units of 0.001 s, more than its limit of 200000: at its slowest "
      "rows "
      "one iteration takes 2000.06 s, and the slowest row is stage 0 backward at 810 MHz (1000 s); check "
      "that row of the profile, use a larger unit_time_s, or raise max_planning_units";
  JOULE_EXPECT_ERROR(plan_frontier(dag, profile, options), ErrorCode::kInvalidArgument, message);
  JOULE_EXPECT_ERROR(check_planning_units(dag, profile, options), ErrorCode::kInvalidArgument, message);
  // The highest clock alone (what the server used to check) is 120 units: far inside the limit.
  const auto at_max_clock = evaluate(dag, profile, uniform_plan(dag, 1410), 0);
  ASSERT_TRUE(at_max_clock);
  EXPECT_LT(at_max_clock->time_s / options.unit_time_s, 200);
  // What to do, as the message says: a larger unit, or a higher limit.
  options.unit_time_s = 0.1;
  EXPECT_TRUE(check_planning_units(dag, profile, options));
  options.unit_time_s = 1e-3;
  options.max_planning_units = 3e6;
  const auto raised = check_planning_units(dag, profile, options);
  ASSERT_TRUE(raised) << raised.error().message();
  EXPECT_DOUBLE_EQ(raised->slowest_iteration_s, 2000.06);
  EXPECT_DOUBLE_EQ(raised->units, 2000.06 / 1e-3);
}

TEST(Planner, PlanningUnitsOfTheExample) {
  const Example e = example();
  const auto units = planning_units(e.dag, e.profile, 1e-3);
  ASSERT_TRUE(units) << units.error().message();
  // The example's slowest row is its heavy last stage's backward at the lowest clock.
  EXPECT_EQ(units->slowest_stage, 3);
  EXPECT_EQ(units->slowest_instruction, Instruction::kBackward);
  EXPECT_EQ(units->slowest_frequency_mhz, 810u);
  EXPECT_GT(units->slowest_iteration_s, 0.740);
  EXPECT_LT(units->units, kDefaultMaxPlanningUnits / 100);
  JOULE_EXPECT_ERROR(planning_units(e.dag, e.profile, 0), ErrorCode::kInvalidArgument,
                     "the unit time must be a positive number of seconds (got 0)");
}

TEST(Planner, StragglerSelection) {
  const Example e = example();
  PlannerOptions options;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result);
  const auto& frontier = result->frontier;
  // No straggler: the fastest plan (intrinsic bloat removed at the fastest time).
  const double fastest = frontier.fastest().time_s;
  EXPECT_EQ(*select_for_target(frontier, fastest, 75, 4), 0u);
  // A straggler 10% slower: a slower, cheaper plan; never one slower than the target.
  const size_t chosen = *select_for_target(frontier, fastest * 1.1, 75, 4);
  const auto& point = frontier.points()[chosen];
  EXPECT_LE(point.time_s, fastest * 1.1);
  EXPECT_GT(point.time_s, fastest);
  for (const auto& other : frontier.points()) {
    if (other.time_s <= fastest * 1.1) {
      EXPECT_LE(energy_at_target(point, fastest * 1.1, 75, 4),
                energy_at_target(other, fastest * 1.1, 75, 4) + 1e-9);
    }
  }
  // Past the least-energy point, that point plus blocking.
  EXPECT_EQ(*select_for_target(frontier, 100.0, 75, 4), frontier.size() - 1);
  JOULE_EXPECT_ERROR(
      select_for_target(frontier, 0.5, 75, 4), ErrorCode::kNotFound,
      fmt::format("no plan meets the target of 0.5 s: the fastest plan takes {:.6g} s", fastest));
  JOULE_EXPECT_ERROR(select_for_target(frontier, -1, 75, 4), ErrorCode::kInvalidArgument,
                     "the target iteration time must be a positive number of seconds (got -1)");
}

// The one plan choice every caller uses (CLI, server, Python, live Perseus): what it picks and what it
// reports.
TEST(Planner, ChoosePlanPicksAndPricesThePlanForATarget) {
  const Example e = example();
  PlannerOptions options;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result);
  const auto& frontier = result->frontier;
  const PlanCost& max_clock = result->max_clock;
  const double fastest = frontier.fastest().time_s;
  // No target: the fastest plan, at its own time and energy.
  const auto none = choose_plan(frontier, max_clock, {}, 75, 4);
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_EQ(none->index, 0u);
  EXPECT_FALSE(none->target_time_s);
  EXPECT_EQ(none->time_s, fastest);
  EXPECT_EQ(none->energy_j, frontier.points()[0].energy_j);
  EXPECT_DOUBLE_EQ(none->max_clock_energy_j,
                   max_clock.energy_j + 75.0 * 4 * std::max(0.0, fastest - max_clock.time_s));
  // A slowdown is a target time of slowdown × the fastest time: the same choice as select_for_target().
  const auto slowed = choose_plan(frontier, max_clock, {.slowdown = 1.1}, 75, 4);
  ASSERT_TRUE(slowed) << slowed.error().message();
  const double target = fastest * 1.1;
  EXPECT_EQ(*slowed->target_time_s, target);
  EXPECT_EQ(slowed->time_s, target);
  EXPECT_EQ(slowed->index, *select_for_target(frontier, target, 75, 4));
  EXPECT_EQ(slowed->energy_j, energy_at_target(frontier.points()[slowed->index], target, 75, 4));
  EXPECT_DOUBLE_EQ(slowed->max_clock_energy_j, max_clock.energy_j + 75.0 * 4 * (target - max_clock.time_s));
  EXPECT_LT(slowed->energy_j, slowed->max_clock_energy_j);
  const auto timed = choose_plan(frontier, max_clock, {.time_s = target}, 75, 4);
  ASSERT_TRUE(timed);
  EXPECT_EQ(timed->index, slowed->index);
  EXPECT_EQ(timed->energy_j, slowed->energy_j);
  // Refusals.
  JOULE_EXPECT_ERROR(choose_plan(frontier, max_clock, {.time_s = target, .slowdown = 1.1}, 75, 4),
                     ErrorCode::kInvalidArgument, "give a target time or a slowdown, not both");
  JOULE_EXPECT_ERROR(choose_plan(frontier, max_clock, {.slowdown = 0.9}, 75, 4), ErrorCode::kInvalidArgument,
                     "the slowdown must be a finite number of at least 1 (got 0.9)");
  JOULE_EXPECT_ERROR(
      choose_plan(frontier, max_clock, {.time_s = 0.5}, 75, 4), ErrorCode::kNotFound,
      fmt::format("no plan meets the target of 0.5 s: the fastest plan takes {:.6g} s", fastest));
  JOULE_EXPECT_ERROR(choose_plan(Frontier<FrequencyPlan>{}, max_clock, {}, 75, 4), ErrorCode::kState,
                     "the frontier is empty");
}

TEST(Planner, BadOptions) {
  const Example e = example();
  PlannerOptions options;
  options.unit_time_s = 0;
  JOULE_EXPECT_ERROR(plan_frontier(e.dag, e.profile, options), ErrorCode::kInvalidArgument,
                     "the unit time must be a positive number of seconds (got 0)");
  options.unit_time_s = 1e-3;
  options.p_blocking_w = -5;
  JOULE_EXPECT_ERROR(plan_frontier(e.dag, e.profile, options), ErrorCode::kInvalidArgument,
                     "the blocking power must be finite and non-negative, got -5 W");
  options.p_blocking_w = 75;
  const PipelineDag bigger = *build_pipeline(6, 4, Schedule::k1F1B);
  JOULE_EXPECT_ERROR(plan_frontier(bigger, e.profile, options), ErrorCode::kInvalidArgument,
                     "the profile has 4 stages but the pipeline has 6");
  for (const double bad : {0.0, -1.0, 2e9, std::numeric_limits<double>::quiet_NaN()}) {
    options.max_planning_units = bad;
    JOULE_EXPECT_ERROR(plan_frontier(e.dag, e.profile, options), ErrorCode::kInvalidArgument,
                       fmt::format("max_planning_units must be from 1 to 1073741824, got {}", bad));
  }
}

TEST(Planner, GPipeToo) {
  const Example e = example(8, Schedule::kGPipe);
  PlannerOptions options;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_LE(result->frontier.fastest().time_s, result->max_clock.time_s * 1.0001);
  EXPECT_LT(result->frontier.fastest().energy_j, result->max_clock.energy_j);
  EXPECT_GT(result->frontier.size(), 50u);
}

}  // namespace
}  // namespace joule::plan

namespace joule::plan {
namespace {

// The planner's promise, checked end to end: run its plans on simulated GPUs with clocks set by the frequency
// controllers and measured by energy counters; time and energy must be what the frontier says.
TEST(Planner, PlansRunAsPredictedOnSimulatedGpus) {
  const Example e = example();
  PlannerOptions options;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result);
  const auto& points = result->frontier.points();
  auto executor = PipelineExecutor::create(e.dag, e.profile, 75);
  ASSERT_TRUE(executor) << executor.error().message();
  for (const size_t index : {size_t{0}, points.size() / 3, points.size() / 2, points.size() - 1}) {
    const auto measured = executor->run_iteration(points[index].knob);
    ASSERT_TRUE(measured) << measured.error().message();
    EXPECT_NEAR(measured->time_s, points[index].time_s, 1e-8) << "point " << index;
    // Energy counters count whole millijoules per GPU.
    EXPECT_NEAR(measured->energy_j, points[index].energy_j, 4 * 1e-3) << "point " << index;
  }
}

}  // namespace
}  // namespace joule::plan
