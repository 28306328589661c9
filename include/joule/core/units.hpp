// SPDX-License-Identifier: Apache-2.0
// joule/core/units.hpp — unit conversions. Names carry units: _w, _mw, _j, _mj, _uj, _s, _ns, _mhz.
//
// Devices report integers in mW and mJ (as NVML does); public APIs take and return doubles in SI units.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

namespace joule {

/// Nanoseconds: the resolution of every clock in joule.
using Nanos = std::chrono::nanoseconds;

constexpr double mw_to_w(double power_mw) {
  return power_mw / 1e3;
}
constexpr double w_to_mw(double power_w) {
  return power_w * 1e3;
}
constexpr double mj_to_j(double energy_mj) {
  return energy_mj / 1e3;
}
constexpr double j_to_mj(double energy_j) {
  return energy_j * 1e3;
}
constexpr double uj_to_mj(double energy_uj) {
  return energy_uj / 1e3;
}
constexpr double ns_to_s(double time_ns) {
  return time_ns / 1e9;
}

/// @return the duration in seconds.
constexpr double to_seconds(Nanos duration) {
  return static_cast<double>(duration.count()) / 1e9;
}

/// The longest duration joule takes anywhere, s: 100 years of 365.25 days (3.15576e9 s). Durations are
/// int64 nanoseconds, which overflow past 2^63 ns (about 9.2e9 s, 292 years); this bound leaves room to add
/// any duration to any clock reading. Every duration from a person or a peer is checked against it
/// (joule/core/duration.hpp).
inline constexpr double kMaxDurationS = 100 * 365.25 * 86400;

/// @return `time_s` seconds as Nanos, rounded to the nearest nanosecond. Beyond ±kMaxDurationS the value
/// is clamped to it, and NaN is 0, so that nothing overflows; values from people and peers are checked
/// first (seconds_to_nanos() in joule/core/duration.hpp), this is only the last guard.
inline Nanos from_seconds(double time_s) {
  if (std::isnan(time_s)) {
    return Nanos(0);
  }
  const double bounded = time_s < -kMaxDurationS  ? -kMaxDurationS
                         : time_s > kMaxDurationS ? kMaxDurationS
                                                  : time_s;
  return Nanos(std::llround(bounded * 1e9));
}

/// @return the energy in mJ of `power_mw` held for `duration`.
constexpr double energy_mj(double power_mw, Nanos duration) {
  return power_mw * to_seconds(duration);
}

/// @return watts rounded to the nearest milliwatt, as an integer (for device calls).
inline int64_t round_w_to_mw(double power_w) {
  return std::llround(power_w * 1e3);
}

/// Joules in one kilowatt-hour.
constexpr double kJoulesPerKwh = 3.6e6;

/// Seconds in an hour and in a day.
constexpr int64_t kHourS = 3600;
constexpr int64_t kDayS = 24 * kHourS;

/// Positive infinity (a double): "no bound", "not reached yet".
constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace joule
