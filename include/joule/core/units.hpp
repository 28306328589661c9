// SPDX-License-Identifier: Apache-2.0
// joule/core/units.hpp — unit conversions. Names carry units: _w, _mw, _j, _mj, _uj, _s, _ns, _mhz.
//
// Devices report integers in mW and mJ (as NVML does); public APIs take and return doubles in SI units.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>

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

/// @return `time_s` seconds as Nanos, rounded to the nearest nanosecond.
inline Nanos from_seconds(double time_s) {
  return Nanos(std::llround(time_s * 1e9));
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

}  // namespace joule
