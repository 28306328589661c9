// SPDX-License-Identifier: Apache-2.0
// The words for what went wrong with a request (joule/http/errors.hpp), and that every HTTP client in joule
// uses them: a TLS client aimed at a plain-http server says so, in the carbon providers and in the client
// of joule serve alike.
#include "joule/http/errors.hpp"

#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "joule/client/client.hpp"

#include "carbon/http.hpp"
#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using test::HostileServer;
using namespace std::string_literals;

TEST(HttpErrors, TransportFailuresAreSentencesNotHttplibNames) {
  EXPECT_EQ(describe_transport_error(httplib::Error::SSLConnection),
            "TLS handshake failed: is the server plain http?");
  EXPECT_EQ(describe_transport_error(httplib::Error::Connection), "connection refused or host unreachable");
  EXPECT_EQ(describe_transport_error(httplib::Error::ConnectionTimeout),
            "the connection timed out (no answer from the host)");
  EXPECT_EQ(
      describe_transport_error(httplib::Error::Read),
      "no complete response (the connection closed, the server went silent past the read timeout, or the "
      "answer is not HTTP)");
  EXPECT_EQ(describe_transport_error(httplib::Error::Write),
            "the request could not be sent (the connection broke)");
  EXPECT_EQ(describe_transport_error(httplib::Error::SSLServerVerification),
            "the server's TLS certificate could not be verified (untrusted, expired, or for another host "
            "name)");
  EXPECT_EQ(describe_transport_error(static_cast<httplib::Error>(99)),
            "transport failure (cpp-httplib error 99)");
  for (int code = 0; code <= static_cast<int>(httplib::Error::ConnectionTimeout); ++code) {
    const auto error = static_cast<httplib::Error>(code);
    EXPECT_NE(describe_transport_error(error), httplib::to_string(error)) << code;
    EXPECT_NE(describe_transport_error(error).find(' '), std::string::npos) << code;
  }
}

TEST(HttpErrors, ServerTextIsAPrintableExcerpt) {
  // Escape sequences, CR/LF (a forged second line), NUL and a long message: escaped and cut.
  const std::string hostile = "\x1b[31mred\r\nFAKE: ok\0tail"s + std::string(100'000, 'x');
  // 31 characters of escaped text, then x up to 200.
  const std::string expected = "\\x1b[31mred\\r\\nFAKE: ok\\x00tail" + std::string(169, 'x') + "…";
  EXPECT_EQ(server_error_text(nlohmann::json({{"error", {{"message", hostile}}}}).dump()), expected);
  EXPECT_EQ(server_error_text(nlohmann::json({{"detail", hostile}}).dump()), expected);
  EXPECT_EQ(server_error_text(hostile), expected);  // not JSON: the body itself
  EXPECT_EQ(server_error_text(R"({"error": {"message": "thirteen is unlucky"}})"), "thirteen is unlucky");
  EXPECT_EQ(server_error_text(R"({"message": "no"})", 40), "no");
  EXPECT_EQ(server_error_text(""), "empty body");
  EXPECT_EQ(server_error_text("abcdef", 3), "abc…");
  // 1 MB of nesting is not parsed into a million levels: the body is quoted as text.
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_EQ(server_error_text(deep, 8), "[[[[[[[[…");
}

TEST(HttpErrors, SizesAreWrittenAsPeopleReadThem) {
  EXPECT_EQ(format_byte_count(size_t{8} << 20), "8 MiB");
  EXPECT_EQ(format_byte_count(size_t{64} << 10), "64 KiB");
  EXPECT_EQ(format_byte_count(65537), "65537 bytes");
  EXPECT_EQ(format_byte_count(0), "0 bytes");
}

TEST(HttpErrors, EveryClientSaysATlsHandshakeWithAPlainHttpServerFailed) {
  // A plain-http server that answers whatever arrives (here a TLS ClientHello) with a 400 at once, as web
  // servers do, so that the handshake fails at once.
  HostileServer server([](HostileServer::Peer& peer) {
    if (peer.read_some()) {
      peer.send("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
  });
  const std::string https = fmt::format("https://127.0.0.1:{}", server.port());

  // The carbon providers' GET.
  const auto base = carbon::detail::parse_base_url(https + "/v3", "ElectricityMaps");
  ASSERT_TRUE(base) << base.error().message();
  carbon::detail::HttpGet get;
  get.path = "/carbon-intensity/latest";
  get.timeout_s = 2;
  const auto carbon_answer = carbon::detail::get_json(*base, get, "ElectricityMaps");
  ASSERT_FALSE(carbon_answer);
  EXPECT_EQ(
      carbon_answer.error().message(),
      fmt::format("ElectricityMaps: cannot reach {}/v3/carbon-intensity/latest: TLS handshake failed: is "
                  "the server plain http?",
                  https));

  // The client of joule serve.
  client::ClientOptions options;
  options.attempts = 1;
  options.connect_timeout = std::chrono::milliseconds(2000);
  options.timeout = std::chrono::milliseconds(2000);
  auto joule_client = client::Client::connect(https, options);
  ASSERT_TRUE(joule_client) << joule_client.error().message();
  const auto call = joule_client->call("GET", "/jobs", "", "application/json");
  ASSERT_FALSE(call);
  EXPECT_EQ(
      call.error().message(),
      fmt::format("GET /jobs: cannot reach {}: TLS handshake failed: is the server plain http? (1 attempt)",
                  https));
}

}  // namespace
}  // namespace joule::http
