// SPDX-License-Identifier: Apache-2.0
// Private parts of the service: the response helpers (Zeus's `{"message"}` errors and FastAPI's 422
// `{"detail": [...]}`), the transaction runner with idempotent replay, and the route handlers, split by area
// (batch_size_routes.cpp, pipeline_routes.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/core/json.hpp"
#include "joule/optimize/batch_size.hpp"
#include "joule/plan/live.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/server/service.hpp"

#include "server/lru_map.hpp"

namespace joule::server::detail {

/// Store document kinds. A job's trials are the items of its kJobKind document; kReportsKind documents exist
/// only in databases written before items (converted when their job is first read).
inline constexpr std::string_view kJobKind = "bso_job";
inline constexpr std::string_view kReportsKind = "bso_reports";
inline constexpr std::string_view kPipelineKind = "pipeline";
inline constexpr std::string_view kFrontierKind = "pipeline_frontier";
/// A Zeus pipeline-frequency job: the live scheduler's state (plan::LiveState::dump(); live_service.hpp).
inline constexpr std::string_view kLiveJobKind = "pfo_job";

Response json_response(int status, const nlohmann::json& body);
/// Zeus's error body: {"message": …}.
Response message_response(int status, std::string_view message);
/// FastAPI's 405 for a route that exists with another method: {"detail": "Method Not Allowed"}.
Response method_not_allowed();
/// FastAPI's 422 body for a library validation error "<field path>: <problem>" found in `source` ("body"
/// or "query"): {"detail": [{"loc": [source, field…], "msg": problem, "type": pydantic's type}]}.
Response validation_response(const Error& error, std::string_view source = "body");
/// FastAPI's 422 for a body that is not JSON (or nested too deep), or a validation 422 naming the field of a
/// number out of range.
Response json_decode_response(const JsonError& error);
/// FastAPI's 422 for a missing query parameter.
Response missing_query_response(std::string_view name);

/// @return the parsed body, or FastAPI's 422 for malformed JSON.
tl::expected<nlohmann::json, Response> parse_body(const Request& request);

/// @return 64-bit FNV-1a of `text` (stable across processes and builds: request fingerprints and ids are
/// stored).
uint64_t fnv1a(std::string_view text);
/// @return what identifies a request besides its id: method, path, query and a hash of the body.
std::string fingerprint(const Request& request);
/// @return a fresh 64-bit value from std::random_device.
uint64_t random_u64();
/// @return ns since the Unix epoch on `clock`.
int64_t unix_ns(const Clock& clock);

/// The most ids one registration draws before it gives up (batch-size jobs, pipelines, live jobs): a
/// generated id has at least 32 random bits, so each draw collides with probability ≈ ids stored / 2^32 and
/// 64 draws all collide only in a store that holds billions.
inline constexpr int kMaxIdDraws = 64;

/// Registers under a drawn id: calls `attempt(draw)` for draw 0, 1, … (the caller derives its candidate id
/// from `draw`), which returns the response, or nullopt when the id it tried is taken. @return the first
/// response, a store error from `attempt`, or after kMaxIdDraws taken ids Zeus's 503 "could not draw an
/// unused <what> in 64 attempts; retry".
template <class Attempt>
Result<Response> draw_unused_id(std::string_view what, Attempt&& attempt) {
  for (int draw = 0; draw < kMaxIdDraws; ++draw) {
    std::optional<Response> response = JOULE_TRY(attempt(draw));
    if (response) {
      return std::move(*response);
    }
  }
  return message_response(
      503, fmt::format("could not draw an unused {} in {} attempts; retry", what, kMaxIdDraws));
}

/// Parsed documents by key, reused while the stored text is exactly the same: parsing a job with a long
/// history costs far more than comparing its text, and the comparison makes reuse correct whoever (which
/// process) wrote the document. The least recently used entry goes when the cache is full.
template <class T>
class ParsedCache {
 public:
  explicit ParsedCache(size_t capacity) : entries_(capacity) {}

  /// @return a copy of the value parsed from `body` under `key`, if that is what the cache holds.
  std::optional<T> find(const std::string& key, std::string_view body) {
    std::lock_guard lock(mutex_);
    const Entry* found = entries_.find(key);
    if (found == nullptr || found->body != body) {
      return std::nullopt;
    }
    return found->value;
  }

  void put(const std::string& key, std::string body, T value) {
    std::lock_guard lock(mutex_);
    entries_.put(key, Entry{std::move(body), std::move(value)});
  }

  void erase(const std::string& key) {
    std::lock_guard lock(mutex_);
    entries_.erase(key);
  }

 private:
  struct Entry {
    std::string body;
    T value;
  };
  std::mutex mutex_;
  LruMap<std::string, Entry> entries_;
};

/// How many trials of one batch size succeeded, and the number of the last one: what identifies the list of
/// them (succeeded trials never change), so that a cached list can be checked against the job.
struct SucceededTrials {
  int64_t count = 0;
  int64_t last_trial_number = 0;
  bool operator==(const SucceededTrials&) const = default;
};

/// What the store holds for one batch-size job (kind kJobKind): the library's state without its trials (each
/// trial is an item of this document), when it was registered, how many reports it took, and its succeeded
/// trials per batch size.
struct JobDocument {
  std::optional<optimize::batch_size::JobState> state;  // always set; optional: the state has no default
  int64_t registered_unix_ns = 0;
  int64_t reports = 0;
  /// By batch size. Unset in documents that predate it: then the cache of succeeded trials is not used.
  std::optional<std::map<int64_t, SucceededTrials>> succeeded;

  std::string dump() const;
  /// Parses a version 2 document. @return kParse naming the job.
  static Result<JobDocument> parse(std::string_view key, const nlohmann::json& document);
};

/// The succeeded trials of each (job, batch size), oldest first, kept in memory: the MAB refit with
/// window_size 0 reads all of them at every trial end (to sum them exactly as numpy does), which from the
/// store would cost a row per past trial. An entry is used only if it matches the job's SucceededTrials, and
/// grows only after the transaction that added a trial committed, so it is never ahead of the store. Least
/// recently used entries go beyond `capacity`.
class SucceededCache {
 public:
  explicit SucceededCache(size_t capacity) : entries_(capacity) {}
  /// @return the trials if the entry of (job_id, batch_size) is exactly `expected`.
  std::optional<std::vector<optimize::batch_size::Trial>> find(const std::string& job_id, int64_t batch_size,
                                                               const SucceededTrials& expected);
  void put(const std::string& job_id, int64_t batch_size, SucceededTrials identity,
           std::vector<optimize::batch_size::Trial> trials);
  /// Appends `trial` if the entry is exactly `before`; otherwise drops the entry.
  void append(const std::string& job_id, int64_t batch_size, const SucceededTrials& before,
              const optimize::batch_size::Trial& trial);
  void erase_job(const std::string& job_id);

 private:
  struct Entry {
    SucceededTrials identity;
    std::vector<optimize::batch_size::Trial> trials;
  };
  std::mutex mutex_;
  LruMap<std::pair<std::string, int64_t>, Entry> entries_;
};

/// Parsed frontiers by profile token (an id drawn at every profile upload), least recently used dropped.
struct CachedFrontier {
  std::shared_ptr<const plan::PipelineDag> dag;
  Frontier<plan::FrequencyPlan> frontier;
  plan::PlanCost max_clock;
  int64_t cuts = 0;
  double planning_time_s = 0;
};

class FrontierCache {
 public:
  explicit FrontierCache(size_t capacity) : entries_(capacity) {}
  /// @return the frontier planned from profile `token`, or nullptr.
  std::shared_ptr<const CachedFrontier> find(const std::string& token);
  void put(const std::string& token, std::shared_ptr<const CachedFrontier> frontier);

 private:
  std::mutex mutex_;
  LruMap<std::string, std::shared_ptr<const CachedFrontier>> entries_;
};

/// Runs one computation per key at a time in this process: callers asking for a key being computed wait for
/// that computation instead of starting their own (planning a frontier can take seconds).
class SingleFlight {
 public:
  Result<std::shared_ptr<const CachedFrontier>> run(
      const std::string& key, const std::function<Result<std::shared_ptr<const CachedFrontier>>()>& compute);

 private:
  struct Flight {
    bool done = false;
    std::optional<Result<std::shared_ptr<const CachedFrontier>>> result;
  };
  std::mutex mutex_;
  std::condition_variable finished_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;
};

/// A request handler's outcome inside a transaction: a response (2xx commits, others roll back), or a store
/// error (which the store may retry, or which becomes 503/500).
using Work = std::function<Result<Response>(store::Transaction&)>;

}  // namespace joule::server::detail

namespace joule::server {

namespace detail {
class LiveService;
}

struct Service::Impl {
  Impl(store::Store& store_ref, const ServiceOptions& service_options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  store::Store& store;
  ServiceOptions options;
  const Clock& clock;
  detail::FrontierCache frontiers;
  detail::ParsedCache<detail::JobDocument> jobs;
  detail::SucceededCache succeeded;
  detail::SingleFlight planning;
  /// Zeus's pipeline frequency optimizer (live_service.hpp); made by the constructor.
  std::unique_ptr<detail::LiveService> live;

  /// Runs `work` in one transaction. A 2xx response is saved under the request's id (if any) and committed
  /// with the changes; any other response rolls back. Store errors become 503 (unavailable) or 500.
  Response transact(const Request& request, const detail::Work& work);
  /// The skeleton of every state-changing route: in one transaction (as transact()), `lock` reads and locks
  /// what the request changes; then, if this request id has a stored response, that response is returned
  /// (replayed; a different request under the same id gets 409) and `work` does not run; otherwise
  /// `work(transaction, locked)` applies the request. The replay check comes after the lock so that
  /// concurrent retries of one request id are serialised: the second waits for the first to commit and
  /// then finds its response, so two requests with the same id never both do the work.
  /// @param lock callable (store::Transaction&) -> Result<T>: a store error aborts (retried or 503/500).
  /// @param work callable (store::Transaction&, T&) -> Result<Response>.
  template <class Lock, class Apply>
  Response transact_locked(const Request& request, Lock&& lock, Apply&& work) {
    return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
      auto locked = JOULE_TRY(lock(transaction));
      auto replayed = replay(transaction, request);
      if (!replayed) {
        return tl::make_unexpected(replayed.error());
      }
      if (*replayed) {
        return std::move(**replayed);
      }
      return work(transaction, locked);
    });
  }
  /// Runs a read-only route's `work` in one transaction without its request id: nothing to replay or save,
  /// and any attempt may run it again.
  Response transact_read(const Request& request, const detail::Work& work);
  /// @return the stored response if this request id was seen (replayed), a 409 if it was used by a
  /// different request, or nullopt (apply the request). transact_locked() calls it after locking.
  Result<std::optional<Response>> replay(store::Transaction& transaction, const Request& request);

  // Zeus's batch-size optimizer (batch_size_routes.cpp).
  Response register_job(const Request& request);
  Response next_batch_size(const Request& request);
  Response report(const Request& request);
  Response end_trial(const Request& request);
  Response delete_job(const Request& request);
  Response job_status(const Request& request, const std::string& job_id);

  // The pipeline planner (pipeline_routes.cpp). `rest` is the path after "/pipelines/{id}".
  Response register_pipeline(const Request& request);
  Response pipeline_route(const Request& request, const std::string& pipeline_id, const std::string& rest);

  Response health(const Request& request);

  // The cluster autopilot (cluster_routes.cpp). `rest` is the path after "/cluster".
  Response cluster_route(const Request& request, const std::string& rest);

  /// Deletes a batch of stored responses older than options.response_ttl every so many saved ones.
  void prune_responses();
  std::atomic<uint64_t> saved_responses{0};
};

}  // namespace joule::server
