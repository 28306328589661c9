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
  /// far apart. 0 = choose from max_energy_range_uj (a quarter of the time a 1 kW package needs to wrap,
  /// clamped to [0.1 s, 60 s]). Negative periods are rejected (kInvalidArgument).
  Nanos wrap_check_period{0};
};

/// Opens every RAPL package zone (intel-rapl:N, sorted by N) with its DRAM sub-zone if present. Platform
/// ("psys") zones are skipped: they include the packages and would count them twice. Counters wrap at
/// max_energy_range_uj; readings are corrected for it.
/// @return kNotFound if the root has no RAPL zones (the message says why that usually happens);
/// kPermissionDenied if energy_uj is not readable, with the commands that grant access.
Result<std::vector<std::unique_ptr<Cpu>>> open_rapl_cpus(const RaplOptions& options);

}  // namespace joule::device
