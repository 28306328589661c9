// SPDX-License-Identifier: Apache-2.0
// URLs (joule/http/url.hpp) and retries (joule/http/retry.hpp): what parses and what each refusal says; which
// outcomes are tried again, and that a retry goes out on a fresh attempt against a loopback server.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/http/retry.hpp"
#include "joule/http/url.hpp"

#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using test::HostileServer;

TEST(HttpUrl, ParsesSchemeHostPortAndPathPrefix) {
  const auto api = parse_url("https://api.electricitymap.org/v3/");
  ASSERT_TRUE(api) << api.error().message;
  EXPECT_TRUE(api->tls());
  EXPECT_EQ(api->host, "api.electricitymap.org");
  EXPECT_EQ(api->port, 443);
  EXPECT_EQ(api->origin, "https://api.electricitymap.org");
  EXPECT_EQ(api->path_prefix, "/v3");
  const auto local = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(local);
  EXPECT_FALSE(local->tls());
  EXPECT_EQ(local->port, 8080);
  EXPECT_EQ(local->origin, "http://127.0.0.1:8080");
  EXPECT_EQ(local->path_prefix, "");
  EXPECT_EQ(parse_url("http://example.org")->port, 80);
  const auto v6 = parse_url("http://[::1]:9000/x");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9000);
  EXPECT_EQ(v6->origin, "http://[::1]:9000");
}

TEST(HttpUrl, RefusalsSayWhatIsWrong) {
  using UrlKind = UrlError::Kind;
  const std::vector<std::tuple<std::string, UrlKind, std::string>> cases = {
      {"ftp://h", UrlKind::kScheme, "must start with http:// or https://"},
      {"127.0.0.1:80", UrlKind::kScheme, "must start with http:// or https://"},
      {"http://", UrlKind::kHost, "has no host"},
      {"http://user@h:1", UrlKind::kHost, "has no host"},
      {"http://[::1", UrlKind::kHost, "has no host"},
      {"http://h:99999", UrlKind::kPort, "has a port that is not a number from 1 to 65535: '99999'"},
      {"http://h:", UrlKind::kPort, "has a port that is not a number from 1 to 65535: ''"},
      {"http://h:8o/", UrlKind::kPort, "has a port that is not a number from 1 to 65535: '8o'"},
  };
  for (const auto& [text, kind, message] : cases) {
    const auto refused = parse_url(text);
    ASSERT_FALSE(refused) << text;
    EXPECT_EQ(refused.error().kind, kind) << text;
    EXPECT_EQ(refused.error().message, message) << text;
  }
}

TEST(HttpRetry, OnlyOutcomesWithoutAFinalAnswerAreTriedAgain) {
  EXPECT_TRUE(retryable({Failure::Kind::kConnect, ""}));
  EXPECT_TRUE(retryable({Failure::Kind::kTimeout, ""}));
  EXPECT_TRUE(retryable({Failure::Kind::kTls, ""}));
  EXPECT_FALSE(retryable({Failure::Kind::kTooLarge, ""}));
  EXPECT_TRUE(retryable_status(503));
  EXPECT_FALSE(retryable_status(500));
  EXPECT_FALSE(retryable_status(200));

  const RetryPolicy policy{4, std::chrono::milliseconds(0), std::chrono::milliseconds(0)};
  std::vector<bool> lasts;
  const auto statuses = [&](std::vector<int> answers) {
    lasts.clear();
    return with_retries(policy, [&](int attempt, bool last) -> tl::expected<Response, Failure> {
      lasts.push_back(last);
      return Response{answers[static_cast<size_t>(attempt)], "", {}};
    });
  };
  EXPECT_EQ(statuses({503, 502, 200, 200})->status, 200);
  EXPECT_EQ(lasts, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(statuses({503, 503, 503, 503})->status, 503);  // the last answer, whatever it says
  EXPECT_EQ(lasts, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(statuses({500, 200, 200, 200})->status, 500);
  EXPECT_EQ(lasts.size(), 1u);
  int calls = 0;
  const auto too_large = with_retries(policy, [&](int, bool) -> tl::expected<Response, Failure> {
    ++calls;
    return tl::make_unexpected(Failure{Failure::Kind::kTooLarge, "big"});
  });
  EXPECT_FALSE(too_large);
  EXPECT_EQ(calls, 1);
}

TEST(HttpRetry, ARetryReachesAServerThatClosedTheFirstConnection) {
  // The first connection is closed without an answer; the second gets one.
  HostileServer server([](HostileServer::Peer& peer) {
    static std::atomic<int> connections{0};
    if (peer.read_request() && connections.fetch_add(1) > 0) {
      peer.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
  });
  Connection connection(parse_url(server.url()).value());
  RequestLimits limits;
  limits.timeout_s = 5;
  int attempts = 0;
  const auto outcome =
      with_retries({3, std::chrono::milliseconds(1), std::chrono::milliseconds(1)}, [&](int, bool) {
        ++attempts;
        return connection.get("/", {}, limits);
      });
  ASSERT_TRUE(outcome) << outcome.error().message;
  EXPECT_EQ(outcome->body, "ok");
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(server.connections(), 2);
}

}  // namespace
}  // namespace joule::http
