// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "joule/core/file.hpp"
#include "joule/core/host_port.hpp"
#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"
#include "joule/device/daemon_client.hpp"
#ifdef JOULE_DAEMON_CLIENT_TLS
#include "joule/http/tls.hpp"
#else
namespace joule::http {
class TlsStream {};  // this build has no TLS: open_network() refuses before making one
}  // namespace joule::http
#endif

namespace joule::device {

namespace proto = daemon_protocol;
using SteadyTime = std::chrono::steady_clock::time_point;

namespace {

constexpr Nanos kMinRenewInterval = std::chrono::milliseconds(10);

int milliseconds_until(SteadyTime deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

Result<int> open_socket(const std::string& path, Nanos timeout) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return fail(ErrorCode::kInvalidArgument, "daemon socket path '{}' must have 1 to {} bytes", path,
                sizeof(address.sun_path) - 1);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return fail(ErrorCode::kIo, "cannot create a Unix socket: {}", std::strerror(errno));
  }
  // Writes are small; a send timeout keeps a wedged daemon from blocking the caller forever.
  const auto timeout_us = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
  const timeval limit{static_cast<time_t>(timeout_us / 1'000'000),
                      static_cast<suseconds_t>(timeout_us % 1'000'000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  // A Unix-socket connect completes or fails at once (or waits for backlog room, bounded by SO_SNDTIMEO).
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EACCES || error == EPERM) {
      return fail(
          ErrorCode::kPermissionDenied,
          "cannot connect to the joule daemon at {}: {} (the socket and its folder must be accessible "
          "to this user; the daemon makes the socket mode 0666)",
          path, std::strerror(error));
    }
    return fail(
        ErrorCode::kIo,
        "cannot connect to the joule daemon at {}: {} (is `joule daemon` running? see docs/daemon.md; "
        "JOULE_DAEMON_SOCKET selects another socket)",
        path, std::strerror(error));
  }
  return fd;
}

// `value` if set, else the environment variable `name` (not in a set-user-ID program), else empty.
std::string or_environment(const std::string& value, const char* name) {
  if (!value.empty()) {
    return value;
  }
  const char* set = ::secure_getenv(name);
  return set != nullptr ? std::string(set) : std::string();
}

// The token in `path`: its first word. A file other users may read is refused: the token is a secret.
Result<std::string> read_token_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return fail(ErrorCode::kNotFound, "cannot read the daemon token file {}: {}", path, std::strerror(errno));
  }
  if ((info.st_mode & S_IROTH) != 0) {
    return fail(ErrorCode::kInvalidArgument,
                "the daemon token file {} is readable by every user: its token is a secret; `chmod 600 {}`",
                path, path);
  }
  const auto text = JOULE_TRY(read_text_file(path));
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) {
    return fail(ErrorCode::kInvalidArgument, "the daemon token file {} holds no token", path);
  }
  const auto end = text.find_first_of(" \t\r\n", begin);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Waits until `fd` is ready for `events` or `deadline`. @return false on timeout.
bool wait_for(int fd, short events, SteadyTime deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    return ready > 0;
  }
}

}  // namespace

bool is_network_address(std::string_view address) {
  if (address.empty() || address.find('/') != std::string_view::npos) {
    return false;
  }
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return false;
  }
  return std::all_of(address.begin() + static_cast<std::ptrdiff_t>(colon) + 1, address.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

DaemonClient::DaemonClient(std::string socket_path, int fd, DaemonClientOptions options)
    : socket_path_(std::move(socket_path)), options_(std::move(options)), fd_(fd) {}

Result<void> DaemonClient::open_network(const std::string& address) {
#ifndef JOULE_DAEMON_CLIENT_TLS
  if (!options_.plain_tcp) {
    return fail(ErrorCode::kNotSupported,
                "cannot connect to the joule daemon at {}: this build of joule has no TLS (built without "
                "JOULE_WITH_HTTP)",
                address);
  }
#endif
  const auto [host, port] = JOULE_TRY(parse_host_port(address, "the daemon's address", 9700));
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int error = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); error != 0) {
    return fail(ErrorCode::kIo, "cannot connect to the joule daemon at {}: cannot resolve {}: {}", address,
                host, ::gai_strerror(error));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  std::string why = "no address";
  for (const addrinfo* candidate = found; candidate != nullptr && fd_ < 0; candidate = candidate->ai_next) {
    const int fd = ::socket(candidate->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int error = 0;
    if (::connect(fd, candidate->ai_addr, candidate->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        error = wait_for(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
        socklen_t length = sizeof error;
        if (error == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
          error = errno;
        }
      }
    }
    if (error != 0) {
      why = std::strerror(error);
      ::close(fd);
      continue;
    }
    // Requests are single short lines, answered at once: Nagle's delay would add to every round trip.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
  }
  if (fd_ < 0) {
    return fail(
        ErrorCode::kIo,
        "cannot connect to the joule daemon at {}: {} (is `joule daemon --listen {}` running there, and "
        "the port open? see docs/fleet.md)",
        address, why, address);
  }
  if (options_.plain_tcp) {
    return {};
  }
#ifdef JOULE_DAEMON_CLIENT_TLS
  const http::TlsContextFiles files{or_environment(options_.tls_certificate_file, "JOULE_DAEMON_CERT"),
                                    or_environment(options_.tls_private_key_file, "JOULE_DAEMON_KEY"),
                                    or_environment(options_.tls_ca_file, "JOULE_DAEMON_CA")};
  auto context = http::TlsContext::client(files);
  if (!context) {
    return fail(context.error().code(), "cannot connect to the joule daemon at {}: {}", address,
                context.error().message());
  }
  auto stream = JOULE_TRY(http::TlsStream::client(*context, fd_, host));
  while (true) {
    const auto wait = stream->handshake();
    if (!wait) {
      return fail(wait.error().code(), "the TLS handshake with the joule daemon at {} failed: {}{}", address,
                  wait.error().message(),
                  wait.error().code() == ErrorCode::kPermissionDenied && files.ca_file.empty()
                      ? " (the daemon's certificate is checked against the system's authorities: give its "
                        "authority with $JOULE_DAEMON_CA or the client's CA option)"
                      : "");
    }
    if (*wait == http::TlsWait::kNothing) {
      break;
    }
    if (!wait_for(fd_, *wait == http::TlsWait::kReadable ? POLLIN : POLLOUT, deadline)) {
      return fail(ErrorCode::kIo, "the TLS handshake with the joule daemon at {} timed out after {:.3g} s",
                  address, std::chrono::duration<double>(options_.timeout).count());
    }
  }
  tls_ = std::move(stream);
#endif
  return {};
}

void DaemonClient::note_socket_error(ssize_t result, bool writing) {
  const int error = errno;
  wait_writable_ = writing;
  io_error_ = result < 0 && error != EAGAIN && error != EWOULDBLOCK ? std::strerror(error) : std::string();
  errno = error;
}

ssize_t DaemonClient::receive_locked(char* buffer, size_t size) {
#ifdef JOULE_DAEMON_CLIENT_TLS
  if (tls_) {
    // The daemon refusing this client's certificate after the handshake (TLS 1.3) arrives here (EPROTO).
    const ssize_t n = tls_->receive(buffer, size);
    const int error = errno;
    wait_writable_ = n < 0 && error == EAGAIN && tls_->waits_for_writable();
    io_error_ = n < 0 && error == EPROTO ? tls_->last_error() : std::string();
    errno = error;
    return n;
  }
#endif
  const ssize_t n = ::recv(fd_, buffer, size, 0);
  note_socket_error(n);
  return n;
}

ssize_t DaemonClient::transmit_locked(const char* data, size_t size) {
#ifdef JOULE_DAEMON_CLIENT_TLS
  if (tls_) {
    const ssize_t n = tls_->send(data, size);
    const int error = errno;
    wait_writable_ = n < 0 && error == EAGAIN && tls_->waits_for_writable();
    io_error_ = n < 0 && error == EPROTO ? tls_->last_error() : std::string();
    errno = error;
    return n;
  }
#endif
  // MSG_NOSIGNAL: a daemon that went away must give an error here, not kill the process with SIGPIPE.
  const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
  note_socket_error(n, /*writing=*/true);
  return n;
}

Result<std::shared_ptr<DaemonClient>> DaemonClient::connect(const std::string& socket_path,
                                                            DaemonClientOptions options) {
  const bool network = is_network_address(socket_path);
  std::string token;
  if (network) {
    token = options.token;
    if (token.empty()) {
      if (const auto file = or_environment(options.token_file, "JOULE_DAEMON_TOKEN_FILE"); !file.empty()) {
        token = JOULE_TRY(read_token_file(file));
      }
    }
  }
  const bool renew = options.renew_lease;
  std::shared_ptr<DaemonClient> client;
  if (network) {
    // The constructor is private (clients exist only connected), so make_shared cannot reach it.
    client.reset(new DaemonClient(socket_path, -1, std::move(options)));
    JOULE_TRY(client->open_network(socket_path));
  } else {
    auto fd = JOULE_TRY(open_socket(socket_path, options.timeout));
    client.reset(new DaemonClient(socket_path, fd, std::move(options)));
  }
  proto::Request hello;
  hello.op = proto::Op::kHello;
  hello.protocol = proto::kVersion;
  hello.client = client->options_.client_name;
  hello.token = std::move(token);
  if (!client->options_.holder.empty() && !proto::valid_holder_name(client->options_.holder)) {
    return fail(ErrorCode::kInvalidArgument,
                "daemon client: holder '{}' is not a name of 1 to {} letters, digits, '.', '_' or '-'",
                client->options_.holder, proto::kMaxHolderNameChars);
  }
  hello.holder = client->options_.holder;
  auto response = client->send(hello);
  if (!response) {
    return tl::make_unexpected(response.error());
  }
  if (!response->ok()) {
    const ErrorCode code = response->error->code() == ErrorCode::kInvalidArgument ? ErrorCode::kNotSupported
                                                                                  : response->error->code();
    return fail(code, "the joule daemon at {} refused hello: {}", socket_path, response->error->message());
  }
  client->hello_ = response->result;
  const auto lease = client->hello_.find("lease_s");
  if (lease == client->hello_.end() || !lease->is_number() || lease->get<double>() <= 0) {
    return fail(ErrorCode::kParse, "the joule daemon at {} answered hello without a positive 'lease_s'",
                socket_path);
  }
  client->lease_s_ = lease->get<double>();
  if (renew) {
    client->renew_thread_ = std::thread([raw = client.get()] { raw->renew_loop(); });
  }
  return client;
}

DaemonClient::~DaemonClient() {
  {
    std::lock_guard lock(renew_mutex_);
    stopping_ = true;
  }
  renew_wake_.notify_all();
  if (renew_thread_.joinable()) {
    renew_thread_.join();
  }
  std::lock_guard lock(request_mutex_);
#ifdef JOULE_DAEMON_CLIENT_TLS
  if (tls_) {
    tls_->shutdown();
  }
#endif
  tls_.reset();
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

bool DaemonClient::connected() const {
  std::lock_guard lock(request_mutex_);
  return !broken_.has_value();
}

Error DaemonClient::break_connection_locked(const Error& error) {
  if (!broken_) {
    broken_ =
        Error(error.code(),
              fmt::format("{}; the connection to the joule daemon at {} is closed, and the daemon restores "
                          "the settings made through it",
                          error.message(), socket_path_));
    tls_.reset();
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = -1;
  }
  return *broken_;
}

Result<void> DaemonClient::write_locked(const std::string& line) {
  if (fd_ < 0) {
    return tl::make_unexpected(break_connection_locked(Error(ErrorCode::kIo, "not connected")));
  }
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.timeout;
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = transmit_locked(line.data() + written, line.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      // A Unix socket blocks (bounded by SO_SNDTIMEO: EAGAIN is its timeout); a network one waits here.
      const bool would_block = errno == EAGAIN || errno == EWOULDBLOCK;
      if (would_block && is_network_address(socket_path_) &&
          wait_for(fd_, wait_writable_ ? POLLOUT : POLLIN, deadline)) {
        continue;
      }
      return tl::make_unexpected(break_connection_locked(Error(
          ErrorCode::kIo, would_block ? std::string("the daemon does not take requests (send timed out)")
                                      : fmt::format("cannot send to the daemon: {}", io_error_))));
    }
    written += static_cast<size_t>(n);
  }
  return {};
}

Result<std::string> DaemonClient::read_line_locked(SteadyTime deadline) {
  wait_writable_ = false;
  while (true) {
    if (const size_t newline = buffer_.find('\n'); newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    if (buffer_.size() > proto::kMaxLineBytes) {
      return tl::make_unexpected(
          break_connection_locked(Error(ErrorCode::kParse, "the daemon sent a line over the length limit")));
    }
#ifdef JOULE_DAEMON_CLIENT_TLS
    const bool buffered = tls_ && tls_->pending() > 0;  // decrypted already: the socket may stay quiet
#else
    const bool buffered = false;
#endif
    if (!buffered) {
      pollfd entry{fd_, static_cast<short>(wait_writable_ ? POLLOUT : POLLIN), 0};
      const int ready = ::poll(&entry, 1, milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) {
        continue;
      }
      if (ready == 0) {
        return fail(ErrorCode::kIo, "timeout");  // not fatal by itself: the caller decides
      }
    }
    char chunk[4096];
    const ssize_t n = receive_locked(chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      continue;
    }
    if (n <= 0) {
      return tl::make_unexpected(break_connection_locked(
          Error(ErrorCode::kIo, n == 0 ? std::string("the daemon closed the connection")
                                       : fmt::format("cannot read from the daemon: {}", io_error_))));
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    wait_writable_ = false;
  }
}

namespace {

int device_of(const proto::PowerEvent& event) {
  return event.gpu;
}
int device_of(const proto::CpuEnergyEvent& event) {
  return event.cpu;
}

// Queues `event`; beyond `capacity` the oldest goes, and the next event of its stream and device counts
// it (and what it counted) as dropped, so that a reader never misses samples unawares.
template <class Event>
void queue_bounded(std::deque<Event>& queue, const Event& event, size_t capacity) {
  queue.push_back(event);
  if (queue.size() > std::max<size_t>(capacity, 1)) {
    const Event oldest = queue.front();
    queue.pop_front();
    for (auto& later : queue) {
      if (later.stream == oldest.stream && device_of(later) == device_of(oldest)) {
        later.dropped += oldest.dropped + 1;
        break;
      }
    }
  }
}

}  // namespace

bool DaemonClient::queue_if_event_locked(const proto::ServerMessage& message) {
  if (const auto* power = std::get_if<proto::PowerEvent>(&message)) {
    queue_bounded(events_, *power, options_.max_queued_events);
    return true;
  }
  if (const auto* cpu = std::get_if<proto::CpuEnergyEvent>(&message)) {
    queue_bounded(cpu_events_, *cpu, options_.max_queued_events);
    return true;
  }
  return false;
}

Result<proto::Response> DaemonClient::send(proto::Request request) {
  std::lock_guard lock(request_mutex_);
  if (broken_) {
    return tl::make_unexpected(*broken_);
  }
  request.id = next_id_++;
  JOULE_TRY(write_locked(proto::format_request(request) + "\n"));
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (true) {
    auto line = read_line_locked(deadline);
    if (!line) {
      if (!broken_) {  // a timeout: the response may still come, and would be taken for the next one's
        return tl::make_unexpected(break_connection_locked(
            Error(ErrorCode::kIo, fmt::format("the daemon did not answer '{}' within {:.3g} s",
                                              proto::to_string(request.op), to_seconds(options_.timeout)))));
      }
      return tl::make_unexpected(line.error());
    }
    auto message = proto::parse_server_line(*line);
    if (!message) {
      return tl::make_unexpected(break_connection_locked(message.error()));
    }
    if (queue_if_event_locked(*message)) {
      continue;
    }
    auto& response = std::get<proto::Response>(*message);
    // Responses come in request order; one without an id answers a request the daemon could not read.
    if (response.id && *response.id != request.id) {
      return tl::make_unexpected(break_connection_locked(
          Error(ErrorCode::kParse, fmt::format("the daemon answered request {} while request {} was expected",
                                               *response.id, request.id))));
    }
    return std::move(response);
  }
}

Result<nlohmann::json> DaemonClient::call(proto::Request request) {
  auto response = send(std::move(request));
  if (!response) {
    return tl::make_unexpected(response.error());
  }
  if (!response->ok()) {
    return tl::make_unexpected(response->error->with_context("joule daemon"));
  }
  return std::move(response->result);
}

Result<nlohmann::json> DaemonClient::call_added(proto::Request request, std::string_view feature) {
  const std::string_view op = proto::to_string(request.op);
  auto response = JOULE_TRY(send(std::move(request)));
  if (!response.ok()) {
    if (response.error->code() == ErrorCode::kInvalidArgument &&
        response.error->message().rfind("unknown op", 0) == 0) {
      return fail(ErrorCode::kNotSupported,
                  "joule daemon: the daemon at {} is of an earlier release: it does not {} (no {} operation)",
                  socket_path_, feature, op);
    }
    return tl::make_unexpected(response.error->with_context("joule daemon"));
  }
  return std::move(response.result);
}

Result<uint64_t> DaemonClient::stream_power(std::optional<std::vector<int>> gpus, uint32_t period_ms,
                                            bool energy) {
  proto::Request request;
  request.op = proto::Op::kStreamPower;
  request.gpus = std::move(gpus);
  request.period_ms = period_ms;
  request.energy = energy;
  auto result = JOULE_TRY(call(std::move(request)));
  const auto stream = result.find("stream");
  if (stream == result.end() || !stream->is_number_unsigned()) {
    return fail(ErrorCode::kParse, "the daemon answered stream_power without a stream id");
  }
  return stream->get<uint64_t>();
}

Result<uint64_t> DaemonClient::cancel_stream(uint64_t stream) {
  proto::Request request;
  request.op = proto::Op::kCancelStream;
  request.stream = stream;
  auto result = JOULE_TRY(call(request));
  std::lock_guard lock(request_mutex_);
  std::erase_if(events_, [stream](const proto::PowerEvent& event) { return event.stream == stream; });
  std::erase_if(cpu_events_, [stream](const proto::CpuEnergyEvent& event) { return event.stream == stream; });
  // (A daemon of an earlier release does not count.)
  const auto dropped = result.find("dropped");
  return dropped != result.end() && dropped->is_number_unsigned() ? dropped->get<uint64_t>() : 0;
}

Result<proto::JobEnergyAnswer> DaemonClient::job_energy(const std::string& job) {
  proto::Request request;
  request.op = proto::Op::kJobEnergy;
  request.job = job;
  const auto result = JOULE_TRY(call_added(std::move(request), "account the energy of jobs on shared GPUs"));
  return proto::parse_job_energy_result(result);
}

template <class Event>
Result<std::optional<Event>> DaemonClient::next_event(std::deque<Event>& queue, Nanos timeout) {
  std::lock_guard lock(request_mutex_);
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  while (queue.empty()) {
    if (broken_) {
      return tl::make_unexpected(*broken_);
    }
    auto line = read_line_locked(deadline);
    if (!line) {
      if (!broken_) {
        return std::optional<Event>();  // timeout
      }
      return tl::make_unexpected(line.error());
    }
    auto message = proto::parse_server_line(*line);
    if (!message) {
      return tl::make_unexpected(break_connection_locked(message.error()));
    }
    if (!queue_if_event_locked(*message)) {
      return tl::make_unexpected(
          break_connection_locked(Error(ErrorCode::kParse, "the daemon sent a response nobody asked for")));
    }
  }
  const Event event = queue.front();
  queue.pop_front();
  return std::optional<Event>(event);
}

Result<std::optional<proto::PowerEvent>> DaemonClient::next_power_event(Nanos timeout) {
  return next_event(events_, timeout);
}

Result<std::optional<proto::CpuEnergyEvent>> DaemonClient::next_cpu_energy_event(Nanos timeout) {
  return next_event(cpu_events_, timeout);
}

Result<ClockOffset> DaemonClient::clock_offset(size_t probes) {
  std::vector<ClockProbe> taken;
  taken.reserve(probes);
  const auto unix_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  for (size_t i = 0; i < probes; ++i) {
    proto::Request request;
    request.op = proto::Op::kTime;
    ClockProbe probe;
    probe.sent_ns = unix_ns();
    auto result = JOULE_TRY(call(request));
    probe.received_ns = unix_ns();
    const auto time_ns = result.find("time_ns");
    if (time_ns == result.end() || !time_ns->is_number_integer()) {
      return fail(ErrorCode::kParse, "the daemon answered 'time' without time_ns");
    }
    probe.remote_ns = time_ns->get<int64_t>();
    taken.push_back(probe);
  }
  return estimate_clock_offset(taken);
}

Result<uint64_t> DaemonClient::stream_cpu_energy(std::optional<std::vector<int>> cpus, uint32_t period_ms) {
  proto::Request request;
  request.op = proto::Op::kStreamCpuEnergy;
  request.cpus = std::move(cpus);
  request.period_ms = period_ms;
  auto result = JOULE_TRY(call(std::move(request)));
  const auto stream = result.find("stream");
  if (stream == result.end() || !stream->is_number_unsigned()) {
    return fail(ErrorCode::kParse, "the daemon answered stream_cpu_energy without a stream id");
  }
  return stream->get<uint64_t>();
}

void DaemonClient::renew_loop() {
  const Nanos interval = std::max(kMinRenewInterval, from_seconds(lease_s_ / 3));
  std::unique_lock lock(renew_mutex_);
  while (!renew_wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    proto::Request renew;
    renew.op = proto::Op::kRenewLease;
    auto result = call(renew);
    lock.lock();
    if (!result) {
      // Never thrown from a background thread: logged, and the next request sees a broken connection too.
      log().warn("{}", result.error().message());
      if (!connected()) {
        return;
      }
    }
  }
}

}  // namespace joule::device
