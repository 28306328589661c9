// SPDX-License-Identifier: Apache-2.0
// The daemon's event loop and per-connection state (private to joule_daemon).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/clock.hpp"
#include "joule/daemon/access.hpp"
#include "joule/daemon/audit.hpp"
#include "joule/daemon/daemon.hpp"
#include "joule/daemon/ledger.hpp"
#include "joule/device/daemon_protocol.hpp"

#include "listener.hpp"
#include "network.hpp"

namespace joule::daemon {

using SteadyTime = std::chrono::steady_clock::time_point;

/// Single-threaded: everything but stop() runs on the thread in run().
class Server {
 public:
  Server(std::vector<device::Gpu*> gpus, Clock& clock, DaemonOptions options, AccessPolicy access,
         std::unique_ptr<AuditLog> audit, Listener listener, int wake_fd,
         std::vector<NetworkListener> network_listeners = {}, NetworkSecurity security = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Serves until stop() or one of `stop_signals`; each of `reload_signals` reloads the network listener's
  /// token file and TLS files (reload()).
  Result<std::optional<int>> run(const std::vector<int>& stop_signals,
                                 const std::vector<int>& reload_signals);
  void stop();

  const std::string& socket_path() const { return listener_.path(); }
  const AccessPolicy& access() const { return access_; }
  const std::string& audit_log_path() const { return audit_->path(); }
  std::string job_energy_description() const;
  /// @return the network listeners' bound addresses ("127.0.0.2:9700").
  std::vector<std::string> network_addresses() const;
  /// Loads the token file and the TLS files again for the connections accepted from now on; the connections
  /// already served keep what they were granted. On failure the old ones stay and the error is returned.
  Result<void> reload();

 private:
  struct Stream {
    uint64_t id = 0;
    std::vector<int> gpus;
    std::vector<size_t> cpus;       // positions in options_.cpus (stream_cpu_energy)
    std::vector<uint64_t> dropped;  // per GPU of `gpus`, then per CPU of `cpus`: skipped since its last event
    std::chrono::milliseconds period{0};
    SteadyTime next{};
    uint64_t dropped_total = 0;  // over the stream's life (cancel_stream's answer)
    bool energy = false;         // events carry the GPU's energy counter
  };

  // One reading of a GPU, shared by every stream that samples it in the same pass of the timers: 100
  // subscribers of 8 GPUs read each GPU once per pass, not 100 times.
  struct GpuSample {
    std::optional<uint32_t> power_mw;   // nullopt: the read failed (logged once per pass)
    std::optional<uint64_t> energy_mj;  // read the first time a stream of the pass asks for it
    bool energy_read = false;
  };

  // Settings owned by a named holder (hello's `holder`): they outlive the connection that made them, for
  // one lease after its last request, so that the process that takes the name over (the cluster autopilot's
  // next leader, a restarted agent) finds them in force rather than the originals (docs/daemon.md,
  // "Holders"). Keyed by the principal (a user's uid, a network client's name) and the name, so that nobody
  // else can take them.
  struct Holder {
    std::string name;             // as the client gave it
    SteadyTime lease_deadline{};  // its settings are restored then, unless its connection renews it
    uint64_t owner_id = 0;        // the ledger's owner of its settings: an id no connection has
    uint64_t connection = 0;      // the connection acting for it; 0: none (its settings wait for one)
  };

  // Fields ordered by size (the analyzer's padding check).
  struct Connection {
    uint64_t id = 0;
    Grant grant;
    std::string client_name;
    std::string input;            // bytes received; those before `consumed` are served
    size_t consumed = 0;          // erased before the next read
    std::string output;           // bytes to send
    SteadyTime hello_deadline{};  // closed if not greeted by then
    SteadyTime lease_deadline{};
    SteadyTime last_request{};  // idle when long ago and it holds nothing
    SteadyTime close_deadline{};
    size_t refusals_in_a_row = 0;             // permission-denied answers since its last other answer
    std::optional<std::string> lease_notice;  // told on the next request
    std::string holder_key;                   // the holder it acts for (holders_), empty: none
    std::vector<Stream> streams;
    std::unique_ptr<http::TlsStream> tls;  // a network connection over TLS
    std::string address;                   // a network peer's "HOST:PORT"; empty: a Unix-socket peer
    std::string client;                    // a network peer's name, once a token or certificate said it
    uint64_t principal = 0;                // whose limits and turns it counts in (see principal_key)
    PeerCredentials peer;                  // a Unix-socket peer's; zero for a network peer
    int fd = -1;
    bool greeted = false;
    bool discarding = false;   // skipping the rest of an over-long line
    bool peer_closed = false;  // read its end: closed once its complete lines are served
    bool idle = false;         // counted in idle_per_user_ and idle_total_
    bool closing = false;      // no more reading; close once the output is sent (or at close_deadline)
    bool dead = false;
    // Over a connection limit: told why at accept, then only read (and discarded) until the peer's first
    // line, its close or close_deadline, so that its hello does not fail before it can read the refusal.
    bool refused = false;
    bool remote = false;              // accepted by a network listener
    bool handshaking = false;         // its TLS handshake is not complete
    bool tls_wants_write = false;     // a TLS read or handshake waits for the socket to be writable
    bool tls_wants_read = false;      // a TLS write waits for the socket to be readable
    bool close_after_answer = false;  // refused at hello: closed once that answer is sent
    // Its TLS handshake failed: the alert is sent and the write side shut; what the peer still sends is read
    // and dropped until it closes (or close_deadline), so that closing never resets the connection before
    // the peer has read why.
    bool draining = false;
  };

  void accept_connections();
  /// Serves an accepted `connection` (its id, fd, peer, grant and principal set): starts its hello and lease
  /// clocks, counts it against the limits, and adds it.
  void admit(std::unique_ptr<Connection> connection);
  /// After accept4() failed on `where`: out of descriptors or memory, pauses accepting; logs what is not
  /// a transient error.
  void accept_failed(const std::string& where);
  /// Accepts what waits on a network listener: each connection counted against max_connections and
  /// NetworkOptions::max_handshakes (beyond them closed at once), then its TLS handshake begins.
  void accept_network(const NetworkListener& listener);
  /// Steps the TLS handshake of `connection`; a certificate that a `certificate` line names authenticates it.
  void advance_handshake(Connection& connection);
  /// Makes `connection` the network client `entry` (its grant, its principal). @return why it may not be
  /// (over the per-client connection limit), or nullopt.
  std::optional<std::string> authenticate(Connection& connection, const TokenEntry& entry,
                                          std::string_view how);
  /// Records a refused network authentication in the audit log (rate-limited per address or client).
  void audit_refusal(const Connection& connection, std::string reason, const std::string& detail);
  /// @return a stable key for the limits and turns of a principal: a uid, a network client's name, or an
  /// unauthenticated network host.
  uint64_t principal_key(uint32_t uid) const { return uid; }
  uint64_t principal_key(std::string_view kind, std::string_view name);
  // Socket I/O of a connection, through TLS when it has it. As recv/send: > 0 bytes, 0 closed (receive),
  // -1 with errno (EAGAIN: wait).
  ssize_t receive(Connection& connection, char* buffer, size_t size);
  ssize_t transmit(Connection& connection, const char* data, size_t size);
  /// Reads and drops what a draining connection's peer sends; dead at its end of stream.
  void drain(Connection& connection);
  /// Closes the socket of `connection` (TLS: close_notify first, best effort).
  void close_socket(Connection& connection);
  /// @return why a new connection of `peer` is over a limit, or nullopt.
  std::optional<std::string> over_limit(const PeerCredentials& peer) const;
  void refuse(int fd, const PeerCredentials& peer, const std::string& why);
  /// Logs "refused `what`", at most once per kRefusalLogInterval (the next line counts those left out).
  void log_refusal(const std::string& what);
  /// Root and the daemon's own user over the Unix socket: control by right, exempt from the per-user limit,
  /// may use the reserve. Never a network peer, whatever its scope.
  bool privileged(const Connection& connection) const {
    return !connection.remote && (connection.peer.uid == 0 || connection.peer.uid == daemon_uid_);
  }
  bool privileged(const PeerCredentials& peer) const { return peer.uid == 0 || peer.uid == daemon_uid_; }
  /// "uid 1000 (alice)" for messages.
  std::string user_text(uint32_t uid) const;
  /// "uid 1000 (alice)", "client trainer-17 at 10.0.0.7:51234" or "a client at 10.0.0.7:51234".
  std::string peer_text(const Connection& connection) const;
  void read_from(Connection& connection);
  void write_to(Connection& connection);
  /// Answers an over-long partial line at once and skips it to its newline.
  void skip_overlong(Connection& connection);
  /// @return whether `connection` has a complete request line waiting.
  static bool has_line(const Connection& connection);
  /// @return whether requests of `connection` may be served now (not closing, its output not over the bound).
  bool may_serve(const Connection& connection) const;
  /// Serves the next request line of `connection`. @return false if it had none.
  bool serve_one(Connection& connection);
  /// Serves what waits, in turns: root's and the daemon's user's connections first, then those with the
  /// control right, then the rest; each uid at most options_.requests_per_turn requests, its connections in
  /// turn. Closes the connections whose peer closed once their lines are served.
  void serve_requests();
  /// @return whether `connection` owns a setting, a stream or a waiting request (then it is not idle).
  bool holds_something(const Connection& connection) const;
  void set_idle(Connection& connection, bool idle);
  /// Tells `connection` why in one line (id null, code "state") and closes it.
  void close_with_notice(Connection& connection, const std::string& why);
  void begin_close(Connection& connection, RestoreReason reason);
  void close_dead();
  void run_timers(SteadyTime now);
  /// The daemon's own timers: the audit log's refusal summaries, the job energy accounting's windows.
  void run_periodic(SteadyTime now);
  void sample_stream(Connection& connection, Stream& stream);
  /// @return this pass's reading of `gpu` (with its energy counter when `energy`), read now if it has none.
  const GpuSample& sample_of(int gpu, bool energy);
  /// @return this pass's reading of options_.cpus[`position`] as an event (stream and dropped unset), or
  /// nullopt if the counters could not be read.
  const std::optional<device::daemon_protocol::CpuEnergyEvent>& cpu_sample_of(size_t position);
  std::optional<SteadyTime> next_timer() const;
  /// Closes the job energy accounting's windows now (logging what failed, at most one line a minute).
  void update_job_energy();
  /// job_energy: the job's shares (after closing the windows, if the last close is 0.5 s old or more).
  device::daemon_protocol::Response job_energy_response(const Connection& connection, const std::string& job);
  void shutdown();

  // session.cpp: one request line in, one response line out.
  std::string handle_line(Connection& connection, std::string_view line);
  device::daemon_protocol::Response handle(Connection& connection,
                                           const device::daemon_protocol::Request& request);
  device::daemon_protocol::Response handle_device(Connection& connection,
                                                  const device::daemon_protocol::Request& request);
  nlohmann::json rights_json(const Connection& connection) const;
  /// {uid, gid, pid} of a Unix-socket peer, {address, client} of a network one.
  nlohmann::json peer_json(const Connection& connection) const;
  /// Authenticates a network connection by the token of its hello. @return why not (also logged and
  /// audited), or nullopt.
  std::optional<std::string> authenticate_by_token(Connection& connection, const std::string& token);
  Owner owner_of(const Connection& connection) const;
  /// Makes `connection` act for its principal's holder `name` (created if new), taking it over from the
  /// connection that acted for it, if any. @return hello's `holder` member: {name, held, taken_from}.
  nlohmann::json take_holder(Connection& connection, const std::string& name);
  /// The holder `connection` acts for, if it still does (another connection may have taken it over).
  Holder* holder_of(const Connection& connection);
  const Holder* holder_of(const Connection& connection) const;
  /// Restores the settings of holders whose lease ran out, and forgets holders without a connection nor
  /// settings.
  void expire_holders(SteadyTime now);

  std::vector<device::Gpu*> gpus_;
  Clock& clock_;
  DaemonOptions options_;
  AccessPolicy access_;
  std::unique_ptr<AuditLog> audit_;
  SettingsLedger ledger_;
  Listener listener_;
  int wake_fd_;  // eventfd: stop() writes, run() polls
  std::chrono::nanoseconds lease_;
  std::chrono::nanoseconds hello_timeout_;
  uint32_t daemon_uid_;
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::map<std::string, Holder> holders_;     // by principal and name (Connection::holder_key)
  size_t served_ = 0;                         // connections not refused
  std::map<uint64_t, size_t> per_user_;       // served connections of each unprivileged principal
  size_t lingering_refusals_ = 0;             // refused connections still open
  std::map<uint64_t, size_t> idle_per_user_;  // idle connections of each unprivileged principal
  size_t idle_total_ = 0;                     // their sum
  std::map<uint64_t, uint64_t> next_turn_;    // per principal: the connection served last (its turns rotate)
  std::chrono::nanoseconds idle_timeout_;
  std::optional<SteadyTime> accept_paused_;  // out of file descriptors: accept again then
  SteadyTime next_refusal_log_{};            // refusals are logged at most once per interval
  size_t unlogged_refusals_ = 0;
  uint64_t next_connection_id_ = 1;
  uint64_t next_stream_id_ = 1;
  std::map<int, GpuSample> pass_samples_;  // this pass of the timers' readings, by GPU
  std::map<size_t, std::optional<device::daemon_protocol::CpuEnergyEvent>> pass_cpu_samples_;  // by position
  std::optional<int64_t> pass_time_ms_;  // when they were read, ms since the Unix epoch
  std::vector<NetworkListener> network_listeners_;
  NetworkSecurity security_;
  size_t handshakes_ = 0;                                       // network connections in their TLS handshake
  std::map<std::string, uint64_t, std::less<>> principal_ids_;  // "client x", "host 10.0.0.7" → key
  // Per-job energy of shared GPUs (job_energy); null when off (job_energy_period_s 0).
  std::shared_ptr<const measure::JobResolver> job_resolver_;
  std::unique_ptr<measure::JobEnergyTracker> job_energy_;
  SteadyTime next_job_energy_update_{};
  uint64_t last_job_energy_update_us_ = 0;
  SteadyTime next_job_energy_log_{};  // its errors are logged at most once a minute
  size_t unlogged_job_energy_errors_ = 0;
};

}  // namespace joule::daemon
