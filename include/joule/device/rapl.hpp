// SPDX-License-Identifier: Apache-2.0
// joule/device/rapl.hpp — CPU package and DRAM energy from Intel RAPL via /sys/class/powercap.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/cpu.hpp"

namespace joule::device {

struct RaplOptions {
  /// The powercap directory (holds intel-rapl:N). Environment: JOULE_POWERCAP_ROOT. Containers often
  /// bind-mount the host's tree elsewhere.
  std::string powercap_root = "/sys/class/powercap";
  /// How often a background thread reads each counter so that no wraparound is missed between two reads
  /// far apart. 0 = choose from max_energy_range_uj (a quarter of the time a package drawing max_power_w
  /// needs to wrap, clamped to [0.1 s, 60 s]). Negative periods are rejected (kInvalidArgument).
  Nanos wrap_check_period{0};
  /// The most a package (or its DRAM) can draw, W (> 0). It sizes the automatic wrap_check_period, and tells
  /// a wrap from a reset: a counter that goes back is a wrap only if the energy that implies
  /// (max_energy_range_uj − before + after) over the time since the last reading (at least 0.1 s, the
  /// counters' granularity with margin) is at most this; otherwise it was reset (CPU hot-plug, a firmware or
  /// virtual machine reset), nothing is counted for that step and the reset is reported (CpuEnergyReading).
  /// 1 kW is above what any package draws (500 W for the largest server parts, 1.2-1.5x that in short
  /// turbo bursts; DRAM domains under 200 W). A reset while the counter is within max_power_w × (time since
  /// the last reading) of its top looks like a wrap and adds at most that much (60 kJ with the 60 s
  /// background period of a 262 kJ counter; less between closer readings).
  double max_power_w = 1000;
};

/// Opens every RAPL package zone (intel-rapl:N, sorted by N) with its DRAM sub-zone if present. Platform
/// ("psys") zones are skipped: they include the packages and would count them twice. Counters wrap at
/// max_energy_range_uj; readings are corrected for it, and a counter that goes back faster than
/// max_power_w could explain is counted as a reset, not as a wrap (Cpu::package_reading()).
/// @return kNotFound if the root has no RAPL zones (the message says why that usually happens);
/// kPermissionDenied if energy_uj is not readable, with the commands that grant access; kInvalidArgument
/// for a negative period or a max_power_w that is not a positive number.
Result<std::vector<std::unique_ptr<Cpu>>> open_rapl_cpus(const RaplOptions& options);

}  // namespace joule::device
