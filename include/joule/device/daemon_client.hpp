// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon_client.hpp — one connection to `joule daemon` speaking its line-delimited JSON protocol
// (joule/device/daemon_protocol.hpp, docs/daemon.md): for tools that talk to the daemon directly. GPUs
// served by the daemon are simpler to use as DaemonGpu (joule/device/daemon_gpu.hpp), which needs neither
// this header nor nlohmann-json.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/clock_offset.hpp"
#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/daemon_client_options.hpp"
#include "joule/device/daemon_protocol.hpp"

namespace joule::http {
class TlsStream;  // joule/http/tls.hpp
}

namespace joule::device {

/// @return whether `address` names a daemon on the network, "HOST:PORT" or "[V6]:PORT" (no '/', a numeric
/// port after the last ':'), rather than a Unix socket path.
bool is_network_address(std::string_view address);

/// One connection to `joule daemon`. Every setting made through it belongs to it: the daemon restores
/// them when the connection closes (this object is destroyed, or the process dies) or its lease runs out.
/// This is the per-connection form of the restore contract that device::SettingsGuard keeps in-process
/// (joule/device/settings_guard.hpp); controllers use a guard on top, which also works through a DaemonGpu.
///
/// Thread-safe: requests from several threads are sent one at a time. After an I/O failure or a timeout
/// the connection is closed for good (the daemon then restores its settings) and every later call fails
/// with kIo saying so; there is no silent reconnection, because the settings would be gone.
class DaemonClient {
 public:
  /// Connects to the daemon at `socket_path` and says hello. `socket_path` is a Unix socket's path, or a
  /// network daemon's "HOST:PORT" (is_network_address()): then over TLS (or plain TCP, options.plain_tcp)
  /// with the options' certificate files and token (or their environment variables).
  /// @return kIo if nothing listens there (the message says how to start the daemon),
  /// kPermissionDenied if the socket may not be opened, a certificate is refused by either end, or the
  /// daemon refuses the token (each in words), kNotSupported for a daemon speaking another protocol version,
  /// kInvalidArgument for a token file others may read.
  static Result<std::shared_ptr<DaemonClient>> connect(const std::string& socket_path,
                                                       DaemonClientOptions options = {});
  /// Stops lease renewal and closes the connection (the daemon restores this connection's settings).
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  /// @return the hello result: protocol, server, lease_s, peer {uid, gid, pid}, rights {read, control}.
  const nlohmann::json& hello() const { return hello_; }
  /// @return the lease the daemon grants, seconds.
  double lease_s() const { return lease_s_; }
  /// @return false once the connection failed (see the class comment).
  bool connected() const;

  /// Sends `request` (its id is assigned here) and waits for its response; an error response is a
  /// Response with error set, not a failed Result. Power events that arrive meanwhile are queued for
  /// next_power_event(). @return kIo for a lost connection or a timeout, kParse for a malformed answer.
  Result<daemon_protocol::Response> send(daemon_protocol::Request request);

  /// As send(), but an error response becomes the Error, its message prefixed with "joule daemon: ".
  /// @return the response's result object.
  Result<nlohmann::json> call(daemon_protocol::Request request);

  /// As call(), for an operation added within protocol 1 (daemon_protocol.hpp): a daemon of an earlier
  /// release answers it "unknown op", which becomes kNotSupported "joule daemon: the daemon at <path> is of
  /// an earlier release: it does not <feature> (no <op> operation)", as for a device without the feature.
  Result<nlohmann::json> call_added(daemon_protocol::Request request, std::string_view feature);

  /// Subscribes to power samples of `gpus` (daemon indices; nullopt: all) every `period_ms`, each with the
  /// GPU's energy counter too when `energy` (PowerEvent::energy_mj). A sample the daemon skipped (this client
  /// read too slowly) or this client's queue had no room for (DaemonClientOptions::max_queued_events: the
  /// oldest go) is counted in the next event of its stream and GPU (PowerEvent::dropped).
  /// @return the stream id.
  Result<uint64_t> stream_power(std::optional<std::vector<int>> gpus, uint32_t period_ms,
                                bool energy = false);
  /// Ends a subscription; queued events of that stream are dropped, and no later one arrives.
  /// @return the samples the daemon skipped over the stream's life (0 from a daemon of an earlier release).
  Result<uint64_t> cancel_stream(uint64_t stream);
  /// @return the next power event, waiting at most `timeout`; nullopt on timeout. Errors as send().
  Result<std::optional<daemon_protocol::PowerEvent>> next_power_event(Nanos timeout);

  /// Estimates the daemon's clock offset from this machine's (CLOCK_REALTIME) with `probes` `time` requests,
  /// NTP's way (joule/core/clock_offset.hpp). @return kInvalidArgument for a daemon of an earlier release
  /// (no `time` operation) or a local clock that went back; errors as call().
  Result<ClockOffset> clock_offset(size_t probes = 8);

  /// Subscribes to the energy counters (RAPL) of CPU packages `cpus` (list_cpus' indices; nullopt: all)
  /// every `period_ms`; dropped samples are counted as for stream_power. Cancel with cancel_stream().
  /// @return the stream id; kNotFound when the daemon serves no (or not such a) CPU.
  Result<uint64_t> stream_cpu_energy(std::optional<std::vector<int>> cpus, uint32_t period_ms);
  /// @return the next CPU energy event, waiting at most `timeout`; nullopt on timeout. Errors as send().
  Result<std::optional<daemon_protocol::CpuEnergyEvent>> next_cpu_energy_event(Nanos timeout);

  /// @return job `job`'s estimated share of each GPU it shared, as the daemon accounts it (docs/daemon.md,
  /// "Job energy on shared GPUs"). Errors as call(): kNotFound for a job the daemon has no record of,
  /// kInvalidArgument for a malformed job id, kNotSupported where no GPU of the daemon reports process
  /// samples or the accounting is off (each message says why), and for a daemon of an earlier release.
  Result<daemon_protocol::JobEnergyAnswer> job_energy(const std::string& job);

 private:
  DaemonClient(std::string socket_path, int fd, DaemonClientOptions options);
  // Connects over TCP and, unless plain, completes the TLS handshake (tls_) within options_.timeout.
  Result<void> open_network(const std::string& address);
  // Socket I/O, through TLS when there is one. As recv/send: > 0 bytes, 0 closed (receive), -1 with errno
  // (EAGAIN: poll for what wait_writable_ says first). Need request_mutex_.
  ssize_t receive_locked(char* buffer, size_t size);
  ssize_t transmit_locked(const char* data, size_t size);
  // After a plain socket's recv/send returned `result`: what a retry waits for, and why it failed (errno
  // kept).
  void note_socket_error(ssize_t result, bool writing = false);
  // The next line from the daemon, waiting until `deadline` (steady clock). Needs request_mutex_.
  Result<std::string> read_line_locked(std::chrono::steady_clock::time_point deadline);
  Result<void> write_locked(const std::string& line);
  Error break_connection_locked(const Error& error);
  // Queues `message` if it is an event (bounded, see stream_power). @return whether it was one.
  bool queue_if_event_locked(const daemon_protocol::ServerMessage& message);
  template <class Event>
  Result<std::optional<Event>> next_event(std::deque<Event>& queue, Nanos timeout);
  void renew_loop();

  std::string socket_path_;
  DaemonClientOptions options_;
  nlohmann::json hello_;
  double lease_s_ = 0;

  mutable std::mutex request_mutex_;  // one request on the wire at a time; guards everything below
  int fd_ = -1;
  std::unique_ptr<http::TlsStream> tls_;  // a network daemon's TLS session
  bool wait_writable_ = false;            // the last TLS call waits for the socket to be writable
  std::string io_error_;                  // why the last read or write failed (TLS's reason or strerror)
  std::string buffer_;                    // bytes read but not yet split into lines
  std::deque<daemon_protocol::PowerEvent> events_;
  std::deque<daemon_protocol::CpuEnergyEvent> cpu_events_;
  uint64_t next_id_ = 1;
  std::optional<Error> broken_;

  std::mutex renew_mutex_;
  std::condition_variable renew_wake_;
  bool stopping_ = false;  // guarded by renew_mutex_
  std::thread renew_thread_;
};

}  // namespace joule::device
