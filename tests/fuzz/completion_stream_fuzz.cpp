// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: a streamed completion's body (server-sent events of JSON chunks), as `joule infer bench`
// reads it (joule/loadgen/stream.hpp over joule/http/sse.hpp), cut into pieces of a size the input's first
// byte chooses. Whatever the bytes: no crash, the parser never holds more than its bound, a refused stream
// says why, and an accepted one has counts in range, finite times, and arrivals that add up to its tokens.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "joule/http/sse.hpp"
#include "joule/loadgen/stream.hpp"

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const size_t piece = 1 + data[0] % 64;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);

  // The framing alone, with a small bound.
  joule::http::SseParser parser(256);
  const auto count = [](std::string_view event) -> joule::Result<void> {
    if (event.size() > 256) {
      std::abort();
    }
    return {};
  };
  for (size_t i = 0; i < body.size(); i += piece) {
    joule::fuzz::require_message(parser.feed(body.substr(i, piece), count));
    if (parser.buffered_bytes() > 256) {
      std::abort();
    }
  }
  joule::fuzz::require_message(parser.finish(count));

  // The whole reader, on a clock that ticks at every event.
  double clock_s = 0;
  joule::loadgen::CompletionStream stream([&clock_s] { return clock_s += 0.01; }, 0, 0.1);
  for (size_t i = 0; i < body.size(); i += piece) {
    if (!stream.on_body(body.substr(i, piece))) {
      break;
    }
  }
  joule::http::Response response{200, "", {{"Content-Type", "text/event-stream"}}};
  const joule::loadgen::Completion answer = stream.finish(response, {});
  if (answer.outcome != joule::loadgen::Outcome::kOk) {
    if (answer.error.empty()) {
      std::abort();
    }
    return 0;
  }
  if (answer.completion_tokens < 0 || answer.completion_tokens > joule::loadgen::kMaxUsageTokens ||
      answer.prompt_tokens < 0 || answer.prompt_tokens > joule::loadgen::kMaxUsageTokens) {
    std::abort();
  }
  double tokens = 0;
  for (const auto& arrival : answer.arrivals) {
    if (!std::isfinite(arrival.time_s) || !(arrival.tokens >= 0)) {
      std::abort();
    }
    tokens += arrival.tokens;
  }
  if (!answer.arrivals.empty() &&
      std::abs(tokens - static_cast<double>(answer.completion_tokens)) > 1e-6 * (1 + tokens)) {
    std::abort();
  }
  if ((answer.ttft_s && !(*answer.ttft_s >= 0)) || (answer.tpot_s && !(*answer.tpot_s >= 0))) {
    std::abort();
  }
  return 0;
}
