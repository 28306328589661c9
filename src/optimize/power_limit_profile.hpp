// SPDX-License-Identifier: Apache-2.0
// Private: the power-limit optimizer's profile file (format documented in joule/optimize/power_limit.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::optimize::detail {

/// A profile as stored, and the identity a stored profile must match to be used.
struct StoredProfile {
  std::string job_key;
  std::string gpu_name;
  int gpu_count = 0;
  int world_size = 0;
  device::PowerLimitConstraints constraints;
  int profile_steps = 0;
  std::vector<PowerLimitMeasurement> measurements;
};

inline constexpr std::string_view kProfileFormat = "joule-power-limit-profile";
inline constexpr int kProfileVersion = 1;

/// @return the profile as JSON text (ends with a newline).
std::string profile_to_json(const StoredProfile& profile);

/// @return the profile in `text`, or kParse naming the field that is missing or wrong.
Result<StoredProfile> parse_profile(std::string_view text);

/// @return why `stored` cannot be used for a job whose identity is `here` (measurements ignored), or
/// nullopt if it can.
std::optional<std::string> profile_mismatch(const StoredProfile& stored, const StoredProfile& here);

/// @return true if `key` can name a profile file: non-empty, letters, digits, '.', '_', '-', not
/// starting with '.'.
bool valid_job_key(std::string_view key);

}  // namespace joule::optimize::detail
