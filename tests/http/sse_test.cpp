// SPDX-License-Identifier: Apache-2.0
// Server-sent events (joule/http/sse.hpp) and a body streamed to a BodySink (Connection::request with a
// sink): framing split anywhere, the bound on an event, and the stream under the request's deadline and cap.
#include "joule/http/sse.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/http/connection.hpp"

#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using test::HostileServer;

// The events of `stream` fed in pieces of `piece` bytes, and finished.
std::vector<std::string> events_of(std::string_view stream, size_t piece, size_t max_event_bytes = 64) {
  SseParser parser(max_event_bytes);
  std::vector<std::string> events;
  const auto on_event = [&](std::string_view data) -> Result<void> {
    events.emplace_back(data);
    return {};
  };
  for (size_t i = 0; i < stream.size(); i += piece) {
    EXPECT_TRUE(parser.feed(stream.substr(i, piece), on_event));
  }
  EXPECT_TRUE(parser.finish(on_event));
  return events;
}

TEST(SseParser, ReadsEventsWhereverThePiecesAreCut) {
  const std::string stream =
      ": comment\r\nevent: x\r\nid: 1\r\ndata: one\r\n\r\ndata:two\rdata:  three\r\rretry: 5\n\n"
      "data\n\ndata: last";
  const std::vector<std::string> expected = {"one", "two\n three", "", "last"};
  for (const size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
    EXPECT_EQ(events_of(stream, piece), expected) << "pieces of " << piece;
  }
  EXPECT_TRUE(events_of("\n\n: only comments\n\nevent: y\n\n", 1).empty());
}

TEST(SseParser, RefusesALineOrAnEventOverTheBoundAndStaysRefused) {
  SseParser parser(16);
  const auto ignore = [](std::string_view) -> Result<void> { return {}; };
  EXPECT_TRUE(parser.feed("data: 0123456789", ignore));  // 16 bytes: at the bound
  const auto line = parser.feed("x", ignore);
  ASSERT_FALSE(line);
  EXPECT_EQ(line.error().message(), "a server-sent event is larger than 16 bytes, the most accepted");
  EXPECT_FALSE(parser.feed("\n\n", ignore));
  EXPECT_FALSE(parser.finish(ignore));
  // Lines each within the bound, adding up past it in one event.
  SseParser lines(16);
  EXPECT_TRUE(lines.feed("data: 01234567\n", ignore));
  const auto event = lines.feed("data: 01234567\n", ignore);
  ASSERT_FALSE(event);
  EXPECT_EQ(event.error().message(), "a server-sent event is larger than 16 bytes, the most accepted");
  EXPECT_LE(lines.buffered_bytes(), 16u);
}

TEST(SseParser, AnEventHandlersErrorStopsTheParse) {
  SseParser parser;
  int seen = 0;
  const auto stop = [&](std::string_view) -> Result<void> {
    ++seen;
    return fail(ErrorCode::kParse, "no more");
  };
  const auto fed = parser.feed("data: a\n\ndata: b\n\n", stop);
  ASSERT_FALSE(fed);
  EXPECT_EQ(fed.error().message(), "no more");
  EXPECT_EQ(seen, 1);
}

RequestLimits stream_limits(double timeout_s, size_t max_bytes = kDefaultMaxResponseBytes) {
  RequestLimits limits;
  limits.timeout_s = timeout_s;
  limits.connect_timeout_s = 1;
  limits.max_response_bytes = max_bytes;
  return limits;
}

TEST(HttpConnectionSink, HandsA2xxBodyOverInPiecesAndHoldsAnErrorBody) {
  HostileServer server([](HostileServer::Peer& peer) {
    while (peer.read_request()) {
      const bool ok = peer.target() == "POST /ok";
      peer.send(ok ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                   : "HTTP/1.1 404 X\r\nContent-Length: 4\r\n\r\ngone");
    }
  });
  Connection connection("127.0.0.1", server.port());
  std::string received;
  const BodySink sink = [&](std::string_view piece) {
    received.append(piece);
    return true;
  };
  const auto ok = connection.request("POST", "/ok", "", "", {}, stream_limits(5), sink);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(received, "abcde");
  EXPECT_TRUE(ok->body.empty());
  const auto missing = connection.request("POST", "/missing", "", "", {}, stream_limits(5), sink);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, "gone");
  EXPECT_EQ(received, "abcde");
}

TEST(HttpConnectionSink, TheSinkCanStopAndTheCapAndDeadlineBoundTheStream) {
  HostileServer endless([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")) {
      const std::string block(1024, 'a');
      while (peer.send(block)) {
      }
    }
  });
  const auto run = [&](const RequestLimits& limits, const BodySink& sink) {
    Connection connection("127.0.0.1", endless.port());
    return connection.request("POST", "/", "", "", {}, limits, sink);
  };
  const auto stopped = run(stream_limits(5), [](std::string_view) { return false; });
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().kind, Failure::Kind::kStopped);
  size_t seen = 0;
  const auto capped = run(stream_limits(5, 4096), [&](std::string_view piece) {
    seen += piece.size();
    return true;
  });
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error().message, "the response is larger than 4 KiB, the most accepted");
  EXPECT_LE(seen, 4096u);
  HostileServer trickle([](HostileServer::Peer& peer) {
    if (peer.read_request() && peer.send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")) {
      while (peer.pause(std::chrono::milliseconds(2)) && peer.send("a")) {
      }
    }
  });
  Connection connection("127.0.0.1", trickle.port());
  const auto late =
      connection.request("POST", "/", "", "", {}, stream_limits(0.05), [](std::string_view) { return true; });
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().message, "no complete response within 0.05 s");
}

}  // namespace
}  // namespace joule::http
