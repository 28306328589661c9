// SPDX-License-Identifier: Apache-2.0
// The cluster autopilot's routes through Service::handle (no sockets): each route, each bad input's status
// and message, refused changes leaving the decision standing, the routes off without a cluster service, and
// the /metrics series.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/cluster/service.hpp"
#include "joule/server/metrics.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;
using server::Request;
using server::Response;

constexpr int64_t kStartUnixNs = 1'800'000'000'000'000'000;

class ClusterRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::open_store("sqlite:" + dir_.path() + "/serve.db");
    ASSERT_TRUE(opened) << opened.error().message();
    store_ = std::shared_ptr<store::Store>(std::move(*opened));
    cluster::ClusterServiceOptions options;
    options.initial_cap_w = 4000;
    options.clock = &clock_;
    options.enforcer = enforcer_;
    options.on_replan = [this](const cluster::ClusterDecision* decision, const cluster::ReplanStats& stats) {
      metrics_.observe_cluster(decision, stats);
    };
    auto cluster = cluster::ClusterService::open(store_, options);
    ASSERT_TRUE(cluster) << cluster.error().message();
    server::ServiceOptions service_options;
    service_options.cluster = std::move(*cluster);
    service_ = std::make_unique<server::Service>(store_, service_options);
  }

  Response call(const std::string& method, const std::string& path, const std::string& body = "") {
    Request request;
    request.method = method;
    request.path = path;
    request.body = body;
    request.content_type = "application/json";
    return service_->handle(request);
  }
  Response call(const std::string& method, const std::string& path, const json& body) {
    return call(method, path, body.dump());
  }
  static std::string message(const Response& response) {
    return json::parse(response.body).value("message", "(no message)");
  }

  TempDir dir_;
  VirtualClock clock_{kStartUnixNs};
  std::shared_ptr<cluster::RecordingEnforcer> enforcer_ = std::make_shared<cluster::RecordingEnforcer>();
  server::ServerMetrics metrics_;
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
};

json training(const std::string& id, const std::string& node) {
  return {{"id", id},
          {"gpus", {{{"node", node}, {"index", 0}}, {{"node", node}, {"index", 1}}}},
          {"frontier", {{200, 1.6}, {300, 1.25}, {400, 1.1}, {500, 1.0}, {700, 1.0}}}};
}

json inference(const std::string& id, const std::string& node) {
  return {{"id", id},
          {"kind", "inference"},
          {"gpus", {{{"node", node}, {"index", 0}}, {{"node", node}, {"index", 1}}}},
          {"frontier",
           {{{"power_limit_w", 300}, {"time_s", 0.061}},
            {{"power_limit_w", 450}, {"time_s", 0.050}},
            {{"power_limit_w", 700}, {"time_s", 0.047}}}},
          {"slo_floor_w", 450}};
}

TEST_F(ClusterRoutesTest, EachRouteChangesAndAnswersTheDecision) {
  Response added = call("POST", "/cluster/jobs", training("pretrain", "n1"));
  ASSERT_EQ(added.status, 201) << added.body;
  json decision = json::parse(added.body);
  EXPECT_EQ(decision["version"], 2);  // 1: the cap at start
  EXPECT_EQ(decision["cap_w"], 4000.0);
  EXPECT_EQ(decision["jobs"][0]["id"], "pretrain");
  EXPECT_EQ(decision["gpus"].size(), 2u);
  EXPECT_EQ(decision["enforced"], true);
  EXPECT_EQ(decision["unanswered_nodes"], json::array());

  ASSERT_EQ(call("POST", "/cluster/jobs", inference("chat", "n2")).status, 201);
  Response listed = call("GET", "/cluster/jobs");
  ASSERT_EQ(listed.status, 200) << listed.body;
  EXPECT_EQ(json::parse(listed.body)["jobs"].size(), 2u);
  Response one = call("GET", "/cluster/jobs/chat");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["slo_floor_w"], 450.0);

  Response capped = call("PUT", "/cluster/cap", json{{"cap_w", 2000}});
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(json::parse(capped.body)["cap_w"], 2000.0);
  EXPECT_LE(json::parse(capped.body)["allocated_w"].get<double>(), 2000 + 1e-9);
  Response cap = call("GET", "/cluster/cap");
  EXPECT_EQ(json::parse(cap.body)["cap_w"], 2000.0);
  // The enforcer got the new limits.
  const json gpus = json::parse(capped.body)["gpus"];
  for (const json& gpu : gpus) {
    EXPECT_EQ(enforcer_->applied().at(gpu["node"].get<std::string>()).at(gpu["index"].get<int>()),
              gpu["power_limit_w"].get<double>());
  }

  const json deferrable = {{"id", "finetune"},
                           {"gpus", {{{"node", "n3"}, {"index", 0}}}},
                           {"frontier", {{200, 1.6}, {500, 1.0}}},
                           {"deferrable", true},
                           {"deadline_in_s", 12 * 3600},
                           {"remaining_s", 3600}};
  ASSERT_EQ(call("POST", "/cluster/jobs", deferrable).status, 201);
  Response progress = call("POST", "/cluster/jobs/finetune/progress", json{{"remaining_s", 1800}});
  ASSERT_EQ(progress.status, 200) << progress.body;
  EXPECT_EQ(json::parse(call("GET", "/cluster/jobs/finetune").body)["remaining_s"], 1800.0);

  const json forecast = {{"slots",
                          {{{"length_s", 3600}, {"intensity_g_per_kwh", 500}},
                           {{"length_s", 7200}, {"intensity_g_per_kwh", 50}}}}};
  Response forecasted = call("PUT", "/cluster/forecast", forecast);
  ASSERT_EQ(forecasted.status, 200) << forecasted.body;
  EXPECT_EQ(json::parse(forecasted.body)["deferred_waiting"], json::array({"finetune"}));
  Response cleared = call("DELETE", "/cluster/forecast");
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  EXPECT_EQ(json::parse(cleared.body)["deferred_waiting"], json::array());

  Response heard = call("POST", "/cluster/nodes/n1/heard");
  ASSERT_EQ(heard.status, 200) << heard.body;

  Response removed = call("DELETE", "/cluster/jobs/pretrain");
  ASSERT_EQ(removed.status, 200) << removed.body;
  EXPECT_EQ(json::parse(removed.body)["jobs"].size(), 2u);

  Response latest = call("GET", "/cluster/decision");
  ASSERT_EQ(latest.status, 200) << latest.body;
  EXPECT_EQ(json::parse(latest.body), json::parse(removed.body));

  // The series of /metrics.
  const std::string text = metrics_.render();
  for (const std::string& series : std::vector<std::string>{
           "joule_cluster_power_cap_watts 2000",
           "joule_cluster_decision_version " + std::to_string(json::parse(latest.body)["version"].get<int>()),
           "joule_cluster_job_power_limit_watts{job=\"chat\"}", "joule_cluster_replans_total",
           "joule_cluster_replan_duration_seconds_count", "joule_cluster_allocated_watts",
           "joule_cluster_reserved_watts 0"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  // A job gone is no longer a series.
  EXPECT_EQ(text.find("job=\"pretrain\""), std::string::npos) << text;
}

TEST_F(ClusterRoutesTest, BadInputGetsItsStatusAndMessageAndTheDecisionStands) {
  ASSERT_EQ(call("POST", "/cluster/jobs", inference("chat", "n1")).status, 201);
  const json before = json::parse(call("GET", "/cluster/decision").body);
  struct Case {
    std::string method, path, body;
    int status;
    std::string message;
  };
  json held = training("other", "n2");
  held["gpus"][1] = {{"node", "n1"}, {"index", 0}};
  json swapped = training("swapped", "n3");
  swapped["frontier"] = {{200, 1.0}, {700, 1.6}};
  json milliwatts = training("mw", "n3");
  milliwatts["frontier"] = {{200'000, 1.6}, {700'000, 1.0}};
  json late = training("late", "n3");
  late["deferrable"] = true;
  late["deadline_in_s"] = -120;
  late["remaining_s"] = 60;
  json big = inference("big", "n4");
  big["gpus"] = {{{"node", "n4"}, {"index", 0}}, {{"node", "n4"}, {"index", 1}},
                 {{"node", "n4"}, {"index", 2}}, {{"node", "n4"}, {"index", 3}},
                 {{"node", "n4"}, {"index", 4}}, {{"node", "n4"}, {"index", 5}},
                 {{"node", "n4"}, {"index", 6}}, {{"node", "n4"}, {"index", 7}}};
  const std::vector<Case> cases = {
      {"POST", "/cluster/jobs", held.dump(), 422, "job 'other' names GPU n1:0, which job 'chat' holds"},
      {"POST", "/cluster/jobs", swapped.dump(), 422,
       "job 'swapped': its frontier is not monotone: 1.6 s at 700 W is 60% slower than 1 s at a lower limit "
       "(time must not rise with the power limit; are the columns swapped?)"},
      {"POST", "/cluster/jobs", milliwatts.dump(), 422,
       "job 'mw': a frontier point's power limit of 200000 W per GPU is outside 1–5000 W: is it in mW?"},
      {"POST", "/cluster/jobs", late.dump(), 422, ""},  // checked by prefix below
      {"POST", "/cluster/jobs", inference("chat", "n5").dump(), 422, "job 'chat' is already registered"},
      {"POST", "/cluster/jobs", big.dump(), 409,
       "job 'big' refused: the cap of 4000 W is 500 W short of the inference jobs' SLO floors with every "
       "training job at its lowest limit (4500 W): raise the cap, or allow degraded SLOs"},
      {"POST", "/cluster/jobs", "{\"id\": ", 422, ""},  // not JSON, checked by prefix below
      {"POST", "/cluster/jobs", json{{"id", "x"}, {"gpus", json::array()}, {"frontier", {{200, 1}}}}.dump(),
       422, "job 'x' names no GPU"},
      {"PUT", "/cluster/cap", json{{"cap_w", 800}}.dump(), 409,
       "cap 800 W refused: the cap of 800 W is 100 W short of the inference jobs' SLO floors with every "
       "training job at its lowest limit (900 W): raise the cap, or allow degraded SLOs"},
      {"PUT", "/cluster/cap", json{{"cap_w", -1}}.dump(), 422,
       "the cluster power cap must be a positive number of watts, got -1"},
      {"PUT", "/cluster/cap", json{{"cap_kw", 4}}.dump(), 422,
       "cap_kw: unknown field (expected one of: cap_w)"},
      {"PUT", "/cluster/cap", "{}", 422, "cap_w: required: the cluster's power cap, W"},
      {"PUT", "/cluster/cap", json{{"cap_w", "4 kW"}}.dump(), 422,
       "cap_w: expected a number (the cluster's power cap, W), got \"4 kW\""},
      {"PUT", "/cluster/cap", "[1]", 422, "body: expected a JSON object"},
      {"DELETE", "/cluster/jobs/nope", "", 404, "no job 'nope' is registered"},
      {"GET", "/cluster/jobs/nope", "", 404, "no job 'nope' is registered"},
      {"POST", "/cluster/jobs/chat/progress", json{{"remaining_s", 10}}.dump(), 422,
       "job 'chat' is not deferrable: its progress is not tracked"},
      {"POST", "/cluster/jobs/nope/progress", json{{"remaining_s", 10}}.dump(), 404,
       "no job 'nope' is registered"},
      {"POST", "/cluster/jobs/chat/progress", "{}", 422,
       "remaining_s: required: running time still needed at full speed, s"},
      {"PUT", "/cluster/forecast", json{{"slots", json::array()}}.dump(), 422,
       "the carbon forecast has no slot"},
      {"PUT", "/cluster/forecast", json{{"slots", {{{"length_s", 3600}}}}}.dump(), 422,
       "slots[0]: expected {\"length_s\": S, \"intensity_g_per_kwh\": G}, got an object with 1 key "
       "(\"length_s\")"},
      {"PUT", "/cluster/forecast",
       json{{"slots", {{{"length_s", 3600}, {"intensity_g_per_kwh", "low"}}}}}.dump(), 422,
       "slots[0].intensity_g_per_kwh: expected a number (the grid's carbon intensity, gCO2/kWh), got "
       "\"low\""},
      {"PUT", "/cluster/forecast",
       json{{"slots", {{{"length_s", 3600}, {"intensity_g_per_kwh", -5}}}}}.dump(), 422,
       ""},  // the controller's message, checked by prefix below
      {"PUT", "/cluster/forecast", json{{"start", 0}}.dump(), 422,
       "start: unknown field (expected one of: slots, start_s)"},
  };
  for (const Case& c : cases) {
    const Response response = call(c.method, c.path, c.body);
    EXPECT_EQ(response.status, c.status)
        << c.method << " " << c.path << " " << c.body << ": " << response.body;
    if (!c.message.empty()) {
      EXPECT_EQ(message(response), c.message) << c.method << " " << c.path << " " << c.body;
    }
  }
  EXPECT_TRUE(
      message(call("POST", "/cluster/jobs", late)).starts_with("job 'late': its deadline passed 120 s ago"));
  EXPECT_TRUE(
      message(call("POST", "/cluster/jobs", std::string("{\"id\": "))).starts_with("body: not valid JSON: "));
  EXPECT_TRUE(
      message(call("PUT", "/cluster/forecast",
                   json{{"slots", {{{"length_s", 3600}, {"intensity_g_per_kwh", -5}}}}}))
          .starts_with("forecast slot 0: its carbon intensity must be a number ≥ 0 gCO2/kWh, got -5"));
  // Wrong methods and paths.
  EXPECT_EQ(call("PATCH", "/cluster/cap").status, 405);
  EXPECT_EQ(call("POST", "/cluster/decision").status, 405);
  EXPECT_EQ(call("GET", "/cluster/jobs/chat/progress").status, 405);
  EXPECT_EQ(call("GET", "/cluster/elsewhere").status, 404);
  // None of it changed the decision.
  const json after = json::parse(call("GET", "/cluster/decision").body);
  EXPECT_EQ(after, before);
  EXPECT_EQ(json::parse(call("GET", "/cluster/cap").body)["cap_w"], 4000.0);
}

TEST(ClusterRoutesOff, AnswerNotFoundSayingHowToTurnThemOn) {
  server::Service service(std::shared_ptr<store::Store>(store::memory_store()));
  Request request;
  request.method = "GET";
  request.path = "/cluster/decision";
  const Response response = service.handle(request);
  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(
      json::parse(response.body)["message"],
      "the cluster autopilot is off: start joule serve with --cluster-power-cap-w W to serve /cluster/…");
}

TEST(ClusterRoutesMetrics, RouteTemplatesKeepIdsOutOfLabels) {
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/jobs"), "/cluster/jobs");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/jobs/pretrain"), "/cluster/jobs/{id}");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/jobs/pretrain/progress"),
            "/cluster/jobs/{id}/progress");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/nodes/n1/heard"), "/cluster/nodes/{node}/heard");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/cap"), "/cluster/cap");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/decision"), "/cluster/decision");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/leader"), "/cluster/leader");
  EXPECT_EQ(server::ServerMetrics::route_of("/cluster/x/y"), "other");
}

// Two replicas on one database (docs/cluster.md "High availability"): the follower serves the leader's
// decision, refuses changes with 503 naming the leader, and the leader series say who leads.
TEST(ClusterRoutesReplicas, TheFollowerServesTheLeadersDecisionAndRefusesChangesNamingTheLeader) {
  TempDir dir;
  struct Replica {
    VirtualClock clock{kStartUnixNs};
    server::ServerMetrics metrics;
    std::shared_ptr<cluster::ClusterService> cluster;
    std::unique_ptr<server::Service> service;
    Response call(const std::string& method, const std::string& path, const std::string& body = "") {
      Request request;
      request.method = method;
      request.path = path;
      request.body = body;
      request.content_type = "application/json";
      return service->handle(request);
    }
  };
  auto open = [&](Replica& replica, const std::string& name) {
    auto opened = store::open_store("sqlite:" + dir.path() + "/serve.db");
    ASSERT_TRUE(opened) << opened.error().message();
    std::shared_ptr<store::Store> store(std::move(*opened));
    cluster::ClusterServiceOptions options;
    options.initial_cap_w = 4000;
    options.clock = &replica.clock;
    options.lease = cluster::LeaseOptions{.holder = name,
                                          .address = "http://" + name + ":7787",
                                          .lease_s = 5,
                                          .renew_period_s = 0,
                                          .release_on_close = true};
    options.on_leadership = [&replica](const cluster::Leadership& leadership) {
      replica.metrics.observe_cluster_leader(leadership);
    };
    auto cluster = cluster::ClusterService::open(store, options);
    ASSERT_TRUE(cluster) << cluster.error().message();
    replica.cluster = std::move(*cluster);
    server::ServiceOptions service_options;
    service_options.cluster = replica.cluster;
    replica.service = std::make_unique<server::Service>(store, service_options);
  };
  Replica a;
  Replica b;
  open(a, "a");
  open(b, "b");
  ASSERT_TRUE(a.cluster && b.cluster);

  EXPECT_EQ(a.call("POST", "/cluster/jobs", training("pretrain", "n1").dump()).status, 201);
  Response leader = b.call("GET", "/cluster/leader");
  ASSERT_EQ(leader.status, 200);
  EXPECT_EQ(json::parse(leader.body),
            json({{"leading", false}, {"holder", "a"}, {"address", "http://a:7787"}, {"epoch", 1}}));
  EXPECT_EQ(json::parse(a.call("GET", "/cluster/leader").body)["leading"], true);

  Response refused = b.call("PUT", "/cluster/cap", R"({"cap_w": 3000})");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(json::parse(refused.body),
            json({{"message",
                   "this replica (b) does not lead: changes go to the leader at http://a:7787 (epoch 1)"},
                  {"leader", "http://a:7787"}}));
  EXPECT_EQ(b.call("POST", "/cluster/jobs", training("other", "n2").dump()).status, 503);
  EXPECT_EQ(b.call("DELETE", "/cluster/jobs/pretrain").status, 503);

  ASSERT_TRUE(b.cluster->lease_round());
  const json from_a = json::parse(a.call("GET", "/cluster/decision").body);
  const json from_b = json::parse(b.call("GET", "/cluster/decision").body);
  EXPECT_EQ(from_b["version"], from_a["version"]);
  EXPECT_EQ(from_b["gpus"], from_a["gpus"]);
  EXPECT_EQ(from_b["leader"]["holder"], "a");
  EXPECT_EQ(json::parse(b.call("GET", "/cluster/jobs").body)["jobs"].size(), 1u);

  EXPECT_NE(b.metrics.render().find("joule_cluster_leader 0"), std::string::npos) << b.metrics.render();
  ASSERT_TRUE(a.cluster->lease_round());
  EXPECT_NE(a.metrics.render().find("joule_cluster_leader 1"), std::string::npos) << a.metrics.render();
  EXPECT_NE(a.metrics.render().find("joule_cluster_leader_epoch 1"), std::string::npos);
}

}  // namespace
}  // namespace joule::test
