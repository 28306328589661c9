// SPDX-License-Identifier: Apache-2.0
// TLS streams on sockets the caller owns and polls (transport.hpp's TlsApi), inside the transport module so
// that only the processes that speak TLS load OpenSSL. The daemon's network listener drives server sessions
// from its poll loop (non-blocking sockets: every call may ask to be called again once the socket is readable
// or writable); DaemonClient drives client sessions the same way with its own deadline.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include "http/transport.hpp"

namespace joule::http::transport {

namespace {

// Handshake messages over this are refused (a client's certificate chain, mostly): bounded as the HTTP front
// end bounds a request's head.
constexpr long kMaxCertificateListBytes = 64L * 1024;

// OpenSSL's reasons left in its queue (the last is the most specific), emptied.
std::string openssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(code);
    if (!text.empty()) {
      text += "; ";
    }
    text += reason != nullptr ? reason : "error " + std::to_string(code);
  }
  return text;
}

std::string with_reason(const std::string& what) {
  const std::string reason = openssl_errors();
  return reason.empty() ? what : what + ": " + reason;
}

// The socket BIO of OpenSSL writes with write(2): a peer gone away would raise SIGPIPE in the daemon or in
// a client's process. This one sends with MSG_NOSIGNAL (the error comes back as EPIPE instead).
int socket_of(BIO* bio) {
  return *static_cast<const int*>(BIO_get_data(bio));
}

int socket_destroy(BIO* bio) {
  delete static_cast<int*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

int socket_write(BIO* bio, const char* data, size_t size, size_t* written) {
  BIO_clear_retry_flags(bio);
  const ssize_t sent = ::send(socket_of(bio), data, size, MSG_NOSIGNAL);
  if (sent >= 0) {
    *written = static_cast<size_t>(sent);
    return 1;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    BIO_set_retry_write(bio);
  }
  return 0;
}

int socket_read(BIO* bio, char* buffer, size_t size, size_t* read) {
  BIO_clear_retry_flags(bio);
  const ssize_t received = ::recv(socket_of(bio), buffer, size, 0);
  if (received > 0) {
    *read = static_cast<size_t>(received);
    return 1;
  }
  if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return 0;  // 0 bytes: the end of the stream
}

long socket_control(BIO* /*bio*/, int command, long /*number*/, void* /*pointer*/) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "joule socket");
    if (made != nullptr) {
      BIO_meth_set_write_ex(made, socket_write);
      BIO_meth_set_read_ex(made, socket_read);
      BIO_meth_set_ctrl(made, socket_control);
      BIO_meth_set_destroy(made, socket_destroy);
    }
    return made;
  }();
  return method;
}

void* new_context(bool server, const TlsFiles& files, std::string& error) {
  ERR_clear_error();
  SSL_CTX* context = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (context == nullptr) {
    error = with_reason("cannot create a TLS context");
    return nullptr;
  }
  const auto failed = [&](const std::string& what) {
    error = with_reason(what);
    SSL_CTX_free(context);
    return nullptr;
  };
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  // Writes may be partial and resumed from a moved buffer: the daemon's output string shrinks as it is sent.
  SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_max_cert_list(context, kMaxCertificateListBytes);
  // No session tickets or cache: every connection is authenticated afresh (a reloaded CA or a revoked
  // client certificate applies to the next connection).
  // A peer that closes without close_notify (killed, cut off) reads as the end of the stream: the protocol's
  // lines end in newlines, so nothing truncated is ever taken for a whole request.
  SSL_CTX_set_options(context, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
  if (!files.certificate_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(context, files.certificate_file.c_str()) != 1) {
      return failed("cannot use the certificate " + files.certificate_file);
    }
    if (SSL_CTX_use_PrivateKey_file(context, files.private_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return failed("cannot use the private key " + files.private_key_file);
    }
    if (SSL_CTX_check_private_key(context) != 1) {
      return failed("the private key " + files.private_key_file + " does not match the certificate " +
                    files.certificate_file);
    }
  } else if (server) {
    return failed("a TLS server needs a certificate and its private key");
  }
  if (!files.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(context, files.ca_file.c_str(), nullptr) != 1) {
      return failed("cannot use the certificate authority " + files.ca_file);
    }
    if (server) {
      // Asked for, not required: a client without one may still present a token.
      SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.ca_file.c_str());
      if (names != nullptr) {
        SSL_CTX_set_client_CA_list(context, names);
      }
    }
  } else if (!server && SSL_CTX_set_default_verify_paths(context) != 1) {
    return failed("cannot load the system's certificate authorities");
  }
  if (!server) {
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
  }
  ERR_clear_error();
  return context;
}

void free_context(void* context) {
  SSL_CTX_free(static_cast<SSL_CTX*>(context));
}

void* new_session(void* context, int fd, bool server, const std::string& peer_host, std::string& error) {
  ERR_clear_error();
  SSL* session = SSL_new(static_cast<SSL_CTX*>(context));
  if (session == nullptr) {
    error = with_reason("cannot create a TLS session");
    return nullptr;
  }
  BIO_METHOD* method = socket_method();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) {
    error = with_reason("cannot attach a TLS session to its socket");
    SSL_free(session);
    return nullptr;
  }
  BIO_set_data(bio, new int(fd));  // freed by socket_destroy with the BIO
  BIO_set_init(bio, 1);
  SSL_set_bio(session, bio, bio);  // one reference, owned by the session
  if (server) {
    SSL_set_accept_state(session);
    return session;
  }
  SSL_set_connect_state(session);
  if (!peer_host.empty()) {
    in6_addr address6{};
    in_addr address4{};
    const bool is_address = inet_pton(AF_INET, peer_host.c_str(), &address4) == 1 ||
                            inet_pton(AF_INET6, peer_host.c_str(), &address6) == 1;
    X509_VERIFY_PARAM* parameters = SSL_get0_param(session);
    const int set = is_address ? X509_VERIFY_PARAM_set1_ip_asc(parameters, peer_host.c_str())
                               : X509_VERIFY_PARAM_set1_host(parameters, peer_host.c_str(), 0);
    if (set != 1) {
      error = with_reason("cannot check the server's certificate against " + peer_host);
      SSL_free(session);
      return nullptr;
    }
    if (!is_address) {
      SSL_ctrl(session, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(peer_host.c_str()));
    }
  }
  return session;
}

void free_session(void* session) {
  SSL_free(static_cast<SSL*>(session));
}

// What an SSL call's return `result` means; `error` says why when it failed.
TlsStep step_of(SSL* session, int result, std::string& error) {
  switch (SSL_get_error(session, result)) {
    case SSL_ERROR_NONE:
      return TlsStep::kDone;
    case SSL_ERROR_WANT_READ:
      return TlsStep::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsStep::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return TlsStep::kClosed;
    case SSL_ERROR_SYSCALL: {
      const int saved = errno;
      const std::string queued = openssl_errors();
      if (!queued.empty()) {
        error = queued;
      } else if (saved != 0) {
        error = std::strerror(saved);
      } else {
        return TlsStep::kClosed;  // end of stream without close_notify: the peer went away
      }
      return TlsStep::kFailed;
    }
    default: {
      error = openssl_errors();
      const long verified = SSL_get_verify_result(session);
      if (verified != X509_V_OK) {
        error = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verified) +
                (error.empty() ? "" : " (" + error + ")");
      }
      if (error.empty()) {
        error = "TLS protocol error";
      }
      return TlsStep::kFailed;
    }
  }
}

TlsStep handshake(void* session, std::string& error) {
  ERR_clear_error();
  errno = 0;
  auto* ssl = static_cast<SSL*>(session);
  return step_of(ssl, SSL_do_handshake(ssl), error);
}

TlsStep read(void* session, char* buffer, size_t size, size_t& done, std::string& error) {
  ERR_clear_error();
  errno = 0;
  auto* ssl = static_cast<SSL*>(session);
  done = 0;
  const int result = SSL_read_ex(ssl, buffer, size, &done);
  return result == 1 ? TlsStep::kDone : step_of(ssl, result, error);
}

TlsStep write(void* session, const char* data, size_t size, size_t& done, std::string& error) {
  ERR_clear_error();
  errno = 0;
  auto* ssl = static_cast<SSL*>(session);
  done = 0;
  const int result = SSL_write_ex(ssl, data, size, &done);
  return result == 1 ? TlsStep::kDone : step_of(ssl, result, error);
}

size_t pending(void* session) {
  const int bytes = SSL_pending(static_cast<SSL*>(session));
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

std::string peer_name(void* session) {
  auto* ssl = static_cast<SSL*>(session);
  X509* certificate = SSL_get0_peer_certificate(ssl);
  if (certificate == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    return {};
  }
  char name[256] = {};
  const int length = X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, name,
                                               static_cast<int>(sizeof name));
  return length > 0 ? std::string(name, static_cast<size_t>(length)) : std::string();
}

void shutdown(void* session) {
  ERR_clear_error();
  SSL_shutdown(static_cast<SSL*>(session));
  ERR_clear_error();
}

}  // namespace

const TlsApi* tls_api() {
  static constexpr TlsApi kTlsApi{new_context, free_context, new_session, free_session, handshake,
                                  read,        write,        pending,     peer_name,    shutdown};
  return &kTlsApi;
}

}  // namespace joule::http::transport
