// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/axis.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "joule/core/error.hpp"
#include "joule/viz/svg.hpp"

namespace joule::viz {

namespace {

// Slack for values that are a multiple of the step up to rounding (0.3 / 0.1 = 2.9999999999999996).
constexpr double kSlack = 1e-9;

// A nice step written as mantissa × 10^exponent, so that tick values can be computed as exactly as
// possible: k·m / 10^-e is exact for the decimal values a reader expects, k·m·0.1 is not.
struct Step {
  double mantissa;
  int exponent;

  double value() const { return scaled(1); }
  double scaled(double multiple) const {
    const double power = std::pow(10.0, std::abs(exponent));
    return exponent < 0 ? multiple * mantissa / power : multiple * mantissa * power;
  }
};

void check_range(double min, double max, int max_intervals) {
  if (!std::isfinite(min) || !std::isfinite(max) || min > max) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("an axis range needs finite ends with min <= max, got [{}, {}]", min, max));
  }
  if (max_intervals < 1) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("an axis needs at least 1 tick interval, got {}", max_intervals));
  }
}

// Widens a range too narrow to tell its ends apart in a double (or a single value).
void widen_degenerate(double& min, double& max) {
  const double magnitude = std::max(std::abs(min), std::abs(max));
  if (max - min > magnitude * 1e-12) {
    return;
  }
  const double centre = min / 2 + max / 2;
  const double half = centre == 0 ? 1.0 : std::abs(centre) * 0.1;
  min = centre - half;
  max = centre + half;
}

// floor() and ceil() of a quotient that is an integer up to rounding (0.3 / 0.1 = 2.9999999999999996).
double snapped_floor(double quotient) {
  const double nearest = std::round(quotient);
  return std::abs(quotient - nearest) < kSlack ? nearest : std::floor(quotient);
}
double snapped_ceil(double quotient) {
  const double nearest = std::round(quotient);
  return std::abs(quotient - nearest) < kSlack ? nearest : std::ceil(quotient);
}

// The first and last multiple of `step` that bound [min, max] from outside, or that lie inside it.
std::array<double, 2> multiples(double min, double max, const Step& step, bool outer) {
  const double low = min / step.value();
  const double high = max / step.value();
  return outer ? std::array<double, 2>{snapped_floor(low), snapped_ceil(high)}
               : std::array<double, 2>{snapped_ceil(low), snapped_floor(high)};
}

// The smallest nice step with at most `max_intervals` intervals between its outer (or inner) multiples.
Step choose_step(double min, double max, int max_intervals, bool outer) {
  if (outer && min < 0 && max > 0) {
    max_intervals = std::max(max_intervals, 2);  // zero is a multiple of every step: one interval cannot do
  }
  // A tenth of the average interval is too small a step for sure; the search goes up from there.
  int exponent = static_cast<int>(std::floor(std::log10((max - min) / max_intervals))) - 1;
  for (int tries = 0; tries < 32; ++tries, ++exponent) {
    for (const double mantissa : {1.0, 2.0, 5.0}) {
      const Step step{mantissa, exponent};
      const auto [first, last] = multiples(min, max, step, outer);
      if (last - first <= max_intervals) {
        return step;
      }
    }
  }
  throw Exception(ErrorCode::kInternal, fmt::format("found no tick step for the range [{}, {}]", min, max));
}

Ticks make_ticks(double min, double max, int max_intervals, bool outer) {
  check_range(min, max, max_intervals);
  widen_degenerate(min, max);
  const Step step = choose_step(min, max, max_intervals, outer);
  const auto [first, last] = multiples(min, max, step, outer);
  Ticks ticks;
  ticks.step = step.value();
  ticks.min = outer ? step.scaled(first) : min;
  ticks.max = outer ? step.scaled(last) : max;
  // |multiple| stays far below 2^53 (widen_degenerate() keeps the step above 1e-13 of the magnitude), so the
  // loop counts exactly; the bound on the count is a second guard against an endless loop.
  for (double multiple = first;
       multiple <= last && ticks.values.size() <= static_cast<size_t>(max_intervals) + 1; ++multiple) {
    const double value = step.scaled(multiple);
    ticks.values.push_back(value == 0 ? 0.0 : value);  // no -0
  }
  return ticks;
}

int decimal_exponent(double value) {
  return static_cast<int>(std::floor(std::log10(std::abs(value))));
}

// Fixed-point text with `decimals` decimals, without a sign on a value that rounds to zero.
std::string fixed(double value, int decimals) {
  std::string text = fmt::format("{:.{}f}", value, decimals);
  if (text.front() == '-' && text.find_first_not_of("0.", 1) == std::string::npos) {
    text.erase(0, 1);
  }
  return text;
}

// The decimal exponent of `value` once its mantissa is rounded to decimals(exponent) decimals: 9.96e-5 with
// two decimals rounds to 10.00e-5, which is written 1.00e-4.
template <class Decimals>
int rounded_exponent(double value, Decimals decimals) {
  const int exponent = decimal_exponent(value);
  const double unit = std::pow(10.0, decimals(exponent));
  return std::round(std::abs(value / std::pow(10.0, exponent)) * unit) >= 10 * unit ? exponent + 1 : exponent;
}

std::string scientific(double value, int exponent, int decimals, bool trim) {
  const double mantissa = value / std::pow(10.0, exponent);
  return fmt::format("{}e{}", trim ? format_number(mantissa, decimals) : fixed(mantissa, decimals), exponent);
}

}  // namespace

Ticks nice_ticks(double min, double max, int max_intervals) {
  return make_ticks(min, max, max_intervals, /*outer=*/true);
}

Ticks ticks_within(double min, double max, int max_intervals) {
  return make_ticks(min, max, max_intervals, /*outer=*/false);
}

std::string format_tick(double value, double step) {
  if (!std::isfinite(value) || !(step > 0) || !std::isfinite(step)) {
    return format_number(value, 0);
  }
  const int step_exponent = decimal_exponent(step * (1 + kSlack));
  if (step < 1e6 && step >= 1e-3) {
    return fixed(value, std::max(0, -step_exponent));  // zero too: "0.0, 0.5, 1.0" reads better than "0, 0.5"
  }
  if (value == 0) {
    return "0";
  }
  // Enough mantissa decimals to tell neighbouring ticks apart, and no more.
  const auto decimals = [&](int exponent) { return std::max(0, exponent - step_exponent); };
  const int exponent = rounded_exponent(value, decimals);
  return scientific(value, exponent, decimals(exponent), false);
}

std::string format_significant(double value, int digits) {
  digits = std::clamp(digits, 1, 17);
  if (value == 0 || !std::isfinite(value)) {
    return format_number(value, 0);
  }
  const int exponent = rounded_exponent(value, [&](int) { return digits - 1; });
  if (exponent >= -3 && exponent < 7) {
    if (digits - 1 - exponent < 0) {  // round in the integer part: 123.456 to 2 digits is 120
      const double unit = std::pow(10.0, exponent - digits + 1);
      return format_number(std::round(value / unit) * unit, 0);
    }
    return format_number(value, digits - 1 - exponent);
  }
  return scientific(value, exponent, digits - 1, true);
}

}  // namespace joule::viz
