// SPDX-License-Identifier: Apache-2.0
// joule/loadgen/bench.hpp — the energy benchmark of an OpenAI-compatible endpoint (`joule infer bench`,
// docs/inference.md): a request trace sent open-loop by a pool of worker threads (one keep-alive connection
// each), the GPUs' energy measured over the run (EnergyMonitor), their power sampled (PowerSampler) to
// attribute energy over time to the requests in flight (measure::attribute_energy_over_time), and the run's
// summary: counts, tokens and latency percentiles.
//
//   auto plan = loadgen::plan_requests(trace, {.rate_scale = 2}).value();
//   auto run = loadgen::run_bench(gpus, clock, endpoint, "llama", plan, options).value();
//   auto summary = loadgen::summarize(run.requests).value();
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/http/connection.hpp"
#include "joule/loadgen/openai.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/request_energy.hpp"

namespace joule::loadgen {

/// The most prompt tokens one run sends in all: every prompt is built before the clock starts and held for
/// the run (about 5 bytes a token), so this bounds that memory (5 GB) whatever the trace.
inline constexpr int64_t kMaxRunPromptTokens = 1'000'000'000;

/// One request of a trace: when it arrives, s, and its sizes.
struct TraceRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

struct PlanOptions {
  double rate_scale = 1;             ///< the trace's rate multiplied by this (> 0)
  std::optional<double> duration_s;  ///< only the requests arriving in the first duration_s, s
};

/// @return the requests to send, in trace order: arrivals from the first one, divided by rate_scale, cut at
/// duration_s; max_tokens = the trace's output tokens. kOutOfRange if their prompts add up to more than
/// kMaxRunPromptTokens ("the requests to send ask for more than … prompt tokens in all, …").
Result<std::vector<RequestRecord>> plan_requests(std::span<const TraceRequest> trace,
                                                 const PlanOptions& options);

/// How a run's measured energy is shared among its requests (docs/inference.md).
enum class Attribution {
  /// By each interval's work: prompt tokens spread from sending to the first token, output tokens at their
  /// arrival, weighted by BenchOptions::weights (measure::attribute_energy_by_work()).
  kWork,
  /// Equally among the requests in flight at each instant (measure::attribute_energy_over_time()).
  kEqual,
  /// The server's own per-request figure, usage.energy.energy_j (joule's extension), where it gives one; the
  /// work rule's share where it does not. The idle energy is then what the measurement leaves.
  kServer,
};

/// @return "work", "equal" or "server".
std::string_view to_string(Attribution attribution);
/// @return the attribution called `name`, or kInvalidArgument listing them.
Result<Attribution> parse_attribution(std::string_view name);

struct BenchOptions {
  /// Requests in flight at most (worker threads, started as needed; a request arriving while every worker
  /// is busy waits, and is marked late).
  size_t max_concurrency = 256;
  /// The bounds of each completion request (the whole request, and the response's size).
  http::RequestLimits limits;
  /// What the synthetic prompts' tokens are: words (BPE tokenizers) or characters (byte-level ones).
  bool prompt_words = true;
  /// The names of the bounds, added to the failures that met them.
  LimitNames limit_names;
  /// How often the GPUs' power is sampled to attribute energy over time.
  std::chrono::milliseconds sampling_period{100};
  /// Ask for a stream of server-sent events (TTFT and TPOT measured here, tokens timed) or one JSON body.
  bool stream = true;
  Attribution attribution = Attribution::kWork;
  /// The relative cost of a prompt and an output token, for Attribution::kWork.
  measure::WorkWeights weights;
};

/// One GPU's energy over the run.
struct GpuEnergy {
  int index = 0;
  std::string name;
  double energy_j = 0;
  measure::EnergySource source = measure::EnergySource::kCounter;
};

/// What a run measured.
struct BenchRun {
  std::vector<RequestRecord> requests;  ///< the plan, with its times, answers and attributed energy
  size_t workers = 0;                   ///< worker threads started (the peak concurrency, or the first 16)
  double duration_s = 0;                ///< the energy window, s
  std::vector<GpuEnergy> gpus;
  double energy_j = 0;  ///< every GPU's energy over the run
  bool estimated = false;
  double attributed_energy_j = 0;  ///< the requests' shares
  /// Energy with no request in flight; with Attribution::kServer, what the server's figures leave of the
  /// measured energy (negative if they claim more than was measured).
  double idle_energy_j = 0;
  Attribution attribution = Attribution::kWork;
  /// The sum of the server's usage.energy.energy_j over the requests that gave one; nullopt if none did.
  std::optional<double> server_energy_j;
};

/// Sends `plan` to `endpoint` (POST /v1/completions, `model`), each request at its scheduled time on
/// `clock`, and measures `gpus` over the run. Every prompt is built before the clock starts. The requests'
/// failures are in their records, never an error here; a response is parsed by at most as many workers at
/// once as there are cores (a parsed body can take ~20 times its size). kInvalidArgument only for an
/// attribution the measurements make impossible (non-finite readings).
Result<BenchRun> run_bench(std::span<device::Gpu* const> gpus, Clock& clock, const Endpoint& endpoint,
                           const std::string& model, std::vector<RequestRecord> plan,
                           const BenchOptions& options);

/// The shares of the latency percentiles reported: p50, p90, p99.
inline constexpr double kPercentileShares[3] = {0.5, 0.9, 0.99};

/// The figures of a run's requests.
struct BenchSummary {
  int64_t ok = 0, http_errors = 0, timeouts = 0, connection_errors = 0, bad_responses = 0, late = 0;
  double max_start_delay_s = 0;  ///< the largest start − scheduled time
  std::string first_error;       ///< of the failed request that ended first; empty if none failed
  /// Tokens of the ok requests: the trace's prompts, and the server's prompt and completion counts.
  int64_t requested_prompt_tokens = 0, prompt_tokens = 0, output_tokens = 0;
  /// Nearest-rank percentiles (kPercentileShares) of the ok requests; nullopt without values.
  std::optional<double> latency_s[3], ttft_s[3], tpot_s[3];
  /// Ok requests streamed, and of those whose output tokens were counted (no usage in the stream).
  int64_t streamed = 0, tokens_counted = 0;
};

/// @return the summary of `requests` (kPending counts as a bad response). TTFT and TPOT percentiles are of
/// Completion::ttft_s and tpot_s (measured here when streamed, else the server's). kOutOfRange if a token
/// total would overflow (not with counts in range: checked all the same).
Result<BenchSummary> summarize(std::span<const RequestRecord> requests);

}  // namespace joule::loadgen
