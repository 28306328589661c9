// SPDX-License-Identifier: Apache-2.0
// The metrics of `joule serve`: requests, latency, reports, jobs and epoch windows.
#include "joule/server/metrics.hpp"

#include <algorithm>
#include <array>
#include <set>

#include "joule/cluster/service.hpp"

namespace joule::server {

namespace {

// Epochs one report may stand for in the histograms: a client that skipped reports gets its average epoch
// counted this often at most.
constexpr int64_t kMaxEpochsPerReport = 1000;

const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return buckets;
}

prometheus::Gauge& plain_gauge(prometheus::Registry& registry, const std::string& name,
                               const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

metrics::WindowMetricsOptions epoch_options() {
  metrics::WindowMetricsOptions options;
  options.what = "training epoch reported to POST /report (window=\"epoch\")";
  return options;
}

}  // namespace

ServerMetrics::ServerMetrics(metrics::MetricsRegistry& registry) : ServerMetrics(registry, nullptr) {}

ServerMetrics::ServerMetrics() : ServerMetrics(std::make_unique<metrics::MetricsRegistry>()) {}

// The registry outlives the reference: it is on the heap, and the pointer is only moved into own_registry_.
ServerMetrics::ServerMetrics(std::unique_ptr<metrics::MetricsRegistry>&& own_registry)
    : ServerMetrics(*own_registry, std::move(own_registry)) {}

ServerMetrics::ServerMetrics(metrics::MetricsRegistry& registry,
                             std::unique_ptr<metrics::MetricsRegistry>&& own_registry)
    : own_registry_(std::move(own_registry)),
      registry_(registry),
      requests_(prometheus::BuildCounter()
                    .Name("joule_server_requests_total")
                    .Help("HTTP requests answered, by route template, method and status code")
                    .Register(registry_.registry())),
      latency_(prometheus::BuildHistogram()
                   .Name("joule_server_request_duration_seconds")
                   .Help("Time to answer an HTTP request in seconds, by route template")
                   .Register(registry_.registry())),
      in_flight_(prometheus::BuildGauge()
                     .Name("joule_server_requests_in_flight")
                     .Help("HTTP requests being answered now")
                     .Register(registry_.registry())
                     .Add({})),
      reports_accepted_(prometheus::BuildCounter()
                            .Name("joule_server_reports_accepted_total")
                            .Help("Training reports (POST /report) applied; replays of a request id excluded")
                            .Register(registry_.registry())
                            .Add({})),
      jobs_registered_(prometheus::BuildCounter()
                           .Name("joule_server_jobs_registered_total")
                           .Help("Batch-size jobs registered (POST /jobs answered 201)")
                           .Register(registry_.registry())
                           .Add({})),
      jobs_deleted_(prometheus::BuildCounter()
                        .Name("joule_server_jobs_deleted_total")
                        .Help("Batch-size jobs deleted (DELETE /jobs answered 200)")
                        .Register(registry_.registry())
                        .Add({})),
      trials_ended_(prometheus::BuildCounter()
                        .Name("joule_server_trials_ended_total")
                        .Help("Trials ended by their client (PATCH /trials answered 200)")
                        .Register(registry_.registry())
                        .Add({})),
      epochs_(registry_.registry(), epoch_options()),
      cluster_cap_(plain_gauge(registry_.registry(), "joule_cluster_power_cap_watts",
                               "The cluster autopilot's power cap in the latest decision, W")),
      cluster_allocated_(
          plain_gauge(registry_.registry(), "joule_cluster_allocated_watts",
                      "Sum of the power limits of every GPU on a live node (running or paused), W")),
      cluster_reserved_(plain_gauge(registry_.registry(), "joule_cluster_reserved_watts",
                                    "Silent nodes' GPUs counted at their highest limit, W")),
      cluster_paused_(plain_gauge(registry_.registry(), "joule_cluster_paused_watts",
                                  "Deferred jobs' paused GPUs at their lowest limits, W")),
      cluster_version_(plain_gauge(registry_.registry(), "joule_cluster_decision_version",
                                   "Version of the latest cluster decision")),
      cluster_silent_nodes_(plain_gauge(registry_.registry(), "joule_cluster_silent_nodes",
                                        "Nodes not heard from within the node timeout")),
      cluster_unanswered_nodes_(plain_gauge(registry_.registry(), "joule_cluster_unanswered_nodes",
                                            "Nodes whose daemon did not answer the last enforcement round")),
      cluster_replans_(prometheus::BuildCounter()
                           .Name("joule_cluster_replans_total")
                           .Help("Successful cluster re-plans (every change and every control period)")
                           .Register(registry_.registry())
                           .Add({})),
      cluster_replan_failures_(
          prometheus::BuildCounter()
              .Name("joule_cluster_replan_failures_total")
              .Help("Cluster re-plans the cap could not hold (the previous decision stood)")
              .Register(registry_.registry())
              .Add({})),
      cluster_replan_duration_(prometheus::BuildHistogram()
                                   .Name("joule_cluster_replan_duration_seconds")
                                   .Help("Time of one cluster change: re-plan and store commit, enforcement "
                                         "excluded, s")
                                   .Register(registry_.registry())
                                   .Add({}, latency_buckets())),
      cluster_job_limits_(prometheus::BuildGauge()
                              .Name("joule_cluster_job_power_limit_watts")
                              .Help("Each cluster job's per-GPU power limit in the latest decision, W")
                              .Register(registry_.registry())),
      cluster_leader_(plain_gauge(registry_.registry(), "joule_cluster_leader",
                                  "1 while this replica leads the cluster autopilot, 0 while it follows")),
      cluster_leader_epoch_(plain_gauge(registry_.registry(), "joule_cluster_leader_epoch",
                                        "The cluster lease's epoch as this replica last saw it (+1 per new "
                                        "leader)")) {}

void ServerMetrics::observe_cluster_leader(const cluster::Leadership& leadership) {
  cluster_leader_.Set(leadership.leading ? 1 : 0);
  cluster_leader_epoch_.Set(static_cast<double>(leadership.epoch));
}

void ServerMetrics::observe_cluster(const cluster::ClusterDecision* decision,
                                    const cluster::ReplanStats& stats) {
  if (decision == nullptr) {
    cluster_replan_failures_.Increment();
    return;
  }
  cluster_replans_.Increment();
  cluster_replan_duration_.Observe(std::max(stats.last_replan_s, 0.0));
  cluster_cap_.Set(decision->cap_w);
  cluster_allocated_.Set(decision->allocated_w);
  cluster_reserved_.Set(decision->reserved_w);
  cluster_paused_.Set(decision->paused_w);
  cluster_version_.Set(static_cast<double>(decision->version));
  cluster_silent_nodes_.Set(static_cast<double>(decision->silent_nodes.size()));
  cluster_unanswered_nodes_.Set(static_cast<double>(stats.unanswered_nodes.size()));
  std::lock_guard lock(cluster_mutex_);
  std::set<std::string> present;
  for (const auto& job : decision->jobs) {
    present.insert(job.id);
    auto& gauge = cluster_job_gauges_[job.id];
    if (gauge == nullptr) {
      gauge = &cluster_job_limits_.Add({{"job", job.id}});
    }
    gauge->Set(job.power_limit_w);
  }
  for (auto it = cluster_job_gauges_.begin(); it != cluster_job_gauges_.end();) {
    if (present.contains(it->first)) {
      ++it;
    } else {
      cluster_job_limits_.Remove(it->second);
      it = cluster_job_gauges_.erase(it);
    }
  }
}

std::string ServerMetrics::route_of(std::string_view path) {
  static constexpr std::array<std::string_view, 10> kExact = {
      "/",       "/healthz", "/metrics",   "/jobs", "/jobs/batch_size",
      "/report", "/trials",  "/pipelines", "/info", "/register_job"};
  if (std::find(kExact.begin(), kExact.end(), path) != kExact.end()) {
    return std::string(path);
  }
  if (path.starts_with("/jobs/") && path.find('/', 6) == std::string_view::npos) {
    return "/jobs/{id}";
  }
  // Zeus's pipeline-frequency routes, and joule's /job/{job_id}.
  for (const std::string_view route : {"/register_rank/", "/schedule/", "/result/", "/job/"}) {
    if (path.starts_with(route) && path.size() > route.size() &&
        path.find('/', route.size()) == std::string_view::npos) {
      return std::string(route) + "{job_id}";
    }
  }
  // The cluster autopilot's routes.
  if (path.starts_with("/cluster/")) {
    static constexpr std::array<std::string_view, 5> kCluster = {
        "/cluster/jobs", "/cluster/cap", "/cluster/forecast", "/cluster/decision", "/cluster/leader"};
    if (std::find(kCluster.begin(), kCluster.end(), path) != kCluster.end()) {
      return std::string(path);
    }
    if (path.starts_with("/cluster/jobs/")) {
      const std::string_view id = path.substr(14);
      if (!id.empty() && id.find('/') == std::string_view::npos) {
        return "/cluster/jobs/{id}";
      }
      if (id.ends_with("/progress") && id.find('/') == id.size() - 9 && id.size() > 9) {
        return "/cluster/jobs/{id}/progress";
      }
    }
    if (path.starts_with("/cluster/nodes/") && path.ends_with("/heard")) {
      return "/cluster/nodes/{node}/heard";
    }
    return "other";
  }
  if (path.starts_with("/pipelines/")) {
    const std::string_view rest = path.substr(11);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || rest.substr(slash) == "/") {
      return "/pipelines/{id}";
    }
    static constexpr std::array<std::string_view, 4> kSub = {"/profile", "/frontier", "/plan", "/straggler"};
    const std::string_view sub = rest.substr(slash);
    if (std::find(kSub.begin(), kSub.end(), sub) != kSub.end()) {
      return "/pipelines/{id}" + std::string(sub);
    }
  }
  return "other";
}

void ServerMetrics::start_request() {
  in_flight_.Increment();
}

void ServerMetrics::finish_request(std::string_view method, std::string_view path, int status, bool replayed,
                                   double duration_s) {
  in_flight_.Decrement();
  const std::string route = route_of(path);
  // Methods outside HTTP's usual set are folded, like unknown paths, to keep label values few.
  static constexpr std::array<std::string_view, 6> kMethods = {"GET",   "POST",   "PUT",
                                                               "PATCH", "DELETE", "HEAD"};
  const std::string method_label =
      std::find(kMethods.begin(), kMethods.end(), method) != kMethods.end() ? std::string(method) : "other";
  requests_.Add({{"route", route}, {"method", method_label}, {"status", std::to_string(status)}}).Increment();
  latency_.Add({{"route", route}}, latency_buckets()).Observe(std::max(duration_s, 0.0));
  if (replayed) {
    return;
  }
  if (route == "/report" && method == "POST" && status == 200) {
    reports_accepted_.Increment();
  } else if (route == "/jobs" && method == "POST" && status == 201) {
    jobs_registered_.Increment();
  } else if (route == "/jobs" && method == "DELETE" && status == 200) {
    jobs_deleted_.Increment();
  } else if (route == "/trials" && method == "PATCH" && status == 200) {
    trials_ended_.Increment();
  }
}

void ServerMetrics::observe_epoch(const EpochReport& report) {
  if (report.epochs < 1) {
    return;
  }
  const int64_t epochs = std::min(report.epochs, kMaxEpochsPerReport);
  const auto n = static_cast<double>(report.epochs);
  for (int64_t i = 0; i < epochs; ++i) {
    epochs_.observe("epoch", report.time_s / n, report.energy_j / n);
  }
}

}  // namespace joule::server
