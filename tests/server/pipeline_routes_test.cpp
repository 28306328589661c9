// SPDX-License-Identifier: Apache-2.0
// The pipeline planner routes without HTTP: registration, profile uploads (CSV and JSON rows), the frontier
// (equal to the planner's, planned once and cached in the store), plans for targets and stragglers, and bad
// input answered with 4xx and no change.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "joule/plan/plan_io.hpp"
#include "joule/plan/planner.hpp"
#include "joule/server/service.hpp"

#include "plan/profile_rows.hpp"
#include "server/server_test_util.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;
using server::Request;
using server::Response;

std::string example_profile() {
  std::ifstream in(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class PipelineRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::shared_ptr<store::Store>(store::memory_store());
    service_ = std::make_unique<server::Service>(store_);
  }

  Response call(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& content_type = "application/json",
                std::map<std::string, std::string> query = {}, std::optional<std::string> request_id = {}) {
    return service_->handle(
        Request{method, path, std::move(query), body, content_type, std::move(request_id)});
  }

  std::string register_example(const std::string& id = "pipeline-example") {
    const Response response =
        call("POST", "/pipelines",
             json({{"pipeline_id", id}, {"stages", 4}, {"microbatches", 8}, {"p_blocking_w", 75}}).dump());
    EXPECT_EQ(response.status, 201) << response.body;
    return id;
  }

  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
};

json parsed(const Response& response) {
  return json::parse(response.body);
}

TEST_F(PipelineRoutesTest, RegisterLikeJobs) {
  register_example();
  const json again = {
      {"pipeline_id", "pipeline-example"}, {"stages", 4}, {"microbatches", 8}, {"p_blocking_w", 75}};
  const Response same = call("POST", "/pipelines", again.dump());
  EXPECT_EQ(same.status, 200);
  EXPECT_EQ(parsed(same)["schedule"], "1f1b");
  EXPECT_EQ(parsed(same)["unit_time_s"], 0.001);
  json other = again;
  other["microbatches"] = 16;
  EXPECT_EQ(call("POST", "/pipelines", other.dump()).status, 409);

  const Response generated =
      call("POST", "/pipelines", R"({"pipeline_id_prefix": "llm", "stages": 2, "microbatches": 3})");
  EXPECT_EQ(generated.status, 201);
  EXPECT_TRUE(parsed(generated)["pipeline_id"].get<std::string>().starts_with("llm-"));

  for (const char* bad :
       {R"({"stages": 0, "microbatches": 8})", R"({"stages": 4})",
        R"({"stages": 4, "microbatches": 8, "schedule": "zigzag"})",
        R"({"stages": 4, "microbatches": 8, "p_blocking_w": -1})",
        R"({"stages": 4, "microbatches": 8, "unit_time_s": 0})",
        R"({"stages": 4, "microbatches": 8, "pipeline_id": "a/b"})",
        R"({"stages": 4, "microbatches": 8, "pipeline_id": "x", "pipeline_id_prefix": "y"})",
        R"({"stages": "4", "microbatches": 8})", R"({"stages": 100000, "microbatches": 100000})", R"([1, 2])",
        R"({"stages": )"}) {
    const Response response = call("POST", "/pipelines", bad);
    EXPECT_EQ(response.status, 400) << bad << " → " << response.body;
    EXPECT_TRUE(parsed(response).contains("message")) << response.body;
  }
}

TEST_F(PipelineRoutesTest, FrontierEqualsThePlannersAndIsCachedInTheStore) {
  const std::string id = register_example();
  EXPECT_EQ(call("GET", "/pipelines/" + id + "/frontier").status, 409);  // no profile yet
  const Response uploaded = call("PUT", "/pipelines/" + id + "/profile", example_profile(), "text/csv");
  ASSERT_EQ(uploaded.status, 200) << uploaded.body;
  EXPECT_EQ(parsed(uploaded)["profile_revision"], 1);
  EXPECT_EQ(parsed(uploaded)["stages"], 4);

  const Response first = call("GET", "/pipelines/" + id + "/frontier");
  ASSERT_EQ(first.status, 200) << first.body;
  const json frontier = parsed(first);
  EXPECT_FALSE(frontier["cached"]);

  // The planner's own frontier on the same profile.
  const auto profile = plan::Profile::parse(example_profile(), "example");
  const auto dag = plan::build_pipeline(4, 8, plan::Schedule::k1F1B);
  plan::PlannerOptions options;
  options.p_blocking_w = 75;
  const auto expected = plan::plan_frontier(*dag, *profile, options);
  ASSERT_TRUE(expected);
  ASSERT_EQ(frontier["points"].size(), expected->frontier.size());
  for (size_t i = 0; i < expected->frontier.size(); ++i) {
    EXPECT_EQ(frontier["points"][i]["time_s"], expected->frontier.points()[i].time_s);
    EXPECT_EQ(frontier["points"][i]["energy_j"], expected->frontier.points()[i].energy_j);
  }
  EXPECT_EQ(frontier["max_clock"]["energy_j"], expected->max_clock.energy_j);

  // Stored for other servers: a fresh service on the same store reads it instead of planning.
  server::Service other(store_);
  const Response second =
      other.handle(Request{"GET", "/pipelines/" + id + "/frontier", {}, "", "", std::nullopt});
  EXPECT_TRUE(parsed(second)["cached"]);
  EXPECT_EQ(parsed(second)["points"], frontier["points"]);
  EXPECT_TRUE(parsed(call("GET", "/pipelines/" + id))["frontier_ready"]);

  // Plans: no slowdown is the fastest point; a target picks select_for_target's point.
  const json fastest = parsed(call("GET", "/pipelines/" + id + "/plan"));
  EXPECT_EQ(fastest["index"], 0);
  EXPECT_EQ(fastest["time_s"], expected->frontier.fastest().time_s);
  const json fastest_plan =
      plan::plan_to_json(*dag, expected->frontier.fastest().knob,
                         {expected->frontier.fastest().time_s, expected->frontier.fastest().energy_j});
  for (const auto& [key, value] : fastest_plan.items()) {
    EXPECT_EQ(fastest[key], value) << key;
  }
  const double target = expected->frontier.fastest().time_s * 1.2;
  const auto index = plan::select_for_target(expected->frontier, target, 75, 4);
  ASSERT_TRUE(index);
  const Response targeted =
      call("GET", "/pipelines/" + id + "/plan", "", "", {{"target_time_s", fmt::format("{}", target)}});
  ASSERT_EQ(targeted.status, 200) << targeted.body;
  EXPECT_EQ(parsed(targeted)["index"], *index);
  EXPECT_EQ(parsed(targeted)["target_time_s"], target);
  const auto plan_back = plan::plan_from_json(*dag, parsed(targeted));
  ASSERT_TRUE(plan_back) << plan_back.error().message();
  EXPECT_EQ(*plan_back, expected->frontier.points()[*index].knob);
  EXPECT_EQ(
      parsed(call("GET", "/pipelines/" + id + "/plan", "", "", {{"straggler_slowdown", "1.2"}}))["index"],
      *index);

  // Too fast a target, nonsense numbers, both knobs: 400.
  for (const auto& query : std::vector<std::map<std::string, std::string>>{
           {{"target_time_s", "0.001"}},
           {{"target_time_s", "abc"}},
           {{"target_time_s", "-1"}},
           {{"straggler_slowdown", "0.5"}},
           {{"target_time_s", "1"}, {"straggler_slowdown", "1.1"}}}) {
    const Response response = call("GET", "/pipelines/" + id + "/plan", "", "", query);
    EXPECT_EQ(response.status, 400) << response.body;
  }
}

// Numbers follow the rules the CLI's flags follow (joule/core/validate.hpp), with the field named.
TEST_F(PipelineRoutesTest, NumbersFollowTheSharedRulesWithTheFieldNamed) {
  const std::string id = register_example();
  ASSERT_EQ(call("PUT", "/pipelines/" + id + "/profile", example_profile(), "text/csv").status, 200);
  const std::vector<std::pair<Response, std::string>> cases = {
      {call("POST", "/pipelines", R"({"stages": 4, "microbatches": 8, "p_blocking_w": -1})"),
       "p_blocking_w: must be a finite number ≥ 0, got -1"},
      {call("POST", "/pipelines", R"({"stages": 4, "microbatches": 8, "unit_time_s": 0})"),
       "unit_time_s: must be a finite number > 0, got 0"},
      {call("GET", "/pipelines/" + id + "/plan", "", "", {{"target_time_s", "-1"}}),
       "target_time_s: must be a finite number > 0, got -1"},
      {call("GET", "/pipelines/" + id + "/plan", "", "", {{"target_time_s", "abc"}}),
       "target_time_s: must be a number, got 'abc'"},
      {call("GET", "/pipelines/" + id + "/plan", "", "", {{"straggler_slowdown", "0.5"}}),
       "straggler_slowdown: must be a finite number ≥ 1, got 0.5"},
      {call("POST", "/pipelines/" + id + "/straggler", R"({"iteration_time_s": -1})"),
       "iteration_time_s: must be a finite number > 0, got -1"},
  };
  for (const auto& [response, message] : cases) {
    EXPECT_EQ(response.status, 400) << response.body;
    EXPECT_EQ(parsed(response)["message"], message) << response.body;
  }
}

TEST_F(PipelineRoutesTest, StragglerReportsChangeTheCurrentPlan) {
  const std::string id = register_example();
  ASSERT_EQ(call("PUT", "/pipelines/" + id + "/profile", example_profile(), "text/csv").status, 200);
  const json fastest = parsed(call("GET", "/pipelines/" + id + "/plan"));
  const double slow = fastest["time_s"].get<double>() * 1.3;

  const Response reported =
      call("POST", "/pipelines/" + id + "/straggler", json({{"iteration_time_s", slow}}).dump(),
           "application/json", {}, "straggler-1");
  ASSERT_EQ(reported.status, 200) << reported.body;
  const json plan = parsed(reported);
  EXPECT_EQ(plan["straggler_time_s"], slow);
  EXPECT_EQ(plan["target_time_s"], slow);
  EXPECT_GT(plan["index"].get<int>(), 0);
  EXPECT_LT(plan["energy_at_target_j"].get<double>(),
            fastest["energy_j"].get<double>() + 75 * 4 * (slow - fastest["time_s"].get<double>()));
  // The current plan follows the straggler, and a retried report is replayed.
  EXPECT_EQ(parsed(call("GET", "/pipelines/" + id + "/plan"))["index"], plan["index"]);
  const Response retried =
      call("POST", "/pipelines/" + id + "/straggler", json({{"iteration_time_s", slow}}).dump(),
           "application/json", {}, "straggler-1");
  EXPECT_TRUE(retried.replayed);
  EXPECT_EQ(retried.body, reported.body);

  // A straggler no slower than our fastest plan, or none: back to no slowdown.
  EXPECT_EQ(parsed(call("POST", "/pipelines/" + id + "/straggler", R"({"iteration_time_s": 0.1})"))["index"],
            0);
  EXPECT_EQ(parsed(call("POST", "/pipelines/" + id + "/straggler", R"({"iteration_time_s": null})"))["index"],
            0);
  for (const char* bad : {R"({})", R"({"iteration_time_s": -1})", R"({"iteration_time_s": "1"})", "nope"}) {
    EXPECT_EQ(call("POST", "/pipelines/" + id + "/straggler", bad).status, 400) << bad;
  }
}

TEST_F(PipelineRoutesTest, ProfilesAsJsonRowsAndBadProfiles) {
  const std::string id = "pipeline-small";
  ASSERT_EQ(call("POST", "/pipelines", json({{"pipeline_id", id}, {"stages", 2}, {"microbatches", 2}}).dump())
                .status,
            201);
  json rows = test::small_profile_rows();
  const Response uploaded = call("PUT", "/pipelines/" + id + "/profile", json({{"rows", rows}}).dump());
  ASSERT_EQ(uploaded.status, 200) << uploaded.body;
  EXPECT_EQ(parsed(uploaded)["frequencies_mhz"], json({1400, 1000}));
  // The same profile again (as a bare array) changes nothing.
  const Response same = call("PUT", "/pipelines/" + id + "/profile", rows.dump());
  EXPECT_EQ(parsed(same)["changed"], false);
  EXPECT_EQ(parsed(same)["profile_revision"], 1);
  ASSERT_EQ(call("GET", "/pipelines/" + id + "/frontier").status, 200);
  const Response csv = call("GET", "/pipelines/" + id + "/profile");
  EXPECT_EQ(csv.content_type, "text/csv");
  EXPECT_TRUE(csv.body.starts_with("stage,instruction,frequency_mhz,time_s,energy_j\n"));

  const json before = parsed(call("GET", "/pipelines/" + id));
  json missing_row = rows;
  missing_row.erase(missing_row.begin());
  json bad_stage = rows;
  bad_stage[0]["stage"] = 7;
  json bad_time = rows;
  bad_time[0]["time_s"] = -1;
  json bad_instruction = rows;
  bad_instruction[0]["instruction"] = "sideways";
  for (const std::string& bad :
       {missing_row.dump(), bad_stage.dump(), bad_time.dump(), bad_instruction.dump(),
        std::string("{\"rows\": 3}"), std::string("[{\"stage\": 0}]")}) {
    const Response response = call("PUT", "/pipelines/" + id + "/profile", bad);
    EXPECT_EQ(response.status, 400) << bad << " → " << response.body;
  }
  EXPECT_EQ(call("PUT", "/pipelines/" + id + "/profile", "stage,instruction\n0,forward\n", "text/csv").status,
            400);
  // A 4-stage profile for a 2-stage pipeline.
  EXPECT_EQ(call("PUT", "/pipelines/" + id + "/profile", example_profile(), "text/csv").status, 400);
  EXPECT_EQ(parsed(call("GET", "/pipelines/" + id)), before);

  // A new profile makes the stored frontier stale: planned again.
  json faster = rows;
  for (auto& row : faster) {
    row["time_s"] = row["time_s"].get<double>() / 2;
  }
  const Response changed = call("PUT", "/pipelines/" + id + "/profile", faster.dump());
  EXPECT_EQ(parsed(changed)["profile_revision"], 2);
  EXPECT_FALSE(parsed(call("GET", "/pipelines/" + id))["frontier_ready"]);
  EXPECT_FALSE(parsed(call("GET", "/pipelines/" + id + "/frontier"))["cached"]);
}

TEST_F(PipelineRoutesTest, TooFineAUnitTimeIsRefusedBeforePlanning) {
  ASSERT_EQ(
      call("POST", "/pipelines",
           json({{"pipeline_id", "pipeline-fine"}, {"stages", 4}, {"microbatches", 8}, {"unit_time_s", 1e-9}})
               .dump())
          .status,
      201);
  ASSERT_EQ(call("PUT", "/pipelines/pipeline-fine/profile", example_profile(), "text/csv").status, 200);
  const Response response = call("GET", "/pipelines/pipeline-fine/frontier");
  EXPECT_EQ(response.status, 400);
  EXPECT_NE(parsed(response)["message"].get<std::string>().find("too fine"), std::string::npos)
      << response.body;
}

TEST_F(PipelineRoutesTest, UnknownPipelinesAndRoutes) {
  EXPECT_EQ(call("GET", "/pipelines/nope").status, 404);
  EXPECT_EQ(call("GET", "/pipelines/nope/frontier").status, 404);
  EXPECT_EQ(call("GET", "/pipelines/nope/plan").status, 404);
  EXPECT_EQ(call("PUT", "/pipelines/nope/profile", "x").status, 404);
  EXPECT_EQ(call("POST", "/pipelines/nope/straggler", R"({"iteration_time_s": 1})").status, 404);
  EXPECT_EQ(call("DELETE", "/pipelines/nope").status, 404);
  const std::string id = register_example();
  EXPECT_EQ(call("GET", "/pipelines/" + id + "/nothing").status, 404);
  EXPECT_EQ(call("PATCH", "/pipelines/" + id).status, 405);
  EXPECT_EQ(call("DELETE", "/pipelines/" + id).status, 200);
  EXPECT_EQ(call("GET", "/pipelines/" + id).status, 404);
}

}  // namespace
}  // namespace joule::test
