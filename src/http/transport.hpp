// SPDX-License-Identifier: Apache-2.0
// The boundary between joule and its HTTP transport module (libjoule_http_transport.so): cpp-httplib and
// OpenSSL live in that module, loaded the first time a Connection sends a request, so that the commands
// which never speak HTTP (joule measure, most of the CLI, the root daemon) neither load nor initialise them:
// loading them cost every joule process about 2 ms at start (OpenSSL's initialisation alone ~0.6 ms).
// Both sides are built from this header by the same build (the build id says so); the module exports one
// symbol, kEntryPoint, returning its Api.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/http/connection.hpp"

namespace joule::http::transport {

/// cpp-httplib's error codes (httplib::Error) by value; the module checks at compile time that they match.
enum class TransportError : int {
  kSuccess = 0,
  kUnknown,
  kConnection,
  kBindIpAddress,
  kRead,
  kWrite,
  kExceedRedirectCount,
  kCanceled,
  kSslConnection,
  kSslLoadingCerts,
  kSslServerVerification,
  kUnsupportedMultipartBoundaryChars,
  kCompression,
  kConnectionTimeout,
};

/// What one request came to, before it is put in words (connection.cpp does that).
struct Outcome {
  bool complete = false;                            ///< a whole response arrived: `response` holds it
  Response response;                                ///< status, decoded body (≤ the cap) and header fields
  TransportError error = TransportError::kSuccess;  ///< why not, in httplib's terms
  bool timed_out = false;                           ///< the request's deadline passed
  bool too_large = false;  ///< the response (as declared, on the wire or decoded) is over the cap
  bool stopped = false;    ///< the BodySink returned false
  /// OpenSSL's reason the server's certificate failed verification (X509_verify_cert_error_string), over
  /// TLS when it has one; else empty.
  std::string verify_failure;
  double elapsed_s = 0;  ///< from the start of the request to its end
};

/// How one step of a TLS session ended (TlsApi).
enum class TlsStep : int {
  kDone = 0,   ///< the step completed (`done` bytes for read/write)
  kWantRead,   ///< call again once the socket is readable
  kWantWrite,  ///< call again once the socket is writable
  kClosed,     ///< the peer closed the session (close_notify or end of stream)
  kFailed,     ///< a protocol, certificate or socket error: `error` says which
};

/// The files of a TLS context (PEM). Server: certificate and key required, `ca_file` the authority of client
/// certificates (empty: none asked for). Client: `ca_file` the server's authority (empty: the system's),
/// certificate and key optional (mutual TLS).
struct TlsFiles {
  std::string certificate_file;
  std::string private_key_file;
  std::string ca_file;
};

/// TLS over a socket its caller owns and polls (the daemon's network listener and DaemonClient): OpenSSL's
/// SSL_CTX and SSL, opaque here. Every call clears OpenSSL's error queue first and puts its reason in words.
struct TlsApi {
  /// @return a new context (TLS 1.2 or later), or null with `error` naming the file and OpenSSL's reason.
  void* (*new_context)(bool server, const TlsFiles& files, std::string& error);
  void (*free_context)(void* context);
  /// @return a session of `context` on `fd`; a client checks the server's certificate against `peer_host`
  /// (a DNS name or an IP address). Null with `error` on failure.
  void* (*new_session)(void* context, int fd, bool server, const std::string& peer_host, std::string& error);
  void (*free_session)(void* session);
  TlsStep (*handshake)(void* session, std::string& error);
  TlsStep (*read)(void* session, char* buffer, size_t size, size_t& done, std::string& error);
  TlsStep (*write)(void* session, const char* data, size_t size, size_t& done, std::string& error);
  /// @return bytes decrypted and buffered, readable without waiting for the socket.
  size_t (*pending)(void* session);
  /// @return the Common Name of the peer's verified certificate, or empty.
  std::string (*peer_name)(void* session);
  /// Sends close_notify (best effort, never waits).
  void (*shutdown)(void* session);
};

/// The module's functions. A client is one keep-alive connection (Connection::Impl owns one).
struct Api {
  /// The build that made the module; the loader refuses a module of another build.
  const char* build_id;
  /// @return a new client of http://host:port, or https:// when `tls` (verified against `ca_cert_file`, or
  /// the system's authorities when empty). Opens nothing yet.
  void* (*open)(const std::string& host, int port, bool tls, const std::string& ca_cert_file);
  /// Frees a client from open().
  void (*close)(void* client);
  /// Sends one request and reads the whole response within `limits` (see Connection::request); a 2xx
  /// body goes to `sink` when it is not null (then `stopped` says whether the sink ended the request).
  void (*request)(void* client, std::string_view method, const std::string& path, const std::string& body,
                  std::string_view content_type, const Headers& headers, const RequestLimits& limits,
                  const BodySink* sink, Outcome& outcome);
  /// @return the functions of TLS streams on sockets of the caller's (tls.hpp).
  const TlsApi* (*tls)();
};

/// The C symbol the module exports: `const Api* joule_http_transport_v1()`.
inline constexpr const char* kEntryPoint = "joule_http_transport_v1";
/// The module's file name.
inline constexpr const char* kModuleFileName = "libjoule_http_transport.so";

/// @return the folders api() looks in, in order: $JOULE_MODULE_DIR when set (ignored in a set-user-ID
/// program; for a program linked with joule's installed libraries somewhere else than the configured
/// prefix), then the build's own module folder when this code runs from the build tree (and nothing else),
/// else the folder of the program or Python module holding this code (the Python package), its installed
/// library folder (<bin>/../lib/joule), and the configured install prefix's <libdir>/joule.
std::vector<std::string> module_folders();

/// @return the module's functions, loaded (once, thread-safe) from the first of module_folders() that has
/// a module of this build. Errors: kLibraryMissing, naming every place tried and why each failed.
Result<const Api*> api();

/// Loads the module from the first of `folders` that holds a usable one (not cached: api() calls it once).
/// A file writable by every user, or in a root process one not root's own or writable by its group, is
/// refused unloaded; a module of another build is unloaded again. Errors: kLibraryMissing, naming each
/// place tried and why it failed ("not there", "writable by every user: refused", "from another build of
/// joule: …", dlopen's reason).
Result<const Api*> load_from(const std::vector<std::string>& folders);

}  // namespace joule::http::transport
