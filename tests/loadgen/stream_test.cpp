// SPDX-License-Identifier: Apache-2.0
// Streamed completions (joule/loadgen/stream.hpp) read from loopback servers that send whatever bytes a test
// chooses (tests/http/hostile_server.hpp): honest streams with and without usage, chunks of several tokens,
// a slow stream, and every hostile stream of docs/inference.md's table, each failing its one request with
// its message.
#include "joule/loadgen/stream.hpp"

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/http/connection.hpp"

#include "http/hostile_server.hpp"

namespace joule::loadgen {
namespace {

using std::chrono::milliseconds;
using test::HostileServer;

constexpr const char* kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

double now_s() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A server that answers one request with a stream head and `body`, then closes.
HostileServer streaming(std::string body, std::string head = kStreamHead) {
  return HostileServer([body = std::move(body), head = std::move(head)](HostileServer::Peer& peer) {
    if (peer.read_request()) {
      peer.send(head + body);
    }
  });
}

http::RequestLimits stream_limits(double timeout_s = 5, size_t max_bytes = http::kDefaultMaxResponseBytes) {
  http::RequestLimits bounds;
  bounds.timeout_s = timeout_s;
  bounds.connect_timeout_s = 1;
  bounds.max_response_bytes = max_bytes;
  return bounds;
}

Completion read_stream(const HostileServer& server, const http::RequestLimits& bounds = stream_limits()) {
  http::Connection connection("127.0.0.1", server.port());
  const double sent_s = now_s();
  CompletionStream stream(now_s, sent_s, 0.1);
  const auto result =
      connection.request("POST", "/v1/completions", R"({"stream": true})", "application/json", {}, bounds,
                         [&](std::string_view piece) { return stream.on_body(piece); });
  return stream.finish(result, {"--timeout-s", "--max-response-mib"});
}

std::string text_chunk(std::string_view text, std::string_view usage = "null") {
  return fmt::format(R"(data: {{"choices": [{{"text": "{}", "index": 0}}], "usage": {}}})"
                     "\n\n",
                     text, usage);
}

double arrival_tokens(const Completion& completion) {
  double tokens = 0;
  for (const auto& arrival : completion.arrivals) {
    tokens += arrival.tokens;
  }
  return tokens;
}

TEST(CompletionStream, ReadsTextChunksAndTheUsageChunk) {
  const auto server = streaming(
      text_chunk(" a") + text_chunk(" b") + text_chunk(" c") +
      R"(data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "energy": {"ttft_s": 0.5, "tpot_s": null, "energy_j": 2.5}}})"
      "\n\ndata: [DONE]\n\n");
  const Completion answer = read_stream(server);
  ASSERT_EQ(answer.outcome, Outcome::kOk) << answer.error;
  EXPECT_TRUE(answer.streamed);
  EXPECT_FALSE(answer.tokens_counted);
  EXPECT_EQ(answer.prompt_tokens, 5);
  EXPECT_EQ(answer.completion_tokens, 3);
  ASSERT_TRUE(answer.ttft_s && answer.tpot_s && answer.first_token_s && answer.last_token_s);
  EXPECT_GE(*answer.ttft_s, 0);
  EXPECT_DOUBLE_EQ(*answer.tpot_s, (*answer.last_token_s - *answer.first_token_s) / 2);
  EXPECT_DOUBLE_EQ(arrival_tokens(answer), 3);
  // The server's own figures are kept apart from what was measured here.
  EXPECT_EQ(answer.server_ttft_s, 0.5);
  EXPECT_FALSE(answer.server_tpot_s);
  EXPECT_EQ(answer.server_energy_j, 2.5);
}

TEST(CompletionStream, WithoutUsageCountsTheChunksWithText) {
  // TGI writes "data:" without a space; CRLF and CR line ends, comments, an event field, an empty text (a
  // role or finish chunk) that is no token.
  const auto server = streaming(
      ": keep-alive\r\n\r\nevent: message\r\ndata:{\"choices\": [{\"text\": \"x\"}]}\r\n\r\n"
      "data: {\"choices\": [{\"text\": \"y\"}]}\r\rdata: {\"choices\": [{\"text\": \"\"}]}\n\n" +
      text_chunk("z") + "data: [DONE]\n\n");
  const Completion answer = read_stream(server);
  ASSERT_EQ(answer.outcome, Outcome::kOk) << answer.error;
  EXPECT_TRUE(answer.tokens_counted);
  EXPECT_EQ(answer.completion_tokens, 3);
  EXPECT_EQ(answer.prompt_tokens, 0);
  EXPECT_DOUBLE_EQ(arrival_tokens(answer), 3);
  // TGI before 2.2: no [DONE], the body ends after the chunk that gives its finish_reason.
  const auto old_tgi =
      streaming(text_chunk("a") + R"(data:{"choices": [{"text": "b", "finish_reason": "length"}]})"
                                  "\n\n");
  const Completion finished = read_stream(old_tgi);
  ASSERT_EQ(finished.outcome, Outcome::kOk) << finished.error;
  EXPECT_EQ(finished.completion_tokens, 2);
}

TEST(CompletionStream, ChunksOfSeveralTokensAreScaledToTheUsageCount) {
  // Two chunks, nine tokens: each arrival carries its share, and TPOT divides by the tokens.
  const auto several = streaming(text_chunk("abc") + text_chunk("def") +
                                 R"(data: {"choices": [], "usage": {"completion_tokens": 9}})"
                                 "\n\ndata: [DONE]\n\n");
  const Completion answer = read_stream(several);
  ASSERT_EQ(answer.outcome, Outcome::kOk) << answer.error;
  EXPECT_EQ(answer.completion_tokens, 9);
  EXPECT_DOUBLE_EQ(arrival_tokens(answer), 9);
  EXPECT_DOUBLE_EQ(*answer.tpot_s, (*answer.last_token_s - *answer.first_token_s) / 8);
  // A running usage count in every chunk (vLLM's continuous_usage_stats) says how many each holds.
  const auto running = streaming(text_chunk("ab", R"({"completion_tokens": 2})") +
                                 text_chunk("cde", R"({"completion_tokens": 5})") + "data: [DONE]\n\n");
  const Completion counted = read_stream(running);
  ASSERT_EQ(counted.outcome, Outcome::kOk) << counted.error;
  EXPECT_EQ(counted.completion_tokens, 5);
  EXPECT_FALSE(counted.tokens_counted);
  EXPECT_DOUBLE_EQ(arrival_tokens(counted), 5);
}

TEST(CompletionStream, ASlowStreamIsTimedAsItArrives) {
  // A pause between the first and the last chunk: the last is timed after it, and TPOT spans the two.
  HostileServer server([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send(kStreamHead) && peer.send(text_chunk("a"))) {
      peer.pause(milliseconds(5));
      peer.send(text_chunk("b") + "data: [DONE]\n\n");
    }
  });
  const Completion answer = read_stream(server);
  ASSERT_EQ(answer.outcome, Outcome::kOk) << answer.error;
  // The last chunk left the server ≥ 5 ms after the request reached it (when the first chunk is read is up
  // to the client's scheduling: a loaded machine may read both at once).
  EXPECT_GE(*answer.ttft_s + (*answer.last_token_s - *answer.first_token_s), 0.005);
  EXPECT_GE(*answer.last_token_s, *answer.first_token_s);
  EXPECT_DOUBLE_EQ(*answer.tpot_s, *answer.last_token_s - *answer.first_token_s);
}

// A hostile stream fails the one request with its message.
void expect_refused(const Completion& answer, Outcome outcome, const std::string& message) {
  EXPECT_EQ(answer.outcome, outcome) << answer.error;
  EXPECT_EQ(answer.error, message);
}

TEST(CompletionStream, AnEndlessLineOrAnEventOverTheCapIsRefused) {
  HostileServer endless([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send(kStreamHead) && peer.send("data: ")) {
      const std::string block(4096, 'x');
      while (peer.send(block)) {
      }
    }
  });
  expect_refused(read_stream(endless), Outcome::kBadResponse,
                 "a server-sent event is larger than 64 KiB, the most accepted");
  // Many data lines of one event add up past the bound too.
  std::string lines;
  for (int i = 0; i < 70; ++i) {
    lines += "data: " + std::string(1024, 'y') + "\n";
  }
  expect_refused(read_stream(streaming(lines + "\n")), Outcome::kBadResponse,
                 "a server-sent event is larger than 64 KiB, the most accepted");
}

TEST(CompletionStream, AStreamWithoutDoneFailsWhetherItClosesOrHangs) {
  expect_refused(read_stream(streaming(text_chunk("a") + text_chunk("b"))), Outcome::kBadResponse,
                 "the stream ended without data: [DONE] (after 2 events)");
  HostileServer hanging([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send(kStreamHead) && peer.send(text_chunk("a"))) {
      peer.pause(milliseconds(60'000));
    }
  });
  expect_refused(read_stream(hanging, stream_limits(0.05)), Outcome::kTimeout,
                 "no complete response within 0.05 s (--timeout-s)");
}

TEST(CompletionStream, AByteAtATimeIsCutOffAtTheDeadline) {
  HostileServer trickle([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send(kStreamHead)) {
      const std::string body = text_chunk("a");
      for (size_t i = 0; peer.pause(milliseconds(2)) && peer.send(body.substr(i % body.size(), 1)); ++i) {
      }
    }
  });
  expect_refused(read_stream(trickle, stream_limits(0.05)), Outcome::kTimeout,
                 "no complete response within 0.05 s (--timeout-s)");
}

TEST(CompletionStream, AStreamOverTheResponseCapIsCutOff) {
  HostileServer endless([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send(kStreamHead)) {
      while (peer.send(text_chunk("a"))) {
      }
    }
  });
  expect_refused(read_stream(endless, stream_limits(5, 1024)), Outcome::kBadResponse,
                 "the response is larger than 1 KiB, the most accepted (--max-response-mib)");
}

TEST(CompletionStream, BadChunksAreRefusedWithTheirMessage) {
  expect_refused(read_stream(streaming("data: {oops\n\ndata: [DONE]\n\n")), Outcome::kBadResponse,
                 "the stream's event 1 is not JSON: \"{oops\"");
  expect_refused(read_stream(streaming(text_chunk("a") + "data: [1]\n\ndata: [DONE]\n\n")),
                 Outcome::kBadResponse, "the stream's event 2 is not a JSON object: an array of 1 item");
  expect_refused(read_stream(streaming("data: " + std::string(100, '[') + std::string(100, ']') + "\n\n")),
                 Outcome::kBadResponse, "the stream's event 1 is JSON nested deeper than 64 levels");
  expect_refused(
      read_stream(streaming(R"(data: {"choices": [], "usage": {"completion_tokens": 9223372036854775807}})"
                            "\n\ndata: [DONE]\n\n")),
      Outcome::kBadResponse,
      "the response's usage.completion_tokens must be a whole number from 0 to 1000000000, got "
      "9223372036854775807");
  expect_refused(read_stream(streaming(
                     R"(data: {"choices": [], "usage": {"completion_tokens": 1, "energy": {"energy_j": -1}}})"
                     "\n\ndata: [DONE]\n\n")),
                 Outcome::kBadResponse,
                 "the response's usage.energy.energy_j must be a number of joules from 0 to 1e+09, got -1");
  expect_refused(read_stream(streaming(text_chunk("a") +
                                       "data: {\"error\": {\"message\": \"out of \\u001b memory\"}}\n\n")),
                 Outcome::kBadResponse, "the server sent an error in the stream: out of \\x1b memory");
}

TEST(CompletionStream, AnErrorStatusOrOneJsonBodyIsNamed) {
  const std::string error = R"({"error": {"message": "nope"}})";
  expect_refused(read_stream(streaming(
                     error, fmt::format("HTTP/1.1 400 Bad\r\nContent-Length: {}\r\n\r\n", error.size()))),
                 Outcome::kHttpError, "HTTP 400: nope");
  const std::string whole = R"({"usage": {"completion_tokens": 3}})";
  expect_refused(
      read_stream(streaming(whole, fmt::format("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                               "Content-Length: {}\r\n\r\n",
                                               whole.size()))),
      Outcome::kBadResponse,
      "the server answered with one JSON body, not a stream of server-sent events (run with "
      "--no-stream)");
}

}  // namespace
}  // namespace joule::loadgen
