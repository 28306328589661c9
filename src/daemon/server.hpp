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

namespace joule::daemon {

using SteadyTime = std::chrono::steady_clock::time_point;

/// Single-threaded: everything but stop() runs on the thread in run().
class Server {
 public:
  Server(std::vector<device::Gpu*> gpus, Clock& clock, DaemonOptions options, AccessPolicy access,
         std::unique_ptr<AuditLog> audit, Listener listener, int wake_fd);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Result<std::optional<int>> run(const std::vector<int>& stop_signals);
  void stop();

  const std::string& socket_path() const { return listener_.path(); }
  const AccessPolicy& access() const { return access_; }
  const std::string& audit_log_path() const { return audit_->path(); }

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
    std::vector<Stream> streams;
    PeerCredentials peer;
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
  };

  void accept_connections();
  /// @return why a new connection of `peer` is over a limit, or nullopt.
  std::optional<std::string> over_limit(const PeerCredentials& peer) const;
  void refuse(int fd, const PeerCredentials& peer, const std::string& why);
  /// Root and the daemon's own user: control by right, exempt from the per-user limit, may use the reserve.
  bool privileged(uint32_t uid) const { return uid == 0 || uid == daemon_uid_; }
  /// "uid 1000 (alice)" for messages.
  std::string user_text(uint32_t uid) const;
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
  void sample_stream(Connection& connection, Stream& stream);
  /// @return this pass's reading of `gpu` (with its energy counter when `energy`), read now if it has none.
  const GpuSample& sample_of(int gpu, bool energy);
  /// @return this pass's reading of options_.cpus[`position`] as an event (stream and dropped unset), or
  /// nullopt if the counters could not be read.
  const std::optional<device::daemon_protocol::CpuEnergyEvent>& cpu_sample_of(size_t position);
  std::optional<SteadyTime> next_timer() const;
  void shutdown();

  // session.cpp: one request line in, one response line out.
  std::string handle_line(Connection& connection, std::string_view line);
  device::daemon_protocol::Response handle(Connection& connection,
                                           const device::daemon_protocol::Request& request);
  device::daemon_protocol::Response handle_device(Connection& connection,
                                                  const device::daemon_protocol::Request& request);
  nlohmann::json rights_json(const Connection& connection) const;
  Owner owner_of(const Connection& connection) const;

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
  size_t served_ = 0;                         // connections not refused
  std::map<uint32_t, size_t> per_user_;       // served connections of each unprivileged uid
  size_t lingering_refusals_ = 0;             // refused connections still open
  std::map<uint32_t, size_t> idle_per_user_;  // idle connections of each unprivileged uid
  size_t idle_total_ = 0;                     // their sum
  std::map<uint32_t, uint64_t> next_turn_;    // per uid: the connection served last (its turns rotate)
  std::chrono::nanoseconds idle_timeout_;
  std::optional<SteadyTime> accept_paused_;  // out of file descriptors: accept again then
  SteadyTime next_refusal_log_{};            // refusals are logged at most once per interval
  size_t unlogged_refusals_ = 0;
  uint64_t next_connection_id_ = 1;
  uint64_t next_stream_id_ = 1;
  std::map<int, GpuSample> pass_samples_;  // this pass of the timers' readings, by GPU
  std::map<size_t, std::optional<device::daemon_protocol::CpuEnergyEvent>> pass_cpu_samples_;  // by position
  std::optional<int64_t> pass_time_ms_;  // when they were read, ms since the Unix epoch
};

}  // namespace joule::daemon
