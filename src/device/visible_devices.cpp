// SPDX-License-Identifier: Apache-2.0
#include "joule/device/visible_devices.hpp"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "joule/core/strings.hpp"

namespace joule::device {

namespace {

std::string describe(const VisibleDeviceEntry& entry) {
  return entry.index ? std::to_string(*entry.index) : entry.uuid;
}

}  // namespace

Result<VisibleDevices> parse_visible_devices(std::string_view variable, const char* value) {
  VisibleDevices visible{std::string(variable), std::nullopt};
  if (value == nullptr) {
    return visible;
  }
  visible.entries.emplace();
  const std::string_view text = trim(value);
  if (text.empty()) {
    return visible;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view entry =
        trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (entry.empty()) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}='{}' is malformed: empty entry (expected comma-separated GPU indices or UUIDs)",
                  variable, value);
    }
    VisibleDeviceEntry parsed;
    const bool mig = starts_with_ignoring_case(entry, "MIG-");
    if (mig || starts_with_ignoring_case(entry, "GPU-")) {
      if (entry.size() == 4) {
        return fail(ErrorCode::kInvalidArgument, "{}='{}' is malformed: '{}' has no UUID after '{}'",
                    variable, value, entry, entry.substr(0, 4));
      }
      parsed.uuid = std::string(entry);
    } else {
      int index = -1;
      const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
      if (ec != std::errc() || end != entry.data() + entry.size() || index < 0) {
        return fail(ErrorCode::kInvalidArgument,
                    "{}='{}' is malformed: '{}' is neither a GPU index (0, 1, …) nor a UUID (GPU-… or MIG-…)",
                    variable, value, entry);
      }
      parsed.index = index;
    }
    for (const auto& earlier : *visible.entries) {
      if (earlier.index == parsed.index && earlier.uuid == parsed.uuid) {
        return fail(ErrorCode::kInvalidArgument, "{}='{}' lists GPU {} twice", variable, value,
                    describe(parsed));
      }
    }
    visible.entries->push_back(std::move(parsed));
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return visible;
}

Result<VisibleDevices> visible_devices_from_environment(std::string_view backend) {
  if (backend == "levelzero") {
    // ZE_AFFINITY_MASK is the driver's to apply (and whether Sysman's device list honours it differs between
    // its two initialisations): CUDA_VISIBLE_DEVICES says nothing about Intel GPUs.
    return parse_visible_devices("ZE_AFFINITY_MASK", nullptr);
  }
  if (backend == "rocm" || backend == "amdsmi") {
    if (const char* hip = std::getenv("HIP_VISIBLE_DEVICES")) {
      return parse_visible_devices("HIP_VISIBLE_DEVICES", hip);
    }
  }
  return parse_visible_devices("CUDA_VISIBLE_DEVICES", std::getenv("CUDA_VISIBLE_DEVICES"));
}

bool is_mig_uuid(std::string_view uuid) {
  return starts_with_ignoring_case(uuid, "MIG-");
}

Result<std::vector<int>> resolve_visible_devices(const VisibleDevices& visible,
                                                 const std::vector<std::string>& physical_uuids,
                                                 const std::vector<std::string>& mig_uuids) {
  const int count = static_cast<int>(physical_uuids.size());
  const int mig_count = static_cast<int>(mig_uuids.size());
  std::vector<int> physical;
  if (!visible.entries) {
    for (int i = 0; i < count + mig_count; ++i) {
      physical.push_back(i);
    }
    return physical;
  }
  for (const auto& entry : *visible.entries) {
    int found = -1;
    if (entry.index) {
      if (*entry.index >= count && count == 0) {
        return fail(ErrorCode::kNotFound, "{} names GPU {}, but this machine has no GPU", visible.variable,
                    *entry.index);
      }
      if (*entry.index >= count) {
        return fail(ErrorCode::kNotFound, "{} names GPU {}, but this machine has {} GPU{} (indices 0 to {})",
                    visible.variable, *entry.index, count, count == 1 ? "" : "s", count - 1);
      }
      found = *entry.index;
    } else {
      // MIG instances are matched only against MIG UUIDs, whole GPUs only against GPU UUIDs.
      const bool mig = is_mig_uuid(entry.uuid);
      const std::vector<std::string>& candidates = mig ? mig_uuids : physical_uuids;
      const int offset = mig ? count : 0;
      for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
        if (starts_with_ignoring_case(candidates[static_cast<size_t>(i)], entry.uuid)) {
          if (found >= 0) {
            return fail(ErrorCode::kInvalidArgument, "{} entry '{}' matches more than one {} ({} and {})",
                        visible.variable, entry.uuid, mig ? "MIG instance" : "GPU",
                        mig ? mig_uuids[static_cast<size_t>(found - offset)] : fmt::format("GPU {}", found),
                        mig ? candidates[static_cast<size_t>(i)] : fmt::format("GPU {}", i));
          }
          found = i + offset;
        }
      }
      if (found < 0 && mig) {
        return fail(ErrorCode::kNotFound,
                    "{} names {}, which matches no MIG instance's UUID (this machine has {} MIG instance{}: "
                    "MIG mode may be off, or the instance was destroyed; `nvidia-smi -L` lists them)",
                    visible.variable, entry.uuid, mig_count, mig_count == 1 ? "" : "s");
      }
      if (found < 0) {
        return fail(ErrorCode::kNotFound, "{} names {}, which matches no GPU's UUID", visible.variable,
                    entry.uuid);
      }
    }
    for (const int earlier : physical) {
      if (earlier == found) {
        return fail(
            ErrorCode::kInvalidArgument, "{} selects {} twice", visible.variable,
            found < count ? fmt::format("GPU {}", found) : mig_uuids[static_cast<size_t>(found - count)]);
      }
    }
    physical.push_back(found);
  }
  return physical;
}

}  // namespace joule::device
