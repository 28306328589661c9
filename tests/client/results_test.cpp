// SPDX-License-Identifier: Apache-2.0
// The client's typed answers (joule/client/results.hpp): what a real server sends reads into every field,
// and a malformed answer fails the call with kParse naming the call and the field.
#include "joule/client/results.hpp"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/client/client.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "http/hostile_server.hpp"
#include "server/server_test_util.hpp"

namespace joule::client {
namespace {

namespace bso = optimize::batch_size;
using nlohmann::json;

// A joule serve in this process, on a memory store and a free loopback port.
class LoopbackServe : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::shared_ptr<store::Store>(std::move(*store::open_store("memory:")));
    service_ = std::make_unique<server::Service>(store_);
    server::HttpServerOptions options;
    options.port = 0;
    options.threads = 2;
    http_ = std::make_unique<server::HttpServer>(*service_, options);
    ASSERT_TRUE(http_->start());
    client_ = std::make_unique<Client>(
        value_or_throw(Client::connect(fmt::format("http://127.0.0.1:{}", http_->port()))));
  }
  void TearDown() override {
    client_.reset();
    if (http_) {
      http_->stop();
    }
  }
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
  std::unique_ptr<server::HttpServer> http_;
  std::unique_ptr<Client> client_;
};

TEST_F(LoopbackServe, HealthAndJobStatusReadIntoTheirFields) {
  const auto health = client_->health();
  ASSERT_TRUE(health) << health.error().message();
  EXPECT_EQ(health->status, "ok");
  EXPECT_EQ(health->document["store"], health->store);
  EXPECT_EQ(health->document["schema_version"], health->schema_version);

  const auto registered =
      client_->register_job(test::synthetic_spec("synthetic-typed"), test::synthetic_gpu());
  ASSERT_TRUE(registered) << registered.error().message();
  const auto trial = client_->next_batch_size("synthetic-typed");
  ASSERT_TRUE(trial) << trial.error().message();
  const auto status = client_->job_status("synthetic-typed");
  ASSERT_TRUE(status) << status.error().message();
  EXPECT_EQ(status->job_id, "synthetic-typed");
  EXPECT_EQ(status->stage, bso::Stage::kPruning);
  EXPECT_EQ(status->spec, registered->spec);
  EXPECT_EQ(status->gpu, registered->gpu);
  EXPECT_FALSE(status->min_cost);
  EXPECT_EQ(status->counts.trials, 1);
  EXPECT_EQ(status->counts.dispatched, 1);
  EXPECT_EQ(status->counts.reports, 0);
  ASSERT_EQ(status->trials.size(), 1u);
  EXPECT_EQ(status->trials[0].trial.trial_number, trial->trial_number);
  EXPECT_EQ(status->trials[0].trial.batch_size, trial->batch_size);
  EXPECT_EQ(status->trials[0].reports, 0);
  EXPECT_EQ(status->trials_page.limit, 100);
  EXPECT_FALSE(status->trials_page.next_before);
  EXPECT_TRUE(status->arms.empty());
  EXPECT_EQ(status->document["job_id"], "synthetic-typed");  // the answer as sent, for printing it whole

  const auto page = client_->job_status("synthetic-typed", 1, 2);
  ASSERT_TRUE(page) << page.error().message();
  EXPECT_EQ(page->trials_page.limit, 1);
  EXPECT_EQ(page->trials_page.before, 2);
}

TEST_F(LoopbackServe, PlannerAnswersReadIntoTheirFields) {
  PipelineSpec spec;
  spec.stages = 4;
  spec.microbatches = 8;
  spec.p_blocking_w = 75;
  const auto registered = client_->register_pipeline(spec);
  ASSERT_TRUE(registered) << registered.error().message();
  const std::string id = *registered->first.pipeline_id;
  const auto before = client_->pipeline_status(id);
  ASSERT_TRUE(before) << before.error().message();
  EXPECT_EQ(before->spec, registered->first);
  EXPECT_FALSE(before->has_profile);
  EXPECT_FALSE(before->straggler_time_s);

  std::ifstream file(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv");
  std::stringstream csv;
  csv << file.rdbuf();
  const auto uploaded = client_->upload_profile(id, csv.str());
  ASSERT_TRUE(uploaded) << uploaded.error().message();
  EXPECT_TRUE(uploaded->changed);
  EXPECT_EQ(uploaded->stages, 4);
  EXPECT_FALSE(uploaded->frequencies_mhz.empty());

  const auto frontier = client_->frontier(id);
  ASSERT_TRUE(frontier) << frontier.error().message();
  ASSERT_GT(frontier->points.size(), 10u);
  EXPECT_EQ(frontier->points[0].index, 0);
  EXPECT_NEAR(frontier->points[0].time_s, 0.740, 0.001);  // docs/plan.md's fastest point
  EXPECT_GE(frontier->max_clock_energy_j, frontier->points.back().energy_j);

  const auto fastest = client_->plan(id);
  ASSERT_TRUE(fastest) << fastest.error().message();
  EXPECT_EQ(fastest->index, 0);
  EXPECT_EQ(fastest->schedule, plan::Schedule::k1F1B);
  ASSERT_EQ(fastest->stages_plan.size(), 4u);
  EXPECT_EQ(fastest->stages_plan[0].size(), 16u);  // 8 forwards and 8 backwards
  EXPECT_FALSE(fastest->target_time_s);
  EXPECT_EQ(fastest->frontier_size, static_cast<int64_t>(frontier->points.size()));

  const double slow_s = fastest->time_s * 1.25;
  const auto adapted = client_->report_straggler(id, slow_s);
  ASSERT_TRUE(adapted) << adapted.error().message();
  EXPECT_GT(adapted->index, 0);
  EXPECT_EQ(adapted->straggler_time_s, slow_s);
  EXPECT_EQ(adapted->target_time_s, slow_s);
  EXPECT_EQ(client_->pipeline_status(id)->straggler_time_s, slow_s);
}

// Answers 200 with the body given for each request line ("GET /healthz"); 404 otherwise.
class CannedServer {
 public:
  explicit CannedServer(std::map<std::string, std::string> bodies)
      : bodies_(std::move(bodies)), server_([this](test::HostileServer::Peer& peer) { answer(peer); }) {}
  std::string url() const { return server_.url(); }

 private:
  void answer(test::HostileServer::Peer& peer) const {
    while (peer.read_request()) {
      const auto found = bodies_.find(peer.target());
      const std::string body = found == bodies_.end() ? R"({"detail":"Not Found"})" : found->second;
      peer.send(fmt::format("HTTP/1.1 {} X\r\nContent-Length: {}\r\n\r\n{}",
                            found == bodies_.end() ? 404 : 200, body.size(), body));
    }
  }
  std::map<std::string, std::string> bodies_;
  test::HostileServer server_;
};

TEST(ClientResults, AMalformedAnswerNamesTheCallAndTheField) {
  const json point = {{"index", 0}, {"time_s", "fast"}, {"energy_j", 1.0}};
  const json frontier = {{"pipeline_id", "p"},
                         {"profile_revision", 1},
                         {"max_clock", {{"time_s", 1.0}, {"energy_j", 2.0}}},
                         {"points", {point}},
                         {"cuts", 1},
                         {"planning_time_s", 0.1},
                         {"cached", false}};
  const CannedServer server({
      {"GET /healthz", R"({"status": "ok", "store": "memory"})"},
      {"GET /jobs/j", R"({"job_id": "j", "stage": "Sorting"})"},
      {"GET /pipelines/p/frontier", frontier.dump()},
      {"GET /pipelines/p", R"({"pipeline_id": "p", "spec": {"stages": 0, "microbatches": 1}})"},
      {"GET /pipelines/p/plan", R"([1, 2])"},
  });
  Client client = value_or_throw(Client::connect(server.url()));
  const auto health = client.health();
  ASSERT_FALSE(health);
  EXPECT_EQ(health.error().code(), ErrorCode::kParse);
  EXPECT_EQ(health.error().message(),
            "GET /healthz: the server's health is malformed: schema_version: field required");
  const auto job = client.job_status("j");
  ASSERT_FALSE(job);
  EXPECT_EQ(job.error().message(),
            "GET /jobs/j: the server's job status is malformed: stage: unknown stage "
            "'Sorting'");
  const auto points = client.frontier("p");
  ASSERT_FALSE(points);
  EXPECT_EQ(points.error().message(),
            "GET /pipelines/p/frontier: the server's frontier is malformed: points[0].time_s: value is not a "
            "valid float");
  const auto pipeline = client.pipeline_status("p");
  ASSERT_FALSE(pipeline);
  EXPECT_EQ(
      pipeline.error().message(),
      "GET /pipelines/p: the server's pipeline status is malformed: spec: stages: must be at least 1, got 0");
  const auto plan = client.plan("p");
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message(),
            "GET /pipelines/p/plan: the server's plan is malformed: value is not a "
            "valid dict");
}

TEST(ClientResults, ParsingKeepsTheDocumentAndReadsInfinitePrecisions) {
  const json arm = {{"batch_size", 8},
                    {"param_mean", -3.5},
                    {"param_precision", "inf"},
                    {"reward_precision", "inf"},
                    {"num_observations", 2}};
  const json counts = {{"trials", 0}, {"dispatched", 0}, {"succeeded", 0}, {"failed", 0}, {"reports", 0}};
  bso::JobSpec spec = test::synthetic_spec("synthetic-j");
  const json document = {{"job_id", "j"},
                         {"stage", "MAB"},
                         {"spec", spec.to_json()},
                         {"gpu", test::synthetic_gpu().to_json()},
                         {"min_cost", 12.5},
                         {"min_cost_batch_size", 8},
                         {"exp_default_batch_size", 8},
                         {"registered", "2026-01-01T00:00:00Z"},
                         {"counts", counts},
                         {"trials", json::array()},
                         {"trials_page", {{"limit", 100}, {"before", nullptr}, {"next_before", nullptr}}},
                         {"arms", {arm}},
                         {"newer_field", true}};
  const auto status = parse_job_status(document);
  ASSERT_TRUE(status) << status.error().message();
  EXPECT_EQ(status->stage, bso::Stage::kMab);
  EXPECT_EQ(status->min_cost, 12.5);
  ASSERT_EQ(status->arms.size(), 1u);
  EXPECT_EQ(status->arms[0].param_mean, -3.5);
  EXPECT_TRUE(std::isinf(status->arms[0].param_precision));
  EXPECT_EQ(status->document, document);  // fields a newer server adds are kept
}

}  // namespace
}  // namespace joule::client
