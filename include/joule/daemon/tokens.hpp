// SPDX-License-Identifier: Apache-2.0
// joule/daemon/tokens.hpp — the bearer tokens of the daemon's network listener (docs/fleet.md): who may do
// what when no peer credentials exist. A token file is root's own and private; each line names a client,
// its scope and its token:
//
//     # NAME       SCOPE     TOKEN (at least 32 characters: `openssl rand -hex 32`)
//     trainer-17   read      3f9c0d2e6b8a41f7a5c3e9d1b7f4a2c6e8d0b3f5a7c9e1d3b5f7a9c1e3d5f7a9
//     autopilot    control   9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
//     node-agent   read      certificate
//
// The word `certificate` in the token's column names a client that proves itself with a certificate of the
// daemon's client authority (--tls-client-ca) whose Common Name is NAME: mutual TLS, no secret in the file.
//
// Scopes map onto the daemon's rights: read (energy, power, telemetry, CPU counters, streams), control
// (also power limits and SM clocks), admin (control, and the daemon's own operations).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "joule/core/error.hpp"
#include "joule/device/daemon_protocol.hpp"

namespace joule::daemon {

/// What a token may do.
enum class Scope {
  kRead,     ///< energy, power, telemetry, CPU counters, streams
  kControl,  ///< also power limits and SM clocks
  kAdmin,    ///< control, and the daemon's own operations
};

/// @return "read", "control" or "admin".
std::string_view to_string(Scope scope);
/// @return the scope named `text` (as to_string writes it), or nullopt.
std::optional<Scope> scope_from_string(std::string_view text);
/// @return the daemon right a scope grants (admin: control).
device::daemon_protocol::Right right_of(Scope scope);

/// One client of the network listener.
struct TokenEntry {
  std::string name;  ///< the client's name in audit lines and whoami ([A-Za-z0-9._@-], 1 to 31 characters)
  Scope scope = Scope::kRead;
  std::string token;            ///< the secret (32 to 256 printable characters, no space): never printed
  bool by_certificate = false;  ///< `certificate`: no token; a verified client certificate named `name`
};

/// The token column's word for a client that authenticates with its certificate.
inline constexpr std::string_view kCertificateWord = "certificate";

/// The tokens of one token file. Immutable; thread-safe.
class TokenTable {
 public:
  /// The most a token file may hold, bytes.
  static constexpr size_t kMaxFileBytes = size_t{1} << 20;
  /// The shortest token accepted: 32 characters (128 bits as hex, 192 as base64).
  static constexpr size_t kMinTokenChars = 32;
  static constexpr size_t kMaxTokenChars = 256;
  /// Names are shorter than any token, so that a token written in the name's column is refused unprinted.
  static constexpr size_t kMaxNameChars = 31;

  /// Parses a token file's text. `source` names it in messages ("FILE:LINE: …"). A message never quotes a
  /// token: a malformed one is described by its length and what is wrong with it.
  /// @return kParse for a line that is not `NAME SCOPE TOKEN`, an unknown scope, a bad name, a short, long or
  /// non-printable token, a name or a token given twice; a file with no token at all is an error too.
  static Result<TokenTable> parse(std::string_view text, const std::string& source);

  /// Reads and parses the token file at `path`, refusing one another user could have written or could
  /// read: it must be a regular file (no symbolic link, one hard link), owned by root or `daemon_uid`, and
  /// neither readable nor writable by its group or by others (mode 0600 or 0400).
  /// @return kPermissionDenied naming the file, its owner or mode, and the command that fixes it; kNotFound;
  /// kIo; what parse() returns.
  static Result<TokenTable> load(const std::string& path, uid_t daemon_uid);

  /// @return the entry whose token is `presented`, or nullopt. Compares against every entry in time that
  /// depends only on the lengths, not on where a guess first differs.
  std::optional<TokenEntry> find(std::string_view presented) const;

  /// @return the `certificate` entry named `common_name` (a verified client certificate's), or nullopt.
  std::optional<TokenEntry> find_certificate(std::string_view common_name) const;

  /// @return the entries' names and scopes, e.g. "trainer-17 (read), autopilot (control)": never tokens.
  std::string describe() const;

  size_t size() const { return entries_.size(); }

 private:
  TokenTable() = default;
  std::vector<TokenEntry> entries_;
};

}  // namespace joule::daemon
