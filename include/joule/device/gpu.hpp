// SPDX-License-Identifier: Apache-2.0
// joule/device/gpu.hpp — the GPU interface every backend (NVML, Level Zero, AMD SMI, ROCm SMI, Jetson sysfs,
// simulated, daemon) implements.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::device {

/// Power-limit range and default of one GPU, in milliwatts.
struct PowerLimitConstraints {
  uint32_t min_mw = 0;      ///< smallest limit the driver accepts, mW
  uint32_t max_mw = 0;      ///< largest limit the driver accepts, mW
  uint32_t default_mw = 0;  ///< the board's default limit, mW
};

/// What identifies a GPU; fixed when the device is opened.
struct GpuInfo {
  std::string backend;     ///< "nvml", "levelzero", "amdsmi", "rocm", "jetson", "sim" or "daemon"
  int index = 0;           ///< framework index: position after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES
  int physical_index = 0;  ///< the vendor library's own index
  std::string name;        ///< marketing name, e.g. "Tesla V100-PCIE-32GB"
  std::string uuid;        ///< e.g. "GPU-8f2e…"; empty if the backend has none
  bool has_energy_counter = false;  ///< energy_mj() works; if false, energy must be estimated from power
};

/// Why a GPU's clocks are below their maximum: a bit set with NVML's clocks-event (formerly "throttle")
/// reason bits; other vendors' reasons are mapped onto them.
namespace clock_event {
inline constexpr uint64_t kIdle = 0x1;                   ///< nothing is running
inline constexpr uint64_t kApplicationClocks = 0x2;      ///< an applications-clock or locked-clock setting
inline constexpr uint64_t kSwPowerCap = 0x4;             ///< the power limit holds the clocks down
inline constexpr uint64_t kHwSlowdown = 0x8;             ///< hardware slowdown (thermal, power brake, …)
inline constexpr uint64_t kSyncBoost = 0x10;             ///< synchronised boost with other GPUs
inline constexpr uint64_t kSwThermalSlowdown = 0x20;     ///< the driver cools the GPU down
inline constexpr uint64_t kHwThermalSlowdown = 0x40;     ///< the hardware cools the GPU down
inline constexpr uint64_t kHwPowerBrakeSlowdown = 0x80;  ///< an external power brake
inline constexpr uint64_t kDisplayClocks = 0x100;        ///< display clock setting
}  // namespace clock_event

/// @return the names of the reasons set in `mask`, in bit order: "idle", "applications_clocks",
/// "sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
/// "hw_power_brake_slowdown", "display_clocks"; unknown bits as "0x…". Empty if none is set.
std::vector<std::string> clock_event_reason_names(uint64_t mask);

/// The readings beyond energy and power a GPU may offer (`joule power`, `joule devices`, exporters).
enum class TelemetryField {
  kTemperature,        ///< GPU (edge/core) temperature, °C
  kSmClock,            ///< current SM (graphics) clock, MHz
  kMemoryClock,        ///< current memory clock, MHz
  kGpuUtilization,     ///< share of time a kernel ran over the driver's last sample period, %
  kMemoryUtilization,  ///< share of time device memory was read or written over that period, %
  kClockEventReasons,  ///< why clocks are held down (clock_event bits)
  kMemoryPower,        ///< memory subsystem power, mW
};

/// @return every field, in declaration order.
const std::vector<TelemetryField>& telemetry_fields();
/// @return the field's column name with its unit: "temperature_c", "sm_clock_mhz", "memory_clock_mhz",
/// "gpu_utilization_pct", "memory_utilization_pct", "clock_event_reasons", "memory_power_w".
std::string_view telemetry_field_name(TelemetryField field);

/// One reading of every telemetry field. A field is nullopt when it could not be read; `errors` then says
/// why (kNotSupported: the device or backend does not report it — never shown as zero).
struct GpuTelemetry {
  std::optional<double> temperature_c;                   ///< °C
  std::optional<uint32_t> sm_clock_mhz;                  ///< MHz
  std::optional<uint32_t> memory_clock_mhz;              ///< MHz
  std::optional<uint32_t> gpu_utilization_pct;           ///< 0–100 %
  std::optional<uint32_t> memory_utilization_pct;        ///< 0–100 %
  std::optional<uint64_t> clock_event_reasons;           ///< clock_event bits
  std::optional<uint32_t> memory_power_mw;               ///< mW
  std::vector<std::pair<TelemetryField, Error>> errors;  ///< fields left empty, and why

  /// @return whether `field` holds a value.
  bool has(TelemetryField field) const;
  /// @return the error that left `field` empty, or nullptr if it has a value.
  const Error* error(TelemetryField field) const;
};

/// One GPU. All calls are thread-safe: the public methods take this device's lock and call the backend's
/// protected `do_*` hook, so backends never lock (the template-method pattern of spdlog's base_sink).
///
/// Failures that are expected on real hardware (the feature is not supported, the process lacks
/// permission, the value is out of range) come back as an Error in the Result; the message says what
/// failed, on which GPU, and how to fix it where there is a fix.
class Gpu {
 public:
  explicit Gpu(GpuInfo info) : info_(std::move(info)) {}
  virtual ~Gpu() = default;
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  /// @return identity and capabilities; no device call.
  const GpuInfo& info() const { return info_; }
  /// @return "GPU <index> (<name>)" for messages.
  std::string label() const;

  /// @return the cumulative energy counter in millijoules since an arbitrary origin (driver load).
  /// kNotSupported if info().has_energy_counter is false.
  Result<uint64_t> energy_mj();

  /// @return the current board power draw in milliwatts (instantaneous where the driver offers it,
  /// otherwise the driver's short average).
  Result<uint32_t> power_mw();

  /// @return min/max/default power limit in mW. Cached after the first successful read.
  Result<PowerLimitConstraints> power_limit_constraints();

  /// @return the power limit in force, in mW.
  Result<uint32_t> power_limit_mw();

  /// Sets the power limit, in mW. kOutOfRange (naming the valid range) if outside the constraints;
  /// kPermissionDenied (saying how to get the right) if the process may not change it.
  Result<void> set_power_limit_mw(uint32_t power_limit_mw);

  /// Sets the power limit back to the board's default.
  Result<void> reset_power_limit();

  /// @return the SM (graphics) clocks the GPU supports, in MHz, highest first.
  Result<std::vector<uint32_t>> supported_sm_clocks_mhz();

  /// Locks the SM clock into [min_mhz, max_mhz]. kInvalidArgument if min_mhz > max_mhz.
  Result<void> lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz);

  /// Removes an SM clock lock.
  Result<void> reset_sm_clocks();

  /// @return the memory clocks the GPU can be locked to, in MHz, highest first (HBM GPUs usually list one).
  /// kNotSupported (naming the GPU and the backend) where the backend cannot lock the memory clock.
  Result<std::vector<uint32_t>> supported_memory_clocks_mhz();

  /// Locks the memory clock into [min_mhz, max_mhz]. kInvalidArgument if min_mhz > max_mhz; kNotSupported
  /// as supported_memory_clocks_mhz(); kPermissionDenied as set_power_limit_mw().
  Result<void> lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz);

  /// Removes a memory clock lock. kNotSupported as supported_memory_clocks_mhz().
  Result<void> reset_memory_clocks();

  // Telemetry. Each call is kNotSupported (naming the GPU, the reading and the backend) where the device
  // or its backend does not report the value; other failures as for power_mw().

  /// @return the GPU (edge/core) temperature in °C.
  Result<double> temperature_c();
  /// @return the current SM (graphics) clock in MHz.
  Result<uint32_t> sm_clock_mhz();
  /// @return the current memory clock in MHz.
  Result<uint32_t> memory_clock_mhz();
  /// @return the GPU's utilisation over the driver's last sample period, 0–100 %.
  Result<uint32_t> gpu_utilization_pct();
  /// @return the memory's utilisation (time reading or writing) over that period, 0–100 %.
  Result<uint32_t> memory_utilization_pct();
  /// @return why the clocks are held down now, as clock_event bits (0: they are not).
  Result<uint64_t> clock_event_reasons();
  /// @return the memory subsystem's power draw in mW.
  Result<uint32_t> memory_power_mw();
  /// @return every telemetry field read once, under one lock; never fails as a whole.
  GpuTelemetry telemetry();

  /// Grace Hopper / Grace Blackwell module scope: the power of the whole module (GPU, CPU and memory), mW,
  /// read beside the GPU's own. The module includes the GPU: never add it to power_mw(). kNotSupported
  /// (saying why) on GPUs without a module scope, MIG instances and backends that cannot read one (NVML
  /// reads it; `joule daemon` forwards it).
  Result<uint32_t> module_power_mw();
  /// @return the module's energy since the driver loaded, mJ; errors as module_power_mw(). The module
  /// includes the GPU: never add it to energy_mj().
  Result<uint64_t> module_energy_mj();

  /// Simulated GPUs only (here or a `joule --sim … daemon`'s): the GPU runs its workload (busy) or idles,
  /// so that a program standing in for real work (examples/serve_llm.py) makes it draw power while it
  /// "computes". @return the slowdown of its workload under the settings in force: its time per iteration
  /// over the time at the largest power limit and no clock lock (≥ 1). kNotSupported for a real GPU.
  Result<double> set_simulated_busy(bool busy);

 protected:
  virtual Result<uint64_t> do_energy_mj() = 0;
  virtual Result<uint32_t> do_power_mw() = 0;
  virtual Result<PowerLimitConstraints> do_power_limit_constraints() = 0;
  virtual Result<uint32_t> do_power_limit_mw() = 0;
  virtual Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) = 0;
  virtual Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() = 0;
  virtual Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) = 0;
  virtual Result<void> do_reset_sm_clocks() = 0;
  // Memory clock locks: the defaults say the backend cannot lock the memory clock (kNotSupported).
  virtual Result<std::vector<uint32_t>> do_supported_memory_clocks_mhz();
  virtual Result<void> do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz);
  virtual Result<void> do_reset_memory_clocks();
  // Telemetry hooks: the defaults say the backend does not report the value (telemetry_not_supported).
  virtual Result<double> do_temperature_c();
  virtual Result<uint32_t> do_sm_clock_mhz();
  virtual Result<uint32_t> do_memory_clock_mhz();
  virtual Result<uint32_t> do_gpu_utilization_pct();
  virtual Result<uint32_t> do_memory_utilization_pct();
  virtual Result<uint64_t> do_clock_event_reasons();
  virtual Result<uint32_t> do_memory_power_mw();
  virtual Result<uint32_t> do_module_power_mw();
  virtual Result<uint64_t> do_module_energy_mj();
  virtual Result<double> do_set_simulated_busy(bool busy);

  /// @return kNotSupported: "<label> does not report <reading> (<backend> backend)"; `why` (if not empty)
  /// is appended after a colon, e.g. the vendor library's status.
  Error telemetry_not_supported(TelemetryField field, std::string_view why = {}) const;

  /// Lets a backend learn capabilities after construction (e.g. the energy-counter probe). Call only
  /// before the device is shared between threads.
  GpuInfo& mutable_info() { return info_; }

 private:
  Result<PowerLimitConstraints> constraints_locked();

  GpuInfo info_;
  std::mutex mutex_;
  std::optional<PowerLimitConstraints> constraints_;
};

/// @return `power_mw` as watts with up to three decimals and no trailing zeros, e.g. "212.5 W".
std::string format_watts(uint32_t power_mw);

}  // namespace joule::device
