// SPDX-License-Identifier: Apache-2.0
// joule/server/service.hpp — the optimizer service without HTTP: requests in, responses out, every
// operation one store transaction. `joule serve` puts cpp-httplib in front of it (http_server.hpp); tests
// call handle() directly. The routes are Zeus's batch-size optimizer REST API (wire-compatible) plus the
// pipeline frequency planner's; docs/serve.md lists them with examples.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "joule/core/clock.hpp"
#include "joule/plan/live.hpp"
#include "joule/plan/planner.hpp"
#include "joule/store/store.hpp"

namespace joule::server {

/// The header carrying the client's request id (optional; Zeus's client sends none).
inline constexpr const char* kRequestIdHeader = "X-Request-Id";
/// The response header set to "true" when the response is the stored one of an earlier request with the
/// same id (the request was not applied again).
inline constexpr const char* kReplayedHeader = "X-Idempotent-Replay";

/// One request, independent of the transport.
struct Request {
  std::string method;                        ///< "GET", "POST", "PUT", "PATCH", "DELETE"
  std::string path;                          ///< decoded path without the query, e.g. "/jobs/batch_size"
  std::map<std::string, std::string> query;  ///< decoded query parameters (the last one of a repeated name)
  std::string body;
  std::string content_type;  ///< the Content-Type header, if any
  std::optional<std::string>
      request_id;  ///< X-Request-Id: a retried request with the same id is not re-applied
};

/// One response.
struct Response {
  int status = 200;
  std::string body;  ///< JSON text unless content_type says otherwise
  std::string content_type = "application/json";
  bool replayed = false;  ///< the stored response of an earlier request with the same request id
};

/// One training epoch (or several, if the client skipped reports) learnt from a POST /report: the
/// difference between a trial's cumulative time and energy and those of its previous report.
struct EpochReport {
  std::string job_id;
  int64_t epochs = 1;   ///< epochs the difference covers (≥ 1)
  double time_s = 0;    ///< training time of those epochs, s
  double energy_j = 0;  ///< training energy of those epochs, J
};

/// Limits and knobs of the service.
struct ServiceOptions {
  /// The clock that timestamps trials (its wall-clock time). nullptr: SteadyClock::instance().
  const Clock* clock = nullptr;
  /// Largest pipeline accepted by the planner routes, in computations (2 × stages × microbatches): the
  /// frontier's size and planning time grow with it.
  int64_t max_pipeline_computations = 1 << 16;
  /// Largest (iteration time with every computation at its slowest profiled row) / unit_time_s the planner
  /// accepts (plan::PlannerOptions::max_planning_units): its work grows with the number of time units, so a
  /// tiny unit or one absurdly slow row would plan for hours.
  double max_planning_units = plan::kDefaultMaxPlanningUnits;
  /// Parsed frontiers kept in memory (each pipeline's, keyed by its profile upload), so that plan requests
  /// do not re-read and re-parse the stored frontier.
  size_t frontier_cache_entries = 16;
  /// Parsed batch-size job states kept in memory, reused while their stored text is unchanged.
  size_t job_cache_entries = 1024;
  /// Trials of one job handed out and not ended at once; GET /jobs/batch_size answers 409 beyond it (a
  /// client that asks without ever reporting cannot grow a job without bound).
  int64_t max_open_trials = 1024;
  /// How long the response of a request with an X-Request-Id is kept to answer its retries; older ones are
  /// deleted a batch at a time as requests come in (0: kept forever, and the database grows with every
  /// request).
  std::chrono::seconds response_ttl{24 * 3600};
  /// Called once per applied (committed, not replayed) report that advances its trial's epoch, after the
  /// commit, on the request's thread (e.g. ServerMetrics::observe_epoch). Must not throw.
  std::function<void(const EpochReport&)> on_epoch_report;

  // Zeus's pipeline frequency optimizer routes (/register_job, /register_rank, /schedule, /result).
  /// The live scheduler's knobs for every job.
  plan::LiveOptions live;
  /// Microbatches per iteration for jobs that do not say (Zeus's JobInfo has no such field); 0: a job must
  /// send `num_microbatches`.
  int live_default_microbatches = 0;
  /// A measured profile (canonical CSV) every job starts from instead of profiling; nullopt: profile each.
  std::optional<std::string> live_profile_csv;
  /// How long GET /schedule waits for the other ranks (to register, or to report the round) before 409.
  std::chrono::milliseconds live_schedule_wait{std::chrono::minutes(10)};
  /// Ranks that may wait in GET /schedule at once, across jobs: each waits on a request thread, so this
  /// must stay below the server's threads (joule serve sets threads − 1). Also the largest world_size.
  int live_max_waiting = 15;
};

/// The optimizer service: Zeus's batch-size optimizer routes, operator routes and the pipeline planner
/// routes over a store.
///
/// Every state-changing request is one store transaction: it locks the documents it reads (the job or
/// pipeline), applies the change, stores the response under the request id if the client sent one, and
/// commits; the response is returned only after the commit (durability). A request whose id already has
/// a stored response gets that response back unchanged and changes nothing (idempotent retries); the same
/// id with a different request is refused with 409. Errors roll the transaction back, so a refused request
/// never changes state. Thread-safe: handle() may run on many threads at once, and several services (in
/// several processes) may share one database.
class Service {
 public:
  explicit Service(std::shared_ptr<store::Store> store, const ServiceOptions& options = {});
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  /// Routes and handles one request. Never throws: bad input gives a 4xx with a message, store failures
  /// 503, unexpected exceptions 500 (logged).
  Response handle(const Request& request);

  store::Store& store() { return *store_; }

  /// The routes' implementation (opaque outside src/server/).
  struct Impl;

 private:
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace joule::server
