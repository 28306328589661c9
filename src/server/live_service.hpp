// SPDX-License-Identifier: Apache-2.0
// Zeus's pipeline-frequency optimizer inside `joule serve`: the routes (live_routes.cpp), how a job is laid
// out in the store, the requests that wait for other ranks without a thread, the planner worker and idle-job
// expiry (live_service.cpp).
//
// Store layout of job J (world size W): document (pfo_job, J) holds the bounded plan::LiveState; document
// (pfo_job_data, J) the plan::LiveData (samples, profile, plans), read only when a round completes, a plan
// is applied or a planned schedule is served (and then cached by its version). Items of (pfo_job, J): rank
// r's position (number r, group kRankGroup), the rank holding position p (number W + p, group
// kPositionGroup), and rank r's report of round n (number 2W + r, group n; replaced the next round). A
// request touches the state, one or two items and, once per round, all of the round's reports.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "joule/plan/live.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "server/lru_map.hpp"

namespace joule::server {

namespace detail {

/// Store kinds of a live job (the state document also holds version-1 documents of earlier joules: the
/// whole scheduler, converted to this layout when first read).
inline constexpr std::string_view kLiveDataKind = "pfo_job_data";
inline constexpr int64_t kRankGroup = -1;
inline constexpr int64_t kPositionGroup = -2;

class LiveService {
 public:
  explicit LiveService(Service::Impl& service);
  ~LiveService();
  LiveService(const LiveService&) = delete;
  LiveService& operator=(const LiveService&) = delete;

  /// Handles a live route (`route` is "/info", "/register_job", "/job/", "/register_rank/", "/schedule/" or
  /// "/result/"; `job_id` the rest of the path), answering through `sink` now or later.
  void handle(const Request& request, std::string_view route, const std::string& job_id,
              const std::shared_ptr<ResponseSink>& sink);
  /// Answers every waiting request 503, refuses new waits, stops the threads. Idempotent.
  void stop();
  /// Service::live_jobs().
  Result<std::vector<Service::LiveJobSummary>> jobs(size_t max_jobs);

  // What the routes use (live_routes.cpp).
  /// One GET /schedule that waits: what it waits on, and what it learnt of its rank so far.
  struct Waiter {
    std::string job_id;
    int rank = 0;
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<ResponseSink> sink;
    int world_size = 1;                              // of the job, once read
    std::atomic<bool> cancelled{false};              // the client went away
    std::optional<plan::LiveRankPosition> position;  // once the rank is known to be registered
    bool reported_known = false;
    std::optional<int64_t> reported_round;  // the round the rank had reported when it started waiting
    bool answered = false;                  // under LiveService::mutex_
  };
  // One member per route; handle() picks the route by path and method (anything else: 405).
  /// GET /info.
  Response info() const;
  /// POST /register_job.
  Response register_job(const Request& request);
  /// POST /register_rank/{job_id}.
  Response register_rank(const Request& request, const std::string& job_id);
  /// GET /schedule/{job_id}?rank=&wait_s=: answers through `sink` now, or once the round is ready.
  void schedule(const Request& request, const std::string& job_id, const std::shared_ptr<ResponseSink>& sink);
  /// POST /result/{job_id}.
  Response report_result(const Request& request, const std::string& job_id);
  /// GET /job/{job_id} (joule).
  Response get_job(const Request& request, const std::string& job_id);
  /// DELETE /job/{job_id} (joule).
  Response delete_job(const Request& request, const std::string& job_id);
  /// What POST /register_rank and /result do to a job's state, inside their transaction: a response refuses
  /// the request (nothing is saved), nullopt applies it.
  using StateChange = std::function<Result<std::optional<Response>>(store::Transaction&, plan::LiveState&)>;
  /// The skeleton of the routes that change a job: in one transaction, locks the job's state, replays the
  /// request id's stored response or runs `apply` (404 for an unknown job); an applied change is saved with
  /// the job's idle clock reset, answered 200 null, and wakes the job's waiting requests.
  Response change_job(const Request& request, const std::string& job_id, const StateChange& apply);
  /// Looks at `state` (read in `transaction`; nullopt: no such job) for waiting request `waiter`: an answer,
  /// or nullopt to wait on. `final`: the wait is over, answer whatever the state. A store error is put in
  /// `error` (and nullopt returned).
  std::optional<Response> examine(store::Transaction& transaction, const std::string& job_id,
                                  const std::optional<plan::LiveState>& state, Waiter& waiter, bool final,
                                  std::string* error);
  /// Parks a request that must wait: answered by the waiter thread when its job changes or its time is up.
  void wait_for_change(const std::shared_ptr<Waiter>& waiter);

  // The store layout (live_service.cpp).
  Result<std::optional<plan::LiveState>> load_state(store::Transaction& transaction,
                                                    const std::string& job_id);
  Result<void> save_state(store::Transaction& transaction, const std::string& job_id,
                          const plan::LiveState& state);
  Result<std::shared_ptr<const plan::LiveData>> load_data(store::Transaction& transaction,
                                                          const std::string& job_id,
                                                          const plan::LiveState& state);
  Result<void> save_data(store::Transaction& transaction, const std::string& job_id,
                         const plan::LiveData& data);
  Result<std::optional<plan::LiveRankPosition>> load_rank(store::Transaction& transaction,
                                                          const std::string& job_id,
                                                          const plan::LiveState& state, int rank);
  Result<std::optional<int>> position_holder(store::Transaction& transaction, const std::string& job_id,
                                             const plan::LiveState& state, int position);
  Result<void> save_rank(store::Transaction& transaction, const std::string& job_id,
                         const plan::LiveState& state, const plan::LiveRankPosition& rank);
  /// @return the round rank `rank` last reported, if any.
  Result<std::optional<int64_t>> reported_round(store::Transaction& transaction, const std::string& job_id,
                                                const plan::LiveState& state, int rank);
  Result<void> save_report(store::Transaction& transaction, const std::string& job_id,
                           const plan::LiveState& state, const plan::LiveReport& report);
  Result<std::vector<plan::LiveReport>> load_reports(store::Transaction& transaction,
                                                     const std::string& job_id, const plan::LiveState& state);
  /// @return up to `limit` ranks that have not registered (or not reported this round, if `reports`), and
  /// how many there are.
  Result<std::pair<std::vector<int>, int>> missing(store::Transaction& transaction, const std::string& job_id,
                                                   const plan::LiveState& state, bool reports, size_t limit);
  Result<bool> erase_job(store::Transaction& transaction, const std::string& job_id);

  /// Wakes the requests waiting on `job_id`, and plans it if it waits for a plan.
  void changed(const std::string& job_id, const plan::LiveState& state);
  int64_t now_unix_ns() const;

 private:
  void start_threads();
  void run_waiters();
  void run_planner();
  void evaluate(const std::string& job_id, const std::vector<std::shared_ptr<Waiter>>& waiters,
                std::vector<std::pair<std::shared_ptr<Waiter>, Response>>& answers);
  void plan_job(const std::string& job_id);
  void expire_idle_jobs();
  Result<std::shared_ptr<const plan::LivePlan>> plan_cached(const std::string& job_id,
                                                            const plan::LivePlanRequest& request);
  bool admit_registration(const std::string& peer, double& retry_after_s);

  Service::Impl& service_;
  const std::string owner_;  // this process's name in planning claims

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool started_ = false;
  std::thread waiter_thread_;
  std::thread planner_thread_;
  std::map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;  // by job
  size_t waiting_ = 0;
  std::set<std::string> dirty_;  // jobs changed here since the waiters last looked
  std::deque<std::string> planning_queue_;
  std::set<std::string> planning_;  // queued or being planned here
  std::chrono::steady_clock::time_point next_expiry_;

  // Parsed data by (job, data version); frontiers by job and request, bounded by bytes.
  std::mutex cache_mutex_;
  LruMap<std::pair<std::string, int64_t>, std::shared_ptr<const plan::LiveData>> data_cache_;
  LruMap<std::string, std::shared_ptr<const plan::LivePlan>> plan_cache_;

  // POST /register_job per client: a token bucket each, least recently used clients forgotten.
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point updated;
  };
  std::mutex rate_mutex_;
  LruMap<std::string, Bucket> registrations_;
};

}  // namespace detail
}  // namespace joule::server
