// SPDX-License-Identifier: Apache-2.0
#include "joule/core/duration.hpp"

#include <algorithm>
#include <cmath>

namespace joule {

namespace {
constexpr std::string_view kMaxDurationHint = "100 years is the longest duration joule takes";
}  // namespace

NumberRule duration_rule(bool zero_allowed, double unit_s) {
  return {.min = 0,
          .min_exclusive = !zero_allowed,
          .plausible_max = kMaxDurationS / unit_s,
          .too_high_hint = kMaxDurationHint};
}

Result<Nanos> seconds_to_nanos(double seconds, std::string_view what, const NumberRule& rule) {
  NumberRule bounded = rule;
  bounded.plausible_min = std::max(rule.plausible_min, -kMaxDurationS);
  bounded.plausible_max = std::min(rule.plausible_max, kMaxDurationS);
  bounded.allow_infinity = false;
  if (bounded.too_high_hint.empty()) {
    bounded.too_high_hint = kMaxDurationHint;
  }
  if (bounded.too_low_hint.empty()) {
    bounded.too_low_hint = kMaxDurationHint;
  }
  JOULE_TRY(check_number(seconds, bounded, what));
  return Nanos(std::llround(seconds * 1e9));
}

}  // namespace joule
