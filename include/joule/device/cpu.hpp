// SPDX-License-Identifier: Apache-2.0
// joule/device/cpu.hpp — the CPU interface: package and DRAM energy counters (RAPL).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "joule/core/error.hpp"

namespace joule::device {

/// What identifies a CPU package; fixed when the device is opened.
struct CpuInfo {
  std::string backend;    ///< "rapl", or "daemon" (joule/device/daemon_cpu.hpp: read through `joule daemon`)
  int index = 0;          ///< package index (the N of intel-rapl:N)
  std::string name;       ///< e.g. "package-0"
  bool has_dram = false;  ///< dram_energy_mj() works
};

/// One reading of a CPU energy counter (a package's or its DRAM's).
struct CpuEnergyReading {
  /// Cumulative energy since an arbitrary origin, mJ, corrected for wraparound. A counter reset adds nothing.
  uint64_t energy_mj = 0;
  /// Counter resets seen before this reading since the device was opened: times the counter went back by
  /// more than a wrap at a plausible power can explain (RaplOptions::max_power_w). Two readings subtract to
  /// the energy between them only if their counts are equal (why_not_measurable()).
  uint64_t resets = 0;
  /// Why the last reset was judged one (empty if there was none).
  std::string last_reset;
};

/// @return why the energy between readings `begin` and `end` of one counter is not measurable (a counter
/// reset between them: the energy of the part before the reset is unknown, and a wrap's worth would be
/// phantom energy), or nullopt if end.energy_mj - begin.energy_mj is the energy between them.
std::optional<std::string> why_not_measurable(const CpuEnergyReading& begin, const CpuEnergyReading& end);

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

  /// @return the package's energy with the counter resets seen so far, read together (errors as
  /// package_energy_mj()).
  Result<CpuEnergyReading> package_reading();
  /// @return the DRAM domain's energy with its counter resets (errors as dram_energy_mj()).
  Result<CpuEnergyReading> dram_reading();

 protected:
  virtual Result<uint64_t> do_package_energy_mj() = 0;
  virtual Result<uint64_t> do_dram_energy_mj() = 0;
  /// A backend that can tell counter resets overrides these; the default reports none.
  virtual Result<CpuEnergyReading> do_package_reading();
  virtual Result<CpuEnergyReading> do_dram_reading();

 private:
  CpuInfo info_;
  std::mutex mutex_;
};

}  // namespace joule::device
