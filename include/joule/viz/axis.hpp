// SPDX-License-Identifier: Apache-2.0
// joule/viz/axis.hpp — "nice" linear axis ticks (steps of 1, 2 or 5 × 10^k) and number formats for tick
// labels and tooltips.
#pragma once

#include <string>
#include <vector>

namespace joule::viz {

/// Ticks of a linear axis.
struct Ticks {
  double min = 0;                ///< the axis range's lower end
  double max = 1;                ///< the axis range's upper end
  double step = 1;               ///< the distance between ticks: 1, 2 or 5 × 10^k
  std::vector<double> values{};  ///< the multiples of `step` in [min, max], ascending
};

/// The ticks of the smallest nice step for which the range [min, max], widened outwards to multiples of the
/// step, has at most `max_intervals` intervals (at least 2 for a range across zero); the widened range is the
/// result's range. A range of zero width (a single value) is first widened to ±10% of the value (±1 around
/// 0).
/// @throws joule::Exception (kInvalidArgument) for non-finite ends, min > max or max_intervals < 1.
Ticks nice_ticks(double min, double max, int max_intervals = 6);

/// Keeps [min, max] as the range (for an explicit or padded axis range) and returns the multiples of the
/// smallest nice step that has at most `max_intervals` intervals between the ticks inside the range (there
/// may be a single tick, or none if max_intervals is 1). Same widening and errors as nice_ticks().
Ticks ticks_within(double min, double max, int max_intervals = 6);

/// @return the label of a tick at `value` on an axis with `step`: as many decimals as the step needs
/// (step 0.5: "1.5", "0.0"; step 20: "140"), and "1.5e9"-style text ("0" for zero) when the step is at least
/// 1e6 or below 1e-3.
std::string format_tick(double value, double step);

/// @return `value` rounded to `digits` significant digits (1–17), trailing zeros dropped, "1.235e9"-style
/// outside [1e-3, 1e7): for tooltips and labels, e.g. format_significant(1234.56, 4) == "1235".
std::string format_significant(double value, int digits = 4);

}  // namespace joule::viz
