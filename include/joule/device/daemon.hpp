// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon.hpp — the device/daemon backend: GPUs and CPU packages reached through `joule daemon`,
// so that an unprivileged process can read GPU energy and telemetry, set power limits and SM clocks, and read
// the CPUs' RAPL energy counters that only root may read since Linux 5.10 (docs/daemon.md).
//
//   auto gpus = joule::device::open_daemon_gpus("/run/joule/joule.sock");   // or JOULE_DAEMON_SOCKET
//   (*gpus)[0]->set_power_limit_mw(200'000);  // restored by the daemon when this process goes away
//   auto cpus = joule::device::open_daemon_cpus("/run/joule/joule.sock");
//   (*cpus)[0]->package_energy_mj();
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

class DaemonClient;  // joule/device/daemon_client.hpp: the connection and its JSON wire protocol

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

/// A GPU served by `joule daemon`: every call is one request on a shared DaemonClient. info().backend is
/// "daemon"; name, UUID and energy-counter capability are the daemon's device's. Errors are the daemon's
/// (kPermissionDenied says which right is missing and how to get it), or kIo when the daemon is gone.
///
/// Telemetry: one gpu_telemetry request reads every field on the daemon; telemetry() (which calls the
/// hooks one after the other) sends only one. A single reading (temperature_c(), …) may answer from the
/// previous request when that is under 100 ms old, this field has not been answered from it yet and no
/// setting was changed through this object since. A field the daemon's GPU does not report is
/// kNotSupported with the daemon's message.
class DaemonGpu final : public Gpu {
 public:
  /// @param daemon_index the GPU's index in the daemon's list_devices.
  DaemonGpu(GpuInfo info, std::shared_ptr<DaemonClient> client, int daemon_index);

  /// @return the GPU's index on the daemon (differs from info().index under CUDA_VISIBLE_DEVICES).
  int daemon_index() const { return daemon_index_; }
  /// @return the shared connection (joule/device/daemon_client.hpp has its interface).
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
  Result<double> do_temperature_c() override;
  Result<uint32_t> do_sm_clock_mhz() override;
  Result<uint32_t> do_memory_clock_mhz() override;
  Result<uint32_t> do_gpu_utilization_pct() override;
  Result<uint32_t> do_memory_utilization_pct() override;
  Result<uint64_t> do_clock_event_reasons() override;
  Result<uint32_t> do_memory_power_mw() override;

 private:
  // The snapshot that answers `field`: the last gpu_telemetry answer if recent and `field` comes after every
  // field it answered already (in telemetry_fields() order), else a new one. Called under the Gpu's lock.
  Result<const GpuTelemetry*> telemetry_for(TelemetryField field);

  std::shared_ptr<DaemonClient> client_;
  int daemon_index_;
  std::optional<GpuTelemetry> snapshot_;
  std::chrono::steady_clock::time_point snapshot_time_{};
  size_t snapshot_next_field_ = 0;  // position in telemetry_fields() of the first field not answered yet
};

/// A CPU package served by `joule daemon` (its RAPL counters): each reading is one cpu_energy request on a
/// shared DaemonClient. info().backend is "daemon"; index (the package index), name and has_dram are the
/// daemon's, and so are the counter resets of package_reading() and dram_reading() (none from a daemon that
/// does not report them). Errors as DaemonGpu's.
class DaemonCpu final : public Cpu {
 public:
  DaemonCpu(CpuInfo info, std::shared_ptr<DaemonClient> client);

  DaemonClient& client() const { return *client_; }

 protected:
  Result<uint64_t> do_package_energy_mj() override;
  Result<uint64_t> do_dram_energy_mj() override;
  Result<CpuEnergyReading> do_package_reading() override;
  Result<CpuEnergyReading> do_dram_reading() override;

 private:
  std::shared_ptr<DaemonClient> client_;
};

/// Connects to the daemon at `socket_path` and opens every GPU it serves that this process may see:
/// CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES for ROCm GPUs) selects and orders them by the daemon's
/// physical indices and UUIDs, as for local GPUs. All GPUs share one connection, kept (with its lease
/// renewed in the background) while any of them lives. Errors as DaemonClient::connect(), plus those of
/// resolve_visible_devices().
Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options = {});
/// As above, on a connection already made (GPUs and CPUs of one daemon may share it).
Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(std::shared_ptr<DaemonClient> client);

/// Connects to the daemon at `socket_path` and opens every CPU package whose energy it serves, in the
/// daemon's order (by package index). @return kNotFound if it serves none, with the daemon's reason (e.g.
/// no RAPL driver); kPermissionDenied for a peer without the read right; kInvalidArgument ("unknown op")
/// for a daemon of a release without CPU energy; else errors as DaemonClient::connect().
Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options = {});
/// As above, on a connection already made.
Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::shared_ptr<DaemonClient>& client);

}  // namespace joule::device
