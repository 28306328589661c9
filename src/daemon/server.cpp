// SPDX-License-Identifier: Apache-2.0
#include "server.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "joule/core/log.hpp"
#include "joule/daemon/metrics.hpp"

namespace joule::daemon {

namespace proto = device::daemon_protocol;

namespace {

constexpr double kMaxLeaseS = 86'400;
constexpr double kMaxHelloTimeoutS = 3'600;
constexpr size_t kMaxConnections = 65'536;
constexpr size_t kReadChunkBytes = size_t{16} * 1024;
// How long a closing connection may take to receive its last responses.
constexpr auto kCloseGrace = std::chrono::seconds(2);
// Bounded per wake-up, so that a flood of connections cannot starve the clients already served.
constexpr int kMaxAcceptsPerWake = 64;
// A refused connection stays open (reading nothing but the peer's first line) at most this long, and at most
// this many at once; beyond that one is closed right after its refusal is written.
constexpr auto kRefusalLinger = std::chrono::seconds(1);
constexpr size_t kMaxLingeringRefusals = 64;
// Out of file descriptors, accept() would fail at once again: the listener rests this long.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr auto kRefusalLogInterval = std::chrono::seconds(10);

std::chrono::nanoseconds to_nanoseconds(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
}

}  // namespace

// ---- Daemon ---------------------------------------------------------------------------------------------

Result<std::unique_ptr<Daemon>> Daemon::start(std::vector<device::Gpu*> gpus, Clock& clock,
                                              DaemonOptions options) {
  if (!(options.lease_s > 0 && options.lease_s <= kMaxLeaseS)) {
    return fail(ErrorCode::kInvalidArgument, "--lease-s {} must be above 0 and at most {} (one day)",
                options.lease_s, kMaxLeaseS);
  }
  if (options.max_connections == 0 || options.max_connections > kMaxConnections) {
    return fail(ErrorCode::kInvalidArgument, "--max-connections {} must be at least 1 and at most {}",
                options.max_connections, kMaxConnections);
  }
  if (options.max_connections_per_user == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-connections-per-user 0 must be at least 1");
  }
  if (options.root_reserved_connections >= options.max_connections) {
    return fail(ErrorCode::kInvalidArgument,
                "--root-reserved-connections {} must be less than --max-connections {} (other users need "
                "room too)",
                options.root_reserved_connections, options.max_connections);
  }
  if (!(options.hello_timeout_s > 0 && options.hello_timeout_s <= kMaxHelloTimeoutS)) {
    return fail(ErrorCode::kInvalidArgument, "--hello-timeout-s {} must be above 0 and at most {} (one hour)",
                options.hello_timeout_s, kMaxHelloTimeoutS);
  }
  if (options.max_streams_per_connection == 0 || options.max_queued_bytes == 0) {
    return fail(ErrorCode::kInvalidArgument, "connection limits must be positive");
  }
  if (::geteuid() != 0 && !options.allow_unprivileged) {
    std::vector<std::string> real;
    for (const auto* gpu : gpus) {
      if (gpu->info().backend != "sim") {
        real.push_back(gpu->label());
      }
    }
    if (!real.empty()) {
      return fail(
          ErrorCode::kPermissionDenied,
          "joule daemon runs as uid {}, not root, so it could not change the power limits and clocks of {}; "
          "run it as root (see docs/daemon.md for a systemd unit), or pass --allow-unprivileged to serve "
          "them anyway (reads work; changes fail unless this user may make them)",
          ::geteuid(), fmt::join(real, ", "));
    }
  }
  auto access =
      JOULE_TRY(AccessPolicy::create(options.access, static_cast<uint32_t>(::geteuid()), options.users));
  auto audit = JOULE_TRY(AuditLog::open(options.audit_log));
  auto listener = JOULE_TRY(Listener::open(options.socket_path, ::geteuid()));
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return fail(ErrorCode::kIo, "cannot create an eventfd: {}", std::strerror(errno));
  }
  auto server = std::make_unique<Server>(std::move(gpus), clock, std::move(options), std::move(access),
                                         std::move(audit), std::move(listener), wake_fd);
  // The constructor is private: a daemon exists only started.
  return std::unique_ptr<Daemon>(new Daemon(std::move(server)));
}

Daemon::Daemon(std::unique_ptr<Server> server) : server_(std::move(server)) {}

Daemon::~Daemon() = default;

Result<std::optional<int>> Daemon::run(const std::vector<int>& stop_signals) {
  return server_->run(stop_signals);
}

void Daemon::stop() {
  server_->stop();
}

const std::string& Daemon::socket_path() const {
  return server_->socket_path();
}

const AccessPolicy& Daemon::access() const {
  return server_->access();
}

const std::string& Daemon::audit_log_path() const {
  return server_->audit_log_path();
}

// ---- Server ---------------------------------------------------------------------------------------------

Server::Server(std::vector<device::Gpu*> gpus, Clock& clock, DaemonOptions options, AccessPolicy access,
               std::unique_ptr<AuditLog> audit, Listener listener, int wake_fd)
    : gpus_(std::move(gpus)),
      clock_(clock),
      options_(std::move(options)),
      access_(std::move(access)),
      audit_(std::move(audit)),
      ledger_(gpus_, *audit_),
      listener_(std::move(listener)),
      wake_fd_(wake_fd),
      lease_(to_nanoseconds(options_.lease_s)),
      hello_timeout_(to_nanoseconds(options_.hello_timeout_s)),
      daemon_uid_(static_cast<uint32_t>(::geteuid())) {
  if (options_.metrics) {
    audit_->set_observer([metrics = options_.metrics](const AuditEntry& entry) { metrics->audited(entry); });
  }
  // The socket's lock is held: a state file left beside it is from a daemon that died without restoring
  // (if the ledger finds it is the daemon's own). Through the checked folder's handle, never by path.
  ledger_.set_state_file(listener_.path() + ".state", listener_.folder_fd());
  for (const auto& line : ledger_.recover()) {
    log().warn("recovered after a daemon that stopped without restoring: {}", line);
  }
}

Server::~Server() {
  shutdown();
  ::close(wake_fd_);
}

void Server::stop() {
  const uint64_t one = 1;
  // An eventfd write of 8 bytes cannot be partial; EAGAIN means a stop is already pending.
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_, &one, sizeof one);
}

void Server::shutdown() {
  const auto restored = ledger_.restore_everything(RestoreReason::kShutdown);
  for (const auto& line : restored) {
    log().info("restored {} (shutdown)", line);
  }
  for (auto& [id, connection] : connections_) {
    ::close(connection->fd);
    if (options_.metrics && !connection->refused) {
      options_.metrics->connection_closed();
    }
  }
  connections_.clear();
  served_ = 0;
  per_user_.clear();
  lingering_refusals_ = 0;
}

Owner Server::owner_of(const Connection& connection) const {
  return Owner{connection.id, connection.peer.uid, connection.peer.pid};
}

std::optional<std::string> Server::over_limit(const PeerCredentials& peer) const {
  if (served_ >= options_.max_connections) {
    return fmt::format(
        "the daemon already serves {} connections, its maximum (--max-connections {}); try again "
        "later",
        served_, options_.max_connections);
  }
  if (privileged(peer.uid)) {
    return std::nullopt;
  }
  const size_t for_users = options_.max_connections - options_.root_reserved_connections;
  if (served_ >= for_users) {
    return fmt::format(
        "the daemon already serves {} connections, the most it takes from users other than root "
        "(--max-connections {} less --root-reserved-connections {}); try again later",
        served_, options_.max_connections, options_.root_reserved_connections);
  }
  const auto mine = per_user_.find(peer.uid);
  if (mine != per_user_.end() && mine->second >= options_.max_connections_per_user) {
    const auto name = options_.users.name_of ? options_.users.name_of(peer.uid) : std::nullopt;
    return fmt::format(
        "uid {}{} already has {} connection{} to the daemon, the most one user may hold "
        "(--max-connections-per-user {}); close one first",
        peer.uid, name ? " (" + *name + ")" : std::string(), mine->second, mine->second == 1 ? "" : "s",
        options_.max_connections_per_user);
  }
  return std::nullopt;
}

void Server::refuse(int fd, const PeerCredentials& peer, const std::string& why) {
  proto::Response response;  // no id: it answers no request
  response.error = Error(ErrorCode::kState, why);
  const std::string line = proto::format_response(response) + "\n";
  // A new connection's send buffer takes one short line whole; if not, the peer only misses the reason.
  [[maybe_unused]] const ssize_t sent = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_refusal_log_) {
    log().warn("refused a connection of uid {} pid {}: {}{}", peer.uid, peer.pid, why,
               unlogged_refusals_ == 0
                   ? std::string()
                   : fmt::format(" ({} more refused since the last such line)", unlogged_refusals_));
    next_refusal_log_ = now + kRefusalLogInterval;
    unlogged_refusals_ = 0;
  } else {
    ++unlogged_refusals_;
  }
  if (lingering_refusals_ >= kMaxLingeringRefusals) {
    ::close(fd);
    return;
  }
  // Closed at once, a client that sends its hello a moment later would get EPIPE instead of the reason.
  auto connection = std::make_unique<Connection>();
  connection->id = next_connection_id_++;
  connection->fd = fd;
  connection->peer = peer;
  connection->refused = true;
  connection->close_deadline = now + kRefusalLinger;
  connections_.emplace(connection->id, std::move(connection));
  ++lingering_refusals_;
}

void Server::accept_connections() {
  for (int accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog and poll() would report it again at once: rest instead.
        accept_paused_ = std::chrono::steady_clock::now() + kAcceptPause;
        log().warn("accept on {}: {}; accepting again in {} ms", listener_.path(), std::strerror(errno),
                   kAcceptPause.count());
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        log().warn("accept on {}: {}", listener_.path(), std::strerror(errno));
      }
      return;
    }
    ucred credentials{};
    socklen_t length = sizeof credentials;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      log().warn("cannot read the peer credentials of a connection: {}", std::strerror(errno));
      ::close(fd);
      continue;
    }
    const PeerCredentials peer{credentials.uid, credentials.gid, credentials.pid};
    // Judged before anything else is done for it: a refused connection costs one line and a file descriptor
    // for at most kRefusalLinger.
    if (const auto why = over_limit(peer)) {
      refuse(fd, peer, *why);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->id = next_connection_id_++;
    connection->fd = fd;
    connection->peer = peer;
    // Rights are judged once, at connection time, like file permissions at open().
    connection->grant = access_.grant(connection->peer);
    const auto now = std::chrono::steady_clock::now();
    connection->hello_deadline = now + hello_timeout_;
    connection->lease_deadline = now + lease_;
    log().info("connection {}: uid {} ({}) pid {}: {} ({})", connection->id, credentials.uid,
               connection->grant.user, credentials.pid, proto::to_string(connection->grant.right),
               connection->grant.reason);
    ++served_;
    if (!privileged(peer.uid)) {
      ++per_user_[peer.uid];
    }
    connections_.emplace(connection->id, std::move(connection));
    if (options_.metrics) {
      options_.metrics->connection_opened();
    }
  }
}

void Server::read_from(Connection& connection) {
  char chunk[kReadChunkBytes];
  if (connection.refused) {
    // Its first line (or its close) means it has sent what it would before reading the refusal.
    const ssize_t n = ::recv(connection.fd, chunk, sizeof chunk, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        (n > 0 && std::memchr(chunk, '\n', static_cast<size_t>(n)) != nullptr)) {
      connection.dead = true;
    }
    return;
  }
  // Bounded per wake-up, so that one busy client cannot starve the others.
  for (int round = 0; round < 4 && !connection.closing; ++round) {
    const ssize_t n = ::recv(connection.fd, chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        connection.dead = true;
      }
      return;
    }
    if (n == 0) {
      // The peer closed its end (exit, crash, kill -9 all look alike): its settings go now.
      process_input(connection);
      begin_close(connection, RestoreReason::kDisconnected);
      return;
    }
    connection.input.append(chunk, static_cast<size_t>(n));
    process_input(connection);
    if (connection.output.size() > options_.max_queued_bytes) {
      return;  // let it read first
    }
  }
}

void Server::process_input(Connection& connection) {
  size_t start = 0;
  while (true) {
    const size_t newline = connection.input.find('\n', start);
    if (newline == std::string::npos) {
      break;
    }
    std::string_view line(connection.input.data() + start, newline - start);
    start = newline + 1;
    if (connection.discarding) {
      connection.discarding = false;  // the end of the over-long line, already answered
      continue;
    }
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      continue;  // blank lines are not requests
    }
    if (options_.metrics) {
      options_.metrics->request();
    }
    connection.output += handle_line(connection, line);
    connection.output += '\n';
  }
  connection.input.erase(0, start);
  if (connection.input.size() > proto::kMaxLineBytes) {
    if (!connection.discarding) {
      proto::Response response;
      response.error =
          Error(ErrorCode::kInvalidArgument,
                fmt::format("request line longer than {} bytes; it is skipped up to the next newline",
                            proto::kMaxLineBytes));
      connection.output += proto::format_response(response) + "\n";
      connection.discarding = true;
    }
    connection.input.clear();
  }
}

void Server::write_to(Connection& connection) {
  while (!connection.output.empty()) {
    // MSG_NOSIGNAL: a vanished peer is an error here, not a SIGPIPE for the daemon.
    const ssize_t n = ::send(connection.fd, connection.output.data(), connection.output.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        connection.dead = true;
      }
      return;
    }
    connection.output.erase(0, static_cast<size_t>(n));
  }
}

void Server::begin_close(Connection& connection, RestoreReason reason) {
  if (connection.closing) {
    return;
  }
  connection.closing = true;
  connection.streams.clear();
  connection.close_deadline = std::chrono::steady_clock::now() + kCloseGrace;
  for (const auto& line : ledger_.release_all(connection.id, reason)) {
    log().info("connection {} ({}): restored {}", connection.id, to_string(reason), line);
  }
  if (connection.output.empty()) {
    connection.dead = true;
  }
}

void Server::close_dead() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& connection = *it->second;
    if (connection.closing && connection.output.empty()) {
      connection.dead = true;
    }
    if (!connection.dead) {
      ++it;
      continue;
    }
    if (connection.refused) {
      ::close(connection.fd);
      --lingering_refusals_;
      it = connections_.erase(it);
      continue;
    }
    begin_close(connection, RestoreReason::kDisconnected);  // no-op if already closing
    log().info("connection {} closed", connection.id);
    ::close(connection.fd);
    --served_;
    if (!privileged(connection.peer.uid)) {
      if (auto mine = per_user_.find(connection.peer.uid); mine != per_user_.end() && --mine->second == 0) {
        per_user_.erase(mine);
      }
    }
    it = connections_.erase(it);
    if (options_.metrics) {
      options_.metrics->connection_closed();
    }
  }
}

void Server::sample_stream(Connection& connection, Stream& stream) {
  // Above the queue bound the samples are skipped, not queued: a reader that does not keep up misses some.
  if (connection.output.size() > options_.max_queued_bytes) {
    return;
  }
  for (const int gpu : stream.gpus) {
    const auto power = gpus_[static_cast<size_t>(gpu)]->power_mw();
    if (!power) {
      log().debug("stream {}: {}", stream.id, power.error().message());
      continue;
    }
    proto::PowerEvent event;
    event.stream = stream.id;
    event.gpu = gpu;
    event.time_ms = clock_.to_unix_ns(clock_.now()) / 1'000'000;
    event.power_mw = *power;
    connection.output += proto::format_event(event) + "\n";
  }
}

void Server::run_timers(SteadyTime now) {
  if (accept_paused_ && now >= *accept_paused_) {
    accept_paused_.reset();
  }
  for (auto& [id, connection] : connections_) {
    if (connection->refused) {
      connection->dead = connection->dead || now >= connection->close_deadline;
      continue;
    }
    if (connection->closing) {
      continue;
    }
    if (!connection->greeted && now >= connection->hello_deadline) {
      // Before hello it owns nothing and streams nothing: closing it only frees its slot.
      proto::Response response;
      response.error =
          Error(ErrorCode::kState,
                fmt::format(R"(no hello within {} s of connecting (--hello-timeout-s): the daemon )"
                            R"(closes this connection; send {{"op":"hello","protocol":{}}} first)",
                            options_.hello_timeout_s, proto::kVersion));
      connection->output += proto::format_response(response) + "\n";
      log().info("connection {} (uid {} pid {}): no hello within {} s; closing it", id, connection->peer.uid,
                 connection->peer.pid, options_.hello_timeout_s);
      begin_close(*connection, RestoreReason::kDisconnected);
      continue;
    }
    if (now >= connection->lease_deadline && ledger_.owns_any(connection->id)) {
      const auto restored = ledger_.release_all(connection->id, RestoreReason::kLeaseExpired);
      connection->lease_notice = fmt::format(
          "the lease of {} s ran out without a request, so the daemon restored this connection's settings "
          "({}); "
          "this request was not run: send it again (settings made from now on are owned again)",
          options_.lease_s, fmt::join(restored, "; "));
      log().warn("connection {} (uid {} pid {}): lease expired; restored {}", id, connection->peer.uid,
                 connection->peer.pid, fmt::join(restored, "; "));
    }
    for (auto& stream : connection->streams) {
      if (now >= stream.next) {
        sample_stream(*connection, stream);
        stream.next += stream.period;
        if (stream.next <= now) {
          stream.next = now + stream.period;  // fell behind (a slow device): skip, do not burst
        }
      }
    }
  }
  for (auto& [id, connection] : connections_) {
    if (connection->closing && now >= connection->close_deadline) {
      connection->dead = true;
    }
  }
}

std::optional<SteadyTime> Server::next_timer() const {
  std::optional<SteadyTime> next;
  const auto consider = [&next](SteadyTime time) {
    if (!next || time < *next) {
      next = time;
    }
  };
  if (accept_paused_) {
    consider(*accept_paused_);
  }
  for (const auto& [id, connection] : connections_) {
    if (connection->closing || connection->refused) {
      consider(connection->close_deadline);
      continue;
    }
    if (!connection->greeted) {
      consider(connection->hello_deadline);
    }
    if (ledger_.owns_any(connection->id)) {
      consider(connection->lease_deadline);
    }
    for (const auto& stream : connection->streams) {
      consider(stream.next);
    }
  }
  return next;
}

Result<std::optional<int>> Server::run(const std::vector<int>& stop_signals) {
  int signal_fd = -1;
  if (!stop_signals.empty()) {
    sigset_t set;
    sigemptyset(&set);
    for (const int signal_number : stop_signals) {
      sigaddset(&set, signal_number);
    }
    signal_fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd < 0) {
      return fail(ErrorCode::kIo, "cannot create a signalfd: {}", std::strerror(errno));
    }
  }
  std::optional<int> stopped_by;
  std::optional<Error> failure;
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    // Always accepting (but when out of file descriptors): a connection over a limit is told so and closed,
    // never left in the backlog where it would hold a place that root's next connection needs.
    fds.push_back({accept_paused_ ? -1 : listener_.fd(), POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({signal_fd, POLLIN, 0});
    for (auto& [id, connection] : connections_) {
      short events = 0;
      if (connection->refused) {
        events = POLLIN;
      } else if (!connection->closing && connection->output.size() <= options_.max_queued_bytes) {
        events |= POLLIN;
      }
      if (!connection->output.empty()) {
        events |= POLLOUT;
      }
      fds.push_back({connection->fd, events, 0});
      polled.push_back(connection.get());
    }
    timespec timeout{};
    const timespec* timeout_pointer = nullptr;
    if (const auto next = next_timer()) {
      const auto wait = std::max<std::chrono::nanoseconds>(*next - std::chrono::steady_clock::now(),
                                                           std::chrono::nanoseconds(0));
      timeout.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000);
      timeout.tv_nsec = static_cast<long>(wait.count() % 1'000'000'000);
      timeout_pointer = &timeout;
    }
    if (::ppoll(fds.data(), fds.size(), timeout_pointer, nullptr) < 0) {
      if (errno == EINTR) {
        continue;
      }
      failure = Error(ErrorCode::kIo, fmt::format("poll failed: {}", std::strerror(errno)));
      break;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      break;
    }
    if (signal_fd >= 0 && (fds[2].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        stopped_by = static_cast<int>(info.ssi_signo);
        break;
      }
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& connection = *polled[i];
      const short revents = fds[i + 3].revents;
      if ((revents & POLLIN) != 0 || (revents & POLLHUP) != 0) {
        read_from(connection);
      }
      if ((revents & POLLERR) != 0 || (revents & POLLNVAL) != 0) {
        connection.dead = true;
      }
      if (!connection.output.empty() && !connection.dead) {
        write_to(connection);  // responses go out at once; POLLOUT covers what did not fit
      }
    }
    if ((fds[0].revents & POLLIN) != 0) {
      accept_connections();
    }
    run_timers(std::chrono::steady_clock::now());
    for (auto& [id, connection] : connections_) {
      if (!connection->output.empty() && !connection->dead) {
        write_to(*connection);
      }
    }
    close_dead();
  }
  if (signal_fd >= 0) {
    ::close(signal_fd);
  }
  shutdown();
  if (failure) {
    return tl::make_unexpected(*failure);
  }
  return stopped_by;
}

}  // namespace joule::daemon
