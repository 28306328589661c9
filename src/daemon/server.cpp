// SPDX-License-Identifier: Apache-2.0
#include "server.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

Server::Server(std::vector<device::Gpu*> gpus, Clock& clock, DaemonOptions options, AccessPolicy access,
               std::unique_ptr<AuditLog> audit, Listener listener, int wake_fd,
               std::vector<NetworkListener> network_listeners, NetworkSecurity security)
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
      daemon_uid_(static_cast<uint32_t>(::geteuid())),
      idle_timeout_(to_nanoseconds(options_.idle_timeout_s)),
      network_listeners_(std::move(network_listeners)),
      security_(std::move(security)) {
  if (options_.metrics) {
    audit_->set_observer([metrics = options_.metrics](const AuditEntry& entry) { metrics->audited(entry); });
  }
  // The socket's lock is held: a state file left beside it is from a daemon that died without restoring
  // (if the ledger finds it is the daemon's own). Through the checked folder's handle, never by path.
  ledger_.set_state_file(listener_.path() + ".state", listener_.folder_fd());
  for (const auto& line : ledger_.recover()) {
    log().warn("recovered after a daemon that stopped without restoring: {}", line);
  }
  if (options_.job_energy_period_s > 0) {
    job_resolver_ = options_.job_resolver
                        ? options_.job_resolver
                        : std::make_shared<const measure::SlurmCgroupResolver>(options_.proc_root);
    job_energy_ = std::make_unique<measure::JobEnergyTracker>(gpus_, *job_resolver_, options_.job_energy);
    update_job_energy();  // the first windows start now
  }
}

void Server::update_job_energy() {
  const auto now = std::chrono::steady_clock::now();
  next_job_energy_update_ = now + to_nanoseconds(options_.job_energy_period_s);
  last_job_energy_update_us_ =
      static_cast<uint64_t>(std::max<int64_t>(clock_.to_unix_ns(clock_.now()), 0)) / 1000;
  job_energy_->update(last_job_energy_update_us_);
  const auto errors = job_energy_->take_errors();
  if (errors.empty()) {
    return;
  }
  // A GPU that keeps failing, or processes whose cgroup cannot be read, must not fill the journal.
  if (now < next_job_energy_log_) {
    unlogged_job_energy_errors_ += errors.size();
    return;
  }
  log().warn("job energy accounting: {}{}", errors.front().message(),
             errors.size() + unlogged_job_energy_errors_ > 1
                 ? fmt::format(" ({} more errors since the last line)",
                               errors.size() - 1 + unlogged_job_energy_errors_)
                 : std::string());
  unlogged_job_energy_errors_ = 0;
  next_job_energy_log_ = now + std::chrono::minutes(1);
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
    close_socket(*connection);
    if (options_.metrics && !connection->refused) {
      options_.metrics->connection_closed();
    }
  }
  connections_.clear();
  served_ = 0;
  per_user_.clear();
  lingering_refusals_ = 0;
  idle_per_user_.clear();
  idle_total_ = 0;
  handshakes_ = 0;
  next_turn_.clear();
  audit_->flush_summaries(true);
}

Owner Server::owner_of(const Connection& connection) const {
  uint64_t owner = connection.id;
  if (!connection.holder_key.empty()) {
    if (const auto found = holders_.find(connection.holder_key); found != holders_.end()) {
      owner = found->second.owner_id;
    }
  }
  return Owner{owner, connection.peer.uid, connection.peer.pid, connection.client, connection.address};
}

nlohmann::json Server::take_holder(Connection& connection, const std::string& name) {
  const std::string principal =
      connection.remote ? "client " + connection.client : fmt::format("uid {}", connection.peer.uid);
  const std::string key = principal + "/" + name;
  auto [entry, created] = holders_.try_emplace(key);
  Holder& holder = entry->second;
  if (created) {
    holder.name = name;
    holder.owner_id = next_connection_id_++;
  }
  nlohmann::json taken_from = nullptr;
  if (holder.connection != 0 && holder.connection != connection.id) {
    taken_from = holder.connection;
    log().warn("holder '{}' of {}: connection {} takes it over from connection {}", name, principal,
               connection.id, holder.connection);
  }
  holder.connection = connection.id;
  holder.lease_deadline = std::chrono::steady_clock::now() + lease_;
  connection.holder_key = key;
  const std::vector<std::string> held = ledger_.held_by(holder.owner_id);
  if (!held.empty()) {
    log().info("holder '{}' of {}: connection {} finds {} setting{} in force: {}", name, principal,
               connection.id, held.size(), held.size() == 1 ? "" : "s", fmt::join(held, "; "));
  }
  return {{"name", name}, {"held", held}, {"taken_from", taken_from}};
}

const Server::Holder* Server::holder_of(const Connection& connection) const {
  if (connection.holder_key.empty()) {
    return nullptr;
  }
  const auto found = holders_.find(connection.holder_key);
  return found != holders_.end() && found->second.connection == connection.id ? &found->second : nullptr;
}

Server::Holder* Server::holder_of(const Connection& connection) {
  return const_cast<Holder*>(std::as_const(*this).holder_of(connection));
}

void Server::expire_holders(SteadyTime now) {
  for (auto entry = holders_.begin(); entry != holders_.end();) {
    Holder& holder = entry->second;
    if (now >= holder.lease_deadline && ledger_.owns_any(holder.owner_id)) {
      const auto restored = ledger_.release_all(holder.owner_id, RestoreReason::kLeaseExpired);
      log().warn("holder '{}' ({}): lease of {} s expired; restored {}", holder.name, entry->first,
                 options_.lease_s, fmt::join(restored, "; "));
      if (const auto acting = connections_.find(holder.connection); acting != connections_.end()) {
        acting->second->lease_notice = fmt::format(
            "the lease of {} s ran out without a request, so the daemon restored holder '{}''s settings "
            "({}); "
            "this request was not run: send it again (settings made from now on are owned again)",
            options_.lease_s, holder.name, fmt::join(restored, "; "));
      }
    }
    if (holder.connection == 0 && !ledger_.owns_any(holder.owner_id)) {
      entry = holders_.erase(entry);
      continue;
    }
    ++entry;
  }
}

std::optional<std::string> Server::over_limit(const PeerCredentials& peer) const {
  if (served_ >= options_.max_connections) {
    return fmt::format(
        "the daemon already serves {} connections, its maximum (--max-connections {}); try again "
        "later",
        served_, options_.max_connections);
  }
  if (privileged(peer)) {
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
    return fmt::format(
        "{} already has {} connection{} to the daemon, the most one user may hold "
        "(--max-connections-per-user {}); close one first",
        user_text(peer.uid), mine->second, mine->second == 1 ? "" : "s", options_.max_connections_per_user);
  }
  // Its idle connections already fill its share: it would only add one more (connect, hello, wait).
  const auto idle = idle_per_user_.find(peer.uid);
  if (idle != idle_per_user_.end() && idle->second >= options_.max_idle_connections_per_user) {
    return fmt::format(
        "{} already keeps {} idle connection{} to the daemon (no request for {} s, no setting, no stream), "
        "the "
        "most one user may (--max-idle-connections-per-user {}); use or close one first",
        user_text(peer.uid), idle->second, idle->second == 1 ? "" : "s", options_.idle_timeout_s,
        options_.max_idle_connections_per_user);
  }
  return std::nullopt;
}

std::string Server::user_text(uint32_t uid) const {
  const auto name = options_.users.name_of ? options_.users.name_of(uid) : std::nullopt;
  return fmt::format("uid {}{}", uid, name ? " (" + *name + ")" : std::string());
}

std::string Server::peer_text(const Connection& connection) const {
  if (!connection.remote) {
    return fmt::format("{}, pid {}", user_text(connection.peer.uid), connection.peer.pid);
  }
  return connection.client.empty() ? fmt::format("a client at {}", connection.address)
                                   : fmt::format("client {} at {}", connection.client, connection.address);
}

uint64_t Server::principal_key(std::string_view kind, std::string_view name) {
  // Above every uid: a network principal never shares a uid's limits.
  constexpr uint64_t kFirstNetworkKey = uint64_t{1} << 32;
  const std::string key = fmt::format("{} {}", kind, name);
  const auto found = principal_ids_.find(key);
  if (found != principal_ids_.end()) {
    return found->second;
  }
  const uint64_t id = kFirstNetworkKey + principal_ids_.size();
  principal_ids_.emplace(key, id);
  return id;
}

std::vector<std::string> Server::network_addresses() const {
  std::vector<std::string> addresses;
  addresses.reserve(network_listeners_.size());
  for (const auto& listener : network_listeners_) {
    addresses.push_back(listener.address());
  }
  return addresses;
}

Result<void> Server::reload() {
  if (network_listeners_.empty()) {
    log().info("reload: the daemon has no network listener, so no file to read again");
    return {};
  }
  // The same options as at start: a TLS listener's files load into a TLS context or fail.
  security_ = JOULE_TRY(NetworkSecurity::load(options_.network, daemon_uid_));
  const std::string described = security_.describe(options_.network);
  log().info("network listener reloaded: {}", described);
  AuditEntry entry;
  entry.action = "reload";
  entry.reason = "signal";
  entry.detail = "network listener: " + described;
  audit_->record(entry);
  return {};
}

void Server::audit_refusal(const Connection& connection, std::string reason, const std::string& detail) {
  AuditEntry entry;
  entry.action = "refused";
  entry.connection = connection.id;
  entry.client = connection.client;
  entry.address = connection.address;
  entry.reason = std::move(reason);
  entry.detail = detail;
  audit_->record(entry);
}

void Server::accept_network(const NetworkListener& listener) {
  for (int accepted = 0; accepted < kMaxAcceptsPerWake && handshakes_ < options_.network.max_handshakes;
       ++accepted) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      accept_failed(listener.address());
      return;
    }
    const std::string address = peer_address(fd);
    const std::string host = address.substr(0, address.rfind(':'));
    const uint64_t principal = principal_key("host", host);
    // A network peer never takes the places kept for root.
    const size_t for_users = options_.max_connections - options_.root_reserved_connections;
    const auto mine = per_user_.find(principal);
    std::string over;
    if (served_ >= for_users) {
      over = fmt::format(
          "the daemon already serves {} connections, the most it takes from users other than root", served_);
    } else if (mine != per_user_.end() && mine->second >= options_.max_connections_per_user) {
      over = fmt::format("{} connections from {} are not authenticated yet (--max-connections-per-user {})",
                         mine->second, host, options_.max_connections_per_user);
    }
    if (!over.empty()) {
      // Before TLS there is no way to tell the peer why: logged (at most once per interval) and closed.
      log_refusal(fmt::format("a network connection from {}: {}", address, over));
      ::close(fd);
      continue;
    }
    // Requests and answers are single short lines: Nagle's delay would add to every round trip.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto connection = std::make_unique<Connection>();
    connection->id = next_connection_id_++;
    connection->fd = fd;
    connection->remote = true;
    connection->address = address;
    connection->principal = principal;
    connection->grant = Grant{Right::kNone, "a client at " + address, "not authenticated yet"};
    if (!listener.plain()) {
      auto stream = http::TlsStream::server(security_.tls, fd);
      if (!stream) {
        log().warn("connection from {}: {}", address, stream.error().message());
        ::close(fd);
        continue;
      }
      connection->tls = std::move(*stream);
      connection->handshaking = true;
      ++handshakes_;
    }
    log().info("connection {}: from {} on {}{}", connection->id, address, listener.address(),
               listener.plain() ? " (plain TCP)" : "");
    admit(std::move(connection));
  }
}

void Server::advance_handshake(Connection& connection) {
  connection.tls_wants_write = false;
  const auto wait = connection.tls->handshake();
  if (!wait) {
    if (connection.tls->closed_before_handshake()) {
      // A port probe or health check (connect, close): nothing was refused.
      log().info("connection {} ({}): closed by the peer before its TLS handshake", connection.id,
                 peer_text(connection));
    } else {
      log().warn("connection {} ({}): {}", connection.id, peer_text(connection), wait.error().message());
      audit_refusal(connection, "tls", wait.error().message());
    }
    connection.handshaking = false;
    --handshakes_;
    connection.tls.reset();
    ::shutdown(connection.fd, SHUT_WR);
    connection.draining = true;
    connection.close_deadline = std::chrono::steady_clock::now() + kRefusalLinger;
    return;
  }
  if (*wait != http::TlsWait::kNothing) {
    connection.tls_wants_write = *wait == http::TlsWait::kWritable;
    return;
  }
  connection.handshaking = false;
  --handshakes_;
  const std::string name = connection.tls->peer_name();
  if (name.empty()) {
    return;  // it may still present a token in its hello
  }
  const auto entry = security_.tokens ? security_.tokens->find_certificate(name) : std::nullopt;
  std::string why;
  if (!entry) {
    why = fmt::format(
        "the client certificate of {} is valid, but the daemon's token file names no such client: add a line "
        "`{} read certificate` (or control) to it and reload the daemon (SIGHUP)",
        name, name);
  } else if (const auto over = authenticate(connection, *entry, "certificate")) {
    why = *over;
  } else {
    return;
  }
  log().warn("connection {} ({}): refused: {}", connection.id, peer_text(connection), why);
  audit_refusal(connection, "authentication", why);
  close_with_notice(connection, why);
}

std::optional<std::string> Server::authenticate(Connection& connection, const TokenEntry& entry,
                                                std::string_view how) {
  const uint64_t principal = principal_key("client", entry.name);
  const auto mine = per_user_.find(principal);
  if (mine != per_user_.end() && mine->second >= options_.max_connections_per_user) {
    return fmt::format(
        "client {} already has {} connection{} to the daemon, the most one client may hold "
        "(--max-connections-per-user {}); close one first",
        entry.name, mine->second, mine->second == 1 ? "" : "s", options_.max_connections_per_user);
  }
  if (auto previous = per_user_.find(connection.principal);
      previous != per_user_.end() && --previous->second == 0) {
    per_user_.erase(previous);
  }
  connection.principal = principal;
  ++per_user_[principal];
  connection.client = entry.name;
  connection.grant = Grant{right_of(entry.scope), "client " + entry.name,
                           fmt::format("{} of {} (scope {})", how, entry.name, to_string(entry.scope))};
  log().info("connection {} ({}): authenticated by {}: {}", connection.id, peer_text(connection), how,
             proto::to_string(connection.grant.right));
  return std::nullopt;
}

ssize_t Server::receive(Connection& connection, char* buffer, size_t size) {
  if (!connection.tls) {
    return ::recv(connection.fd, buffer, size, 0);
  }
  const ssize_t n = connection.tls->receive(buffer, size);
  connection.tls_wants_write = n < 0 && errno == EAGAIN && connection.tls->waits_for_writable();
  if (n < 0 && errno == EPROTO) {
    log().info("connection {} ({}): TLS read: {}", connection.id, peer_text(connection),
               connection.tls->last_error());
    errno = EPROTO;  // (the log may have set another)
  }
  return n;
}

ssize_t Server::transmit(Connection& connection, const char* data, size_t size) {
  if (!connection.tls) {
    // MSG_NOSIGNAL: a vanished peer is an error here, not a SIGPIPE for the daemon.
    return ::send(connection.fd, data, size, MSG_NOSIGNAL);
  }
  const ssize_t n = connection.tls->send(data, size);
  connection.tls_wants_read = n < 0 && errno == EAGAIN && !connection.tls->waits_for_writable();
  return n;
}

void Server::drain(Connection& connection) {
  char chunk[kReadChunkBytes];
  for (int round = 0; round < 4; ++round) {
    const ssize_t n = ::recv(connection.fd, chunk, sizeof chunk, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      connection.dead = true;
      return;
    }
    if (n < 0) {
      return;
    }
  }
}

void Server::close_socket(Connection& connection) {
  if (connection.tls && !connection.handshaking && !connection.dead) {
    connection.tls->shutdown();
  }
  connection.tls.reset();
  ::close(connection.fd);
}

void Server::log_refusal(const std::string& what) {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_refusal_log_) {
    ++unlogged_refusals_;
    return;
  }
  log().warn("refused {}{}", what,
             unlogged_refusals_ == 0
                 ? std::string()
                 : fmt::format(" ({} more refused since the last such line)", unlogged_refusals_));
  next_refusal_log_ = now + kRefusalLogInterval;
  unlogged_refusals_ = 0;
}

void Server::refuse(int fd, const PeerCredentials& peer, const std::string& why) {
  proto::Response response;  // no id: it answers no request
  response.error = Error(ErrorCode::kState, why);
  const std::string line = proto::format_response(response) + "\n";
  // A new connection's send buffer takes one short line whole; if not, the peer only misses the reason.
  [[maybe_unused]] const ssize_t sent = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  log_refusal(fmt::format("a connection of uid {} pid {}: {}", peer.uid, peer.pid, why));
  const auto now = std::chrono::steady_clock::now();
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

void Server::accept_failed(const std::string& where) {
  if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
    // The connection stays in the backlog and poll() would report it again at once: rest instead.
    accept_paused_ = std::chrono::steady_clock::now() + kAcceptPause;
    log().warn("accept on {}: {}; accepting again in {} ms", where, std::strerror(errno),
               kAcceptPause.count());
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
    log().warn("accept on {}: {}", where, std::strerror(errno));
  }
}

void Server::accept_connections() {
  for (int accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      accept_failed(listener_.path());
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
    connection->principal = principal_key(peer.uid);
    log().info("connection {}: uid {} ({}) pid {}: {} ({})", connection->id, credentials.uid,
               connection->grant.user, credentials.pid, proto::to_string(connection->grant.right),
               connection->grant.reason);
    admit(std::move(connection));
  }
}

void Server::admit(std::unique_ptr<Connection> connection) {
  const auto now = std::chrono::steady_clock::now();
  connection->hello_deadline = now + hello_timeout_;
  connection->lease_deadline = now + lease_;
  connection->last_request = now;
  ++served_;
  if (!privileged(*connection)) {
    ++per_user_[connection->principal];
  }
  connections_.emplace(connection->id, std::move(connection));
  if (options_.metrics) {
    options_.metrics->connection_opened();
  }
}

void Server::read_from(Connection& connection) {
  char chunk[kReadChunkBytes];
  if (connection.refused) {
    // Its first line (or its close) means it has sent what it would before reading the refusal.
    const ssize_t n = receive(connection, chunk, sizeof chunk);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        (n > 0 && std::memchr(chunk, '\n', static_cast<size_t>(n)) != nullptr)) {
      connection.dead = true;
    }
    return;
  }
  if (connection.consumed > 0) {
    connection.input.erase(0, connection.consumed);
    connection.consumed = 0;
  }
  // Bounded per wake-up, and only while no complete request waits to be served: a client's unserved requests
  // stay in its socket, never in the daemon's memory, and reading a flood costs nothing until its turn.
  for (int round = 0; round < 4 && !connection.closing && !connection.peer_closed; ++round) {
    if (has_line(connection) || connection.output.size() > options_.max_queued_bytes) {
      return;
    }
    const ssize_t n = receive(connection, chunk, sizeof chunk);
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
      // The peer closed its end (exit, crash, kill -9 all look alike): its settings go once the requests it
      // sent before are answered (serve_requests).
      connection.peer_closed = true;
      return;
    }
    connection.input.append(chunk, static_cast<size_t>(n));
    skip_overlong(connection);
  }
}

bool Server::has_line(const Connection& connection) {
  return connection.input.find('\n', connection.consumed) != std::string::npos;
}

bool Server::may_serve(const Connection& connection) const {
  return !connection.refused && !connection.draining && !connection.closing && !connection.dead &&
         connection.output.size() <= options_.max_queued_bytes;
}

void Server::skip_overlong(Connection& connection) {
  if (connection.input.size() - connection.consumed <= proto::kMaxLineBytes || has_line(connection)) {
    return;
  }
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
  connection.consumed = 0;
}

bool Server::serve_one(Connection& connection) {
  while (true) {
    const size_t newline = connection.input.find('\n', connection.consumed);
    if (newline == std::string::npos) {
      return false;
    }
    std::string_view line(connection.input.data() + connection.consumed, newline - connection.consumed);
    connection.consumed = newline + 1;
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
    connection.last_request = std::chrono::steady_clock::now();
    if (connection.idle) {
      set_idle(connection, false);
    }
    connection.output += handle_line(connection, line);
    connection.output += '\n';
    if (connection.close_after_answer) {
      begin_close(connection, RestoreReason::kDisconnected);
      return true;
    }
    if (connection.refusals_in_a_row >= options_.max_refusals_in_a_row) {
      log().info("connection {} ({}): {} requests in a row refused; closing it", connection.id,
                 peer_text(connection), connection.refusals_in_a_row);
      close_with_notice(
          connection, fmt::format("the daemon closes this connection: its last {} requests were all refused "
                                  "(--max-refusals-in-a-row {}); get the right they need (their answers say "
                                  "how) before connecting again",
                                  connection.refusals_in_a_row, options_.max_refusals_in_a_row));
    }
    return true;
  }
}

void Server::serve_requests() {
  // Who has a request waiting, by class (root and the daemon's user; control; the rest) and uid, each uid's
  // connections in id order (connections_ is ordered by id).
  std::array<std::map<uint64_t, std::vector<Connection*>>, 3> waiting;
  for (auto& [id, connection] : connections_) {
    if (may_serve(*connection) && has_line(*connection)) {
      const size_t rank = privileged(*connection) ? 0 : connection->grant.right >= Right::kControl ? 1 : 2;
      waiting[rank][connection->principal].push_back(connection.get());
    }
  }
  std::map<uint64_t, uint64_t> turns;
  for (auto& by_uid : waiting) {
    for (auto& [uid, queue] : by_uid) {
      // Start after the connection served last, so that a uid's many connections share its budget.
      uint64_t& last = turns[uid] = next_turn_[uid];
      const auto first =
          std::find_if(queue.begin(), queue.end(), [last](const Connection* c) { return c->id > last; });
      std::rotate(queue.begin(), first, queue.end());
      size_t budget = options_.requests_per_turn;
      for (bool served = true; served && budget > 0;) {
        served = false;
        for (Connection* connection : queue) {
          if (budget == 0) {
            break;
          }
          if (may_serve(*connection) && serve_one(*connection)) {
            --budget;
            served = true;
            last = connection->id;
          }
        }
      }
    }
  }
  next_turn_ = std::move(turns);
  for (auto& [id, connection] : connections_) {
    if (connection->peer_closed && !connection->closing && !connection->refused && !has_line(*connection)) {
      begin_close(*connection, RestoreReason::kDisconnected);
    }
  }
}

bool Server::holds_something(const Connection& connection) const {
  if (const Holder* holder = holder_of(connection); holder != nullptr && ledger_.owns_any(holder->owner_id)) {
    return true;
  }
  return !connection.streams.empty() || ledger_.owns_any(connection.id) || has_line(connection);
}

void Server::set_idle(Connection& connection, bool idle) {
  if (connection.idle == idle) {
    return;
  }
  connection.idle = idle;
  if (idle) {
    ++idle_per_user_[connection.principal];
    ++idle_total_;
    return;
  }
  --idle_total_;
  if (auto mine = idle_per_user_.find(connection.principal);
      mine != idle_per_user_.end() && --mine->second == 0) {
    idle_per_user_.erase(mine);
  }
}

void Server::close_with_notice(Connection& connection, const std::string& why) {
  proto::Response response;  // no id: it answers no request
  response.error = Error(ErrorCode::kState, why);
  connection.output += proto::format_response(response) + "\n";
  begin_close(connection, RestoreReason::kDisconnected);
}

void Server::write_to(Connection& connection) {
  while (!connection.output.empty()) {
    // MSG_NOSIGNAL: a vanished peer is an error here, not a SIGPIPE for the daemon.
    const ssize_t n = transmit(connection, connection.output.data(), connection.output.size());
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
  // A holder's settings stay for the rest of its lease, for the next connection that takes the holder.
  if (Holder* holder = holder_of(connection)) {
    holder->connection = 0;
    const std::vector<std::string> held = ledger_.held_by(holder->owner_id);
    if (held.empty()) {
      holders_.erase(connection.holder_key);
    } else {
      log().info("connection {} ({}): holder '{}' keeps {} setting{} for up to {} s: {}", connection.id,
                 to_string(reason), holder->name, held.size(), held.size() == 1 ? "" : "s", options_.lease_s,
                 fmt::join(held, "; "));
    }
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
      close_socket(connection);
      --lingering_refusals_;
      it = connections_.erase(it);
      continue;
    }
    begin_close(connection, RestoreReason::kDisconnected);  // no-op if already closing
    set_idle(connection, false);
    log().info("connection {} closed", connection.id);
    if (connection.handshaking) {
      --handshakes_;
    }
    close_socket(connection);
    --served_;
    if (!privileged(connection)) {
      if (auto mine = per_user_.find(connection.principal); mine != per_user_.end() && --mine->second == 0) {
        per_user_.erase(mine);
      }
    }
    it = connections_.erase(it);
    if (options_.metrics) {
      options_.metrics->connection_closed();
    }
  }
}

const Server::GpuSample& Server::sample_of(int gpu, bool energy) {
  if (!pass_time_ms_) {
    pass_time_ms_ = clock_.to_unix_ns(clock_.now()) / 1'000'000;
  }
  auto [entry, inserted] = pass_samples_.try_emplace(gpu);
  GpuSample& sample = entry->second;
  device::Gpu& device = *gpus_[static_cast<size_t>(gpu)];
  if (inserted) {
    if (const auto power = device.power_mw()) {
      sample.power_mw = *power;
    } else {
      log().debug("stream sample of GPU {}: {}", gpu, power.error().message());
    }
  }
  if (energy && !sample.energy_read) {
    sample.energy_read = true;
    if (const auto energy_mj = device.energy_mj()) {
      sample.energy_mj = *energy_mj;
    }
  }
  return sample;
}

const std::optional<proto::CpuEnergyEvent>& Server::cpu_sample_of(size_t position) {
  if (!pass_time_ms_) {
    pass_time_ms_ = clock_.to_unix_ns(clock_.now()) / 1'000'000;
  }
  auto [entry, inserted] = pass_cpu_samples_.try_emplace(position);
  if (!inserted) {
    return entry->second;
  }
  device::Cpu& cpu = *options_.cpus[position];
  const auto package = cpu.package_reading();
  if (!package) {
    log().debug("stream sample of CPU {}: {}", cpu.info().index, package.error().message());
    return entry->second;
  }
  proto::CpuEnergyEvent event;
  event.cpu = cpu.info().index;
  event.time_ms = *pass_time_ms_;
  event.package_energy_mj = package->energy_mj;
  event.package_resets = package->resets;
  if (cpu.info().has_dram) {
    const auto dram = cpu.dram_reading();
    if (!dram) {
      log().debug("stream sample of CPU {}'s DRAM: {}", cpu.info().index, dram.error().message());
      return entry->second;
    }
    event.dram_energy_mj = dram->energy_mj;
    event.dram_resets = dram->resets;
  }
  entry->second = event;
  return entry->second;
}

void Server::sample_stream(Connection& connection, Stream& stream) {
  // Above the queue bound the samples are skipped, not queued: a reader that does not keep up misses some,
  // counted per GPU and told in its next event of that GPU; other clients never wait for it.
  if (connection.output.size() > options_.max_queued_bytes) {
    for (auto& dropped : stream.dropped) {
      ++dropped;
    }
    stream.dropped_total += stream.dropped.size();
    if (options_.metrics) {
      options_.metrics->stream_samples(0, stream.dropped.size());
    }
    return;
  }
  uint64_t sent = 0;
  for (size_t i = 0; i < stream.gpus.size(); ++i) {
    const GpuSample& sample = sample_of(stream.gpus[i], stream.energy);
    if (!sample.power_mw) {
      continue;
    }
    proto::PowerEvent event;
    event.stream = stream.id;
    event.gpu = stream.gpus[i];
    event.time_ms = *pass_time_ms_;
    event.power_mw = *sample.power_mw;
    event.energy_mj = stream.energy ? sample.energy_mj : std::nullopt;
    event.dropped = std::exchange(stream.dropped[i], 0);
    connection.output += proto::format_event(event) + "\n";
    ++sent;
  }
  for (size_t i = 0; i < stream.cpus.size(); ++i) {
    const auto& sample = cpu_sample_of(stream.cpus[i]);
    if (!sample) {
      continue;
    }
    proto::CpuEnergyEvent event = *sample;
    event.stream = stream.id;
    event.dropped = std::exchange(stream.dropped[stream.gpus.size() + i], 0);
    connection.output += proto::format_event(event) + "\n";
    ++sent;
  }
  if (options_.metrics) {
    options_.metrics->stream_samples(sent, 0);
  }
}

void Server::run_periodic(SteadyTime now) {
  if (const auto due = audit_->next_summary(); due && now >= *due) {
    audit_->flush_summaries();
  }
  if (job_energy_ && now >= next_job_energy_update_) {
    update_job_energy();
  }
}

void Server::run_timers(SteadyTime now) {
  if (accept_paused_ && now >= *accept_paused_) {
    accept_paused_.reset();
  }
  run_periodic(now);
  // A new pass: the streams due now share one reading of each GPU.
  pass_samples_.clear();
  pass_cpu_samples_.clear();
  pass_time_ms_.reset();
  expire_holders(now);
  for (auto& [id, connection] : connections_) {
    if (connection->refused || connection->draining) {
      connection->dead = connection->dead || now >= connection->close_deadline;
      continue;
    }
    if (connection->closing) {
      continue;
    }
    if (connection->handshaking && now >= connection->hello_deadline) {
      // No TLS yet to say it in: logged and audited, then closed.
      log().info(
          "connection {} ({}): no TLS handshake within {} s of connecting (--hello-timeout-s); closing it",
          id, peer_text(*connection), options_.hello_timeout_s);
      audit_refusal(*connection, "handshake-timeout",
                    fmt::format("no TLS handshake within {} s of connecting", options_.hello_timeout_s));
      connection->dead = true;
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
      log().info("connection {} ({}): no hello within {} s; closing it", id, peer_text(*connection),
                 options_.hello_timeout_s);
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
      log().warn("connection {} ({}): lease expired; restored {}", id, peer_text(*connection),
                 fmt::join(restored, "; "));
    }
    if (connection->greeted && !connection->idle && !privileged(*connection) &&
        now >= connection->last_request + idle_timeout_ && !holds_something(*connection)) {
      // It became idle: kept within the caps, closed beyond them (it holds nothing to restore).
      const size_t mine =
          idle_per_user_.count(connection->principal) != 0 ? idle_per_user_[connection->principal] : 0;
      std::string over;
      if (mine >= options_.max_idle_connections_per_user) {
        over = fmt::format(
            "{} already keeps {} idle connection{}, the most one user may "
            "(--max-idle-connections-per-user {})",
            connection->remote ? "client " + connection->client : user_text(connection->peer.uid), mine,
            mine == 1 ? "" : "s", options_.max_idle_connections_per_user);
      } else if (idle_total_ >= options_.max_idle_connections) {
        over = fmt::format(
            "users other than root already keep {} idle connections, the most the daemon keeps "
            "(--max-idle-connections {})",
            idle_total_, options_.max_idle_connections);
      }
      if (over.empty()) {
        set_idle(*connection, true);
      } else {
        log().info("connection {} ({}): idle, over a cap; closing it", id, peer_text(*connection));
        close_with_notice(
            *connection,
            fmt::format("the daemon closes this connection: it has been idle for {} s (no request, no "
                        "setting, no stream) and {}; connect again when you need the daemon",
                        options_.idle_timeout_s, over));
        continue;
      }
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
  if (const auto summary = audit_->next_summary()) {
    consider(*summary);
  }
  if (job_energy_) {
    consider(next_job_energy_update_);
  }
  for (const auto& [key, holder] : holders_) {
    if (ledger_.owns_any(holder.owner_id)) {
      consider(holder.lease_deadline);
    }
  }
  for (const auto& [id, connection] : connections_) {
    if (connection->closing || connection->refused || connection->draining) {
      consider(connection->close_deadline);
      continue;
    }
    if (!connection->greeted) {
      consider(connection->hello_deadline);
    } else if (!connection->idle && !privileged(*connection) && !holds_something(*connection)) {
      consider(connection->last_request + idle_timeout_);
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

Result<std::optional<int>> Server::run(const std::vector<int>& stop_signals,
                                       const std::vector<int>& reload_signals) {
  int signal_fd = -1;
  if (!stop_signals.empty() || !reload_signals.empty()) {
    sigset_t set;
    sigemptyset(&set);
    for (const int signal_number : stop_signals) {
      sigaddset(&set, signal_number);
    }
    for (const int signal_number : reload_signals) {
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
  std::vector<bool> tls_buffered;  // per polled connection: TLS holds decrypted bytes it has not read yet
  const size_t first_connection = 3 + network_listeners_.size();
  while (true) {
    fds.clear();
    polled.clear();
    tls_buffered.clear();
    // Always accepting (but when out of file descriptors): a connection over a limit is told so and closed,
    // never left in the backlog where it would hold a place that root's next connection needs.
    fds.push_back({accept_paused_ ? -1 : listener_.fd(), POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({signal_fd, POLLIN, 0});
    // With --max-handshakes in progress, new network connections wait in the listen backlog until one ends:
    // queued, not refused, and never competing with the established clients.
    const bool take_network = !accept_paused_ && handshakes_ < options_.network.max_handshakes;
    for (const auto& listener : network_listeners_) {
      fds.push_back({take_network ? listener.fd() : -1, POLLIN, 0});
    }
    bool requests_waiting = false;
    for (auto& [id, connection] : connections_) {
      short events = 0;
      const bool waiting = has_line(*connection);
      requests_waiting = requests_waiting || (waiting && may_serve(*connection));
      bool buffered = false;
      if (connection->handshaking) {
        events = connection->tls_wants_write ? POLLOUT : POLLIN;
      } else if (connection->refused || connection->draining) {
        events = POLLIN;
      } else if (!connection->closing && !connection->peer_closed && !waiting &&
                 connection->output.size() <= options_.max_queued_bytes) {
        events = static_cast<short>(events | (connection->tls_wants_write ? POLLOUT : POLLIN));
        // Bytes TLS already decrypted never make the socket readable again: read them without waiting.
        buffered = connection->tls && connection->tls->pending() > 0;
        requests_waiting = requests_waiting || buffered;
      }
      if (!connection->output.empty()) {
        events = static_cast<short>(events | (connection->tls_wants_read ? POLLIN : POLLOUT));
      }
      fds.push_back({connection->fd, events, 0});
      polled.push_back(connection.get());
      tls_buffered.push_back(buffered);
    }
    timespec timeout{};
    const timespec* timeout_pointer = nullptr;
    if (requests_waiting) {
      timeout_pointer = &timeout;  // zero: a turn of requests waits, only look for what else arrived
    } else if (const auto next = next_timer()) {
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
        const int signal_number = static_cast<int>(info.ssi_signo);
        if (std::find(reload_signals.begin(), reload_signals.end(), signal_number) == reload_signals.end()) {
          stopped_by = signal_number;
          break;
        }
        if (const auto reloaded = reload(); !reloaded) {
          log().error("reload (signal {}) failed; the network listener keeps its previous files: {}",
                      signal_number, reloaded.error().message());
        }
      }
    }
    // Handshakes are bounded per pass: a flood of new TLS connections delays the established ones by at most
    // handshake_steps_per_pass handshakes' work.
    size_t handshake_steps = options_.network.handshake_steps_per_pass;
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& connection = *polled[i];
      const short revents = fds[i + first_connection].revents;
      if (connection.draining) {
        if (revents != 0) {
          drain(connection);
        }
        continue;
      }
      if (connection.handshaking) {
        if (revents != 0 && handshake_steps > 0) {
          --handshake_steps;
          advance_handshake(connection);
        }
        continue;
      }
      if ((revents & POLLIN) != 0 || (revents & POLLHUP) != 0 || tls_buffered[i] ||
          (connection.tls_wants_write && (revents & POLLOUT) != 0)) {
        read_from(connection);
      }
      if ((revents & POLLERR) != 0 || (revents & POLLNVAL) != 0) {
        connection.dead = true;
      }
    }
    if ((fds[0].revents & POLLIN) != 0) {
      accept_connections();
    }
    for (size_t i = 0; i < network_listeners_.size(); ++i) {
      if ((fds[3 + i].revents & POLLIN) != 0) {
        accept_network(network_listeners_[i]);
      }
    }
    serve_requests();
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
