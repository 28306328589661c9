// SPDX-License-Identifier: Apache-2.0
// `joule infer bench`: sends a request trace open-loop to an OpenAI-compatible /v1/completions endpoint,
// measures the selected GPUs' energy over the run (EnergyMonitor), samples their power (PowerSampler) to
// attribute energy over time to the requests in flight (measure::attribute_energy_over_time), and reports
// J/request, J/output token, throughput and latency percentiles (docs/inference.md).
#include "infer_bench.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/json.hpp"
#include "joule/core/numeric.hpp"
#include "joule/core/strings.hpp"
#include "joule/http/connection.hpp"
#include "joule/http/errors.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/power_sampler.hpp"
#include "joule/measure/request_energy.hpp"
#include "joule/metrics/inference_metrics.hpp"
#include "joule/metrics/registry.hpp"
#include "joule/sim/serving.hpp"

#include "usage.hpp"

namespace joule::cli {

namespace {
// A namespace of its own: in a unity build this file shares a translation unit with other commands.
namespace infer_bench {

constexpr auto kSamplingPeriod = std::chrono::milliseconds(100);
// The most tokens one response's usage may count (prompt or completion): far above any model's context, and
// low enough that no trace's sum can overflow (2^63 / 10^9 ≈ 9 · 10^9 requests).
constexpr int64_t kMaxUsageTokens = 1'000'000'000;
// The longest time a response's usage.energy may report (ttft_s, tpot_s): a day, far above any request's, so
// that a sum over a trace stays finite.
constexpr double kMaxServerSeconds = 86'400;
// The most prompt tokens one run sends in all: every prompt is built before the clock starts and held for
// the run (about 5 bytes a token), so this bounds that memory (5 GB) whatever the trace; a day of the
// synthetic traces at 10 requests/s asks for about 5 · 10^8.
constexpr int64_t kMaxRunPromptTokens = 1'000'000'000;
// The longest model id taken from GET /v1/models (Hugging Face's repository ids are at most 96 characters).
constexpr size_t kMaxModelIdBytes = 256;
constexpr double kBytesPerMib = 1024.0 * 1024.0;

struct BenchFlags {
  std::string endpoint;
  std::string trace;
  std::string gpus;  // empty: all
  std::string model;
  double rate_scale = 1;
  std::optional<double> duration_s;
  int64_t max_concurrency = 256;
  double timeout_s = 300;  // the whole request: connecting, sending, the whole response
  double max_response_mib = static_cast<double>(http::kDefaultMaxResponseBytes) / kBytesPerMib;
  std::string prompt_unit = "word";
  Format format = Format::kText;
  std::string requests_out;
  std::string metrics_out;
};

struct Endpoint {
  std::string origin;  // http://host:port
  std::string host;
  int port = 0;
};

// Accepts http://HOST:PORT with an optional trailing slash, nothing else: the paths are the OpenAI API's.
Result<Endpoint> parse_endpoint(const std::string& text) {
  const auto refuse = [&](std::string_view why) {
    return fail(ErrorCode::kInvalidArgument,
                "--endpoint '{}': {}: expected http://HOST:PORT (e.g. http://127.0.0.1:8000)", text, why);
  };
  constexpr std::string_view kScheme = "http://";
  if (text.rfind(kScheme, 0) != 0) {
    return refuse(text.rfind("https://", 0) == 0 ? "https is not supported" : "not an http:// URL");
  }
  std::string rest = text.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') {
    rest.pop_back();
  }
  if (rest.find('/') != std::string::npos) {
    return refuse("a path is not allowed (the endpoint's /v1/… paths are used)");
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    return refuse("no port");
  }
  Endpoint endpoint;
  endpoint.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), endpoint.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || endpoint.port < 1 ||
      endpoint.port > 65535) {
    return refuse(fmt::format("'{}' is not a port", port));
  }
  if (endpoint.host.empty() || endpoint.host.find_first_of("@?#") != std::string::npos) {
    return refuse("no host");
  }
  endpoint.origin = fmt::format("http://{}:{}", endpoint.host, endpoint.port);
  return endpoint;
}

// The bounds of one request to the endpoint: --timeout-s for the whole of it, --max-response-mib.
http::RequestLimits request_limits(const BenchFlags& flags, double timeout_s) {
  http::RequestLimits limits;
  limits.timeout_s = timeout_s;
  limits.connect_timeout_s = std::min(timeout_s, 10.0);
  limits.max_response_bytes =
      static_cast<size_t>(std::max<long long>(1, std::llround(flags.max_response_mib * kBytesPerMib)));
  return limits;
}

// A failed request in words, with the flag that sets the bound it met.
std::string failure_text(const http::Failure& failure) {
  switch (failure.kind) {
    case http::Failure::Kind::kTooLarge:
      return fmt::format("{} (--max-response-mib)", failure.message);
    case http::Failure::Kind::kTimeout:
      return fmt::format("{} (--timeout-s)", failure.message);
    default:
      return failure.message;
  }
}

// The model the endpoint serves: --model, else the first id GET /v1/models lists. Checks the endpoint is
// reachable either way (before any device is read).
std::string resolve_model(const Endpoint& endpoint, const BenchFlags& flags) {
  http::Connection connection(endpoint.host, endpoint.port);
  const auto response = connection.get("/v1/models", {{"Accept", "application/json"}},
                                       request_limits(flags, std::min(flags.timeout_s, 10.0)));
  if (!response) {
    const http::Failure& failure = response.error();
    const bool unreachable =
        failure.kind != http::Failure::Kind::kTooLarge && failure.kind != http::Failure::Kind::kTimeout;
    throw Exception(
        ErrorCode::kIo,
        unreachable
            ? fmt::format("infer bench: cannot reach the endpoint {} (GET /v1/models: {})", endpoint.origin,
                          failure_text(failure))
            : fmt::format("infer bench: {} GET /v1/models: {}", endpoint.origin, failure_text(failure)));
  }
  if (!flags.model.empty()) {
    return flags.model;
  }
  if (response->status != 200) {
    throw Exception(ErrorCode::kIo,
                    fmt::format("infer bench: {} GET /v1/models: HTTP {}: {} (name the model with --model)",
                                endpoint.origin, response->status, http::server_error_text(response->body)));
  }
  const auto json = parse_json(response->body);
  const nlohmann::json* id = nullptr;
  if (json && json->is_object()) {
    const auto data = json->find("data");
    if (data != json->end() && data->is_array() && !data->empty() && (*data)[0].is_object()) {
      const auto found = (*data)[0].find("id");
      id = found != (*data)[0].end() && found->is_string() ? &*found : nullptr;
    }
  }
  if (id == nullptr) {
    throw Exception(
        ErrorCode::kParse,
        fmt::format("infer bench: {} GET /v1/models lists no model id (name the model with --model)",
                    endpoint.origin));
  }
  // The id is printed in the report: refuse one that would need escaping or flood it.
  const auto& name = id->get_ref<const std::string&>();
  if (name.empty() || name.size() > kMaxModelIdBytes || printable_excerpt(name, kMaxModelIdBytes) != name) {
    throw Exception(
        ErrorCode::kParse,
        fmt::format("infer bench: {} GET /v1/models: the first model id {} is not a printable name of "
                    "1 to {} bytes (name the model with --model)",
                    endpoint.origin, quoted_excerpt(name), kMaxModelIdBytes));
  }
  return name;
}

// A synthetic prompt of about `tokens` tokens, different for every request (so that a server's prefix cache
// does not make prefill free). "word": `tokens` words drawn from common English words that BPE tokenizers
// (GPT, Llama) encode as one token each, with their leading space; "char": `tokens` random lowercase letters,
// one token each for byte-level tokenizers (the example server). The server may add a BOS token.
std::string synthetic_prompt(int64_t tokens, size_t request, bool words) {
  static constexpr std::string_view kWords[] = {"the",  "of",  "and", "to", "in",   "is",
                                                "that", "for", "it",  "as", "with", "was",
                                                "on",   "be",  "at",  "by", "this", "from"};
  constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t state = 0x9E3779B97F4A7C15ULL * (request + 1);
  const auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  std::string prompt;
  prompt.reserve(static_cast<size_t>(tokens) * (words ? 5 : 1));
  for (int64_t i = 0; i < tokens; ++i) {
    if (words) {
      if (i > 0) {
        prompt += ' ';
      }
      prompt += kWords[next() % kWordCount];
    } else {
      prompt += static_cast<char>('a' + next() % 26);
    }
  }
  return prompt;
}

enum class Outcome { kPending, kOk, kHttpError, kTimeout, kConnectionError, kBadResponse };

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPending:
      return "not_sent";
    case Outcome::kOk:
      return "ok";
    case Outcome::kHttpError:
      return "http_error";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kConnectionError:
      return "connection_error";
    case Outcome::kBadResponse:
      return "bad_response";
  }
  return "ok";
}

// One request of the run. Times are seconds since the run began, on the devices' clock.
struct Sent {
  double scheduled_s = 0;  // its (scaled) arrival
  double start_s = 0;
  double end_s = 0;
  bool late = false;  // every worker was busy when it arrived
  Outcome outcome = Outcome::kPending;
  std::string error;
  int64_t requested_prompt_tokens = 0;
  int64_t max_tokens = 0;
  int64_t prompt_tokens = 0;      // the server's usage
  int64_t completion_tokens = 0;  // the server's usage
  std::optional<double> ttft_s;   // usage.energy.ttft_s, if the server gives it
  std::optional<double> tpot_s;   // usage.energy.tpot_s
  double energy_j = 0;            // attributed
  double latency_s() const { return end_s - start_s; }
};

// Reads the response of one completion into `sent`: outcome, error and the server's figures (not its times).
// Whatever the server sent reaches the report only as numbers in range or through printable_excerpt().
void read_completion(const tl::expected<http::Response, http::Failure>& result, Sent& sent) {
  if (!result) {
    switch (result.error().kind) {
      case http::Failure::Kind::kTimeout:
        sent.outcome = Outcome::kTimeout;
        break;
      case http::Failure::Kind::kTooLarge:
        sent.outcome = Outcome::kBadResponse;
        break;
      default:
        sent.outcome = Outcome::kConnectionError;
        break;
    }
    sent.error = failure_text(result.error());
    return;
  }
  const http::Response& response = *result;
  if (response.status < 200 || response.status >= 300) {
    sent.outcome = Outcome::kHttpError;
    sent.error = fmt::format("HTTP {}: {}", response.status, http::server_error_text(response.body));
    return;
  }
  const auto bad = [&](std::string_view why) {
    sent.outcome = Outcome::kBadResponse;
    sent.error = fmt::format("the response {}", why);
  };
  const auto parsed = parse_json(response.body);
  if (!parsed) {
    switch (parsed.error().kind) {
      case JsonError::Kind::kTooDeep:
        return bad(fmt::format("is JSON nested deeper than {} levels", kMaxJsonDepth));
      case JsonError::Kind::kNumberOutOfRange:
        return bad(fmt::format("is not usable JSON: {}", parsed.error().message));
      case JsonError::Kind::kSyntax:
        break;
    }
    return bad(fmt::format("is not JSON: {}", quoted_excerpt(response.body, 60)));
  }
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) {
    return bad(fmt::format("is not a JSON object: {}", describe_json(json)));
  }
  const auto usage = json.find("usage");
  if (usage == json.end() || !usage->is_object()) {
    return bad("has no usage object (token counts)");
  }
  // A count: absent (nullopt), or a whole number from 0 to kMaxUsageTokens; anything else refuses the
  // response, naming the field.
  std::string count_error;
  const auto count = [&](const char* key) -> std::optional<int64_t> {
    const auto it = usage->find(key);
    if (it == usage->end()) {
      return std::nullopt;
    }
    // nlohmann keeps integers from 2^63 up as unsigned, negative ones as signed.
    bool in_range = false;
    if (it->is_number_unsigned()) {
      in_range = it->get<uint64_t>() <= kMaxUsageTokens;
    } else if (it->is_number_integer()) {
      in_range = it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxUsageTokens;
    }
    if (!in_range) {
      if (count_error.empty()) {
        count_error = fmt::format("the response's usage.{} must be a whole number from 0 to {}, got {}", key,
                                  kMaxUsageTokens, describe_json(*it));
      }
      return std::nullopt;
    }
    return it->get<int64_t>();
  };
  const auto prompt = count("prompt_tokens");
  const auto completion = count("completion_tokens");
  if (!count_error.empty()) {
    sent.outcome = Outcome::kBadResponse;
    sent.error = std::move(count_error);
    return;
  }
  if (!completion) {
    return bad("has no usage.completion_tokens");
  }
  // joule's extension (examples/serve_llm.py): usage.energy.ttft_s / tpot_s, each absent, null (tpot_s of a
  // one-token answer) or a number of seconds from 0 to kMaxServerSeconds; anything else refuses the response,
  // naming the field, so that no figure of the report (a sum in the metrics) becomes inf.
  const auto energy = usage->find("energy");
  if (energy != usage->end() && energy->is_object()) {
    std::string seconds_error;
    const auto seconds = [&](const char* key) -> std::optional<double> {
      const auto it = energy->find(key);
      if (it == energy->end() || it->is_null()) {
        return std::nullopt;
      }
      if (it->is_number() && it->get<double>() >= 0 && it->get<double>() <= kMaxServerSeconds) {
        return it->get<double>();
      }
      if (seconds_error.empty()) {
        seconds_error = fmt::format(
            "the response's usage.energy.{} must be a number of seconds from 0 to {:g} (a day), got {}", key,
            kMaxServerSeconds, describe_json(*it));
      }
      return std::nullopt;
    };
    const auto ttft_s = seconds("ttft_s");
    const auto tpot_s = seconds("tpot_s");
    if (!seconds_error.empty()) {
      sent.outcome = Outcome::kBadResponse;
      sent.error = std::move(seconds_error);
      return;
    }
    sent.ttft_s = ttft_s;
    sent.tpot_s = tpot_s;
  }
  sent.prompt_tokens = prompt.value_or(0);
  sent.completion_tokens = *completion;
  sent.outcome = Outcome::kOk;
}

// A pool of worker threads, grown on demand up to a bound; each worker keeps one connection.
class WorkerPool {
 public:
  using Work = std::function<void(http::Connection&, size_t)>;
  /// Starts `initial` workers now (thread start-up then costs the first requests nothing).
  WorkerPool(const Endpoint& endpoint, size_t max_workers, size_t initial, Work work)
      : endpoint_(endpoint), max_workers_(max_workers), work_(std::move(work)) {
    std::lock_guard lock(mutex_);
    while (threads_.size() < std::min(initial, max_workers_)) {
      threads_.emplace_back([this] { run(); });
    }
  }
  ~WorkerPool() { close(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues request `index`. @return true if it must wait: every worker is busy and there are max_workers.
  bool submit(size_t index) {
    std::lock_guard lock(mutex_);
    queue_.push_back(index);
    if (queue_.size() <= idle_) {
      wake_.notify_one();
      return false;
    }
    if (threads_.size() < max_workers_) {
      threads_.emplace_back([this] { run(); });
      return false;
    }
    return true;
  }

  /// Finishes the queued work and joins the workers.
  void close() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    wake_.notify_all();
    for (auto& thread : threads_) {
      if (thread.joinable()) {
        thread.join();
      }
    }
  }

  /// @return how many workers were started (the peak concurrency, or the initial ones).
  size_t workers() const {
    std::lock_guard lock(mutex_);
    return threads_.size();
  }

 private:
  void run() {
    http::Connection connection(endpoint_.host, endpoint_.port);
    std::unique_lock lock(mutex_);
    while (true) {
      ++idle_;
      wake_.wait(lock, [this] { return closing_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) {
        return;  // closing
      }
      const size_t index = queue_.front();
      queue_.pop_front();
      lock.unlock();
      work_(connection, index);
      lock.lock();
    }
  }

  Endpoint endpoint_;
  size_t max_workers_;
  Work work_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<size_t> queue_;
  size_t idle_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

// Nearest-rank percentile; nullopt for no values.
std::optional<double> percentile(std::vector<double> values, double share) {
  return numeric::nearest_rank_percentile(values, share);
}

struct GpuFigure {
  int index = 0;
  std::string name;
  double energy_j = 0;
  measure::EnergySource source = measure::EnergySource::kCounter;
};

struct Report {
  std::string endpoint;
  std::string model;
  std::string trace;
  bool simulated = false;
  std::vector<Sent> sent;
  size_t workers = 0;
  double duration_s = 0;
  std::vector<GpuFigure> gpus;
  double energy_j = 0;
  bool estimated = false;
  double attributed_energy_j = 0;
  double idle_energy_j = 0;
  // Derived.
  int64_t ok = 0, http_errors = 0, timeouts = 0, connection_errors = 0, bad_responses = 0, late = 0;
  double max_start_delay_s = 0;
  std::string first_error;
  int64_t requested_prompt_tokens = 0, prompt_tokens = 0, output_tokens = 0;
  std::optional<double> latency[3], ttft[3], tpot[3];
};

constexpr double kShares[3] = {0.5, 0.9, 0.99};
constexpr const char* kShareNames[3] = {"p50", "p90", "p99"};

// Adds a request's tokens to a total. The server's counts are at most kMaxUsageTokens each and the trace's
// sim::kMaxTraceTokens, so no trace a file can hold makes them overflow; checked all the same.
void add_tokens(int64_t& total, int64_t count, std::string_view what) {
  if (__builtin_add_overflow(total, count, &total)) {
    throw Exception(ErrorCode::kOutOfRange, fmt::format("infer bench: the {} add up to more than {}", what,
                                                        std::numeric_limits<int64_t>::max()));
  }
}

void summarize(Report& report) {
  std::vector<double> latencies, ttfts, tpots;
  double first_error_at = INFINITY;
  for (const Sent& sent : report.sent) {
    report.late += sent.late ? 1 : 0;
    report.max_start_delay_s = std::max(report.max_start_delay_s, sent.start_s - sent.scheduled_s);
    switch (sent.outcome) {
      case Outcome::kOk:
        ++report.ok;
        break;
      case Outcome::kHttpError:
        ++report.http_errors;
        break;
      case Outcome::kTimeout:
        ++report.timeouts;
        break;
      case Outcome::kConnectionError:
        ++report.connection_errors;
        break;
      case Outcome::kBadResponse:
      case Outcome::kPending:
        ++report.bad_responses;
        break;
    }
    if (sent.outcome != Outcome::kOk) {
      if (sent.end_s < first_error_at) {
        first_error_at = sent.end_s;
        report.first_error = sent.error;
      }
      continue;
    }
    add_tokens(report.requested_prompt_tokens, sent.requested_prompt_tokens, "trace's prompt tokens");
    add_tokens(report.prompt_tokens, sent.prompt_tokens, "prompt tokens of the responses");
    add_tokens(report.output_tokens, sent.completion_tokens, "completion tokens of the responses");
    latencies.push_back(sent.latency_s());
    if (sent.ttft_s) {
      ttfts.push_back(*sent.ttft_s);
    }
    if (sent.tpot_s) {
      tpots.push_back(*sent.tpot_s);
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    report.latency[i] = percentile(latencies, kShares[i]);
    report.ttft[i] = percentile(ttfts, kShares[i]);
    report.tpot[i] = percentile(tpots, kShares[i]);
  }
}

double per(double value, double count) {
  return count > 0 ? value / count : 0.0;
}

nlohmann::ordered_json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

// The summary fields, in order (JSON object and CSV row alike).
std::vector<std::pair<std::string, nlohmann::ordered_json>> summary_fields(const Report& r,
                                                                           const BenchFlags& flags) {
  const auto failed = static_cast<int64_t>(r.sent.size()) - r.ok;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> fields = {
      {"endpoint", r.endpoint},
      {"model", r.model},
      {"trace", r.trace},
      {"rate_scale", flags.rate_scale},
      {"simulated_gpus", r.simulated},
      {"requests", static_cast<int64_t>(r.sent.size())},
      {"requests_ok", r.ok},
      {"requests_failed", failed},
      {"http_errors", r.http_errors},
      {"timeouts", r.timeouts},
      {"connection_errors", r.connection_errors},
      {"bad_responses", r.bad_responses},
      {"first_error",
       r.first_error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.first_error)},
      {"max_concurrency", flags.max_concurrency},
      {"workers", static_cast<int64_t>(r.workers)},
      {"started_late", r.late},
      {"max_start_delay_s", r.max_start_delay_s},
      {"duration_s", r.duration_s},
      {"energy_j", r.energy_j},
      {"energy_estimated", r.estimated},
      {"attributed_energy_j", r.attributed_energy_j},
      {"idle_energy_j", r.idle_energy_j},
      {"j_per_request", per(r.energy_j, static_cast<double>(r.ok))},
      {"j_per_output_token", per(r.energy_j, static_cast<double>(r.output_tokens))},
      {"requested_prompt_tokens", r.requested_prompt_tokens},
      {"prompt_tokens", r.prompt_tokens},
      {"output_tokens", r.output_tokens},
      {"requests_per_s", per(static_cast<double>(r.ok), r.duration_s)},
      {"output_tokens_per_s", per(static_cast<double>(r.output_tokens), r.duration_s)},
  };
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_latency_s", kShareNames[i]), optional_json(r.latency[i]));
  }
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_ttft_s", kShareNames[i]), optional_json(r.ttft[i]));
  }
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_tpot_s", kShareNames[i]), optional_json(r.tpot[i]));
  }
  return fields;
}

nlohmann::ordered_json gpus_json(const Report& r) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const GpuFigure& gpu : r.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"energy_j", gpu.energy_j},
                    {"source", measure::to_string(gpu.source)},
                    {"estimated", gpu.source != measure::EnergySource::kCounter}});
  }
  return gpus;
}

std::string render_json(const Report& r, const BenchFlags& flags) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto& [name, value] : summary_fields(r, flags)) {
    out[name] = value;
  }
  out["gpus"] = gpus_json(r);
  return out.dump(2) + "\n";
}

std::string csv_value(const nlohmann::ordered_json& value) {
  if (value.is_null()) {
    return "";
  }
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_boolean()) {
    return value.get<bool>() ? "true" : "false";
  }
  if (value.is_number_float()) {
    return fmt::format("{:.6g}", value.get<double>());
  }
  return value.dump();
}

std::string render_csv(const Report& r, const BenchFlags& flags) {
  std::vector<std::string> header, row;
  for (auto& [name, value] : summary_fields(r, flags)) {
    header.push_back(name);
    row.push_back(csv_value(value));
  }
  std::ostringstream out;
  csv::write_row(out, header);
  csv::write_row(out, row);
  return out.str();
}

std::string seconds_text(const std::optional<double>& value) {
  if (!value) {
    return "n/a";
  }
  return *value < 1 ? fmt::format("{:.1f} ms", *value * 1e3) : fmt::format("{:.3f} s", *value);
}

std::string render_text(const Report& r, const BenchFlags& flags) {
  std::string out =
      fmt::format("{} requests to {} (model {}) from {}{}\n", r.sent.size(), r.endpoint, r.model, r.trace,
                  flags.rate_scale != 1 ? fmt::format(", rate × {:g}", flags.rate_scale) : "");
  const auto failed = static_cast<int64_t>(r.sent.size()) - r.ok;
  out += fmt::format("requests      {} ok, {} failed", r.ok, failed);
  if (failed > 0) {
    out += fmt::format(" ({} HTTP errors, {} timeouts, {} connection errors, {} bad responses)",
                       r.http_errors, r.timeouts, r.connection_errors, r.bad_responses);
  }
  out += "\n";
  if (!r.first_error.empty()) {
    out += fmt::format("first error   {}\n", r.first_error);
  }
  out += fmt::format("started late  {} (arrived while all {} workers were busy); largest start delay {}\n",
                     r.late, flags.max_concurrency, seconds_text(r.max_start_delay_s));
  out += fmt::format("duration      {:.2f} s; {:.2f} requests/s, {:.1f} output tokens/s\n", r.duration_s,
                     per(static_cast<double>(r.ok), r.duration_s),
                     per(static_cast<double>(r.output_tokens), r.duration_s));
  out += fmt::format("tokens        {} prompt ({} asked for), {} output\n", r.prompt_tokens,
                     r.requested_prompt_tokens, r.output_tokens);
  out += fmt::format("energy        {:.1f} J{}: {:.1f} J to requests, {:.1f} J idle\n", r.energy_j,
                     r.estimated ? " (estimated)" : "", r.attributed_energy_j, r.idle_energy_j);
  for (const GpuFigure& gpu : r.gpus) {
    out += fmt::format("  GPU {} ({})  {:.1f} J ({})\n", gpu.index, gpu.name, gpu.energy_j,
                       measure::to_string(gpu.source));
  }
  out += fmt::format("J/request     {:.3f}\nJ/token       {:.4f} (per output token)\n",
                     per(r.energy_j, static_cast<double>(r.ok)),
                     per(r.energy_j, static_cast<double>(r.output_tokens)));
  out += fmt::format("\n{:<10}{:>12}{:>12}{:>12}\n", "", "p50", "p90", "p99");
  const auto row = [&](std::string_view name, const std::optional<double>(&values)[3]) {
    out += fmt::format("{:<10}{:>12}{:>12}{:>12}\n", name, seconds_text(values[0]), seconds_text(values[1]),
                       seconds_text(values[2]));
  };
  row("latency", r.latency);
  row("TTFT", r.ttft);
  row("TPOT", r.tpot);
  if (!r.ttft[0]) {
    out += "(TTFT and TPOT: the server does not report them in usage.energy)\n";
  }
  if (r.simulated) {
    out +=
        "note: the GPUs are simulated: they draw their own workload's power, so this energy is not the "
        "endpoint's\n";
  }
  return out;
}

bool write_requests(OutputFile& output, const Report& r) {
  std::ostringstream out;
  csv::write_row(out, {"request", "arrival_s", "start_s", "end_s", "latency_s", "outcome", "prompt_tokens",
                       "completion_tokens", "ttft_s", "tpot_s", "energy_j", "late", "error"});
  const auto optional_text = [](const std::optional<double>& value) {
    return value ? fmt::format("{:.6f}", *value) : std::string();
  };
  for (size_t i = 0; i < r.sent.size(); ++i) {
    const Sent& s = r.sent[i];
    csv::write_row(out,
                   {std::to_string(i), fmt::format("{:.6f}", s.scheduled_s), fmt::format("{:.6f}", s.start_s),
                    fmt::format("{:.6f}", s.end_s), fmt::format("{:.6f}", s.latency_s()),
                    std::string(to_string(s.outcome)), std::to_string(s.prompt_tokens),
                    std::to_string(s.completion_tokens), optional_text(s.ttft_s), optional_text(s.tpot_s),
                    fmt::format("{:.6f}", s.energy_j), s.late ? "1" : "0", s.error});
  }
  return write_or_report(output, out.str(), true);
}

// The run as Prometheus would have scraped it at the end (docs/metrics.md): one model label. The endpoint
// does not say how a request's energy divides between prefill and decode: the phases are split by the tokens
// rule (each prompt and output token counts one), as RequestEnergyLedger's default does per iteration.
bool write_metrics(OutputFile& output, const Report& r) {
  metrics::MetricsRegistry registry;
  metrics::InferenceMetrics inference(registry.registry());
  for (size_t i = 0; i < r.sent.size(); ++i) {
    const Sent& sent = r.sent[i];
    if (sent.outcome != Outcome::kOk) {
      continue;
    }
    measure::RequestEnergy request;
    request.request_id = std::to_string(i);
    request.arrival_s = sent.start_s;
    request.finish_s = sent.end_s;
    if (sent.ttft_s) {
      request.first_token_s = sent.start_s + *sent.ttft_s;
      if (sent.tpot_s && sent.completion_tokens > 1) {
        request.finish_s =
            request.first_token_s + *sent.tpot_s * static_cast<double>(sent.completion_tokens - 1);
      }
    }
    request.prompt_tokens = sent.prompt_tokens;
    request.output_tokens = sent.completion_tokens;
    request.energy_j = sent.energy_j;
    const auto tokens = static_cast<double>(sent.prompt_tokens + sent.completion_tokens);
    request.prefill_energy_j =
        tokens > 0 ? sent.energy_j * static_cast<double>(sent.prompt_tokens) / tokens : 0;
    request.decode_energy_j = sent.energy_j - request.prefill_energy_j;
    inference.observe_request(r.model, request, std::nullopt);
  }
  inference.add_idle_energy(r.model, r.idle_energy_j);
  inference.set_requests(r.model, 0, 0);
  return write_or_report(output, registry.render(), true);
}

int run_bench(const GlobalOptions& global, const BenchFlags& flags) {
  if (flags.endpoint.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "infer bench: --endpoint http://HOST:PORT is required");
  }
  if (flags.trace.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "infer bench: --trace FILE is required");
  }
  const Endpoint endpoint = value_or_throw(parse_endpoint(flags.endpoint));
  std::optional<std::vector<int>> gpu_indices;
  if (!flags.gpus.empty()) {
    gpu_indices = value_or_throw(parse_index_list(flags.gpus, "--gpus"));
  }
  const sim::ServingTrace trace = value_or_throw(sim::read_serving_trace(flags.trace));
  // Checked before the run.
  std::optional<OutputFile> requests_out = open_output(flags.requests_out, "--requests-out");
  std::optional<OutputFile> metrics_out = open_output(flags.metrics_out, "--metrics-out");

  // The requests to send: arrivals from the first one, scaled, cut at --duration-s.
  Report report;
  report.endpoint = endpoint.origin;
  report.trace = flags.trace;
  const double first_arrival_s = trace.requests.front().arrival_s;
  int64_t prompt_tokens = 0;
  for (const sim::ServingRequest& request : trace.requests) {
    const double at_s = (request.arrival_s - first_arrival_s) / flags.rate_scale;
    if (flags.duration_s && at_s >= *flags.duration_s) {
      break;
    }
    Sent sent;
    sent.scheduled_s = at_s;
    sent.requested_prompt_tokens = request.prompt_tokens;
    sent.max_tokens = request.output_tokens;
    report.sent.push_back(std::move(sent));
    // Each count is at most sim::kMaxTraceTokens; their sum is what the prompts built up front take.
    prompt_tokens += request.prompt_tokens;
    if (prompt_tokens > kMaxRunPromptTokens) {
      throw Exception(
          ErrorCode::kOutOfRange,
          fmt::format("infer bench: {}: the requests to send ask for more than {} prompt tokens in "
                      "all, the most one run builds prompts for (about 5 GB of text, held for the "
                      "run); send fewer with --duration-s",
                      flags.trace, kMaxRunPromptTokens));
    }
  }

  const device::DeviceSet devices = open_devices(global, true, false);
  const std::vector<device::Gpu*> gpus = value_or_throw(devices.select_gpus(gpu_indices));
  if (gpus.empty()) {
    throw Exception(ErrorCode::kNotFound,
                    fmt::format("infer bench: no GPU to measure: {}. For simulated GPUs, run joule --sim "
                                "v100 infer bench …",
                                devices.why_no_gpus()));
  }
  report.simulated = value_or_throw(discovery_options(global)).sim_spec.has_value();
  report.model = resolve_model(endpoint, flags);

  // Bodies are built before the clock starts.
  std::vector<std::string> bodies;
  bodies.reserve(report.sent.size());
  for (size_t i = 0; i < report.sent.size(); ++i) {
    const nlohmann::json body = {
        {"model", report.model},
        {"prompt", synthetic_prompt(report.sent[i].requested_prompt_tokens, i, flags.prompt_unit == "word")},
        {"max_tokens", report.sent[i].max_tokens},
        {"stream", false}};
    bodies.push_back(body.dump());
  }

  Clock& clock = *devices.clock;
  measure::EnergyMonitor monitor(gpus, {}, clock);
  measure::PowerSampler sampler(gpus, clock, kSamplingPeriod);
  Nanos t0{0};  // the run's start: set before the first request is queued
  const auto since_start_s = [&] { return to_seconds(clock.now() - t0); };

  std::mutex sent_mutex;  // guards report.sent's per-request fields while workers write them
  {
    // A few workers up front: thread start-up then delays no early request.
    const http::RequestLimits limits = request_limits(flags, flags.timeout_s);
    // Responses are parsed by as many workers at once as there are cores (parsing gains nothing from more):
    // a parsed body can take ~20 times its size (8 MiB of "[0,0,…" is ~150 MB), so this, not
    // --max-concurrency, bounds that memory.
    std::counting_semaphore<> parsers(std::max<std::ptrdiff_t>(1, std::thread::hardware_concurrency()));
    WorkerPool pool(endpoint, static_cast<size_t>(flags.max_concurrency), 16,
                    [&](http::Connection& connection, size_t index) {
                      const double start_s = since_start_s();
                      const auto response = connection.request("POST", "/v1/completions", bodies[index],
                                                               "application/json", {}, limits);
                      const double end_s = since_start_s();
                      // Parsed before taking the lock, which every worker shares.
                      Sent reading;
                      parsers.acquire();
                      read_completion(response, reading);
                      parsers.release();
                      std::lock_guard lock(sent_mutex);
                      Sent& sent = report.sent[index];
                      sent.start_s = start_s;
                      sent.end_s = end_s;
                      sent.outcome = reading.outcome;
                      sent.error = std::move(reading.error);
                      sent.prompt_tokens = reading.prompt_tokens;
                      sent.completion_tokens = reading.completion_tokens;
                      sent.ttft_s = reading.ttft_s;
                      sent.tpot_s = reading.tpot_s;
                    });
    sampler.start();
    t0 = clock.now();
    monitor.begin_window("infer-bench", false);
    for (size_t i = 0; i < report.sent.size(); ++i) {
      const Nanos due =
          t0 + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(report.sent[i].scheduled_s));
      const Nanos wait = due - clock.now();
      if (wait > Nanos(0)) {
        std::this_thread::sleep_for(wait);
      }
      const bool late = pool.submit(i);
      std::lock_guard lock(sent_mutex);
      report.sent[i].late = late;
    }
    pool.close();
    report.workers = pool.workers();
  }
  sampler.sample_now();
  const Nanos t1 = clock.now();
  const measure::Measurement measurement = monitor.end_window("infer-bench", false);
  sampler.stop();
  report.duration_s = measurement.time_s;

  // Attribution: the run cut into sampling periods; each GPU's sampled energy per period, scaled so that the
  // GPU's periods add up to what the monitor measured (the samples give the shape over time, the monitor the
  // total), summed over GPUs, then shared among the requests in flight.
  const double span_s = to_seconds(t1 - t0);
  const double period_s = to_seconds(kSamplingPeriod);
  std::vector<measure::EnergyInterval> intervals;
  const auto periods = static_cast<size_t>(std::ceil(span_s / period_s));
  for (size_t i = 0; i < periods; ++i) {
    const double start_s = static_cast<double>(i) * period_s;
    // Each end is the next start, computed the same way, so that rounding never makes them overlap.
    intervals.push_back({start_s, std::min(static_cast<double>(i + 1) * period_s, span_s), 0});
  }
  for (size_t g = 0; g < gpus.size(); ++g) {
    const GpuFigure figure{gpus[g]->info().index, gpus[g]->info().name, measurement.gpu_energy[g].energy_j,
                           measurement.gpu_energy[g].source};
    report.gpus.push_back(figure);
    report.energy_j += figure.energy_j;
    report.estimated = report.estimated || measurement.gpu_energy[g].estimated();
    std::vector<double> sampled(intervals.size(), 0.0);
    double sampled_total_j = 0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      const auto from =
          t0 + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(intervals[i].start_s));
      const auto to =
          t0 + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(intervals[i].end_s));
      sampled[i] = value_or_throw(sampler.energy_j(g, from, to));
      sampled_total_j += sampled[i];
    }
    const double scale = sampled_total_j > 0 ? figure.energy_j / sampled_total_j : 0.0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      intervals[i].energy_j += sampled[i] * scale;
    }
  }
  std::vector<measure::FlightInterval> flights;
  flights.reserve(report.sent.size());
  for (const Sent& sent : report.sent) {
    flights.push_back({sent.start_s, sent.end_s});
  }
  const measure::TimelineAttribution attribution =
      value_or_throw(measure::attribute_energy_over_time(intervals, flights));
  for (size_t i = 0; i < report.sent.size(); ++i) {
    report.sent[i].energy_j = attribution.request_energy_j[i];
  }
  report.attributed_energy_j = attribution.attributed_energy_j;
  report.idle_energy_j = attribution.idle_energy_j;
  summarize(report);

  switch (flags.format) {
    case Format::kJson:
      std::cout << render_json(report, flags);
      break;
    case Format::kCsv:
      std::cout << render_csv(report, flags);
      break;
    case Format::kText:
      std::cout << render_text(report, flags);
      break;
  }
  // A file that cannot be written: its figures go to stderr, and the exit code is 1.
  const bool requests_written = !requests_out || write_requests(*requests_out, report);
  const bool metrics_written = !metrics_out || write_metrics(*metrics_out, report);
  if (requests_out && requests_written) {
    if (flags.format == Format::kText) {
      std::cout << fmt::format("per-request figures written to {}\n", flags.requests_out);
    }
  }
  if (metrics_out && metrics_written) {
    if (flags.format == Format::kText) {
      std::cout << fmt::format("metrics written to {}\n", flags.metrics_out);
    }
  }
  if (report.ok == 0) {
    std::cerr << fmt::format("joule: error: infer bench: no request to {} succeeded: {}\n", endpoint.origin,
                             report.first_error);
    return 1;
  }
  if (report.ok < static_cast<int64_t>(report.sent.size()) && flags.format != Format::kText) {
    std::cerr << fmt::format("joule: note: {} of {} requests failed; the first: {}\n",
                             static_cast<int64_t>(report.sent.size()) - report.ok, report.sent.size(),
                             report.first_error);
  }
  return requests_written && metrics_written ? 0 : 1;
}

}  // namespace infer_bench
}  // namespace

void add_infer_bench_command(CLI::App& infer_command, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<infer_bench::BenchFlags>();
  auto* command = infer_command.add_subcommand(
      "bench", "Benchmark the energy of an OpenAI-compatible endpoint: send a trace, measure the GPUs");
  command->add_option("--endpoint", flags->endpoint, "The server: http://HOST:PORT (POST /v1/completions)")
      ->option_text("URL")
      ->required();
  command->add_option("--trace", flags->trace, "Request trace CSV (arrival_s,prompt_tokens,output_tokens)")
      ->option_text("FILE.csv")
      ->required();
  command->add_option("--gpus", flags->gpus, "GPU indices to measure, e.g. 0,1 (default: all visible)")
      ->option_text("LIST");
  command->add_option("--model", flags->model, "Model name sent (default: the first GET /v1/models lists)")
      ->option_text("NAME");
  command->add_option("--rate-scale", flags->rate_scale, "Multiply the trace's request rate (default 1)")
      ->check(number(NumberRule::positive()))
      ->option_text("F");
  command->add_option("--duration-s", flags->duration_s, "Send only the requests arriving in the first S s")
      ->check(number(duration_rule()))
      ->option_text("S");
  command
      ->add_option("--max-concurrency", flags->max_concurrency,
                   "Requests in flight at most (worker threads; default 256)")
      ->check(number({.min = 1, .max = 4096, .integer = true}))
      ->option_text("N");
  command
      ->add_option("--timeout-s", flags->timeout_s,
                   "Give up on a request S s after sending it, whole response included (default 300)")
      ->check(number(duration_rule()))
      ->option_text("S");
  command
      ->add_option("--max-response-mib", flags->max_response_mib,
                   "Refuse a response larger than M MiB, while reading it (default 8)")
      ->check(number({.min = 0, .max = 4096, .min_exclusive = true}))
      ->option_text("M");
  command
      ->add_option("--prompt-unit", flags->prompt_unit,
                   "What one prompt token is in the synthetic prompts: word (BPE tokenizers) or char "
                   "(byte-level tokenizers) (default word)")
      ->check(CLI::IsMember({"word", "char"}))
      ->option_text("UNIT");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson, Format::kCsv});
  command->add_option("--requests-out", flags->requests_out, "Write per-request figures (CSV)")
      ->option_text("FILE.csv");
  command
      ->add_option("--metrics-out", flags->metrics_out,
                   "Write the run's Prometheus metrics (text exposition)")
      ->option_text("FILE.prom");
  set_examples(*command, {"joule infer bench --endpoint http://127.0.0.1:8000 --trace "
                          "data/inference/bursty-1h.csv --duration-s 60 --requests-out requests.csv"});
  command->callback([&exit_code, &global, flags] { exit_code = infer_bench::run_bench(global, *flags); });
}

}  // namespace joule::cli
