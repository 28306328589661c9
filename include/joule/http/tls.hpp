// SPDX-License-Identifier: Apache-2.0
// joule/http/tls.hpp — TLS on a socket the caller owns and polls: the daemon's network listener (server
// sessions driven from its poll loop) and DaemonClient (client sessions). OpenSSL lives in joule's transport
// module, loaded by the first context made here (joule/http/connection.hpp says where it is looked for).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <sys/types.h>

#include "joule/core/error.hpp"

namespace joule::http {

/// The PEM files of a TLS context.
struct TlsContextFiles {
  /// The certificate chain presented to the peer: required for a server; for a client, its certificate
  /// for mutual TLS (optional).
  std::string certificate_file;
  /// The private key of `certificate_file`.
  std::string private_key_file;
  /// Server: the authority whose certificates clients may present (empty: none are asked for). Client: the
  /// authority of the server's certificate (empty: the system's).
  std::string ca_file;
};

/// An OpenSSL context: certificates loaded once, shared by the sessions made from it (each keeps it alive).
/// TLS 1.2 or later, no session resumption (every connection is authenticated afresh).
class TlsContext {
 public:
  /// @return a server context; kLibraryMissing without the transport module, kInvalidArgument naming the
  /// file that cannot be used and OpenSSL's reason (unreadable, not PEM, key not matching the certificate).
  static Result<std::shared_ptr<TlsContext>> server(const TlsContextFiles& files);
  /// @return a client context, which checks the server's certificate. Errors as server().
  static Result<std::shared_ptr<TlsContext>> client(const TlsContextFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool is_server() const { return server_; }
  /// @return whether a server asks clients for a certificate (it was given a CA file).
  bool asks_client_certificate() const { return asks_client_certificate_; }

 private:
  friend class TlsStream;
  static Result<std::shared_ptr<TlsContext>> make(bool server, const TlsContextFiles& files);
  TlsContext(const void* api, void* handle, bool server, bool asks_client_certificate);
  const void* api_;  // transport::TlsApi
  void* handle_;
  bool server_;
  bool asks_client_certificate_;
};

/// What a TLS call needs before it can go on.
enum class TlsWait {
  kNothing,   ///< it completed
  kReadable,  ///< call again once the socket is readable (poll POLLIN)
  kWritable,  ///< call again once the socket is writable (poll POLLOUT)
};

/// The outcome of one read or write.
struct TlsIo {
  size_t bytes = 0;  ///< bytes read or written (0 when waiting or closed)
  TlsWait wait = TlsWait::kNothing;
  bool closed = false;  ///< the peer ended the session (read: nothing more will come)
};

/// One TLS session on a connected socket (blocking or not; the stream neither owns nor closes it).
/// Not thread-safe: one thread drives a session.
class TlsStream {
 public:
  /// @return the server end of a session on `fd` (an accepted connection).
  static Result<std::unique_ptr<TlsStream>> server(std::shared_ptr<const TlsContext> context, int fd);
  /// @return the client end of a session on `fd`; the server's certificate must name `host` (a DNS name or
  /// an IP address, as the certificate's subjectAltName lists it).
  static Result<std::unique_ptr<TlsStream>> client(std::shared_ptr<const TlsContext> context, int fd,
                                                   const std::string& host);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  /// Advances the handshake. @return kNothing once it is complete, else what to wait for; kPermissionDenied
  /// for a certificate that failed verification (OpenSSL's reason: "certificate has expired", "unable to get
  /// local issuer certificate", the peer's alert such as "tlsv1 alert unknown ca"), kIo for anything else
  /// (a peer that speaks no TLS, a reset).
  Result<TlsWait> handshake();
  /// @return whether the handshake completed.
  bool established() const { return established_; }
  /// @return whether handshake() failed because the peer closed the connection before the handshake ended
  /// (a port probe, a health check), not for a refusal.
  bool closed_before_handshake() const { return closed_before_handshake_; }
  /// Reads at most `size` bytes. Errors as handshake() (a TLS 1.3 server refuses a client's certificate
  /// after the client's handshake ended: the client hears it here).
  Result<TlsIo> read(char* buffer, size_t size);
  /// Writes at most `size` bytes (possibly fewer). Errors as handshake().
  Result<TlsIo> write(const char* data, size_t size);
  /// read() as recv(2) has it, for a loop that treats plain and TLS sockets alike: > 0 bytes, 0 the peer
  /// closed, -1 with errno EAGAIN (wait for what waits_for_writable() says) or EPROTO (last_error() says
  /// why).
  ssize_t receive(char* buffer, size_t size);
  /// write() as send(2) has it: > 0 bytes, -1 with errno EAGAIN or EPROTO (the peer closed, or an error).
  ssize_t send(const char* data, size_t size);
  /// @return whether the last receive() or send() that returned EAGAIN waits for the socket to be writable
  /// (else readable).
  bool waits_for_writable() const { return waits_for_writable_; }
  /// @return why the last receive() or send() failed with EPROTO.
  const std::string& last_error() const { return last_error_; }
  /// @return bytes already decrypted, readable now without the socket being readable.
  size_t pending() const;
  /// @return the Common Name of the peer's verified certificate; empty if it presented none.
  std::string peer_name() const;
  /// Sends close_notify, best effort (never waits).
  void shutdown();

 private:
  TlsStream(std::shared_ptr<const TlsContext> context, void* handle);
  /// Turns a read's or write's outcome into recv(2)/send(2)'s.
  ssize_t as_posix(const Result<TlsIo>& io, bool reading);
  std::shared_ptr<const TlsContext> context_;
  void* handle_;
  std::string last_error_;
  bool established_ = false;
  bool closed_before_handshake_ = false;
  bool waits_for_writable_ = false;
};

}  // namespace joule::http
