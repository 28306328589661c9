// SPDX-License-Identifier: Apache-2.0
// joule/loadgen/openai.hpp — one request to an OpenAI-compatible completions endpoint, as the load
// generator of `joule infer bench` sends and reads it (docs/inference.md): the endpoint's address, the model
// it serves, synthetic prompts, and what a completion's answer says (outcome, token counts, the server's
// TTFT/TPOT), read so that whatever the server sent reaches a report only as numbers in range or through
// printable_excerpt().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "joule/core/error.hpp"
#include "joule/http/connection.hpp"
#include "joule/measure/request_energy.hpp"

namespace joule::loadgen {

/// The most tokens one response's usage may count (prompt or completion): far above any model's context, and
/// low enough that no trace's sum can overflow (2^63 / 10^9 ≈ 9 · 10^9 requests).
inline constexpr int64_t kMaxUsageTokens = 1'000'000'000;
/// The longest time a response's usage.energy may report (ttft_s, tpot_s), s: a day, far above any
/// request's, so that a sum over a trace stays finite.
inline constexpr double kMaxServerSeconds = 86'400;
/// The most energy a response's usage.energy.energy_j may report, J: a GW for a second, far above any
/// request's, so that a sum over a trace stays finite.
inline constexpr double kMaxServerJoules = 1e9;
/// The longest model id taken from GET /v1/models (Hugging Face's repository ids are at most 96 characters).
inline constexpr size_t kMaxModelIdBytes = 256;

/// An OpenAI-compatible server: http://HOST:PORT (the paths are the OpenAI API's).
struct Endpoint {
  std::string origin;  ///< "http://host:port"
  std::string host;
  int port = 0;
};

/// @return the endpoint `text` names: http://HOST:PORT with an optional trailing slash, nothing else; or
/// kInvalidArgument "'<text>': <why>: expected http://HOST:PORT (e.g. http://127.0.0.1:8000)" (https is
/// not supported, not an http:// URL, a path is not allowed, no port, '<port>' is not a port, no host).
Result<Endpoint> parse_endpoint(const std::string& text);

/// Words added to a failure's message, in parentheses, to say what sets the bound it met (e.g. the flags
/// "--timeout-s" and "--max-response-mib"); empty: nothing added.
struct LimitNames {
  std::string timeout;
  std::string max_response;
};

/// @return `failure`'s message, with the name of the bound it met for a timeout or a response over the cap.
std::string failure_text(const http::Failure& failure, const LimitNames& names);

/// @return the model the endpoint serves: `model` if not empty, else the first id GET /v1/models lists. The
/// endpoint is asked either way, so that one that cannot be reached is found before any work. kIo when it
/// cannot be reached or refuses the list; kParse for a list with no id, or a first id that is not a
/// printable name of 1 to kMaxModelIdBytes bytes.
Result<std::string> resolve_model(const Endpoint& endpoint, const std::string& model,
                                  const http::RequestLimits& limits, const LimitNames& names = {});

/// @return a synthetic prompt of about `tokens` tokens, different for every `request` (so that a server's
/// prefix cache does not make prefill free). `words`: `tokens` words drawn from common English words that
/// BPE tokenizers (GPT, Llama) encode as one token each, with their leading space; else `tokens` random
/// lowercase letters, one token each for byte-level tokenizers. The server may add a BOS token.
std::string synthetic_prompt(int64_t tokens, size_t request, bool words);

/// @return the JSON body of a completion of `prompt` by `model`, at most `max_tokens` long: streamed
/// (`"stream": true, "stream_options": {"include_usage": true}`) or not (`"stream": false`).
std::string completion_body(const std::string& model, const std::string& prompt, int64_t max_tokens,
                            bool stream = false);

/// How a request ended.
enum class Outcome { kPending, kOk, kHttpError, kTimeout, kConnectionError, kBadResponse };

/// @return "not_sent", "ok", "http_error", "timeout", "connection_error" or "bad_response".
std::string_view to_string(Outcome outcome);

/// What the answer to one completion said.
struct Completion {
  Outcome outcome = Outcome::kPending;
  std::string error;              ///< why it is not kOk, printable
  int64_t prompt_tokens = 0;      ///< the server's usage.prompt_tokens (0 if absent)
  int64_t completion_tokens = 0;  ///< usage.completion_tokens; streamed without usage: the content chunks
  /// Time to first token and per output token after it, s: measured by the client when streamed (first
  /// chunk with text − sending; (last − first chunk with text) / (tokens − 1)), else the server's
  /// usage.energy figures (joule's extension) when it gives them.
  std::optional<double> ttft_s;
  std::optional<double> tpot_s;
  /// The server's own usage.energy.ttft_s, tpot_s and energy_j (joule's extension), when given.
  std::optional<double> server_ttft_s;
  std::optional<double> server_tpot_s;
  std::optional<double> server_energy_j;
  bool streamed = false;        ///< read as server-sent events
  bool tokens_counted = false;  ///< completion_tokens counts content chunks: the stream had no usage
  /// Streamed: when the first and the last chunk with text arrived, s on the run's clock.
  std::optional<double> first_token_s;
  std::optional<double> last_token_s;
  /// Streamed: when the output tokens arrived, chunks falling in the same attribution interval merged (at
  /// most one entry per interval, so the run's length bounds it, not the tokens); their tokens add up to
  /// completion_tokens.
  std::vector<measure::TokenArrival> arrivals;
};

/// @return what `result` (the answer to POST /v1/completions) says: kOk with the server's figures; kTimeout,
/// kConnectionError or kBadResponse (over the cap) when no answer came; kHttpError for a non-2xx status
/// (with the server's text as a printable excerpt); kBadResponse for a body that is not a JSON object with a
/// usage object, a usage count that is not a whole number from 0 to kMaxUsageTokens, or a usage.energy time
/// that is not a number of seconds from 0 to kMaxServerSeconds (the field is named).
Completion read_completion(const tl::expected<http::Response, http::Failure>& result,
                           const LimitNames& names);

/// One request of a run. Times are seconds since the run began, on the run's clock.
struct RequestRecord {
  double scheduled_s = 0;  ///< its (scaled) arrival
  double start_s = 0;      ///< when it was sent
  double end_s = 0;        ///< when its answer (or failure) came
  bool late = false;       ///< every worker was busy when it arrived
  int64_t requested_prompt_tokens = 0;
  int64_t max_tokens = 0;
  Completion completion;
  double energy_j = 0;  ///< attributed, by the run's rule (BenchRun::attribution)

  double latency_s() const { return end_s - start_s; }
  /// @return the request as measure's records see it: sent at start_s; first token and finish as the
  /// stream's chunks with text arrived, else from the server's TTFT and TPOT when it gave them, else
  /// finished at end_s; phases by the tokens rule.
  measure::FinishedRequest finished() const;
};

}  // namespace joule::loadgen
