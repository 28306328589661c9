// SPDX-License-Identifier: Apache-2.0
// joule/client/client.hpp — a typed C++ client of `joule serve` (and of Zeus's batch-size optimizer server,
// for the routes Zeus has). Every call carries a request id (X-Request-Id) and is retried with the same id
// on transient failures (connection errors, 502/503/504), so a retry is never applied twice by joule's
// server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/client/pipeline_spec.hpp"
#include "joule/client/results.hpp"
#include "joule/core/error.hpp"
#include "joule/optimize/batch_size.hpp"

namespace joule::client {

/// The cap on an answer's body by default (ClientOptions::max_response_bytes): 64 MiB.
inline constexpr size_t kDefaultMaxResponseBytes = size_t{64} << 20;

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{3000};
  /// How long one attempt waits for the response (a frontier can take seconds to plan).
  std::chrono::milliseconds timeout{120000};
  /// Attempts per call; only transient failures are retried.
  int attempts = 8;
  std::chrono::milliseconds backoff{50};        ///< wait before the second attempt, doubled each time…
  std::chrono::milliseconds max_backoff{2000};  ///< … up to this
  /// The request id of every call (scripts that retry a whole command); unset: a fresh id per call.
  std::optional<std::string> request_id;
  /// The most an answer's body may hold, in bytes, decoded: a larger one is refused while reading it (the
  /// call fails with kIo, not retried). 64 MiB is far above any answer of joule serve (a page of 1000 trials
  /// is under 1 MB, a plan of 100,000 computations about 7 MB).
  size_t max_response_bytes = kDefaultMaxResponseBytes;
};

/// What `POST /jobs` answered.
struct RegisteredJob {
  optimize::batch_size::JobSpec spec;  ///< job_id set (generated if the request had none)
  optimize::batch_size::GpuConfig gpu;
  bool created = false;  ///< 201 (new) rather than 200 (already registered identically)
};

/// The HTTP outcome of a call that got an answer (for callers that need the status itself).
struct RawResponse {
  int status = 0;
  std::string body;
  bool replayed = false;  ///< the server returned the stored response of an earlier attempt
};

/// A client of one server, or of several servers on one database (tried in turn on connection failures).
/// Not thread-safe: calls on one Client are serialised by a mutex; use one Client per thread for concurrency.
class Client {
 public:
  /// @param urls "http://HOST:PORT", or several separated by commas. kInvalidArgument for a malformed URL.
  static Result<Client> connect(const std::string& urls, ClientOptions options = {});

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Zeus's batch-size optimizer routes.
  /// POST /jobs. Errors carry the server's message: kInvalidArgument (422), kState (409 config mismatch).
  Result<RegisteredJob> register_job(const optimize::batch_size::JobSpec& spec,
                                     const optimize::batch_size::GpuConfig& gpu);
  /// GET /jobs/batch_size?job_id=: the next trial.
  Result<optimize::batch_size::TrialId> next_batch_size(const std::string& job_id);
  /// POST /report: one epoch's cumulative result.
  Result<optimize::batch_size::ReportResponse> report(const optimize::batch_size::TrainingResult& result);
  /// PATCH /trials: ends a trial (a still running one becomes Failed).
  Result<void> end_trial(const optimize::batch_size::TrialId& trial);
  /// DELETE /jobs?job_id=.
  Result<void> delete_job(const std::string& job_id);
  /// GET /jobs/{id} (joule): the job's stage, counts, arms and its newest 100 trials with their report
  /// counts. kParse if the answer is not a job status (results.hpp).
  Result<JobStatus> job_status(const std::string& job_id);
  /// GET /jobs/{id}?limit=&before=: the same with the page of trials asked for (`limit` ≤ 1000 newest trials
  /// numbered below `before`; see JobStatus::trials_page).
  Result<JobStatus> job_status(const std::string& job_id, int64_t limit, std::optional<int64_t> before);
  /// GET /healthz. A store that does not answer is the server's 503 (kIo, after the retries).
  Result<Health> health();

  // The pipeline planner routes (joule).
  /// POST /pipelines: the registered spec (id set) and whether it was created.
  Result<std::pair<PipelineSpec, bool>> register_pipeline(const PipelineSpec& spec);
  /// PUT /pipelines/{id}/profile with CSV text (stage,instruction,frequency_mhz,time_s,energy_j).
  Result<UploadedProfile> upload_profile(const std::string& pipeline_id, const std::string& csv_text);
  /// GET /pipelines/{id}/frontier (kState while the pipeline has no profile).
  Result<PipelineFrontier> frontier(const std::string& pipeline_id);
  /// GET /pipelines/{id}/plan[?target_time_s=] (s): plan_to_json() plus context; no target: the current plan.
  Result<PipelinePlan> plan(const std::string& pipeline_id,
                            std::optional<double> target_time_s = std::nullopt);
  /// POST /pipelines/{id}/straggler: records the straggler's iteration time in s (nullopt clears it) and
  /// returns the plan that fits it.
  Result<PipelinePlan> report_straggler(const std::string& pipeline_id,
                                        std::optional<double> iteration_time_s);
  /// GET /pipelines/{id}.
  Result<PipelineStatus> pipeline_status(const std::string& pipeline_id);
  /// DELETE /pipelines/{id}.
  Result<void> delete_pipeline(const std::string& pipeline_id);

  /// Sends one request (with a request id and retries as every call) and returns whatever status came back.
  /// kIo if no server answered within the attempts, or the answer is larger than max_response_bytes.
  Result<RawResponse> call(const std::string& method, const std::string& path_and_query,
                           const std::string& body, const std::string& content_type = "application/json");

  /// @return the request id the last call used.
  const std::string& last_request_id() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  /// call() for JSON: @return (status, parsed body) of a 2xx answer (parsed with the depth-limited
  /// parse_json(), joule/core/json.hpp), else the error with the server's message as a printable excerpt.
  Result<std::pair<int, nlohmann::json>> json_call(const std::string& method, const std::string& path,
                                                   const nlohmann::json& body);
  std::unique_ptr<Impl> impl_;
};

/// @return `text` with URL reserved characters percent-encoded (for query values and path segments).
std::string url_encode(const std::string& text);

}  // namespace joule::client
