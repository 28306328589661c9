// SPDX-License-Identifier: Apache-2.0
// The clients of joule/http's Connection: the carbon providers' GET and the client of joule serve, against
// hostile loopback servers. An endless or compressed body stops at the cap (Connection's), JSON is parsed
// with the depth limit, and the server's text reaches a message only as a short printable excerpt. Caps are
// 64 KiB, so each attack ends in milliseconds.
#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <zlib.h>

#include "joule/client/client.hpp"
#include "joule/http/connection.hpp"

#include "carbon/http.hpp"
#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using test::HostileServer;
using namespace std::string_literals;

constexpr size_t kCap = size_t{64} << 10;

// An answer with `status` and `body`, its length declared, the connection closed after it.
void answer(HostileServer::Peer& peer, int status, const std::string& body,
            const std::string& extra_headers = "") {
  peer.send(fmt::format("HTTP/1.1 {} X\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}", status,
                        body.size(), extra_headers, body));
}

// 1 MiB of zeros, deflated to about 1 KB: within the cap on the wire, 16 times over it decoded.
std::string packed_zeros() {
  const std::string zeros(size_t{1} << 20, '\0');
  uLongf size = compressBound(static_cast<uLong>(zeros.size()));
  std::string packed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &size, reinterpret_cast<const Bytef*>(zeros.data()),
                static_cast<uLong>(zeros.size()), 9) != Z_OK) {
    throw std::runtime_error("compress2 failed");
  }
  packed.resize(size);
  return packed;
}

const std::string kHostileText = "\x1b[2J\r\nFAKE: ok\0"s + std::string(20'000, 'y');
const std::string kHostileEscaped = "\\x1b[2J\\r\\nFAKE: ok\\x00";  // 23 characters
const std::string kHostileExcerpt = kHostileEscaped + std::string(177, 'y') + "…";
const std::string kDeep = std::string(10'000, '[') + std::string(10'000, ']');

// Answers by the last path segment: the attack it names.
void hostile_api(HostileServer::Peer& peer) {
  if (!peer.read_request()) {
    return;
  }
  const std::string target = peer.target();
  const std::string attack = target.substr(target.rfind('/') + 1);
  if (attack == "endless") {
    peer.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = fmt::format("1000\r\n{}\r\n", std::string(0x1000, 'a'));
    while (peer.send(chunk)) {
    }
  } else if (attack == "declared") {
    // A terabyte announced: refused before any of it is read (none is sent).
    peer.send("HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n");
  } else if (attack == "packed") {
    answer(peer, 200, packed_zeros(), "Content-Encoding: deflate\r\n");
  } else if (attack == "error") {
    answer(peer, 500, nlohmann::json({{"error", {{"message", kHostileText}}}}).dump());
  } else if (attack == "html") {
    answer(peer, 502, kHostileText);
  } else if (attack == "deep") {
    answer(peer, 200, kDeep);
  } else if (attack == "huge-number") {
    answer(peer, 200, R"({"points": [1, 1e999]})");
  } else if (attack == "not-json") {
    answer(peer, 200, "<html>\r\n<title>200 OK</title>");
  } else if (attack == "validation") {
    // FastAPI's shape with hostile entries: not objects, a loc that is not a list, a msg that is not text.
    answer(
        peer, 422,
        nlohmann::json(
            {{"detail",
              {1, "x", {{"loc", "body"}, {"msg", 5}}, {{"loc", {"body", "name"}}, {"msg", kHostileText}}}}})
            .dump());
  } else if (attack == "validations") {
    nlohmann::json detail = nlohmann::json::array();
    for (int i = 0; i < 1000; ++i) {
      detail.push_back({{"loc", {"body", fmt::format("f{}", i)}}, {"msg", "field required"}});
    }
    answer(peer, 422, nlohmann::json({{"detail", detail}}).dump());
  } else {
    answer(peer, 404, "{}");
  }
}

class CarbonGet : public ::testing::Test {
 protected:
  std::string get(const std::string& attack) {
    const auto base = carbon::detail::parse_base_url(server_.url() + "/v3", "ElectricityMaps");
    carbon::detail::HttpGet request;
    request.path = "/" + attack;
    request.timeout_s = 5;
    request.max_response_bytes = kCap;
    const auto answer = carbon::detail::get_json(*base, request, "ElectricityMaps");
    return answer ? "ok: " + answer->dump() : answer.error().message();
  }
  HostileServer server_{hostile_api};
};

TEST_F(CarbonGet, AnAnswerOverTheCapIsRefusedWhileReadingIt) {
  const std::string refused =
      "ElectricityMaps: GET /v3/{}: the response is larger than 64 KiB, the most accepted";
  EXPECT_EQ(get("endless"), fmt::format(fmt::runtime(refused), "endless"));
  EXPECT_EQ(get("declared"), fmt::format(fmt::runtime(refused), "declared"));
  EXPECT_EQ(get("packed"), fmt::format(fmt::runtime(refused), "packed"));
}

TEST_F(CarbonGet, TheServersTextIsAPrintableExcerptAndJsonIsDepthLimited) {
  EXPECT_EQ(get("error"), "ElectricityMaps: GET /v3/error: HTTP 500: " + kHostileExcerpt);
  EXPECT_EQ(get("html"), "ElectricityMaps: GET /v3/html: HTTP 502: " + kHostileExcerpt);
  EXPECT_EQ(get("deep"), "ElectricityMaps: GET /v3/deep: the response is JSON nested deeper than 64 levels");
  EXPECT_EQ(get("huge-number"),
            "ElectricityMaps: GET /v3/huge-number: the response is not usable JSON: points[1]: the number "
            "1e999 is out of range (a finite number within ±1.8e308 is expected)");
  EXPECT_EQ(
      get("not-json"),
      R"(ElectricityMaps: GET /v3/not-json: the response is not JSON: "<html>\r\n<title>200 OK</title>")");
}

class JouleClient : public ::testing::Test {
 protected:
  std::string status(const std::string& attack) {
    client::ClientOptions options;
    options.attempts = 3;
    options.backoff = std::chrono::milliseconds(1);
    options.timeout = std::chrono::milliseconds(5000);
    options.max_response_bytes = kCap;
    auto client = client::Client::connect(server_.url(), options);
    const auto answer = client->job_status(attack);
    return answer ? "ok: " + answer->document.dump() : answer.error().message();
  }
  HostileServer server_{hostile_api};
};

TEST_F(JouleClient, AnAnswerOverTheCapIsRefusedWhileReadingItAndNotRetried) {
  const std::string refused = "GET /jobs/{}: {}: the response is larger than 64 KiB, the most accepted";
  EXPECT_EQ(status("endless"), fmt::format(fmt::runtime(refused), "endless", server_.url()));
  EXPECT_EQ(server_.connections(), 1);  // 3 attempts allowed: an answer is not retried
  EXPECT_EQ(status("declared"), fmt::format(fmt::runtime(refused), "declared", server_.url()));
  EXPECT_EQ(status("packed"), fmt::format(fmt::runtime(refused), "packed", server_.url()));
}

TEST_F(JouleClient, TheServersTextIsAPrintableExcerptAndJsonIsDepthLimited) {
  EXPECT_EQ(status("error"), "GET /jobs/error: HTTP 500: " + kHostileExcerpt);
  EXPECT_EQ(status("deep"),
            "GET /jobs/deep: the server's answer (HTTP 200) is JSON nested deeper than 64 levels");
  EXPECT_EQ(
      status("not-json"),
      R"(GET /jobs/not-json: the server's answer (HTTP 200) is not JSON: "<html>\r\n<title>200 OK</title>")");
  // Entries of another shape are skipped (they made nlohmann throw), the text escaped and cut.
  EXPECT_EQ(status("validation"),
            "GET /jobs/validation: HTTP 422: ?; name: " + kHostileEscaped + std::string(168, 'y') + "…");
  // 1000 validation errors: the first few, cut at 200 characters.
  std::string joined;
  for (int i = 0; i < 20; ++i) {
    joined += fmt::format("{}f{}: field required", i == 0 ? "" : "; ", i);
  }
  EXPECT_EQ(status("validations"), "GET /jobs/validations: HTTP 422: " + joined.substr(0, 200) + "…");
}

}  // namespace
}  // namespace joule::http
