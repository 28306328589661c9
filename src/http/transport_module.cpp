// SPDX-License-Identifier: Apache-2.0
// joule's HTTP transport module (transport.hpp): bounded requests over cpp-httplib, loaded only by the
// processes that send HTTP. httplib bounds each read and write by its own timeout, so a server that sends
// one byte just before each timeout keeps a request alive forever, and it appends a body (and header lines,
// whose number it does not limit) to memory without bound. Here httplib still writes the request and parses
// the response, but through our stream (ClientImpl::process_socket, a virtual member meant for this:
// SSLClient replaces it the same way): every wait ends at the request's one deadline, and every byte
// received counts against the cap; the decoded body is counted again as it is delivered. Over TLS, httplib's
// SSLClient does the handshake and the certificate checks, and our stream reads and writes through OpenSSL
// with the socket made non-blocking, so that no partial TLS record holds a read past the deadline either.
// Nothing here links joule's libraries: the module holds no state of its own beside its clients.
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include "http/transport.hpp"

#ifndef JOULE_TRANSPORT_BUILD_ID
#error "JOULE_TRANSPORT_BUILD_ID must name the build (src/http/CMakeLists.txt)"
#endif

namespace joule::http::transport {

// tls_module.cpp: TLS streams on the caller's sockets.
const TlsApi* tls_api();

// The error codes travel by value (TransportError mirrors httplib::Error).
#define JOULE_SAME_ERROR(ours, theirs) \
  static_assert(static_cast<int>(TransportError::ours) == static_cast<int>(httplib::Error::theirs))
JOULE_SAME_ERROR(kSuccess, Success);
JOULE_SAME_ERROR(kUnknown, Unknown);
JOULE_SAME_ERROR(kConnection, Connection);
JOULE_SAME_ERROR(kBindIpAddress, BindIPAddress);
JOULE_SAME_ERROR(kRead, Read);
JOULE_SAME_ERROR(kWrite, Write);
JOULE_SAME_ERROR(kExceedRedirectCount, ExceedRedirectCount);
JOULE_SAME_ERROR(kCanceled, Canceled);
JOULE_SAME_ERROR(kSslConnection, SSLConnection);
JOULE_SAME_ERROR(kSslLoadingCerts, SSLLoadingCerts);
JOULE_SAME_ERROR(kSslServerVerification, SSLServerVerification);
JOULE_SAME_ERROR(kUnsupportedMultipartBoundaryChars, UnsupportedMultipartBoundaryChars);
JOULE_SAME_ERROR(kCompression, Compression);
JOULE_SAME_ERROR(kConnectionTimeout, ConnectionTimeout);
#undef JOULE_SAME_ERROR

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr double kLongestTimeoutS = 365.0 * 24 * 3600;
// What the status line and the header fields may add to the body's cap on the wire: 64 KiB, as a server's
// own limit on a request's head usually is (ours: 16 KiB), far above any real response's.
constexpr size_t kHeadBytes = size_t{64} << 10;

// What bounds one request, and what the bounds ended: shared by the client and the stream of each request.
struct Bounds {
  SteadyClock::time_point deadline;
  size_t max_bytes = kDefaultMaxResponseBytes;  // on the wire (or decrypted, over TLS)
  bool timed_out = false;
  bool too_large = false;
};

// A socket as httplib's Stream, every wait bounded by the deadline and every byte received counted: what the
// plain and the TLS streams share.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t socket, Bounds& bounds) : socket_(socket), bounds_(bounds) {}

  bool is_writable() const override { return wait_for(POLLOUT); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(::getsockname, ip, port);
  }
  socket_t socket() const override { return socket_; }

 protected:
  // Waits until the socket is ready for `events` or the deadline passes (then marks the request timed out).
  bool wait_for(short events) const {
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(bounds_.deadline - SteadyClock::now());
      if (left.count() <= 0) {
        bounds_.timed_out = true;
        return false;
      }
      pollfd entry{socket_, events, 0};
      const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
      if (ready > 0) {
        return true;  // ready, or hung up / failed: the next read or write says which
      }
      if (ready < 0 && errno != EINTR) {
        return false;
      }
    }
  }

  // Counts `count` bytes received. @return false (the request is over) past the cap.
  bool count(size_t count) {
    received_ += count;
    if (received_ > bounds_.max_bytes) {
      bounds_.too_large = true;
      return false;
    }
    return true;
  }

  socket_t socket_;

 private:
  template <class Query>
  void address_of(Query query, std::string& ip, int& port) const {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    ip.clear();
    port = 0;
    if (query(socket_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    std::array<char, INET6_ADDRSTRLEN> text{};
    if (address.ss_family == AF_INET) {
      const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
      ::inet_ntop(AF_INET, &v4.sin_addr, text.data(), text.size());
      port = ntohs(v4.sin_port);
    } else if (address.ss_family == AF_INET6) {
      const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
      ::inet_ntop(AF_INET6, &v6.sin6_addr, text.data(), text.size());
      port = ntohs(v6.sin6_port);
    }
    ip = text.data();
  }

  Bounds& bounds_;
  size_t received_ = 0;
};

// A plain socket: reads through a small buffer (httplib reads header lines one byte at a time).
class BoundedStream final : public DeadlineStream {
 public:
  using DeadlineStream::DeadlineStream;

  bool is_readable() const override { return begin_ < end_ || wait_for(POLLIN); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      const ssize_t received = receive();
      if (received <= 0) {
        return received;
      }
      begin_ = 0;
      end_ = static_cast<size_t>(received);
    }
    const size_t count = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_.data() + begin_, count);
    begin_ += count;
    return static_cast<ssize_t>(count);
  }

  ssize_t write(const char* ptr, size_t size) override {
    while (true) {
      if (!wait_for(POLLOUT)) {
        return -1;
      }
      const ssize_t sent = ::send(socket_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        continue;
      }
      return sent;
    }
  }

 private:
  ssize_t receive() {
    while (true) {
      if (!wait_for(POLLIN)) {
        return -1;
      }
      const ssize_t received = ::recv(socket_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      if (received < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        continue;
      }
      if (received > 0 && !count(static_cast<size_t>(received))) {
        return -1;
      }
      return received;
    }
  }

  std::array<char, 16384> buffer_{};
  size_t begin_ = 0;
  size_t end_ = 0;
};

// A TLS connection (set up by httplib's SSLClient): OpenSSL reads and writes on the socket made
// non-blocking, each wait bounded by the deadline, every decrypted byte counted. (OpenSSL buffers whole
// records itself, so httplib's one-byte reads cost no system call.)
class BoundedTlsStream final : public DeadlineStream {
 public:
  BoundedTlsStream(socket_t socket, SSL* ssl, Bounds& bounds) : DeadlineStream(socket, bounds), ssl_(ssl) {
    // httplib leaves the socket blocking after the handshake; left non-blocking for its shutdown too, which
    // then never waits.
    const int flags = ::fcntl(socket, F_GETFL);
    if (flags >= 0) {
      ::fcntl(socket, F_SETFL, flags | O_NONBLOCK);
    }
  }

  bool is_readable() const override { return SSL_pending(ssl_) > 0 || wait_for(POLLIN); }

  ssize_t read(char* ptr, size_t size) override {
    const int wanted = static_cast<int>(std::min<size_t>(size, INT_MAX));
    while (true) {
      ERR_clear_error();
      const int received = SSL_read(ssl_, ptr, wanted);
      if (received > 0) {
        return count(static_cast<size_t>(received)) ? received : -1;
      }
      const int error = SSL_get_error(ssl_, received);
      if (error == SSL_ERROR_ZERO_RETURN) {
        return 0;  // the server closed the TLS session
      }
      if (!wait_after(error)) {
        return -1;
      }
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    const int length = static_cast<int>(std::min<size_t>(size, INT_MAX));
    while (true) {
      ERR_clear_error();
      const int sent = SSL_write(ssl_, ptr, length);
      if (sent > 0) {
        return sent;
      }
      if (!wait_after(SSL_get_error(ssl_, sent))) {
        return -1;
      }
    }
  }

 private:
  // After an OpenSSL call that could not finish: waits for what it needs. @return false if it failed, or
  // the deadline passed.
  bool wait_after(int error) const {
    switch (error) {
      case SSL_ERROR_WANT_READ:
        return wait_for(POLLIN);
      case SSL_ERROR_WANT_WRITE:
        return wait_for(POLLOUT);
      default:
        return false;
    }
  }

  SSL* ssl_;
};

// httplib's client (Base: ClientImpl for http://, SSLClient for https://) with our stream in place of its
// own.
template <class Base>
class BoundedClient final : public Base {
 public:
  BoundedClient(Bounds& bounds, const std::string& host, int port) : Base(host, port), bounds_(bounds) {}

 private:
  using Socket = typename Base::Socket;

  bool process_socket(const Socket& socket, std::function<bool(httplib::Stream&)> callback) override {
    if constexpr (std::is_same_v<Base, httplib::SSLClient>) {
      BoundedTlsStream stream(socket.sock, socket.ssl, bounds_);
      return callback(stream);
    } else {
      BoundedStream stream(socket.sock, bounds_);
      return callback(stream);
    }
  }

  Bounds& bounds_;
};

// httplib takes timeouts as whole seconds and microseconds.
std::pair<time_t, time_t> seconds_and_microseconds(double seconds) {
  const double whole = std::floor(seconds);
  return {static_cast<time_t>(whole), static_cast<time_t>((seconds - whole) * 1e6)};
}

// One keep-alive connection: httplib's client with our stream.
class Client {
 public:
  Client(const std::string& host, int port, bool tls, const std::string& ca_cert_file) {
    if (tls) {
      auto client = std::make_unique<BoundedClient<httplib::SSLClient>>(bounds_, host, port);
      if (!ca_cert_file.empty()) {
        client->set_ca_cert_path(ca_cert_file);
      }
      tls_ = client.get();
      client_ = std::move(client);
    } else {
      client_ = std::make_unique<BoundedClient<httplib::ClientImpl>>(bounds_, host, port);
    }
    client_->set_keep_alive(true);
    // Headers and body leave in separate writes: no wait for the first one's acknowledgement.
    client_->set_tcp_nodelay(true);
  }

  void request(std::string_view method, const std::string& path, const std::string& body,
               std::string_view content_type, const Headers& headers, const RequestLimits& limits,
               const BodySink* sink, Outcome& outcome) {
    const auto start = SteadyClock::now();
    // Beyond a year is "no limit" (and keeps the clock's arithmetic in range); NaN or ≤ 0 is no time at all.
    const double timeout_s = limits.timeout_s > 0 ? std::min(limits.timeout_s, kLongestTimeoutS) : 0.0;
    const auto deadline =
        start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(timeout_s));
    const double connect_s =
        limits.connect_timeout_s > 0 ? std::min(limits.connect_timeout_s, timeout_s) : 0.0;
    const auto [connect_whole, connect_us] = seconds_and_microseconds(connect_s);
    // Connecting, and each wait of a TLS handshake (httplib's), within the connect timeout.
    client_->set_connection_timeout(connect_whole, connect_us);
    const size_t wire_bytes = limits.max_response_bytes > std::numeric_limits<size_t>::max() - kHeadBytes
                                  ? std::numeric_limits<size_t>::max()
                                  : limits.max_response_bytes + kHeadBytes;
    bounds_ = Bounds{deadline, wire_bytes};

    httplib::Request request;
    request.method = std::string(method);
    request.path = path;
    request.body = body;
    for (const auto& [name, value] : headers) {
      request.headers.emplace(name, value);
    }
    if (!content_type.empty()) {
      request.headers.emplace("Content-Type", std::string(content_type));
    }
    outcome = Outcome{};
    Response& response = outcome.response;
    bool body_too_large = false;
    bool to_sink = false;  // a 2xx body with a sink: handed over piece by piece, counted, not held
    size_t streamed = 0;
    request.response_handler = [&](const httplib::Response& head) {
      to_sink = sink != nullptr && head.status >= 200 && head.status < 300;
      // A declared length over the cap is refused before any of the body is read; one within it is
      // reserved at once.
      const std::string length_text = head.get_header_value("Content-Length");
      if (!length_text.empty()) {
        uint64_t length = 0;
        const auto [end, ec] =
            std::from_chars(length_text.data(), length_text.data() + length_text.size(), length);
        if (ec == std::errc() && end == length_text.data() + length_text.size()) {
          if (length > limits.max_response_bytes) {
            body_too_large = true;
            return false;
          }
          if (!to_sink) {
            response.body.reserve(static_cast<size_t>(length));
          }
        }
      }
      return true;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t /*offset*/, uint64_t /*total*/) {
      if (to_sink) {
        if (size > limits.max_response_bytes - streamed) {
          body_too_large = true;
          return false;
        }
        streamed += size;
        if (!(*sink)(std::string_view(data, size))) {
          outcome.stopped = true;
          return false;
        }
        return true;
      }
      if (size > limits.max_response_bytes - response.body.size()) {
        body_too_large = true;
        return false;
      }
      response.body.append(data, size);
      return true;
    };
    httplib::Response head;
    auto error = httplib::Error::Success;
    outcome.complete = client_->send(request, head, error);
    outcome.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
    if (outcome.complete) {
      response.status = head.status;
      response.headers.assign(head.headers.begin(), head.headers.end());
      return;
    }
    outcome.error = static_cast<TransportError>(static_cast<int>(error));
    outcome.timed_out = bounds_.timed_out;
    outcome.too_large = body_too_large || bounds_.too_large;
    // OpenSSL's reason, when it has one (e.g. "self-signed certificate").
    if (error == httplib::Error::SSLServerVerification && tls_ != nullptr &&
        tls_->get_openssl_verify_result() != X509_V_OK) {
      outcome.verify_failure = X509_verify_cert_error_string(tls_->get_openssl_verify_result());
    }
  }

 private:
  Bounds bounds_;
  std::unique_ptr<httplib::ClientImpl> client_;
  httplib::SSLClient* tls_ = nullptr;  // client_, for https://
};

void* open_client(const std::string& host, int port, bool tls, const std::string& ca_cert_file) {
  return new Client(host, port, tls, ca_cert_file);
}

void close_client(void* client) {
  delete static_cast<Client*>(client);
}

void send_request(void* client, std::string_view method, const std::string& path, const std::string& body,
                  std::string_view content_type, const Headers& headers, const RequestLimits& limits,
                  const BodySink* sink, Outcome& outcome) {
  static_cast<Client*>(client)->request(method, path, body, content_type, headers, limits, sink, outcome);
}

constexpr Api kApi{JOULE_TRANSPORT_BUILD_ID, open_client, close_client, send_request, tls_api};

}  // namespace

}  // namespace joule::http::transport

extern "C" __attribute__((visibility("default"))) const joule::http::transport::Api*
joule_http_transport_v1() {
  return &joule::http::transport::kApi;
}
