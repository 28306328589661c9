// SPDX-License-Identifier: Apache-2.0
// joule/core/duration.hpp — the one rule for a duration in seconds from a person or a peer (a flag, a Python
// argument, an option, a request): finite, in range, and at most kMaxDurationS (100 years), so that its
// int64 nanoseconds never overflow (`power --duration-s 1e10` used to stop at once: 1e19 ns wrapped to a
// deadline in the past).
#pragma once

#include <string_view>

#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/core/validate.hpp"

namespace joule {

/// The rule of a duration flag or option counted in units of `unit_s` seconds (1: seconds, 60: minutes,
/// 3600: hours): a finite number > 0 (≥ 0 with `zero_allowed`) of at most kMaxDurationS / unit_s. Its
/// refusal of a larger value says the limit: "--duration-s must be at most 3.15576e+09, got 1e+10: 100 years
/// is the longest duration joule takes".
NumberRule duration_rule(bool zero_allowed = false, double unit_s = 1);

/// @return `seconds` as Nanos after checking it against `rule` with its plausibility bounds narrowed to
/// [−kMaxDurationS, kMaxDurationS] (the default rule: any time or signed difference within 100 years);
/// kInvalidArgument naming `what` otherwise, as check_number() words it.
Result<Nanos> seconds_to_nanos(double seconds, std::string_view what,
                               const NumberRule& rule = NumberRule::any_finite());

}  // namespace joule
