// SPDX-License-Identifier: Apache-2.0
// Bounded requests over cpp-httplib. httplib bounds each read and write by its own timeout, so a server
// that sends one byte just before each timeout keeps a request alive forever, and it appends a body (and
// header lines, whose number it does not limit) to memory without bound. Here httplib still writes the
// request and parses the response, but through our stream (ClientImpl::process_socket, a virtual member
// meant for this: SSLClient replaces it the same way): every wait ends at the request's one deadline, and
// every byte received counts against the cap; the decoded body is counted again as it is delivered.
#include "joule/http/connection.hpp"

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
#include <system_error>
#include <utility>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "joule/http/errors.hpp"

namespace joule::http {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr double kLongestTimeoutS = 365.0 * 24 * 3600;
// What the status line and the header fields may add to the body's cap on the wire: 64 KiB, as a server's
// own limit on a request's head usually is (ours: 16 KiB), far above any real response's.
constexpr size_t kHeadBytes = size_t{64} << 10;

// The socket as httplib's Stream: reads through a small buffer (httplib reads header lines one byte at a
// time), every wait bounded by the deadline, every byte received counted.
class BoundedStream final : public httplib::Stream {
 public:
  BoundedStream(socket_t socket, SteadyClock::time_point deadline, size_t max_bytes)
      : socket_(socket), deadline_(deadline), max_bytes_(max_bytes) {}

  bool is_readable() const override { return begin_ < end_ || wait_for(POLLIN); }
  bool is_writable() const override { return wait_for(POLLOUT); }

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

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(::getsockname, ip, port);
  }
  socket_t socket() const override { return socket_; }

  bool timed_out() const { return timed_out_; }
  bool too_large() const { return too_large_; }

 private:
  // Waits until the socket is ready for `events` or the deadline passes (then marks the stream timed out).
  bool wait_for(short events) const {
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - SteadyClock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd entry{socket_, events, 0};
      const int ready = ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
      if (ready > 0) {
        return true;  // ready, or hung up / failed: the next recv or send says which
      }
      if (ready < 0 && errno != EINTR) {
        return false;
      }
    }
  }

  ssize_t receive() {
    while (true) {
      if (!wait_for(POLLIN)) {
        return -1;
      }
      const ssize_t received = ::recv(socket_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      if (received < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        continue;
      }
      if (received > 0) {
        received_ += static_cast<size_t>(received);
        if (received_ > max_bytes_) {
          too_large_ = true;
          return -1;
        }
      }
      return received;
    }
  }

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

  socket_t socket_;
  SteadyClock::time_point deadline_;
  size_t max_bytes_;
  size_t received_ = 0;
  std::array<char, 16384> buffer_{};
  size_t begin_ = 0;
  size_t end_ = 0;
  mutable bool timed_out_ = false;
  bool too_large_ = false;
};

// httplib's client with our stream in place of its own.
class BoundedClient final : public httplib::ClientImpl {
 public:
  BoundedClient(const std::string& host, int port) : httplib::ClientImpl(host, port) {}

  /// Bounds the next request; afterwards, timed_out() and too_large() say whether a bound ended it.
  void arm(SteadyClock::time_point deadline, size_t max_bytes) {
    deadline_ = deadline;
    max_bytes_ = max_bytes;
    timed_out_ = false;
    too_large_ = false;
  }
  bool timed_out() const { return timed_out_; }
  bool too_large() const { return too_large_; }

 private:
  bool process_socket(const Socket& socket, std::function<bool(httplib::Stream&)> callback) override {
    BoundedStream stream(socket.sock, deadline_, max_bytes_);
    const bool ok = callback(stream);
    timed_out_ = stream.timed_out();
    too_large_ = stream.too_large();
    return ok;
  }

  SteadyClock::time_point deadline_;
  size_t max_bytes_ = kDefaultMaxResponseBytes;
  bool timed_out_ = false;
  bool too_large_ = false;
};

// httplib takes timeouts as whole seconds and microseconds.
std::pair<time_t, time_t> seconds_and_microseconds(double seconds) {
  const double whole = std::floor(seconds);
  return {static_cast<time_t>(whole), static_cast<time_t>((seconds - whole) * 1e6)};
}

}  // namespace

class Connection::Impl {
 public:
  Impl(const std::string& host, int port) : client_(host, port) { client_.set_keep_alive(true); }

  tl::expected<Response, Failure> request(std::string_view method, const std::string& path,
                                          const std::string& body, std::string_view content_type,
                                          const Headers& headers, const RequestLimits& limits) {
    const auto start = SteadyClock::now();
    // Beyond a year is "no limit" (and keeps the clock's arithmetic in range); NaN or ≤ 0 is no time at all.
    const double timeout_s = limits.timeout_s > 0 ? std::min(limits.timeout_s, kLongestTimeoutS) : 0.0;
    const auto deadline =
        start + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(timeout_s));
    const double connect_s =
        limits.connect_timeout_s > 0 ? std::min(limits.connect_timeout_s, timeout_s) : 0.0;
    const auto [connect_whole, connect_us] = seconds_and_microseconds(connect_s);
    client_.set_connection_timeout(connect_whole, connect_us);
    const size_t wire_bytes = limits.max_response_bytes > std::numeric_limits<size_t>::max() - kHeadBytes
                                  ? std::numeric_limits<size_t>::max()
                                  : limits.max_response_bytes + kHeadBytes;
    client_.arm(deadline, wire_bytes);

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
    Response response;
    bool body_too_large = false;
    request.response_handler = [&](const httplib::Response& head) {
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
          response.body.reserve(static_cast<size_t>(length));
        }
      }
      return true;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t /*offset*/, uint64_t /*total*/) {
      if (size > limits.max_response_bytes - response.body.size()) {
        body_too_large = true;
        return false;
      }
      response.body.append(data, size);
      return true;
    };
    httplib::Response head;
    auto error = httplib::Error::Success;
    if (client_.send(request, head, error)) {
      response.status = head.status;
      return response;
    }
    return tl::make_unexpected(failure(error, body_too_large || client_.too_large(), start, limits));
  }

 private:
  Failure failure(httplib::Error error, bool too_large, SteadyClock::time_point start,
                  const RequestLimits& limits) const {
    using Kind = Failure::Kind;
    if (too_large) {
      return {Kind::kTooLarge, fmt::format("the response is larger than {}, the most accepted",
                                           format_byte_count(limits.max_response_bytes))};
    }
    const double elapsed_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
    if (client_.timed_out() ||
        (error == httplib::Error::ConnectionTimeout && elapsed_s >= limits.timeout_s)) {
      return {Kind::kTimeout, fmt::format("no complete response within {:g} s", limits.timeout_s)};
    }
    switch (error) {
      case httplib::Error::Connection:
        return {Kind::kConnect, describe_transport_error(error)};
      case httplib::Error::ConnectionTimeout:
        return {Kind::kTimeout, fmt::format("no answer to the connection within {:g} s",
                                            std::min(limits.connect_timeout_s, limits.timeout_s))};
      case httplib::Error::SSLConnection:
      case httplib::Error::SSLLoadingCerts:
      case httplib::Error::SSLServerVerification:
        return {Kind::kTls, describe_transport_error(error)};
      case httplib::Error::Write:
        return {Kind::kSend, describe_transport_error(error)};
      case httplib::Error::Read:
        // Not a timeout (the deadline is checked above): the general words would suggest one.
        return {Kind::kReceive,
                "the connection closed before a complete response arrived (or the answer is not HTTP)"};
      default:
        return {Kind::kOther, describe_transport_error(error)};
    }
  }

  BoundedClient client_;
};

Connection::Connection(const std::string& host, int port) : impl_(std::make_unique<Impl>(host, port)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

tl::expected<Response, Failure> Connection::request(std::string_view method, const std::string& path,
                                                    const std::string& body, std::string_view content_type,
                                                    const Headers& headers, const RequestLimits& limits) {
  return impl_->request(method, path, body, content_type, headers, limits);
}

tl::expected<Response, Failure> Connection::get(const std::string& path, const Headers& headers,
                                                const RequestLimits& limits) {
  return request("GET", path, "", "", headers, limits);
}

}  // namespace joule::http
