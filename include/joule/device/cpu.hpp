// SPDX-License-Identifier: Apache-2.0
// joule/device/cpu.hpp — the CPU interface: package and DRAM energy counters (RAPL).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "joule/core/error.hpp"

namespace joule::device {

/// What identifies a CPU package; fixed when the device is opened.
struct CpuInfo {
  std::string backend;    ///< "rapl", or "daemon" (joule/device/daemon.hpp: read through `joule daemon`)
  int index = 0;          ///< package index (the N of intel-rapl:N)
  std::string name;       ///< e.g. "package-0"
  bool has_dram = false;  ///< dram_energy_mj() works
};

/// One CPU package. Thread-safe: public calls take this device's lock and call the backend's hook.
class Cpu {
 public:
  explicit Cpu(CpuInfo info) : info_(std::move(info)) {}
  virtual ~Cpu() = default;
  Cpu(const Cpu&) = delete;
  Cpu& operator=(const Cpu&) = delete;

  const CpuInfo& info() const { return info_; }
  /// @return "CPU <index> (<name>)" for messages.
  std::string label() const;

  /// @return the package's cumulative energy in millijoules since an arbitrary origin, corrected for
  /// counter wraparound. kPermissionDenied says how to obtain read access.
  Result<uint64_t> package_energy_mj();

  /// @return the DRAM domain's cumulative energy in millijoules. kNotSupported if info().has_dram is false.
  Result<uint64_t> dram_energy_mj();

 protected:
  virtual Result<uint64_t> do_package_energy_mj() = 0;
  virtual Result<uint64_t> do_dram_energy_mj() = 0;

 private:
  CpuInfo info_;
  std::mutex mutex_;
};

}  // namespace joule::device
