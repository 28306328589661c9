// SPDX-License-Identifier: Apache-2.0
// Requests over TLS through Connection (joule/http/connection.hpp): a loopback https server with a
// certificate made here (a P-256 key, for 127.0.0.1, trusted through ConnectionOptions::ca_cert_file), the
// same bounds as over plain TCP (an endless body stops at the cap, a trickle at the deadline), and the
// words for a certificate that is not trusted and for TLS aimed at a plain-http server.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "joule/http/connection.hpp"
#include "joule/http/url.hpp"

#include "http/hostile_server.hpp"

namespace joule::http {
namespace {

using Kind = Failure::Kind;

// A self-signed certificate for 127.0.0.1 and its key, written as PEM files in a fresh directory.
class Certificate {
 public:
  Certificate() {
    directory_ = std::filesystem::temp_directory_path() / ("joule-tls-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory_);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
    std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
    if (!key || !cert) {
      throw std::runtime_error("cannot make a key");
    }
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key.get());
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("127.0.0.1"),
                               -1, -1, 0);
    X509_set_issuer_name(cert.get(), name);
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, cert.get(), cert.get(), nullptr, nullptr, 0);
    X509_EXTENSION* alt = X509V3_EXT_conf_nid(nullptr, &context, NID_subject_alt_name, "IP:127.0.0.1");
    X509_add_ext(cert.get(), alt, -1);
    X509_EXTENSION_free(alt);
    X509_sign(cert.get(), key.get(), EVP_sha256());
    FILE* cert_file = std::fopen(cert_path().c_str(), "w");
    FILE* key_file = std::fopen(key_path().c_str(), "w");
    PEM_write_X509(cert_file, cert.get());
    PEM_write_PrivateKey(key_file, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(cert_file);
    std::fclose(key_file);
  }
  ~Certificate() { std::filesystem::remove_all(directory_); }
  Certificate(const Certificate&) = delete;
  Certificate& operator=(const Certificate&) = delete;

  std::string cert_path() const { return (directory_ / "cert.pem").string(); }
  std::string key_path() const { return (directory_ / "key.pem").string(); }

 private:
  std::filesystem::path directory_;
};

// An https server on loopback: /hello answers, /endless never ends its chunked body, /trickle sends a byte
// every 20 ms.
class TlsServer {
 public:
  explicit TlsServer(const Certificate& certificate)
      : server_(certificate.cert_path().c_str(), certificate.key_path().c_str()) {
    server_.Get("/hello", [](const httplib::Request& request, httplib::Response& response) {
      response.set_content("hello " + request.get_header_value("Authorization"), "text/plain");
    });
    server_.Get("/endless", [](const httplib::Request&, httplib::Response& response) {
      response.set_chunked_content_provider("text/plain", [](size_t, httplib::DataSink& sink) {
        const std::string chunk(4096, 'a');
        return sink.write(chunk.data(), chunk.size());
      });
    });
    server_.Get("/trickle", [this](const httplib::Request&, httplib::Response& response) {
      response.set_chunked_content_provider("text/plain", [this](size_t, httplib::DataSink& sink) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return !stopping_ && sink.write("a", 1);
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~TlsServer() {
    stopping_ = true;
    server_.stop();
    thread_.join();
  }
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  Url url() const { return parse_url(fmt::format("https://127.0.0.1:{}", port_)).value(); }

 private:
  httplib::SSLServer server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

RequestLimits limits(double timeout_s) {
  RequestLimits limits;
  limits.timeout_s = timeout_s;
  limits.connect_timeout_s = 2;
  limits.max_response_bytes = size_t{64} << 10;
  return limits;
}

TEST(HttpTls, RequestsOverTlsAreBoundedAsOverPlainTcp) {
  const Certificate certificate;
  TlsServer server(certificate);
  Connection connection(server.url(), {.ca_cert_file = certificate.cert_path()});
  const auto hello = connection.get("/hello", {bearer_authorization("t0ken")}, limits(5));
  ASSERT_TRUE(hello) << hello.error().message;
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hello Bearer t0ken");
  EXPECT_EQ(hello->header("content-type"), "text/plain");
  const auto again = connection.get("/hello", {basic_authorization("me", "pw")}, limits(5));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->body, "hello Basic bWU6cHc=");

  const auto endless = connection.get("/endless", {}, limits(5));
  ASSERT_FALSE(endless);
  EXPECT_EQ(endless.error().kind, Kind::kTooLarge);
  EXPECT_EQ(endless.error().message, "the response is larger than 64 KiB, the most accepted");

  const auto start = std::chrono::steady_clock::now();
  const auto trickle = connection.get("/trickle", {}, limits(0.08));
  ASSERT_FALSE(trickle);
  EXPECT_EQ(trickle.error().kind, Kind::kTimeout);
  EXPECT_EQ(trickle.error().message, "no complete response within 0.08 s");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
}

TEST(HttpTls, AnUntrustedCertificateIsRefusedWithOpenSslsReason) {
  const Certificate certificate;
  TlsServer server(certificate);
  Connection connection(server.url());  // the system's CAs: the certificate is its own issuer
  const auto refused = connection.get("/hello", {}, limits(5));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, Kind::kTls);
  EXPECT_EQ(
      refused.error().message,
      "the server's TLS certificate could not be verified (untrusted, expired, or for another host name): "
      "self-signed certificate");
}

TEST(HttpTls, TlsAimedAtAPlainHttpServerSaysSo) {
  test::HostileServer server([](test::HostileServer::Peer& peer) {
    if (peer.read_some()) {
      peer.send("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
  });
  Connection connection(parse_url(fmt::format("https://127.0.0.1:{}", server.port())).value());
  const auto refused = connection.get("/", {}, limits(5));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, Kind::kTls);
  EXPECT_EQ(refused.error().message, "TLS handshake failed: is the server plain http?");
}

}  // namespace
}  // namespace joule::http
