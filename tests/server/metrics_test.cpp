// SPDX-License-Identifier: Apache-2.0
// The metrics of `joule serve` without sockets: route templates, request counting, and the epoch windows
// the service reports (once per applied report, never for replays or refused reports).
#include "joule/server/metrics.hpp"

#include <gtest/gtest.h>

#include "metrics/metrics_text.hpp"
#include "server/server_test_util.hpp"

namespace joule::server {
namespace {

using nlohmann::json;

TEST(ServerMetricsTest, RoutesAreTemplatesSoLabelValuesStayFew) {
  EXPECT_EQ(ServerMetrics::route_of("/jobs"), "/jobs");
  EXPECT_EQ(ServerMetrics::route_of("/jobs/batch_size"), "/jobs/batch_size");
  EXPECT_EQ(ServerMetrics::route_of("/jobs/mnist-1234abcd"), "/jobs/{id}");
  EXPECT_EQ(ServerMetrics::route_of("/jobs/a/b"), "other");
  EXPECT_EQ(ServerMetrics::route_of("/pipelines/p-1"), "/pipelines/{id}");
  EXPECT_EQ(ServerMetrics::route_of("/pipelines/p-1/"), "/pipelines/{id}");
  EXPECT_EQ(ServerMetrics::route_of("/pipelines/p-1/plan"), "/pipelines/{id}/plan");
  EXPECT_EQ(ServerMetrics::route_of("/pipelines/p-1/profile"), "/pipelines/{id}/profile");
  EXPECT_EQ(ServerMetrics::route_of("/pipelines/p-1/whatever"), "other");
  EXPECT_EQ(ServerMetrics::route_of("/metrics"), "/metrics");
  EXPECT_EQ(ServerMetrics::route_of("/random/../path"), "other");
  // Zeus's pipeline-frequency routes and joule's /job/{job_id}: their job ids never become label values.
  EXPECT_EQ(ServerMetrics::route_of("/register_job"), "/register_job");
  EXPECT_EQ(ServerMetrics::route_of("/info"), "/info");
  const std::string id = "2026-11-28-10-00-00+dp2+pp4+tp1+perseus+0f3c9a5e6b7d2e11";
  EXPECT_EQ(ServerMetrics::route_of("/register_rank/" + id), "/register_rank/{job_id}");
  EXPECT_EQ(ServerMetrics::route_of("/schedule/" + id), "/schedule/{job_id}");
  EXPECT_EQ(ServerMetrics::route_of("/result/" + id), "/result/{job_id}");
  EXPECT_EQ(ServerMetrics::route_of("/job/" + id), "/job/{job_id}");
  EXPECT_EQ(ServerMetrics::route_of("/schedule/"), "other");
  EXPECT_EQ(ServerMetrics::route_of("/schedule/a/b"), "other");
}

TEST(ServerMetricsTest, CountsRequestsReportsAndJobs) {
  ServerMetrics metrics;
  metrics.start_request();
  metrics.finish_request("POST", "/jobs", 201, false, 0.002);
  metrics.start_request();
  metrics.finish_request("POST", "/report", 200, false, 0.001);
  metrics.start_request();
  metrics.finish_request("POST", "/report", 200, true, 0.001);  // a replay: not a new report
  metrics.start_request();
  metrics.finish_request("POST", "/report", 422, false, 0.001);
  metrics.start_request();
  metrics.finish_request("GET", "/jobs/j-1", 404, false, 0.0001);
  metrics.start_request();
  metrics.finish_request("BREW", "/coffee", 404, false, 0.0001);
  metrics.start_request();
  metrics.finish_request("DELETE", "/jobs", 200, false, 0.001);
  metrics.start_request();
  metrics.finish_request("PATCH", "/trials", 200, false, 0.001);
  const auto parsed = test::parse_exposition(metrics.render());
  EXPECT_EQ(parsed.type.at("joule_server_requests_total"), "counter");
  EXPECT_EQ(parsed.type.at("joule_server_request_duration_seconds"), "histogram");
  EXPECT_EQ(parsed.value("joule_server_requests_total",
                         {{"route", "/report"}, {"method", "POST"}, {"status", "200"}}),
            2.0);
  EXPECT_EQ(parsed.value("joule_server_requests_total", {{"route", "/report"}, {"status", "422"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_server_requests_total", {{"route", "/jobs/{id}"}, {"status", "404"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_server_requests_total", {{"route", "other"}, {"method", "other"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_server_reports_accepted_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_server_jobs_registered_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_server_jobs_deleted_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_server_trials_ended_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_server_requests_in_flight"), 0.0);
  EXPECT_EQ(parsed.value("joule_server_request_duration_seconds_count", {{"route", "/report"}}), 3.0);
  EXPECT_EQ(
      parsed.value("joule_server_request_duration_seconds_bucket", {{"route", "/jobs"}, {"le", "0.001"}}),
      1.0);  // the DELETE
  EXPECT_EQ(
      parsed.value("joule_server_request_duration_seconds_bucket", {{"route", "/jobs"}, {"le", "0.0025"}}),
      2.0);
}

TEST(ServerMetricsTest, EpochsFromReportsFeedTheWindowHistograms) {
  auto metrics = std::make_shared<ServerMetrics>();
  ServiceOptions options;
  options.on_epoch_report = [metrics](const EpochReport& report) { metrics->observe_epoch(report); };
  Service service(std::shared_ptr<store::Store>(std::move(*store::open_store("memory:"))), options);
  const auto call = [&service](const std::string& method, const std::string& path, const json& body,
                               std::optional<std::string> id = {}) {
    Request request;
    request.method = method;
    request.path = path;
    request.body = body.dump();
    request.content_type = "application/json";
    request.request_id = std::move(id);
    return service.handle(request);
  };
  ASSERT_EQ(call("POST", "/jobs",
                 test::register_body(test::synthetic_spec("synthetic-metrics"), test::synthetic_gpu()))
                .status,
            201);
  Request next;
  next.method = "GET";
  next.path = "/jobs/batch_size";
  next.query = {{"job_id", "synthetic-metrics"}};
  const auto trial_json = json::parse(service.handle(next).body);
  const optimize::batch_size::TrialId trial{"synthetic-metrics", trial_json["batch_size"].get<int64_t>(),
                                            trial_json["trial_number"].get<int64_t>()};
  using test::SyntheticTraining;
  ASSERT_EQ(call("POST", "/report", SyntheticTraining::result(trial, 1).to_json(), "r1").status, 200);
  ASSERT_EQ(call("POST", "/report", SyntheticTraining::result(trial, 1).to_json(), "r1").status,
            200);  // replay
  ASSERT_EQ(call("POST", "/report", SyntheticTraining::result(trial, 1).to_json()).status,
            200);  // same epoch again
  ASSERT_EQ(call("POST", "/report", SyntheticTraining::result(trial, 3).to_json()).status,
            200);  // skipped epoch 2
  auto bad = SyntheticTraining::result(trial, 4);
  bad.energy_j = -1;
  ASSERT_EQ(call("POST", "/report", bad.to_json()).status, 422);

  const double epoch_s = SyntheticTraining::epoch_time_s(trial.batch_size, trial.trial_number);
  const auto parsed = test::parse_exposition(metrics->render());
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_count", {{"window", "epoch"}}), 3.0);
  EXPECT_NEAR(*parsed.value("joule_window_duration_seconds_sum", {{"window", "epoch"}}), 3 * epoch_s, 1e-9);
  EXPECT_NEAR(*parsed.value("joule_window_energy_joules_sum", {{"window", "epoch"}}),
              SyntheticTraining::result(trial, 3).energy_j, 1e-6);
}

}  // namespace
}  // namespace joule::server
