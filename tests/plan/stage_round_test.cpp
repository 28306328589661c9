// SPDX-License-Identifier: Apache-2.0
// A rank's topology check and the server's per-round schedule body (joule.PipelineFrequencyOptimizer's).
#include "joule/plan/stage_round.hpp"

#include <string>

#include <gtest/gtest.h>

namespace joule::plan {
namespace {

std::string topology_error(const StageTopology& topology) {
  Result<void> checked = check_topology(topology);
  EXPECT_FALSE(checked);
  return checked ? "" : checked.error().message();
}

TEST(StageTopology, AcceptsAConsistentRank) {
  EXPECT_TRUE(check_topology({.rank = 5,
                              .dp_rank = 1,
                              .pp_rank = 1,
                              .tp_rank = 1,
                              .dp_degree = 2,
                              .pp_degree = 2,
                              .tp_degree = 2,
                              .world_size = 8}));
}

TEST(StageTopology, NamesWhatIsWrong) {
  EXPECT_EQ(topology_error({.pp_degree = 0}), "pp_degree must be ≥ 1, got 0");
  EXPECT_EQ(topology_error({.pp_degree = 4, .world_size = 6}),
            "world_size 6 is not dp_degree × pp_degree × tp_degree = 1 × 4 × 1");
  // Degrees whose product overflows are refused, not wrapped.
  EXPECT_EQ(topology_error({.dp_degree = int64_t{1} << 32, .pp_degree = int64_t{1} << 32, .world_size = 0}),
            "world_size 0 is not dp_degree × pp_degree × tp_degree = 4294967296 × 4294967296 × 1");
  EXPECT_EQ(topology_error({.pp_rank = 4, .pp_degree = 4, .world_size = 4}), "pp_rank 4 is not in [0, 4)");
  EXPECT_EQ(topology_error({.rank = -1}), "rank -1 is not in [0, 1)");
  EXPECT_EQ(check_topology({.pp_degree = 0}).error().code(), ErrorCode::kInvalidArgument);
}

TEST(RoundSchedule, ReadsABody) {
  const std::string text =
      R"({"rank": 1, "round": 3, "phase": "profiling", "iterations": 5,
          "frequencies": [["forward", 1410], ["backward", 0]], "predicted": {"iteration_time_s": 1.5}})";
  Result<RoundSchedule> schedule = RoundSchedule::parse(text, 1, "s");
  ASSERT_TRUE(schedule) << schedule.error().message();
  ASSERT_EQ(schedule->frequencies.size(), 2U);
  EXPECT_EQ(schedule->frequencies[0], std::make_pair(Instruction::kForward, 1410U));
  EXPECT_EQ(schedule->frequencies[1], std::make_pair(Instruction::kBackward, 0U));
  EXPECT_EQ(schedule->round, 3);
  EXPECT_EQ(schedule->phase, "profiling");
  EXPECT_EQ(schedule->iterations, 5);
  EXPECT_EQ(schedule->predicted["iteration_time_s"], 1.5);
}

TEST(RoundSchedule, DefaultsWhatIsAbsent) {
  Result<RoundSchedule> schedule = RoundSchedule::parse(R"({"frequencies": [["forward", 1]], "round": "x",
                                                            "phase": null, "predicted": [1]})",
                                                        0, "s");
  ASSERT_TRUE(schedule) << schedule.error().message();
  EXPECT_EQ(schedule->round, 0);
  EXPECT_EQ(schedule->phase, "None");  // as Python's str() of the decoded value
  EXPECT_FALSE(schedule->iterations);
  EXPECT_TRUE(schedule->predicted.is_null());
  EXPECT_EQ(RoundSchedule::parse(R"({"frequencies": [["forward", 1]]})", 0, "s")->phase, "planned");
}

std::string schedule_error(const std::string& text, int64_t rank = 0) {
  Result<RoundSchedule> schedule = RoundSchedule::parse(text, rank, "http://h/schedule/j");
  EXPECT_FALSE(schedule);
  if (schedule) {
    return "";
  }
  EXPECT_EQ(schedule.error().code(), ErrorCode::kInvalidArgument);
  return schedule.error().message();
}

TEST(RoundSchedule, RefusesAMalformedBodyQuotingIt) {
  EXPECT_EQ(schedule_error("[1]"),
            "http://h/schedule/j: a schedule is an object with a 'frequencies' list (got [1])");
  EXPECT_EQ(schedule_error("not json"),
            "http://h/schedule/j: a schedule is an object with a 'frequencies' list (got not json)");
  EXPECT_EQ(
      schedule_error(R"({"rank": 2, "frequencies": []})"),
      R"(http://h/schedule/j: the schedule is for rank 2, not this rank 0 (got {"rank": 2, "frequencies": []}))");
  const std::string bad_entry = "frequencies[1] must be ['forward' or 'backward', MHz ≥ 0]";
  for (const char* entry :
       {R"(["sideways", 1])", R"(["forward", -1])", R"(["forward", 1.0])", R"(["forward", true])",
        R"(["forward"])", R"({"forward": 1})", R"(["forward", 4294967296])"}) {
    const std::string message =
        schedule_error(fmt::format(R"({{"frequencies": [["backward", 1], {}]}})", entry));
    EXPECT_NE(message.find(bad_entry), std::string::npos) << message;
  }
  EXPECT_NE(schedule_error(R"({"frequencies": []})").find(": the schedule has no instruction (got "),
            std::string::npos);
  for (const char* iterations : {"0", "1.5", "true", "\"3\""}) {
    const std::string message =
        schedule_error(fmt::format(R"({{"frequencies": [["forward", 1]], "iterations": {}}})", iterations));
    EXPECT_NE(message.find("'iterations' must be a positive integer or null"), std::string::npos) << message;
  }
  // At most 300 bytes of the body are quoted.
  const std::string long_body = R"({"frequencies": [], "pad": ")" + std::string(1000, 'x') + "\"}";
  EXPECT_EQ(schedule_error(long_body).size(),
            std::string("http://h/schedule/j: the schedule has no instruction (got )").size() + 300);
}

TEST(RoundSchedule, ComparesTheRankAsPythonDoes) {
  EXPECT_TRUE(RoundSchedule::parse(R"({"rank": 1.0, "frequencies": [["forward", 1]]})", 1, "s"));
  EXPECT_TRUE(RoundSchedule::parse(R"({"rank": true, "frequencies": [["forward", 1]]})", 1, "s"));
  EXPECT_NE(schedule_error(R"({"rank": "1", "frequencies": [["forward", 1]]})", 1)
                .find("the schedule is for rank 1, not this rank 1"),
            std::string::npos);
}

std::string plan_error(const StagePlanRequest& request) {
  Result<LocalPlan> planned = plan_stages(request);
  EXPECT_FALSE(planned);
  return planned ? "" : planned.error().message();
}

TEST(StagePlan, NeedsAProfileOrAPlanFileAndItsArguments) {
  StagePlanRequest request;
  EXPECT_EQ(plan_error(request), "server_url=None needs profile= (plan here) or plan= (a plan file)");
  request.profile = "p.csv";
  EXPECT_EQ(plan_error(request), "planning from a profile needs num_microbatches");
  request.plan_path = "/nonexistent/p.json";
  EXPECT_FALSE(plan_stages(request));  // the files' own errors
  request.slowdown = 1.2;
  EXPECT_EQ(plan_error(request), "target_time_s and slowdown choose a plan from a profile, not a plan file");
}

TEST(RoundRecorder, BuildsTheResultBody) {
  RoundRecorder recorder;
  const nlohmann::json empty = recorder.take_result(3, std::nullopt, std::nullopt);
  EXPECT_EQ(empty, nlohmann::json::parse(R"({"rank": 3, "iter_time": [], "iter_energy": [],
      "time_breakdown": {"forward": [], "backward": []}, "energy_breakdown": {"forward": [], "backward": []}})"));
  for (int iteration = 0; iteration < 2; ++iteration) {
    recorder.begin_iteration();
    recorder.record(Instruction::kForward, 1.0, 10.0);
    recorder.record(Instruction::kBackward, 2.0, 20.0);
    recorder.record(Instruction::kForward, 1.5, 15.0);
    recorder.end_iteration(5.0 + iteration, 50.0);
  }
  recorder.begin_iteration();
  recorder.record(Instruction::kForward, 9.0, 9.0);  // an iteration not ended is not reported
  const nlohmann::json result = recorder.take_result(0, 4, true);
  EXPECT_EQ(result, nlohmann::json::parse(R"({"rank": 0, "round": 4, "thermally_steady": true,
      "iter_time": [5.0, 6.0], "iter_energy": [50.0, 50.0],
      "time_breakdown": {"forward": [[1.0, 1.5], [1.0, 1.5]], "backward": [[2.0], [2.0]]},
      "energy_breakdown": {"forward": [[10.0, 15.0], [10.0, 15.0]], "backward": [[20.0], [20.0]]}})"));
  EXPECT_EQ(recorder.take_result(3, std::nullopt, std::nullopt), empty);  // the next round starts empty
}

}  // namespace
}  // namespace joule::plan
