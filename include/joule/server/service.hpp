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
#include <utility>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/plan/live.hpp"
#include "joule/plan/planner.hpp"
#include "joule/probe/card.hpp"
#include "joule/store/store.hpp"

namespace joule::cluster {
class ClusterService;  // joule/cluster/service.hpp
}

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
      request_id;         ///< X-Request-Id: a retried request with the same id is not re-applied
  std::string peer = {};  ///< the client's address ("" if unknown): what per-client limits count by
};

/// One response.
struct Response {
  int status = 200;
  std::string body;  ///< JSON text unless content_type says otherwise
  std::string content_type = "application/json";
  bool replayed = false;  ///< the stored response of an earlier request with the same request id
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra headers, e.g. Retry-After
};

/// Where an answer given later goes: a transport's handle on one waiting request (the long-polling
/// GET /schedule). Implementations must be thread-safe.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  /// Delivers the answer; only the first call counts. Called from any thread; must not block.
  virtual void respond(Response response) = 0;
  /// Calls `callback` once if the client goes away before the answer (at once, on this thread, if it
  /// already has). The callback may run on any thread and must not block.
  virtual void on_cancel(std::function<void()> callback) = 0;
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
  /// The bounds of one live job (clocks per rank, ranks, computations, stored data, planning work).
  plan::LiveLimits live_limits;
  /// Microbatches per iteration for jobs that do not say (Zeus's JobInfo has no such field); 0: a job must
  /// send `num_microbatches`.
  int live_default_microbatches = 0;
  /// A measured profile (canonical CSV) every job starts from instead of profiling; nullopt: profile each.
  std::optional<std::string> live_profile_csv;
  /// A frontier card of the stage GPUs every profiled job starts from (plan::LiveState::use_card()) unless
  /// its registration sends its own (`card`); nullopt: none. `live_card_source` names it in logs.
  std::optional<probe::Card> live_card;
  std::string live_card_source;
  /// How long GET /schedule waits for the other ranks (to register, report the round, or the plan) before
  /// 409. A waiting request holds its connection, never a thread.
  std::chrono::milliseconds live_schedule_wait{std::chrono::minutes(10)};
  /// Requests that may wait in GET /schedule at once across jobs (503 beyond it); one job's waits are also
  /// bounded by twice its world size.
  int live_max_waiting = 65'536;
  /// The largest body of POST /result/{job_id}; a job whose ranks' results could exceed it is refused at
  /// registration (422 naming num_microbatches). The transport applies it to the route (HttpServer).
  size_t live_max_result_bytes = size_t{1} << 20;
  /// A job no rank wrote to (registered, reported) for this long is deleted, with its ranks' records; 0:
  /// jobs stay until DELETE /job/{job_id}. Like Zeus's max_job_idle_time.
  std::chrono::seconds live_max_job_idle{7 * 24 * 3600};
  /// How often idle jobs are looked for (Zeus's cleanup period).
  std::chrono::milliseconds live_expiry_period{60'000};
  /// POST /register_job per client address per minute (a burst of as many, refilled evenly; 429 beyond);
  /// 0: no limit.
  int live_registrations_per_minute = 60;
  /// Bytes of planned frontiers kept in memory for straggler re-targeting (least recently used dropped; a
  /// frontier larger than this is planned again when needed).
  size_t live_plan_cache_bytes = size_t{256} << 20;
  /// How often waiting requests re-read their jobs for changes made by other processes on the database
  /// (changes made here wake them at once).
  std::chrono::milliseconds live_poll_interval{200};
  /// A job waiting for a plan that a process claimed this long ago is planned again by another process
  /// (the claimant died): longer than any planning the limits allow (LiveLimits::max_planning_work plans a
  /// GPT-3-sized pipeline in seconds).
  std::chrono::seconds live_planning_lease{60};

  // The cluster autopilot (docs/cluster.md, "Serving the controller").
  /// Serves /cluster/… over this service (jobs, cap, forecast, decision); nullptr: those routes answer
  /// 404 saying the autopilot is off. It keeps its own state in its store (usually this service's).
  std::shared_ptr<cluster::ClusterService> cluster;
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
  /// 503, unexpected exceptions 500 (logged). A request that waits (GET /schedule) blocks the calling
  /// thread until it is answered; transports use handle_async() instead.
  Response handle(const Request& request);
  /// The same, answering through `sink`: at once, on this thread, or — for a request that waits
  /// (GET /schedule) — later, from the service's own thread, holding no thread of the caller meanwhile.
  /// A sink whose client goes away stops the wait.
  void handle_async(const Request& request, const std::shared_ptr<ResponseSink>& sink);
  /// Stops the service's background work (planning, waits, expiry): every waiting request is answered 503
  /// now, and later ones at once. For a transport about to stop. Idempotent; the destructor calls it.
  void stop();

  /// One live (pipeline-frequency) job as /metrics shows it.
  struct LiveJobSummary {
    std::string job_id;
    std::string phase;
    int64_t round = 0;
    int registered = 0;
    int world_size = 0;
    std::optional<double> target_time_s;     ///< the iteration time the pipelines are planned for
    std::optional<double> predicted_saving;  ///< 1 − planned energy / every computation at the max clock
  };
  /// @return up to `max_jobs` live jobs (the newest ids), read from the store. Errors: the store's.
  Result<std::vector<LiveJobSummary>> live_jobs(size_t max_jobs);

  store::Store& store() { return *store_; }

  /// The routes' implementation (opaque outside src/server/).
  struct Impl;

 private:
  Response handle_now(const Request& request);  // every route that answers at once

  std::shared_ptr<store::Store> store_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace joule::server
