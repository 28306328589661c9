// SPDX-License-Identifier: Apache-2.0
// joule/daemon/daemon.hpp — `joule daemon`: serves GPUs to unprivileged processes over a Unix socket,
// judges each connection by its peer credentials, and puts every setting back when the connection that
// made it goes away (docs/daemon.md).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/daemon/access.hpp"
#include "joule/daemon/audit.hpp"
#include "joule/daemon/network.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/daemon_protocol.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/job_energy.hpp"

namespace joule::daemon {

class DaemonMetrics;

struct DaemonOptions {
  /// The socket to listen on. Its folder is created (mode 0755) if missing; the socket is mode 0666 so
  /// that anyone can connect and be judged by credentials. The folder and every folder above it must belong
  /// to root (or the daemon's user) and be writable by no one else unless sticky (docs/daemon.md).
  std::string socket_path = std::string(device::daemon_protocol::kDefaultSocketPath);
  /// Who may read and who may control.
  AccessRules access;
  /// The audit log file; empty: stderr (the journal, under systemd). Opened as AuditLog::open() says: never
  /// through a link, only the daemon's own file in a safe folder.
  std::string audit_log;
  /// Refusals of one uid written to the audit log one by one per audit_refusal_interval_s
  /// (--audit-refusals-per-user); the rest are counted in one summary line per interval.
  size_t audit_refusals_per_user = AuditLimits{}.refusals_per_user;
  /// The interval of audit_refusals_per_user, s (> 0, ≤ 86400).
  double audit_refusal_interval_s = AuditLimits{}.interval_s;
  /// A connection whose last this-many requests in a row were all refused (permission-denied) is told why in
  /// one line (id null, code "state") and closed (--max-refusals-in-a-row; ≥ 1).
  size_t max_refusals_in_a_row = 64;
  /// How long a connection's settings outlive its last request, s (> 0, ≤ 86400).
  double lease_s = 60;
  /// Serve real (non-simulated) GPUs even when not running as root.
  bool allow_unprivileged = false;
  /// Connections served at once (--max-connections). A connection beyond a limit below is accepted, told
  /// why in one error line (id null, code "state") and closed: it never waits in the listen backlog.
  size_t max_connections = 256;
  /// Connections one unprivileged uid may hold (--max-connections-per-user); root and the daemon's own
  /// user are not counted per user.
  size_t max_connections_per_user = 32;
  /// Of max_connections, how many only root and the daemon's own user may take (--root-reserved-connections),
  /// so that an administrator can always connect. Less than max_connections.
  size_t root_reserved_connections = 16;
  /// A connection that has not said hello this long after it was accepted is told so and closed
  /// (--hello-timeout-s; > 0, ≤ 3600).
  double hello_timeout_s = 5;
  /// Requests of one uid served per turn of the event loop (--requests-per-turn; ≥ 1). Each turn serves
  /// root's and the daemon's user's connections first, then those with the control right, then the rest, each
  /// uid at most this many requests (its connections in turn); the rest wait in their connections for the
  /// next turn, so that one user's flood cannot delay another's requests by more than a turn.
  size_t requests_per_turn = 16;
  /// A served connection of a user other than root (and the daemon's) is idle when it has said hello, owns
  /// no setting, has no power stream and has sent no request for this long, s (--idle-timeout-s; > 0,
  /// ≤ 86400). DaemonClient renews its lease every third of a lease, so its connections are never idle.
  double idle_timeout_s = 60;
  /// Idle connections one such uid may keep (--max-idle-connections-per-user; ≥ 1): one more that becomes
  /// idle is told why and closed, and the uid's new connections are refused until it has fewer.
  size_t max_idle_connections_per_user = 4;
  /// Idle connections all such uids together may keep (--max-idle-connections; ≥ 1): one more that becomes
  /// idle is told why and closed. With the per-user cap, users who connect and wait cannot fill the places
  /// other users need (max_connections − root_reserved_connections).
  size_t max_idle_connections = 64;
  /// Power streams one connection may hold.
  size_t max_streams_per_connection = 16;
  /// Unsent bytes a connection may queue: above this the daemon stops reading its requests and skips its
  /// stream samples until it reads (a slow reader is never dropped, and never makes the daemon grow).
  size_t max_queued_bytes = size_t{1024} * 1024;
  /// User and group lookups (tests replace them).
  UserDatabase users = UserDatabase::system();
  /// Counts connections, requests, setting changes and restores (docs/metrics.md); nullptr: none.
  std::shared_ptr<DaemonMetrics> metrics;
  /// CPU packages whose energy counters (RAPL, root-only since Linux 5.10) the daemon serves to peers with
  /// the read right (list_cpus, cpu_energy), by their package index; they must outlive the daemon.
  std::vector<device::Cpu*> cpus;
  /// Why `cpus` is empty (e.g. the RAPL backend's error), for the peers that ask for CPU energy.
  std::string no_cpus_reason;
  /// How often the daemon closes a window of every GPU that reports process samples (NVML) and adds each
  /// job's estimated share of it (measure::JobEnergyTracker; the job_energy request), s; 0: never (job_energy
  /// answers not-supported). At most 60; the driver keeps only seconds of samples, so keep it at a few
  /// (--job-energy-period-s).
  double job_energy_period_s = 2;
  /// The accounting's bounds: jobs kept, the retention of ended jobs, processes remembered.
  measure::JobEnergyOptions job_energy;
  /// Tells each sampled process's job; nullptr: Slurm's cgroups under `proc_root`.
  std::shared_ptr<const measure::JobResolver> job_resolver;
  /// Where the processes' cgroup files are, for the default resolver (tests give a fake tree).
  std::string proc_root = "/proc";
  /// The network listener (--listen and its TLS and token files; docs/fleet.md): off when `listen` is empty.
  /// A network peer's limits and audit lines are those of its client name (its token's or certificate's),
  /// as a local peer's are its uid's; it never uses root's reserve.
  NetworkOptions network;
};

class Server;

/// The daemon: a single-threaded poll loop over the listening socket, the connections, a stop event and
/// (optionally) a signalfd. Create with start(), serve with run().
class Daemon {
 public:
  /// Checks that it may serve `gpus` (as root, or any simulated GPUs, or with allow_unprivileged), resolves
  /// the access rules, opens the audit log and takes the socket: its folder must be safe (see socket_path),
  /// a leftover socket file is removed only if it is the daemon's user's and no process answers on it, and
  /// `<socket>.lock` (flock; never a link or another user's file) keeps a second daemon off the same path.
  /// Then it restores what `<socket>.state` lists, if a previous daemon on this socket died without
  /// restoring — only if the file is the daemon's user's own, mode 0600 or 0644, one link, in its format;
  /// any other file there is logged as an error, moved aside to `<socket>.state.untrusted.<unix seconds>`
  /// and never replayed.
  /// @param gpus the GPUs to serve, in index order (may be empty when options.cpus is not); they must
  /// outlive the daemon.
  /// @param clock the clock the GPUs run on (power event timestamps).
  /// @return kPermissionDenied (not root with real GPUs; an unsafe socket folder; a lock file or socket
  /// another user planted; a token file or TLS key others may read), kInvalidArgument (bad option, a TLS
  /// file that cannot be used, plain TCP on an address that is not loopback), kParse (a malformed token
  /// file), kNotFound
  /// (unknown user or group), kState (another daemon serves the socket), kIo (socket or log).
  static Result<std::unique_ptr<Daemon>> start(std::vector<device::Gpu*> gpus, Clock& clock,
                                               DaemonOptions options);
  /// Restores whatever is still owned, closes every connection and removes the socket file (if it is
  /// still this daemon's).
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// Serves until stop() is called or one of `stop_signals` arrives (they must be blocked in every thread
  /// of the process, e.g. with a signal mask set before any thread starts; they are then read from a
  /// signalfd, never handled asynchronously). Before returning, every setting is restored (reason
  /// "shutdown") and every connection closed.
  /// Each of `reload_signals` (blocked likewise; SIGHUP for `joule daemon`) reloads the network listener's
  /// token file and TLS files for the connections accepted from then on, without dropping any; a file that
  /// fails to load is logged and the previous ones stay.
  /// @return the signal that stopped it, or nullopt after stop(); kIo if polling fails.
  Result<std::optional<int>> run(const std::vector<int>& stop_signals = {},
                                 const std::vector<int>& reload_signals = {});

  /// Makes run() return soon. Thread-safe; not async-signal-safe.
  void stop();

  const std::string& socket_path() const;
  const AccessPolicy& access() const;
  /// @return the network listeners' bound addresses, e.g. "127.0.0.2:9700" (the port chosen for :0).
  std::vector<std::string> network_addresses() const;
  /// @return the audit log's path, or "stderr".
  const std::string& audit_log_path() const;
  /// @return one line on the job energy accounting (job_energy): on which GPUs and how often, or why none.
  std::string job_energy_description() const;

 private:
  explicit Daemon(std::unique_ptr<Server> server);
  std::unique_ptr<Server> server_;
};

}  // namespace joule::daemon
