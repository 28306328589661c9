// SPDX-License-Identifier: Apache-2.0
// joule/device/hw_check_report.hpp — the forms of the read-only hardware check (hw_check.hpp) and of the
// backends discovery tried: what `joule devices [--check]` and scripts/hw-check print. Pure functions of
// their inputs (and uname(2)), no other I/O.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/device/discovery.hpp"
#include "joule/device/hw_check.hpp"

namespace joule::device {

/// What a report says besides the checks.
struct HwCheckReport {
  std::string joule_version;
  std::string time;           ///< when the check ran, ISO 8601 UTC
  std::string fallback_note;  ///< why a simulated GPU was checked instead (empty: real GPUs)
};

/// @return "Linux 6.1.0-18-amd64 x86_64" (uname's system, release, machine), or "unknown".
std::string kernel_description();
/// @return one line per backend tried: "  nvml    unavailable  libnvidia-ml.so.1 not found: …".
std::string backends_text(const DeviceSet& devices);
/// @return [{backend, kind, ok, devices, detail}] of the backends tried.
nlohmann::json backends_json(const DeviceSet& devices);
/// The check as a human reads it: the header, the backends, each GPU's checks, the summary line.
std::string hw_check_text(const DeviceSet& devices, const std::vector<GpuCheck>& checks,
                          const HwCheckReport& report);
/// The same as a JSON document (2-space indent, final newline); settings_changed is always false.
std::string hw_check_json(const DeviceSet& devices, const std::vector<GpuCheck>& checks,
                          const HwCheckReport& report);

}  // namespace joule::device
