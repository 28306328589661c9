// SPDX-License-Identifier: Apache-2.0
// joule/loadgen/stream.hpp — one streamed completion (POST /v1/completions with "stream": true) read as it
// arrives, as `joule infer bench` does by default (docs/inference.md): the server-sent events parsed within
// bounds (http::SseParser), the time of each chunk with text taken on the run's clock (TTFT, TPOT and the
// token arrivals that attribute energy by work), and the final usage chunk's token counts when the server
// sends one (vLLM, SGLang, TGI and llama.cpp's server do with "stream_options": {"include_usage": true}).
//
//   CompletionStream stream(now_s, sent_s, /*bin_s=*/0.1);
//   auto result = connection.request("POST", "/v1/completions", body, "application/json", {}, limits,
//                                    [&](std::string_view piece) { return stream.on_body(piece); });
//   Completion completion = stream.finish(result, names);
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "joule/core/error.hpp"
#include "joule/http/connection.hpp"
#include "joule/http/sse.hpp"
#include "joule/loadgen/openai.hpp"
#include "joule/measure/request_energy.hpp"

namespace joule::loadgen {

/// Reads one completion stream. Each event's data is a JSON chunk: `choices[0].text` (the new text; a chunk
/// with non-empty text counts as output), `usage` (its prompt_tokens and completion_tokens, checked as in
/// read_completion(); usage.energy, joule's extension, read too), or `error` (the server failed
/// mid-stream); `data: [DONE]` ends it (or the body's end after a `finish_reason`). Not thread-safe: one per
/// request.
class CompletionStream {
 public:
  /// `now_s`: the run's clock, s (read at each event); `sent_s`: when the request was sent, on it; `bin_s`:
  /// the attribution's interval (> 0): chunks arriving in one interval are kept as one arrival.
  CompletionStream(std::function<double()> now_s, double sent_s, double bin_s);

  /// The request's http::BodySink. @return false once the stream is refused (an event over
  /// http::kDefaultMaxEventBytes, not JSON, not an object, an error event, a usage count out of range):
  /// finish() then says why.
  bool on_body(std::string_view piece);

  /// @return the completion, from the request's outcome and what the stream said: kOk with the tokens
  /// (usage.completion_tokens, else the chunks with text, marked counted), the client-measured TTFT and
  /// TPOT, and the arrivals (their tokens add up to completion_tokens); kHttpError for a non-2xx status
  /// (as read_completion()); kTimeout / kConnectionError / kBadResponse (over the cap) when the transport
  /// failed; kBadResponse for a refused event, or a stream that ended without `data: [DONE]` and without a
  /// chunk giving a finish_reason (TGI before 2.2 sends no [DONE]); one JSON body instead of a stream is
  /// named ("run with --no-stream").
  Completion finish(const tl::expected<http::Response, http::Failure>& result, const LimitNames& names);

 private:
  Result<void> on_event(std::string_view data);
  void add_chunk(double at_s, int64_t tokens);

  std::function<double()> now_s_;
  double sent_s_;
  double bin_s_;
  http::SseParser parser_;
  std::string error_;  // why on_body() refused the stream
  int64_t events_ = 0;
  bool done_ = false;
  bool finished_ = false;       // a chunk gave a finish_reason
  int64_t chunks_ = 0;          // chunks with text
  int64_t counted_tokens_ = 0;  // their tokens (1 each, or the growth of a running usage count)
  std::optional<int64_t> prompt_tokens_;
  std::optional<int64_t> completion_tokens_;  // the last usage.completion_tokens seen
  Completion server_;                         // its server_* fields
  std::optional<double> first_token_s_;
  std::optional<double> last_token_s_;
  std::vector<measure::TokenArrival> arrivals_;
  int64_t last_bin_ = -1;
};

}  // namespace joule::loadgen
