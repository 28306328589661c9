// SPDX-License-Identifier: Apache-2.0
#include "joule/core/validate.hpp"

#include <cmath>

#include <fmt/format.h>

namespace joule {

namespace {

std::string number_text(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  return fmt::format("{:g}", value);
}

}  // namespace

std::string describe(const NumberRule& rule) {
  const bool has_min = std::isfinite(rule.min);
  const bool has_max = std::isfinite(rule.max);
  std::string kind = rule.integer ? "a whole number" : "a finite number";
  if (has_min && has_max && !rule.min_exclusive) {
    return fmt::format("{} in [{}, {}]", kind, number_text(rule.min), number_text(rule.max));
  }
  if (has_min && has_max) {
    return fmt::format("{} in ({}, {}]", kind, number_text(rule.min), number_text(rule.max));
  }
  if (has_min) {
    return fmt::format("{} {} {}", kind, rule.min_exclusive ? ">" : "≥", number_text(rule.min));
  }
  if (has_max) {
    return fmt::format("{} ≤ {}", kind, number_text(rule.max));
  }
  return kind;
}

Result<double> check_number(double value, const NumberRule& rule, std::string_view name) {
  const bool infinite_allowed = rule.allow_infinity && std::isinf(value);
  const bool in_range = (rule.min_exclusive ? value > rule.min : value >= rule.min) && value <= rule.max;
  const bool whole = !rule.integer || std::isinf(value) || std::trunc(value) == value;
  const std::string subject = name.empty() ? std::string("must be") : fmt::format("{} must be", name);
  if (!std::isnan(value) && (std::isfinite(value) || infinite_allowed) && in_range && whole) {
    if (value < rule.plausible_min || value > rule.plausible_max) {
      const bool low = value < rule.plausible_min;
      const std::string_view hint = low ? rule.too_low_hint : rule.too_high_hint;
      return fail(ErrorCode::kInvalidArgument, "{} at {} {}, got {}{}", subject, low ? "least" : "most",
                  number_text(low ? rule.plausible_min : rule.plausible_max), number_text(value),
                  hint.empty() ? std::string() : fmt::format(": {}", hint));
    }
    return value;
  }
  return fail(ErrorCode::kInvalidArgument, "{} {}{}, got {}", subject, describe(rule),
              rule.allow_infinity ? " (or inf)" : "", number_text(value));
}

Result<uint32_t> round_w_to_mw(double power_w, const NumberRule& rule, std::string_view name) {
  JOULE_TRY(check_number(power_w, rule, name));
  // A uint32 of mW: the widest power a device call takes (NVML's and the daemon's).
  const double rounded_mw = std::round(power_w * 1e3);
  if (!(rounded_mw >= 0) || rounded_mw > static_cast<double>(std::numeric_limits<uint32_t>::max())) {
    return fail(
        ErrorCode::kInvalidArgument, "{} in [0, 4294967.295] W (a device takes a uint32 of mW), got {}",
        name.empty() ? std::string("must be") : fmt::format("{} must be", name), number_text(power_w));
  }
  return static_cast<uint32_t>(rounded_mw);
}

namespace quantity {

NumberRule power_w() {
  return {.min = 0, .plausible_max = 5000, .too_high_hint = "is it in mW? The unit here is W"};
}

NumberRule carbon_intensity_g_per_kwh() {
  return {.min = 0, .plausible_max = 2000, .too_high_hint = "is it in g/MWh? The unit here is g/kWh"};
}

NumberRule energy_j() {
  return {.min = 0, .plausible_max = 1e15, .too_high_hint = "is it in mJ or µJ? The unit here is J"};
}

NumberRule frequency_mhz() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_min = 10,
          .plausible_max = 10000,
          .too_low_hint = "is it in GHz? The unit here is MHz",
          .too_high_hint = "is it in kHz or Hz? The unit here is MHz"};
}

NumberRule ttft_s() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_max = 600,
          .too_high_hint = "is it in ms? The unit here is s"};
}

NumberRule tpot_s() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_max = 10,
          .too_high_hint = "is it in ms? The unit here is s"};
}

NumberRule iteration_time_s() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_max = 3600,
          .too_high_hint = "is it in ms? The unit here is s"};
}

NumberRule sampling_period_ms() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_max = 3'600'000,
          .too_high_hint = "is it in µs? The unit here is ms"};
}

NumberRule period_min() {
  return {.min = 0,
          .min_exclusive = true,
          .plausible_max = 1440,
          .too_high_hint = "is it in seconds? The unit here is minutes"};
}

}  // namespace quantity

}  // namespace joule
