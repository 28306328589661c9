// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon_gpu.hpp — GPUs reached through `joule daemon` (the device/daemon backend), so that an
// unprivileged process can read GPU energy and telemetry and set power limits, SM clocks and memory clocks;
// the daemon restores every setting when the connection that made it goes away (docs/daemon.md). CPU packages
// served by the daemon: joule/device/daemon_cpu.hpp.
//
//   auto gpus = joule::device::open_daemon_gpus("/run/joule/joule.sock");   // or JOULE_DAEMON_SOCKET
//   (*gpus)[0]->set_power_limit_mw(200'000);  // restored by the daemon when this process goes away
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/daemon_client_options.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

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
  Result<std::vector<uint32_t>> do_supported_memory_clocks_mhz() override;
  Result<void> do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) override;
  Result<void> do_reset_memory_clocks() override;
  Result<uint32_t> do_module_power_mw() override;
  Result<uint64_t> do_module_energy_mj() override;
  Result<double> do_temperature_c() override;
  Result<uint32_t> do_sm_clock_mhz() override;
  Result<uint32_t> do_memory_clock_mhz() override;
  Result<uint32_t> do_gpu_utilization_pct() override;
  Result<uint32_t> do_memory_utilization_pct() override;
  Result<uint64_t> do_clock_event_reasons() override;
  Result<uint32_t> do_memory_power_mw() override;
  Result<double> do_set_simulated_busy(bool busy) override;

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

/// Connects to the daemon at `socket_path` and opens every GPU it serves that this process may see:
/// CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES for ROCm GPUs) selects and orders them by the daemon's
/// physical indices and UUIDs, as for local GPUs. All GPUs share one connection, kept (with its lease
/// renewed in the background) while any of them lives. Errors as DaemonClient::connect(), plus those of
/// resolve_visible_devices().
Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options = {});
/// As above, on a connection already made (GPUs and CPUs of one daemon may share it). @param
/// apply_visible_devices false: every GPU the daemon serves, whatever this process's CUDA_VISIBLE_DEVICES
/// (another node's GPUs, for a fleet).
Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::shared_ptr<DaemonClient>& client,
                                                           bool apply_visible_devices = true);

}  // namespace joule::device
