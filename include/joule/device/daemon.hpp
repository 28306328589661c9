// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon.hpp — the device/daemon backend: GPUs reached through `joule daemon`, so that an
// unprivileged process can read energy and set power limits and SM clocks (docs/daemon.md).
//
//   auto gpus = joule::device::open_daemon_gpus("/run/joule/joule.sock");   // or JOULE_DAEMON_SOCKET
//   (*gpus)[0]->set_power_limit_mw(200'000);  // restored by the daemon when this process goes away
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/daemon_protocol.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

/// How a DaemonClient talks to the daemon.
struct DaemonClientOptions {
  /// Sent in hello, shown in the daemon's log.
  std::string client_name = "joule";
  /// How long a request may wait for its response before the connection is given up, and how long
  /// connecting may take.
  Nanos timeout = std::chrono::seconds(10);
  /// Renew the lease on a background thread every lease/3, so that settings stay while this client lives
  /// even when it sends no request for a while. Without it the caller must send a request (any) before
  /// the lease runs out, or the daemon restores this connection's settings.
  bool renew_lease = true;
};

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
  /// Connects to the daemon at `socket_path` and says hello.
  /// @return kIo if nothing listens there (the message says how to start the daemon),
  /// kPermissionDenied if the socket may not be opened, kNotSupported for a daemon speaking another
  /// protocol version.
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

  /// Subscribes to power samples of `gpus` (daemon indices; nullopt: all) every `period_ms`.
  /// @return the stream id.
  Result<uint64_t> stream_power(std::optional<std::vector<int>> gpus, uint32_t period_ms);
  /// Ends a subscription; queued events of that stream are dropped, and no later one arrives.
  Result<void> cancel_stream(uint64_t stream);
  /// @return the next power event, waiting at most `timeout`; nullopt on timeout. Errors as send().
  Result<std::optional<daemon_protocol::PowerEvent>> next_power_event(Nanos timeout);

 private:
  DaemonClient(std::string socket_path, int fd, DaemonClientOptions options);
  // The next line from the daemon, waiting until `deadline` (steady clock). Needs request_mutex_.
  Result<std::string> read_line_locked(std::chrono::steady_clock::time_point deadline);
  Result<void> write_locked(const std::string& line);
  Error break_connection_locked(const Error& error);
  void queue_event_locked(const daemon_protocol::PowerEvent& event);
  void renew_loop();

  std::string socket_path_;
  DaemonClientOptions options_;
  nlohmann::json hello_;
  double lease_s_ = 0;

  mutable std::mutex request_mutex_;  // one request on the wire at a time; guards everything below
  int fd_ = -1;
  std::string buffer_;  // bytes read but not yet split into lines
  std::deque<daemon_protocol::PowerEvent> events_;
  uint64_t next_id_ = 1;
  std::optional<Error> broken_;

  std::mutex renew_mutex_;
  std::condition_variable renew_wake_;
  bool stopping_ = false;  // guarded by renew_mutex_
  std::thread renew_thread_;
};

/// A GPU served by `joule daemon`: every call is one request on a shared DaemonClient. info().backend is
/// "daemon"; name, UUID and energy-counter capability are the daemon's device's. Errors are the daemon's
/// (kPermissionDenied says which right is missing and how to get it), or kIo when the daemon is gone.
class DaemonGpu final : public Gpu {
 public:
  /// @param daemon_index the GPU's index in the daemon's list_devices.
  DaemonGpu(GpuInfo info, std::shared_ptr<DaemonClient> client, int daemon_index);

  /// @return the GPU's index on the daemon (differs from info().index under CUDA_VISIBLE_DEVICES).
  int daemon_index() const { return daemon_index_; }
  DaemonClient& client() const { return *client_; }

 protected:
  Result<uint64_t> do_energy_mj() override;
  Result<uint32_t> do_power_mw() override;
  Result<PowerLimitConstraints> do_power_limit_constraints() override;
  Result<uint32_t> do_power_limit_mw() override;
  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override;
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override;
  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override;
  Result<void> do_reset_sm_clocks() override;

 private:
  Result<nlohmann::json> call(daemon_protocol::Op op);

  std::shared_ptr<DaemonClient> client_;
  int daemon_index_;
};

/// Connects to the daemon at `socket_path` and opens every GPU it serves that this process may see:
/// CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES for ROCm GPUs) selects and orders them by the daemon's
/// physical indices and UUIDs, as for local GPUs. All GPUs share one connection, kept (with its lease
/// renewed in the background) while any of them lives. Errors as DaemonClient::connect(), plus those of
/// resolve_visible_devices().
Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options = {});

}  // namespace joule::device
