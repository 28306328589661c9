// SPDX-License-Identifier: Apache-2.0
#include "network.hpp"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "joule/core/host_port.hpp"

namespace joule::daemon {

namespace {

constexpr int kNetworkBacklog = 1024;
// The private key is read here only to check its file; OpenSSL reads it again by path.
constexpr size_t kMaxKeyFileBytes = size_t{1} << 20;

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
  }
  return false;
}

std::string address_text(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(v4->sin_port));
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(v6->sin6_port));
  }
  return "unknown";
}

}  // namespace

std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return "unknown";
  }
  return address_text(reinterpret_cast<const sockaddr*>(&address));
}

Result<NetworkListener> NetworkListener::open(const std::string& text, bool plain) {
  const auto [host, port] = JOULE_TRY(parse_host_port(text, "--listen", 9700));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int error = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); error != 0) {
    return fail(ErrorCode::kIo, "--listen {}: cannot resolve {}: {}", text, host, ::gai_strerror(error));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  if (plain && !is_loopback(found->ai_addr)) {
    return fail(ErrorCode::kInvalidArgument,
                "--listen {}: plain TCP (no --tls-cert) is allowed only on a loopback address (127.0.0.1, "
                "[::1]); {} is not one: give the daemon a certificate (docs/fleet.md)",
                text, address_text(found->ai_addr));
  }
  NetworkListener listener;
  listener.plain_ = plain;
  listener.fd_ = UniqueFd(::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.fd_.valid()) {
    return fail(ErrorCode::kIo, "--listen {}: cannot create a socket: {}", text, std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (found->ai_family == AF_INET6) {
    ::setsockopt(listener.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  if (::bind(listener.fd(), found->ai_addr, found->ai_addrlen) != 0) {
    return fail(ErrorCode::kIo, "--listen {}: cannot bind {}: {}", text, address_text(found->ai_addr),
                std::strerror(errno));
  }
  if (::listen(listener.fd(), kNetworkBacklog) != 0) {
    return fail(ErrorCode::kIo, "--listen {}: cannot listen: {}", text, std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bound), &length);
  listener.address_ = address_text(reinterpret_cast<const sockaddr*>(&bound));
  return listener;
}

Result<NetworkSecurity> NetworkSecurity::load(const NetworkOptions& options, uid_t daemon_uid) {
  NetworkSecurity security;
  const bool has_certificate = !options.tls_certificate_file.empty() || !options.tls_private_key_file.empty();
  if (has_certificate && (options.tls_certificate_file.empty() || options.tls_private_key_file.empty())) {
    return fail(ErrorCode::kInvalidArgument, "--tls-cert and --tls-key go together: give both or neither");
  }
  if (!has_certificate && !options.allow_plain_loopback) {
    return fail(ErrorCode::kInvalidArgument,
                "--listen needs --tls-cert and --tls-key: the daemon speaks TLS on the network (plain TCP "
                "only on loopback, with --allow-plain-loopback)");
  }
  if (!has_certificate && !options.tls_client_ca_file.empty()) {
    return fail(ErrorCode::kInvalidArgument, "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS)");
  }
  if (options.tokens_file.empty() && options.tls_client_ca_file.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "--listen needs --tokens FILE or --tls-client-ca FILE: without either no network client "
                "could prove who it is");
  }
  if (!options.tokens_file.empty()) {
    auto tokens = TokenTable::load(options.tokens_file, daemon_uid);
    if (!tokens) {
      return fail(tokens.error().code(), "--tokens: {}", tokens.error().message());
    }
    security.tokens = std::move(*tokens);
  }
  if (has_certificate) {
    const auto key = read_private_file(options.tls_private_key_file,
                                       {"TLS private key", "whoever reads it can pose as the daemon"},
                                       daemon_uid, kMaxKeyFileBytes);
    if (!key) {
      return fail(key.error().code(), "--tls-key: {}", key.error().message());
    }
    auto context = http::TlsContext::server(
        {options.tls_certificate_file, options.tls_private_key_file, options.tls_client_ca_file});
    if (!context) {
      return fail(context.error().code(), "--tls-cert/--tls-key/--tls-client-ca: {}",
                  context.error().message());
    }
    security.tls = std::move(*context);
  }
  return security;
}

std::string NetworkSecurity::describe(const NetworkOptions& options) const {
  std::string text = tls ? "TLS" : "plain TCP (loopback only)";
  if (tls && tls->asks_client_certificate()) {
    text += fmt::format(", client certificates of {}", options.tls_client_ca_file);
  }
  text += tokens ? fmt::format("; clients: {}", tokens->describe()) : std::string("; no token file");
  return text;
}

}  // namespace joule::daemon
