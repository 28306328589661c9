// SPDX-License-Identifier: Apache-2.0
// joule/device/visible_devices.hpp — CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES: which GPUs a process sees
// and in what order (the "framework indices" every joule API uses).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::device {

/// One entry of a visible-devices list: a physical index, or a UUID (a unique prefix suffices, as in CUDA).
struct VisibleDeviceEntry {
  std::optional<int> index;  ///< set for numeric entries
  std::string uuid;          ///< set for "GPU-…" and "MIG-…" (an NVIDIA MIG instance) entries
};

/// The parsed variable. `entries` is nullopt when the variable is unset (every device visible, in physical
/// order); an empty vector when it is set to the empty string (no device visible).
struct VisibleDevices {
  std::string variable;  ///< the variable the list came from, for messages ("" when unset)
  std::optional<std::vector<VisibleDeviceEntry>> entries;
};

/// Parses a visible-devices value. @param variable the variable name, used in messages.
/// @param value the value, or nullptr when unset.
/// @return kInvalidArgument for malformed lists (empty element, negative or non-numeric index, a bare "GPU-"
/// or "MIG-", duplicate), naming the variable and the bad entry.
Result<VisibleDevices> parse_visible_devices(std::string_view variable, const char* value);

/// Reads the visible-devices variable of a backend from the environment: "nvml" and "sim" read
/// CUDA_VISIBLE_DEVICES; "rocm" and "amdsmi" read HIP_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES;
/// "levelzero" none (every GPU the driver lists is visible).
Result<VisibleDevices> visible_devices_from_environment(std::string_view backend);

/// @return true if `uuid` names an NVIDIA MIG instance ("MIG-…", any case).
bool is_mig_uuid(std::string_view uuid);

/// Maps a visible list to physical indices, in framework order.
/// @param physical_uuids the UUIDs of every physical device, in physical order ("" if unknown).
/// @param mig_uuids the UUIDs of the MIG instances ("MIG-…"), for backends that have them: index
/// physical_uuids.size() + i stands for mig_uuids[i]. Numeric entries never select a MIG instance; "MIG-…"
/// entries match only these. With the variable unset every device and then every MIG instance is visible.
/// @return the index of framework index 0, 1, …; kNotFound for an index past the last device or a UUID that
/// matches none (for a MIG UUID, saying MIG mode may be off or the instance destroyed); kInvalidArgument
/// for an ambiguous UUID prefix or a device listed twice.
Result<std::vector<int>> resolve_visible_devices(const VisibleDevices& visible,
                                                 const std::vector<std::string>& physical_uuids,
                                                 const std::vector<std::string>& mig_uuids = {});

}  // namespace joule::device
