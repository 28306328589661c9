// SPDX-License-Identifier: Apache-2.0
// TLS streams on sockets of the caller's (joule/http/tls.hpp), both ends over a socket pair: mutual TLS and
// the client's verified name, a client without a certificate, and each refusal in words — a certificate of
// another authority, an expired one, a server certificate for another address, a peer speaking no TLS — and
// the files a context cannot use.
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "joule/http/tls.hpp"

#include "test_pki.hpp"

namespace joule::http {
namespace {

using joule::testing::TestPki;

struct SocketPair {
  SocketPair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      throw std::runtime_error("socketpair");
    }
  }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;
  int fds[2] = {-1, -1};
};

// Blocking sockets: every step completes or fails.
Result<void> complete(TlsStream& stream) {
  const auto wait = JOULE_TRY(stream.handshake());
  if (wait != TlsWait::kNothing) {
    return fail(ErrorCode::kInternal, "a blocking handshake asked to wait");
  }
  return {};
}

struct Ends {
  Result<void> server = {};
  Result<void> client = {};
  std::string server_heard;  // what the server read after its handshake
  std::string client_heard;  // what the client read after sending "ping\n"
  std::string peer_name;     // the client's name as the server verified it
};

// Runs a handshake between `server_context` and `client_context` (checking the name `host`), then a ping and
// its echo.
Ends exchange(const std::shared_ptr<TlsContext>& server_context,
              const std::shared_ptr<TlsContext>& client_context, const std::string& host = "127.0.0.1") {
  SocketPair pair;
  Ends ends;
  auto server_end = std::async(std::launch::async, [&] {
    auto stream = TlsStream::server(server_context, pair.fds[0]);
    if (!stream) {
      ends.server = tl::make_unexpected(stream.error());
      return;
    }
    ends.server = complete(**stream);
    if (!ends.server) {
      ::shutdown(pair.fds[0], SHUT_RDWR);
      return;
    }
    ends.peer_name = (*stream)->peer_name();
    char buffer[64];
    const auto read = (*stream)->read(buffer, sizeof buffer);
    if (!read) {
      ends.server = tl::make_unexpected(read.error());
      return;
    }
    ends.server_heard.assign(buffer, read->bytes);
    (void)(*stream)->write("pong\n", 5);
    (*stream)->shutdown();
  });
  auto stream = TlsStream::client(client_context, pair.fds[1], host);
  if (!stream) {
    ends.client = tl::make_unexpected(stream.error());
  } else if ((ends.client = complete(**stream))) {
    (void)(*stream)->write("ping\n", 5);
    char buffer[64];
    const auto read = (*stream)->read(buffer, sizeof buffer);
    if (!read) {
      ends.client = tl::make_unexpected(read.error());
    } else {
      ends.client_heard.assign(buffer, read->bytes);
    }
  }
  if (!ends.client) {
    ::shutdown(pair.fds[1], SHUT_RDWR);
  }
  server_end.wait();
  return ends;
}

class TlsStreamTest : public ::testing::Test {
 protected:
  TlsStreamTest() : pki_("stream") {
    authority_ = pki_.authority("ca");
    server_files_ = pki_.issue("ca", "server", "node1", {"IP:127.0.0.1", "DNS:node1"});
    client_files_ = pki_.issue("ca", "client", "trainer-17");
  }

  std::shared_ptr<TlsContext> server_context(bool ask_client_certificate = true) {
    auto context = TlsContext::server({server_files_.certificate, server_files_.key,
                                       ask_client_certificate ? authority_.certificate : std::string()});
    EXPECT_TRUE(context) << context.error().message();
    return *context;
  }
  std::shared_ptr<TlsContext> client_context(const TestPki::Files& files) {
    auto context = TlsContext::client({files.certificate, files.key, authority_.certificate});
    EXPECT_TRUE(context) << context.error().message();
    return *context;
  }

  TestPki pki_;
  TestPki::Files authority_;
  TestPki::Files server_files_;
  TestPki::Files client_files_;
};

TEST_F(TlsStreamTest, MutualTlsNamesTheClientByItsVerifiedCertificate) {
  const auto ends = exchange(server_context(), client_context(client_files_));
  ASSERT_TRUE(ends.server) << ends.server.error().message();
  ASSERT_TRUE(ends.client) << ends.client.error().message();
  EXPECT_EQ(ends.peer_name, "trainer-17");
  EXPECT_EQ(ends.server_heard, "ping\n");
  EXPECT_EQ(ends.client_heard, "pong\n");
  EXPECT_TRUE(server_context()->asks_client_certificate());
}

TEST_F(TlsStreamTest, AClientWithoutACertificateIsServedUnnamed) {
  auto client = TlsContext::client({"", "", authority_.certificate});
  ASSERT_TRUE(client) << client.error().message();
  const auto ends = exchange(server_context(), *client, "node1");
  ASSERT_TRUE(ends.server) << ends.server.error().message();
  ASSERT_TRUE(ends.client) << ends.client.error().message();
  EXPECT_EQ(ends.peer_name, "");
  EXPECT_EQ(ends.client_heard, "pong\n");
}

TEST_F(TlsStreamTest, ACertificateOfAnotherAuthorityIsRefused) {
  pki_.authority("other-ca");
  const auto stranger = pki_.issue("other-ca", "stranger", "stranger");
  const auto ends = exchange(server_context(), client_context(stranger));
  ASSERT_FALSE(ends.server);
  EXPECT_EQ(ends.server.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(ends.server.error().message().find("unable to get local issuer certificate"), std::string::npos)
      << ends.server.error().message();
  ASSERT_FALSE(ends.client);
  EXPECT_NE(ends.client.error().message().find("alert"), std::string::npos) << ends.client.error().message();
}

TEST_F(TlsStreamTest, AnExpiredCertificateIsRefused) {
  const auto expired = pki_.issue("ca", "expired", "old-node", {}, -7200, -3600);
  const auto ends = exchange(server_context(), client_context(expired));
  ASSERT_FALSE(ends.server);
  EXPECT_EQ(ends.server.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(ends.server.error().message().find("certificate has expired"), std::string::npos)
      << ends.server.error().message();
  ASSERT_FALSE(ends.client);
}

TEST_F(TlsStreamTest, AnOversizedClientCertificateIsRefusedUnread) {
  // 4,000 names make a certificate of ~90 KB, over the 64 KiB a handshake message may hold.
  std::vector<std::string> names;
  for (int i = 0; i < 4000; ++i) {
    names.push_back("DNS:node" + std::to_string(i) + ".cluster.example");
  }
  const auto huge = pki_.issue("ca", "huge", "huge", names);
  const auto ends = exchange(server_context(), client_context(huge));
  ASSERT_FALSE(ends.server);
  EXPECT_NE(ends.server.error().message().find("excessive message size"), std::string::npos)
      << ends.server.error().message();
  ASSERT_FALSE(ends.client);
}

TEST_F(TlsStreamTest, AServerCertificateForAnotherAddressIsRefusedByTheClient) {
  const auto ends = exchange(server_context(false), client_context(client_files_), "127.0.0.9");
  ASSERT_FALSE(ends.client);
  EXPECT_EQ(ends.client.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(ends.client.error().message().find("IP address mismatch"), std::string::npos)
      << ends.client.error().message();
}

TEST_F(TlsStreamTest, APeerSpeakingNoTlsFailsTheHandshakeInWords) {
  SocketPair pair;
  auto stream = TlsStream::server(server_context(), pair.fds[0]);
  ASSERT_TRUE(stream);
  const std::string plain = "{\"op\":\"hello\",\"protocol\":1}\n";
  ASSERT_EQ(::write(pair.fds[1], plain.data(), plain.size()), static_cast<ssize_t>(plain.size()));
  const auto wait = (*stream)->handshake();
  ASSERT_FALSE(wait);
  EXPECT_EQ(wait.error().code(), ErrorCode::kIo);
  EXPECT_NE(wait.error().message().find("TLS handshake: "), std::string::npos) << wait.error().message();
}

TEST_F(TlsStreamTest, FilesAContextCannotUseAreNamed) {
  const auto missing = TlsContext::server({"/nonexistent/cert.pem", server_files_.key, ""});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(missing.error().message().find("cannot use the certificate /nonexistent/cert.pem"),
            std::string::npos)
      << missing.error().message();
  const auto mismatched = TlsContext::server({server_files_.certificate, client_files_.key, ""});
  ASSERT_FALSE(mismatched);
  EXPECT_NE(mismatched.error().message().find("cannot use the private key " + client_files_.key +
                                              ": key values mismatch"),
            std::string::npos)
      << mismatched.error().message();
  const auto not_pem = TlsContext::client({"", "", server_files_.key});
  ASSERT_FALSE(not_pem);
  EXPECT_NE(not_pem.error().message().find("cannot use the certificate authority"), std::string::npos)
      << not_pem.error().message();
  const auto no_certificate = TlsContext::server({"", "", authority_.certificate});
  ASSERT_FALSE(no_certificate);
  EXPECT_NE(no_certificate.error().message().find("needs a certificate"), std::string::npos);
}

}  // namespace
}  // namespace joule::http
