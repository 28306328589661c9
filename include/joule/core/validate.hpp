// SPDX-License-Identifier: Apache-2.0
// joule/core/validate.hpp — the one place where a number from a person or a peer is checked: command-line
// flags, HTTP bodies and Python arguments go through these, so the same value gets the same answer
// everywhere, and the message names the field the way its caller spells it ("--duration-s", "time_s").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

namespace joule {

/// What a number must be.
struct NumberRule {
  double min = -std::numeric_limits<double>::infinity();  ///< inclusive lower bound (−∞: none)
  double max = std::numeric_limits<double>::infinity();   ///< inclusive upper bound (+∞: none)
  bool min_exclusive = false;                             ///< the bound `min` itself is refused (e.g. "> 0")
  bool allow_infinity = false;  ///< +∞ and −∞ pass (where they mean "no limit"); NaN never does
  bool integer = false;         ///< the value must be a whole number
  /// Plausibility bounds, checked after the ones above: a value that means something but is far beyond what
  /// any real one is (a duration over 100 years, 75000 W for a GPU) is most likely a slip of unit or of a
  /// digit. Its refusal names the bound and, after it, the hint ("is it in mW? the flag takes W").
  double plausible_min = -std::numeric_limits<double>::infinity();
  double plausible_max = std::numeric_limits<double>::infinity();
  std::string_view too_low_hint{};
  std::string_view too_high_hint{};

  static NumberRule any_finite() { return {}; }
  static NumberRule positive() { return {.min = 0, .min_exclusive = true}; }
  static NumberRule non_negative() { return {.min = 0}; }
  static NumberRule between(double lo, double hi) { return {.min = lo, .max = hi}; }
  static NumberRule positive_integer() { return {.min = 0, .min_exclusive = true, .integer = true}; }
  static NumberRule non_negative_integer() { return {.min = 0, .integer = true}; }
};

/// Checks `value` against `rule`. @return the value, or kInvalidArgument "NAME must be …, got VALUE", e.g.
/// "--duration-s must be a finite number, got nan", "--forecast-hours must be ≥ 0, got -2", "eta must be in
/// [0, 1], got 3". A value that passes these but lies beyond a plausibility bound: "--p-blocking-w must be at
/// most 2000, got 75000: is it in mW? the flag takes W". An empty `name` gives "must be …, got …" (for
/// callers that prefix the name themselves).
Result<double> check_number(double value, const NumberRule& rule, std::string_view name);

/// Watts from a person or a peer as the integer milliwatts a device call takes: check_number(power_w, rule,
/// name), then rounded to the nearest mW. @return the mW, or kInvalidArgument as check_number() words it, or
/// "NAME must be in [0, 4294967.295] W (a device takes a uint32 of mW), got VALUE" outside a uint32 of mW.
/// (joule::round_w_to_mw() in units.hpp rounds a value the library already trusts.)
Result<uint32_t> round_w_to_mw(double power_w, const NumberRule& rule, std::string_view name);

/// @return a description of `rule` for help texts and messages: "a finite number", "> 0", "in [0, 1]".
std::string describe(const NumberRule& rule);

/// The rules of the quantities people type in a unit: the command line's flags, the Python arguments and the
/// library options of the same quantity share one, so that the same value gets the same answer everywhere.
/// Each has a plausibility bound far beyond any real value, whose refusal names the likely slip of unit:
/// "--carbon-intensity must be at most 2000, got 380000: is it in g/MWh? The unit here is g/kWh". Callers may
/// tighten the domain (e.g. min_exclusive for a step that must be > 0).
namespace quantity {
/// Electrical power of a GPU, a node's GPUs or a blocked GPU, W: ≥ 0, at most 5000 (mW?).
NumberRule power_w();
/// Carbon intensity of electricity, gCO2e/kWh: ≥ 0, at most 2000 (the dirtiest grids are near 1000; g/MWh?).
NumberRule carbon_intensity_g_per_kwh();
/// Energy of a run or a trial, J: ≥ 0, at most 1e15 (278 GWh; mJ or µJ?).
NumberRule energy_j();
/// A GPU clock, MHz: > 0, from 10 to 10000 (GHz? kHz?).
NumberRule frequency_mhz();
/// A time-to-first-token SLO, s: > 0, at most 600 (ms?).
NumberRule ttft_s();
/// A time-per-output-token SLO, s: > 0, at most 10 (ms?).
NumberRule tpot_s();
/// The time of one training iteration, or a planner's time unit, s: > 0, at most 3600 (ms?).
NumberRule iteration_time_s();
/// A sampling period, ms: > 0, at most 3600000 (one hour; µs?).
NumberRule sampling_period_ms();
/// A decision period, minutes: > 0, at most 1440 (one day; seconds?).
NumberRule period_min();
}  // namespace quantity

}  // namespace joule
