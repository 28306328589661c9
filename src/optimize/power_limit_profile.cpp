// SPDX-License-Identifier: Apache-2.0
#include "power_limit_profile.hpp"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/units.hpp"
#include "joule/device/json_forms.hpp"

namespace joule::optimize::detail {

namespace {

using Json = nlohmann::json;

double to_w(uint32_t power_mw) {
  return mw_to_w(power_mw);
}

// Field readers: each names the field in its error.
Result<const Json*> field(const Json& object, std::string_view parent, const char* name) {
  const auto found = object.find(name);
  if (found == object.end()) {
    return fail(ErrorCode::kParse, "missing field '{}{}'", parent, name);
  }
  return &*found;
}

Result<std::string> string_field(const Json& object, std::string_view parent, const char* name) {
  auto value = JOULE_TRY(field(object, parent, name));
  if (!(value)->is_string()) {
    return fail(ErrorCode::kParse, "field '{}{}' must be a string", parent, name);
  }
  return (value)->get<std::string>();
}

Result<int> count_field(const Json& object, std::string_view parent, const char* name) {
  auto value = JOULE_TRY(field(object, parent, name));
  if (!(value)->is_number_integer() || (value)->get<int64_t>() < 1 || (value)->get<int64_t>() > 1'000'000) {
    return fail(ErrorCode::kParse, "field '{}{}' must be an integer from 1 to 1000000", parent, name);
  }
  return static_cast<int>((value)->get<int64_t>());
}

Result<double> number_field(const Json& object, std::string_view parent, const char* name, bool positive) {
  auto value = JOULE_TRY(field(object, parent, name));
  if (!(value)->is_number()) {
    return fail(ErrorCode::kParse, "field '{}{}' must be a number", parent, name);
  }
  const double number = (value)->get<double>();
  if (!std::isfinite(number) || number < 0 || (positive && number == 0)) {
    return fail(ErrorCode::kParse, "field '{}{}' must be a {} number, got {}", parent, name,
                positive ? "positive" : "non-negative", number);
  }
  return number;
}

// Watts as stored → mW; limits are whole milliwatts below 4.29 MW.
Result<uint32_t> watts_field(const Json& object, std::string_view parent, const char* name) {
  auto value = JOULE_TRY(number_field(object, parent, name, true));
  if (value > 4e6) {
    return fail(ErrorCode::kParse, "field '{}{}' is not a power limit: {} W", parent, name, value);
  }
  return static_cast<uint32_t>(round_w_to_mw(value));
}

// @return the error of the first of `results` that holds one.
template <class... Results>
std::optional<Error> first_error(const Results&... results) {
  std::optional<Error> error;
  ((error || results.has_value() ? void() : void(error = results.error())), ...);
  return error;
}

Result<StoredProfile> parse_json(const Json& root) {
  if (!root.is_object()) {
    return fail(ErrorCode::kParse, "the profile must be a JSON object");
  }
  auto format = string_field(root, "", "format");
  if (!format) {
    return tl::make_unexpected(format.error());
  }
  if (*format != kProfileFormat) {
    return fail(ErrorCode::kParse, "field 'format' must be \"{}\", got \"{}\"", kProfileFormat, *format);
  }
  auto version = JOULE_TRY(field(root, "", "version"));
  if (!(version)->is_number_integer() || (version)->get<int64_t>() != kProfileVersion) {
    return fail(ErrorCode::kParse, "unsupported profile version {} (this joule reads version {})",
                (version)->dump(), kProfileVersion);
  }

  StoredProfile profile;
  auto job_key = string_field(root, "", "job_key");
  auto gpu_name = string_field(root, "", "gpu_name");
  auto gpu_count = count_field(root, "", "gpu_count");
  auto world_size = count_field(root, "", "world_size");
  auto profile_steps = count_field(root, "", "profile_steps");
  if (auto error = first_error(job_key, gpu_name, gpu_count, world_size, profile_steps)) {
    return tl::make_unexpected(*error);
  }
  profile.job_key = *job_key;
  profile.gpu_name = *gpu_name;
  profile.gpu_count = *gpu_count;
  profile.world_size = *world_size;
  profile.profile_steps = *profile_steps;

  auto constraints = JOULE_TRY(field(root, "", "constraints"));
  if (!(constraints)->is_object()) {
    return fail(ErrorCode::kParse, "field 'constraints' must be an object");
  }
  auto min_mw = watts_field(*constraints, "constraints.", "min_w");
  auto max_mw = watts_field(*constraints, "constraints.", "max_w");
  auto default_mw = watts_field(*constraints, "constraints.", "default_w");
  if (auto error = first_error(min_mw, max_mw, default_mw)) {
    return tl::make_unexpected(*error);
  }
  profile.constraints = {*min_mw, *max_mw, *default_mw};

  auto measurements = JOULE_TRY(field(root, "", "measurements"));
  if (!(measurements)->is_array() || (measurements)->empty()) {
    return fail(ErrorCode::kParse, "field 'measurements' must be a non-empty array");
  }
  std::set<uint32_t> seen;
  for (size_t i = 0; i < (measurements)->size(); ++i) {
    const Json& entry = (*measurements)[i];
    const std::string parent = fmt::format("measurements[{}].", i);
    if (!entry.is_object()) {
      return fail(ErrorCode::kParse, "field 'measurements[{}]' must be an object", i);
    }
    auto limit_mw = watts_field(entry, parent, "power_limit_w");
    auto energy_j = number_field(entry, parent, "energy_j", false);
    auto time_s = number_field(entry, parent, "time_s", true);
    if (auto error = first_error(limit_mw, energy_j, time_s)) {
      return tl::make_unexpected(*error);
    }
    if (*limit_mw < profile.constraints.min_mw || *limit_mw > profile.constraints.max_mw) {
      return fail(ErrorCode::kParse, "field '{}power_limit_w' ({} W) is outside the constraints", parent,
                  to_w(*limit_mw));
    }
    if (!seen.insert(*limit_mw).second) {
      return fail(ErrorCode::kParse, "field '{}power_limit_w': {} W is measured twice", parent,
                  to_w(*limit_mw));
    }
    profile.measurements.push_back({*limit_mw, *energy_j, *time_s, profile.profile_steps});
  }
  return profile;
}

bool same(const device::PowerLimitConstraints& a, const device::PowerLimitConstraints& b) {
  return a.min_mw == b.min_mw && a.max_mw == b.max_mw && a.default_mw == b.default_mw;
}

std::string describe(const device::PowerLimitConstraints& constraints) {
  return fmt::format("{} W to {} W (default {} W)", to_w(constraints.min_mw), to_w(constraints.max_mw),
                     to_w(constraints.default_mw));
}

}  // namespace

std::string profile_to_json(const StoredProfile& profile) {
  nlohmann::ordered_json measurements = nlohmann::ordered_json::array();
  for (const auto& measurement : profile.measurements) {
    measurements.push_back({{"power_limit_w", to_w(measurement.power_limit_mw)},
                            {"energy_j", measurement.energy_j},
                            {"time_s", measurement.time_s}});
  }
  const nlohmann::ordered_json root = {{"format", kProfileFormat},
                                       {"version", kProfileVersion},
                                       {"job_key", profile.job_key},
                                       {"gpu_name", profile.gpu_name},
                                       {"gpu_count", profile.gpu_count},
                                       {"world_size", profile.world_size},
                                       {"constraints", device::to_json(profile.constraints)},
                                       {"profile_steps", profile.profile_steps},
                                       {"measurements", std::move(measurements)}};
  return root.dump(2) + "\n";
}

Result<StoredProfile> parse_profile(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& error) {
    return fail(ErrorCode::kParse, "not valid JSON: {}", error.what());
  }
  try {
    return parse_json(root);
  } catch (const Json::exception& error) {
    return fail(ErrorCode::kParse, "unexpected content: {}", error.what());
  }
}

std::optional<std::string> profile_mismatch(const StoredProfile& stored, const StoredProfile& here) {
  if (stored.job_key != here.job_key) {
    return fmt::format("it is the profile of job '{}', not '{}'", stored.job_key, here.job_key);
  }
  if (stored.gpu_name != here.gpu_name) {
    return fmt::format("it was measured on {}, this job runs on {}", stored.gpu_name, here.gpu_name);
  }
  if (stored.gpu_count != here.gpu_count) {
    return fmt::format("it was measured with {} GPU(s) per rank, this job has {}", stored.gpu_count,
                       here.gpu_count);
  }
  if (stored.world_size != here.world_size) {
    return fmt::format("it was measured with world size {}, this job has {}", stored.world_size,
                       here.world_size);
  }
  if (!same(stored.constraints, here.constraints)) {
    return fmt::format("it was measured with power limits {}, these GPUs allow {}",
                       describe(stored.constraints), describe(here.constraints));
  }
  return std::nullopt;
}

bool valid_job_key(std::string_view key) {
  if (key.empty() || key.front() == '.') {
    return false;
  }
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

}  // namespace joule::optimize::detail
