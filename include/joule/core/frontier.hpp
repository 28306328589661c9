// SPDX-License-Identifier: Apache-2.0
// joule/core/frontier.hpp — the time–energy Pareto frontier of a fixed amount of work, and the policies that
// pick a point from it. Every optimizer in joule produces a Frontier; every policy picks from one.
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "joule/core/error.hpp"

namespace joule {

/// One way to do the work: a knob setting and what the work costs with it.
template <class Knob>
struct FrontierPoint {
  Knob knob{};          ///< e.g. a power limit, (batch size, power limit), a frequency plan
  double time_s = 0;    ///< time of the work, seconds
  double energy_j = 0;  ///< energy of the work, joules
};

/// The Pareto-optimal points of a set of measurements of the same work, sorted by time (fastest first, so
/// energy decreases along the list). A point is dropped if another point is no slower and uses no more
/// energy while being strictly better in one of the two; of points equal in both, the first one given is
/// kept.
template <class Knob>
class Frontier {
 public:
  Frontier() = default;

  /// Builds the frontier of `points`. @throws joule::Exception (kInvalidArgument) for a negative or
  /// non-finite time or energy.
  static Frontier from_points(std::vector<FrontierPoint<Knob>> points);

  /// @return the points, fastest first.
  const std::vector<FrontierPoint<Knob>>& points() const { return points_; }
  size_t size() const { return points_.size(); }
  bool empty() const { return points_.empty(); }
  /// @return the fastest point (the MinTime end). @throws joule::Exception (kState) if empty.
  const FrontierPoint<Knob>& fastest() const;
  /// @return the least-energy point (the MinEnergy end). @throws joule::Exception (kState) if empty.
  const FrontierPoint<Knob>& least_energy() const;

 private:
  std::vector<FrontierPoint<Knob>> points_;
};

/// Zeus's cost (NSDI'23): `eta·E + (1 − eta)·max_power_w·T`, energy and time in one unit (J). eta = 1 is
/// energy only; eta = 0 is time only.
struct ZeusCost {
  double eta = 0.5;  ///< in [0, 1]
  double max_power_w =
      0;  ///< the power that converts time into energy, W (> 0); Zeus: the largest power limit
  /// @return the cost of `energy_j` and `time_s`, in J.
  double cost(double energy_j, double time_s) const {
    return eta * energy_j + (1 - eta) * max_power_w * time_s;
  }
};

/// Chase's cost (Yang et al., ICLR'23 workshop): Zeus's cost with energy weighted by the forecast carbon
/// intensity of the grid, relative to a worst-case intensity:
/// `eta·(I/I_max)·E + (1 − eta)·max_power_w·T`, where I = min(intensity_g_per_kwh, max_intensity_g_per_kwh).
/// This is Chase's `(eta·P·I + (1 − eta)·MAX_PL·MAX_CI)/throughput` divided by MAX_CI, so it picks the same
/// point; it equals ZeusCost{effective_eta()} up to a positive factor. A dirty grid favours energy (lower
/// power limits), a clean one favours speed. With a price in $/kWh for the intensity and the highest price
/// for the maximum it is the electricity-price variant (zeus#53).
struct CarbonCost {
  double eta = 0.5;                      ///< in [0, 1]; the weight of energy at the worst-case intensity
  double intensity_g_per_kwh = 0;        ///< forecast intensity, gCO2e/kWh (≥ 0)
  double max_intensity_g_per_kwh = 750;  ///< the worst case that normalises it (> 0); Chase: 750
  double max_power_w = 0;                ///< converts time into energy, W (> 0), as in ZeusCost
  /// @return the intensity used: intensity_g_per_kwh clamped to max_intensity_g_per_kwh.
  double clamped_intensity_g_per_kwh() const {
    return intensity_g_per_kwh < max_intensity_g_per_kwh ? intensity_g_per_kwh : max_intensity_g_per_kwh;
  }
  /// @return the eta of the ZeusCost that picks the same point: eta·I / (eta·I + (1 − eta)·I_max).
  double effective_eta() const {
    const double energy_weight = eta * clamped_intensity_g_per_kwh();
    const double denominator = energy_weight + (1 - eta) * max_intensity_g_per_kwh;
    return denominator > 0 ? energy_weight / denominator : 0;
  }
  /// @return the cost of `energy_j` and `time_s`, in J at the worst-case intensity.
  double cost(double energy_j, double time_s) const {
    return eta * (clamped_intensity_g_per_kwh() / max_intensity_g_per_kwh) * energy_j +
           (1 - eta) * max_power_w * time_s;
  }
};

/// The least-energy point whose time is at most `time_s` (a deadline, a straggler's pace, a latency SLO).
struct Deadline {
  double time_s = 0;
};

/// The least-energy point whose time is at most `factor` × the fastest point's time (factor ≥ 1).
struct MaxSlowdown {
  double factor = 1;
};

/// The least-energy point.
struct MinEnergy {};

/// The fastest point.
struct MinTime {};

/// A rule that picks one point of a frontier.
using Policy = std::variant<ZeusCost, CarbonCost, Deadline, MaxSlowdown, MinEnergy, MinTime>;

/// @return e.g. "ZeusCost(eta=0.5, max_power=250 W)", "CarbonCost(eta=0.25, intensity=412 g/kWh,
/// max_intensity=750 g/kWh, max_power=300 W)", "Deadline(1.2 s)", "MaxSlowdown(1.1x)".
std::string describe(const Policy& policy);

/// @return kInvalidArgument (naming the parameter and its valid range) if the policy's parameters are
/// invalid: eta outside [0, 1], max_power_w ≤ 0, a negative or non-finite intensity, a maximum intensity
/// ≤ 0, a negative or non-finite deadline, factor < 1.
Result<void> validate(const Policy& policy);

/// Picks a point from times and energies given fastest first (as Frontier::points() are).
/// @return the index of the chosen point; ties go to the faster point. kState if there is no point;
/// kNotFound if no point meets a time bound (the message gives the bound and the fastest time);
/// validate()'s errors.
Result<size_t> select_index(const std::vector<double>& times_s, const std::vector<double>& energies_j,
                            const Policy& policy);

/// @return the index into frontier.points() of the point `policy` picks (see select_index()).
template <class Knob>
Result<size_t> select(const Frontier<Knob>& frontier, const Policy& policy) {
  std::vector<double> times;
  std::vector<double> energies;
  times.reserve(frontier.size());
  energies.reserve(frontier.size());
  for (const auto& point : frontier.points()) {
    times.push_back(point.time_s);
    energies.push_back(point.energy_j);
  }
  return select_index(times, energies, policy);
}

/// @return the positions of the Pareto-optimal entries among (times_s[i], energies_j[i]), sorted by time
/// (ties in time by energy, then by position). @throws joule::Exception (kInvalidArgument) for sizes that
/// differ or values that are negative or not finite.
std::vector<size_t> pareto_indices(const std::vector<double>& times_s, const std::vector<double>& energies_j);

template <class Knob>
Frontier<Knob> Frontier<Knob>::from_points(std::vector<FrontierPoint<Knob>> points) {
  std::vector<double> times;
  std::vector<double> energies;
  times.reserve(points.size());
  energies.reserve(points.size());
  for (const auto& point : points) {
    times.push_back(point.time_s);
    energies.push_back(point.energy_j);
  }
  Frontier frontier;
  for (const size_t index : pareto_indices(times, energies)) {
    frontier.points_.push_back(std::move(points[index]));
  }
  return frontier;
}

template <class Knob>
const FrontierPoint<Knob>& Frontier<Knob>::fastest() const {
  if (points_.empty()) {
    throw Exception(ErrorCode::kState, "the frontier is empty");
  }
  return points_.front();
}

template <class Knob>
const FrontierPoint<Knob>& Frontier<Knob>::least_energy() const {
  if (points_.empty()) {
    throw Exception(ErrorCode::kState, "the frontier is empty");
  }
  return points_.back();
}

}  // namespace joule
