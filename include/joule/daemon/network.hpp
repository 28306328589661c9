// SPDX-License-Identifier: Apache-2.0
// joule/daemon/network.hpp — the daemon's network listener (docs/fleet.md): the same protocol as on its Unix
// socket, over TLS, for clients on other hosts. A network client has no peer credentials: it proves who it is
// with a bearer token from the token file (joule/daemon/tokens.hpp) or a client certificate of the client
// authority, and its scope gives its right (read, or control for control and admin).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace joule::daemon {

struct NetworkOptions {
  /// Addresses to listen on, "HOST:PORT" or "[V6]:PORT" (--listen, repeatable); empty: the Unix socket only.
  std::vector<std::string> listen;
  /// The daemon's certificate chain and its private key, PEM (--tls-cert, --tls-key). The key file must be
  /// the daemon's user's (or root's) and readable by nobody else, like the token file.
  std::string tls_certificate_file;
  std::string tls_private_key_file;
  /// The authority of client certificates (--tls-client-ca): a client presenting one it signed, whose Common
  /// Name a `NAME SCOPE certificate` line of the token file names, is that client (mutual TLS). Empty: no
  /// client certificate is asked for.
  std::string tls_client_ca_file;
  /// The token file (--tokens): NAME SCOPE TOKEN lines (joule/daemon/tokens.hpp).
  std::string tokens_file;
  /// Plain TCP without TLS (--allow-plain-loopback): only on loopback addresses (127.0.0.0/8, ::1), for
  /// tests and SSH tunnels ending on the host; tokens still apply (sent in clear over loopback).
  bool allow_plain_loopback = false;
  /// TLS handshakes in progress at once (--max-handshakes); beyond it new connections wait in the listen
  /// backlog until one ends, so a flood of new connections costs established clients at most this many
  /// handshakes' work, bounded per pass (handshake_steps_per_pass).
  size_t max_handshakes = 64;
  /// Handshake steps the event loop runs per pass before it serves the established connections again.
  size_t handshake_steps_per_pass = 8;
};

}  // namespace joule::daemon
