// SPDX-License-Identifier: Apache-2.0
// Bounded requests (joule/http/connection.hpp) against hostile loopback servers: endless bodies and header
// lines, declared lengths and decoded bodies over the cap, bytes trickled slower than the deadline, answers
// that are not HTTP. The caps and deadlines are small, so each attack ends in milliseconds.
#include "joule/http/connection.hpp"

#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <zlib.h>

#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using test::HostileServer;
using Kind = Failure::Kind;
using std::chrono::milliseconds;

constexpr size_t kSmallCap = size_t{64} << 10;

RequestLimits small_limits(double timeout_s = 5) {
  RequestLimits limits;
  limits.timeout_s = timeout_s;
  limits.connect_timeout_s = 1;
  limits.max_response_bytes = kSmallCap;
  return limits;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a hostile server's attack ends as: the failure, and how long the client took to give up.
struct Outcome {
  tl::expected<Response, Failure> result;
  double elapsed_s = 0;
};

Outcome post(const HostileServer& server, const RequestLimits& limits) {
  Connection connection("127.0.0.1", server.port());
  const auto start = std::chrono::steady_clock::now();
  auto result =
      connection.request("POST", "/v1/completions", R"({"prompt":"hi"})", "application/json", {}, limits);
  return {std::move(result), seconds_since(start)};
}

void expect_failure(const Outcome& outcome, Kind kind, const std::string& message) {
  ASSERT_FALSE(outcome.result) << "status " << outcome.result->status;
  EXPECT_EQ(outcome.result.error().kind, kind);
  EXPECT_EQ(outcome.result.error().message, message);
}

constexpr std::string_view kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(HttpConnection, ReadsWholeAnswersAndKeepsTheConnection) {
  HostileServer server([](HostileServer::Peer& peer) {
    while (peer.read_request()) {
      const std::string body = peer.target() == "GET /chunked" ? "" : R"({"ok":true})";
      if (body.empty()) {
        peer.send(std::string(kChunkedHead) + "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
      } else {
        peer.send(fmt::format("HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
      }
    }
  });
  Connection connection("127.0.0.1", server.port());
  const auto first =
      connection.request("POST", "/x", "{}", "application/json", {{"X-Test", "1"}}, small_limits());
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->status, 201);
  EXPECT_EQ(first->body, R"({"ok":true})");
  const auto second = connection.get("/chunked", {}, small_limits());
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(second->body, "abcde");
  EXPECT_EQ(server.connections(), 1);  // kept alive
  // A body of exactly the cap is whole (the status line and headers come on top).
  HostileServer exact([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send(fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", kSmallCap,
                          std::string(kSmallCap, 'x')));
  });
  const auto whole = post(exact, small_limits());
  ASSERT_TRUE(whole.result) << whole.result.error().message;
  EXPECT_EQ(whole.result->body.size(), kSmallCap);
}

TEST(HttpConnection, AnEndlessBodyIsCutOffAtTheCap) {
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    if (!peer.send(kChunkedHead)) {
      return;
    }
    const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 4096, std::string(4096, 'a'));
    while (peer.send(chunk)) {
    }
  });
  const auto outcome = post(server, small_limits(30));
  expect_failure(outcome, Kind::kTooLarge, "the response is larger than 64 KiB, the most accepted");
  EXPECT_LT(outcome.elapsed_s, 10) << "the cap, not the 30 s deadline, must end it";
}

TEST(HttpConnection, AnEndlessBodyWithoutLengthOrChunksIsCutOffAtTheCap) {
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    const std::string block(4096, 'b');
    while (peer.send(block)) {
    }
  });
  expect_failure(post(server, small_limits(30)), Kind::kTooLarge,
                 "the response is larger than 64 KiB, the most accepted");
}

TEST(HttpConnection, EndlessHeaderLinesAreCutOffAtTheCap) {
  // cpp-httplib limits the length of one header line, not their number; the head may add 64 KiB to the cap.
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("HTTP/1.1 200 OK\r\n");
    while (peer.send("X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")) {
    }
  });
  expect_failure(post(server, small_limits(30)), Kind::kTooLarge,
                 "the response is larger than 64 KiB, the most accepted");
}

TEST(HttpConnection, ADeclaredLengthOverTheCapIsRefusedBeforeTheBody) {
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\nabc");
    peer.pause(milliseconds(60'000));  // sends nothing more: only the declared length can end this early
  });
  const auto outcome = post(server, small_limits(30));
  expect_failure(outcome, Kind::kTooLarge, "the response is larger than 64 KiB, the most accepted");
  EXPECT_LT(outcome.elapsed_s, 10);
}

TEST(HttpConnection, ACompressedBodyIsCountedAsDecoded) {
  // 1 MiB of zeros is about 1 KB compressed: within the cap on the wire, 16 times over it decoded.
  const std::string zeros(size_t{1} << 20, '\0');
  uLongf packed_size = compressBound(static_cast<uLong>(zeros.size()));
  std::string packed(packed_size, '\0');
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                      reinterpret_cast<const Bytef*>(zeros.data()), static_cast<uLong>(zeros.size()), 9),
            Z_OK);
  packed.resize(packed_size);
  ASSERT_LT(packed.size(), kSmallCap / 8);
  HostileServer server([&packed](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send(fmt::format("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{}",
                          packed.size(), packed));
  });
  expect_failure(post(server, small_limits()), Kind::kTooLarge,
                 "the response is larger than 64 KiB, the most accepted");
}

TEST(HttpConnection, AHeaderTrickledSlowerThanTheDeadlineIsCutOffAtIt) {
  // One byte every 10 ms: each read succeeds long before any per-read timeout, so only a deadline for the
  // whole request ends it (the status line itself never completes).
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    for (size_t i = 0; peer.pause(milliseconds(10)) && peer.send(head.substr(i % head.size(), 1)); ++i) {
    }
  });
  const auto outcome = post(server, small_limits(0.08));
  expect_failure(outcome, Kind::kTimeout, "no complete response within 0.08 s");
  EXPECT_GE(outcome.elapsed_s, 0.08);
  EXPECT_LT(outcome.elapsed_s, 5) << "the trickle alone would never end";
}

TEST(HttpConnection, ABodyTrickledSlowerThanTheDeadlineIsCutOffAtIt) {
  HostileServer server([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    while (peer.pause(milliseconds(10)) && peer.send("x")) {
    }
  });
  const auto outcome = post(server, small_limits(0.08));
  expect_failure(outcome, Kind::kTimeout, "no complete response within 0.08 s");
  EXPECT_LT(outcome.elapsed_s, 5);
}

TEST(HttpConnection, TransportFailuresSayWhatHappened) {
  // Nothing listens on a port a server just gave back.
  int closed_port = 0;
  {
    HostileServer gone([](HostileServer::Peer&) {});
    closed_port = gone.port();
  }
  Connection refused("127.0.0.1", closed_port);
  const auto no_server = refused.get("/", {}, small_limits());
  ASSERT_FALSE(no_server);
  EXPECT_EQ(no_server.error().kind, Kind::kConnect);
  EXPECT_EQ(no_server.error().message, "connection refused or host unreachable");

  HostileServer not_http([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("SSH-2.0-OpenSSH_9.2\r\n");
  });
  expect_failure(post(not_http, small_limits()), Kind::kReceive,
                 "the connection closed before a complete response arrived (or the answer is not HTTP)");

  HostileServer hangs_up([](HostileServer::Peer& peer) {
    peer.read_request();
    peer.send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  });
  expect_failure(post(hangs_up, small_limits()), Kind::kReceive,
                 "the connection closed before a complete response arrived (or the answer is not HTTP)");
}

}  // namespace
}  // namespace joule::http
