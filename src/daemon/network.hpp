// SPDX-License-Identifier: Apache-2.0
// The daemon's network listener (private to joule_daemon): listening TCP sockets, and what authenticates the
// clients that connect to them (TLS context, token file), loaded at start and again on SIGHUP.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "joule/core/error.hpp"
#include "joule/daemon/network.hpp"
#include "joule/daemon/tokens.hpp"
#include "joule/http/tls.hpp"

#include "safe_files.hpp"

namespace joule::daemon {

/// A bound, listening, non-blocking TCP socket.
class NetworkListener {
 public:
  /// @param text "HOST:PORT" as --listen gives it (port 0: any free port).
  /// @param plain: no TLS; then the address must be a loopback one.
  /// @return kInvalidArgument (not HOST:PORT, plain TCP on an address that is not loopback), kIo (cannot
  /// resolve, bind or listen: the address and the system's reason).
  static Result<NetworkListener> open(const std::string& text, bool plain);
  int fd() const { return fd_.get(); }
  /// @return the bound address, e.g. "127.0.0.2:9700" (with the port chosen for port 0).
  const std::string& address() const { return address_; }
  bool plain() const { return plain_; }

 private:
  NetworkListener() = default;
  UniqueFd fd_;
  std::string address_;
  bool plain_ = false;
};

/// What authenticates network clients. Immutable once loaded; SIGHUP loads a new one for new connections.
struct NetworkSecurity {
  std::shared_ptr<const http::TlsContext> tls;  ///< null: plain TCP (--allow-plain-loopback)
  std::optional<TokenTable> tokens;             ///< null: no token file (certificates only)

  /// Checks the options (a listener needs TLS unless plain loopback is allowed, and some way to
  /// authenticate: a token file or a client authority), reads the token file and the key as private files
  /// and makes the TLS context. @return the first error, naming its file and flag.
  static Result<NetworkSecurity> load(const NetworkOptions& options, uid_t daemon_uid);
  /// @return e.g. "TLS, client certificates of /etc/joule/ca.pem; tokens: trainer (read), …".
  std::string describe(const NetworkOptions& options) const;
};

/// @return "HOST:PORT" of the peer of the connected socket `fd` (IPv6 in brackets), or "unknown".
std::string peer_address(int fd);

}  // namespace joule::daemon
