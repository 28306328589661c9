// SPDX-License-Identifier: Apache-2.0
// joule/device/gpu.hpp — the GPU interface every backend (NVML, ROCm SMI, simulated) implements.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
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
  std::string backend;     ///< "nvml", "rocm" or "sim"
  int index = 0;           ///< framework index: position after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES
  int physical_index = 0;  ///< the vendor library's own index
  std::string name;        ///< marketing name, e.g. "Tesla V100-PCIE-32GB"
  std::string uuid;        ///< e.g. "GPU-8f2e…"; empty if the backend has none
  bool has_energy_counter = false;  ///< energy_mj() works; if false, energy must be estimated from power
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

 protected:
  virtual Result<uint64_t> do_energy_mj() = 0;
  virtual Result<uint32_t> do_power_mw() = 0;
  virtual Result<PowerLimitConstraints> do_power_limit_constraints() = 0;
  virtual Result<uint32_t> do_power_limit_mw() = 0;
  virtual Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) = 0;
  virtual Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() = 0;
  virtual Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) = 0;
  virtual Result<void> do_reset_sm_clocks() = 0;

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
