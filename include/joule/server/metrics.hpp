// SPDX-License-Identifier: Apache-2.0
// joule/server/metrics.hpp — the Prometheus metrics of `joule serve` (GET /metrics on its own listener;
// docs/metrics.md).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "joule/metrics/gpu_metrics.hpp"
#include "joule/server/service.hpp"

namespace joule::cluster {
struct ClusterDecision;  // joule/cluster/controller.hpp
struct ReplanStats;      // joule/cluster/service.hpp
struct Leadership;       // joule/cluster/service.hpp
}  // namespace joule::cluster

namespace joule::server {

/// What `joule serve` exports:
///
/// | metric | type | labels |
/// |---|---|---|
/// | `joule_server_requests_total` | counter | route, method, status |
/// | `joule_server_request_duration_seconds` | histogram | route |
/// | `joule_server_requests_in_flight` | gauge | – |
/// | `joule_server_reports_accepted_total` | counter | – |
/// | `joule_server_jobs_registered_total`, `joule_server_jobs_deleted_total` | counter | – |
/// | `joule_server_trials_ended_total` | counter | – |
/// | `joule_window_duration_seconds`, `joule_window_energy_joules` | histogram | window="epoch" |
/// | `joule_pfo_jobs` | gauge | – |
/// | `joule_pfo_job_phase` | gauge (1) | job_id, phase |
/// | `joule_pfo_job_round`, `joule_pfo_job_ranks_registered` | gauge | job_id |
/// | `joule_pfo_job_target_time_seconds`, `joule_pfo_job_predicted_saving_ratio` | gauge | job_id |
/// | `joule_cluster_power_cap_watts`, `joule_cluster_allocated_watts`, `joule_cluster_reserved_watts`,
/// `joule_cluster_paused_watts` | gauge | – | | `joule_cluster_job_power_limit_watts` | gauge | job | |
/// `joule_cluster_decision_version`, `joule_cluster_silent_nodes`, `joule_cluster_unanswered_nodes` | gauge |
/// – | | `joule_cluster_replans_total`, `joule_cluster_replan_failures_total` | counter | – | |
/// `joule_cluster_replan_duration_seconds` | histogram | – | | `joule_cluster_leader`,
/// `joule_cluster_leader_epoch` | gauge | – |
///
/// The joule_cluster series exist once the cluster autopilot re-planned (observe_cluster()); a job's
/// series goes when the job does.
/// The joule_pfo_job series are read from the store at each scrape (HttpServer adds them; up to 1000 jobs,
/// the newest), so every replica on a database shows every job. A request whose client went away before
/// its answer (a waiting GET /schedule) is counted with status 499.
/// Routes are templates ("/jobs/{id}", "/pipelines/{id}/plan"), never raw paths, so that the label values
/// stay few. Replayed requests (an X-Request-Id seen before) count as requests, not as new reports or jobs.
/// Thread-safe.
class ServerMetrics {
 public:
  /// Registers the server's families in `registry` (which must outlive this object), beside whatever else
  /// it renders (GPU metrics, the daemon's): one registry per /metrics endpoint.
  explicit ServerMetrics(metrics::MetricsRegistry& registry);
  /// As above, in a registry of its own.
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  /// @return the registry the families are in, to add more metrics or collectors to.
  metrics::MetricsRegistry& registry() { return registry_; }

  /// Counts a request that starts (in flight until finish_request()).
  void start_request();
  /// Records one answered request. @param path the request path (mapped to its route template).
  void finish_request(std::string_view method, std::string_view path, int status, bool replayed,
                      double duration_s);
  /// Observes the epochs of one report (each of `report.epochs` epochs gets the average figures).
  void observe_epoch(const EpochReport& report);
  /// Records one re-plan of the cluster autopilot (ClusterServiceOptions::on_replan): the decision's
  /// figures after a successful one, a failure after one the cap could not hold (`decision` nullptr).
  void observe_cluster(const cluster::ClusterDecision* decision, const cluster::ReplanStats& stats);
  /// Records who leads after a lease round (ClusterServiceOptions::on_leadership): joule_cluster_leader 1 on
  /// the leader, 0 on a follower; joule_cluster_leader_epoch the lease's epoch as this replica saw it.
  void observe_cluster_leader(const cluster::Leadership& leadership);

  /// @return the text exposition of everything.
  std::string render() const { return registry_.render(); }

  /// @return the route template of `path`: "/jobs/{id}", "/pipelines/{id}/profile", … or "other".
  static std::string route_of(std::string_view path);

 private:
  explicit ServerMetrics(std::unique_ptr<metrics::MetricsRegistry>&& own_registry);
  ServerMetrics(metrics::MetricsRegistry& registry, std::unique_ptr<metrics::MetricsRegistry>&& own_registry);

  std::unique_ptr<metrics::MetricsRegistry> own_registry_;  // the default constructor's
  metrics::MetricsRegistry& registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Gauge& in_flight_;
  prometheus::Counter& reports_accepted_;
  prometheus::Counter& jobs_registered_;
  prometheus::Counter& jobs_deleted_;
  prometheus::Counter& trials_ended_;
  metrics::WindowMetrics epochs_;

  // The cluster autopilot's series (observe_cluster()).
  prometheus::Gauge& cluster_cap_;
  prometheus::Gauge& cluster_allocated_;
  prometheus::Gauge& cluster_reserved_;
  prometheus::Gauge& cluster_paused_;
  prometheus::Gauge& cluster_version_;
  prometheus::Gauge& cluster_silent_nodes_;
  prometheus::Gauge& cluster_unanswered_nodes_;
  prometheus::Counter& cluster_replans_;
  prometheus::Counter& cluster_replan_failures_;
  prometheus::Histogram& cluster_replan_duration_;
  prometheus::Family<prometheus::Gauge>& cluster_job_limits_;
  prometheus::Gauge& cluster_leader_;
  prometheus::Gauge& cluster_leader_epoch_;
  std::mutex cluster_mutex_;                                      // guards cluster_job_gauges_
  std::map<std::string, prometheus::Gauge*> cluster_job_gauges_;  // job id → its series
};

}  // namespace joule::server
