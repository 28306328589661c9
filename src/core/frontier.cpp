// SPDX-License-Identifier: Apache-2.0
#include "joule/core/frontier.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>

#include <fmt/format.h>

namespace joule {

namespace {

// Checks that the two columns pair up and hold finite, non-negative numbers.
Result<void> check_points(const std::vector<double>& times_s, const std::vector<double>& energies_j) {
  if (times_s.size() != energies_j.size()) {
    return fail(ErrorCode::kInvalidArgument, "{} times but {} energies: every point needs both",
                times_s.size(), energies_j.size());
  }
  for (size_t i = 0; i < times_s.size(); ++i) {
    if (!std::isfinite(times_s[i]) || times_s[i] < 0) {
      return fail(ErrorCode::kInvalidArgument,
                  "point {} has time {} s: times must be finite and non-negative", i, times_s[i]);
    }
    if (!std::isfinite(energies_j[i]) || energies_j[i] < 0) {
      return fail(ErrorCode::kInvalidArgument,
                  "point {} has energy {} J: energies must be finite and non-negative", i, energies_j[i]);
    }
  }
  return {};
}

// The index whose key (primary, time, energy) is smallest among `candidates`, earlier index on full ties.
// Breaking ties by time then energy makes "ties go to the faster point" hold even for unsorted input.
template <class Primary, class Keep>
std::optional<size_t> argmin(const std::vector<double>& times_s, const std::vector<double>& energies_j,
                             Primary primary, Keep keep) {
  std::optional<size_t> best;
  std::tuple<double, double, double> best_key;
  for (size_t i = 0; i < times_s.size(); ++i) {
    if (!keep(i)) {
      continue;
    }
    const auto key = std::make_tuple(primary(i), times_s[i], energies_j[i]);
    if (!best || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  return best;
}

}  // namespace

std::vector<size_t> pareto_indices(const std::vector<double>& times_s,
                                   const std::vector<double>& energies_j) {
  value_or_throw(check_points(times_s, energies_j));
  std::vector<size_t> order(times_s.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Sorting by (time, energy, position) puts, among equal points, the first one given first; the sweep then
  // keeps a point only if it uses strictly less energy than every faster-or-equal point before it.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(times_s[a], energies_j[a], a) < std::tie(times_s[b], energies_j[b], b);
  });
  std::vector<size_t> kept;
  for (const size_t index : order) {
    if (kept.empty() || energies_j[index] < energies_j[kept.back()]) {
      kept.push_back(index);
    }
  }
  return kept;
}

std::string describe(const Policy& policy) {
  struct Describer {
    std::string operator()(const ZeusCost& p) const {
      return fmt::format("ZeusCost(eta={}, max_power={} W)", p.eta, p.max_power_w);
    }
    std::string operator()(const CarbonCost& p) const {
      return fmt::format("CarbonCost(eta={}, intensity={} g/kWh, max_intensity={} g/kWh, max_power={} W)",
                         p.eta, p.intensity_g_per_kwh, p.max_intensity_g_per_kwh, p.max_power_w);
    }
    std::string operator()(const Deadline& p) const { return fmt::format("Deadline({} s)", p.time_s); }
    std::string operator()(const MaxSlowdown& p) const { return fmt::format("MaxSlowdown({}x)", p.factor); }
    std::string operator()(const MinEnergy&) const { return "MinEnergy"; }
    std::string operator()(const MinTime&) const { return "MinTime"; }
  };
  return std::visit(Describer{}, policy);
}

Result<void> validate(const Policy& policy) {
  struct Validator {
    Result<void> operator()(const ZeusCost& p) const {
      // Written as a negated range test so that NaN fails too.
      if (!(p.eta >= 0 && p.eta <= 1)) {
        return fail(ErrorCode::kInvalidArgument, "ZeusCost eta must be in [0, 1], got {}", p.eta);
      }
      if (!(p.max_power_w > 0) || !std::isfinite(p.max_power_w)) {
        return fail(ErrorCode::kInvalidArgument, "ZeusCost max_power_w must be positive and finite, got {} W",
                    p.max_power_w);
      }
      return {};
    }
    Result<void> operator()(const CarbonCost& p) const {
      if (!(p.eta >= 0 && p.eta <= 1)) {
        return fail(ErrorCode::kInvalidArgument, "CarbonCost eta must be in [0, 1], got {}", p.eta);
      }
      if (!(p.intensity_g_per_kwh >= 0) || !std::isfinite(p.intensity_g_per_kwh)) {
        return fail(ErrorCode::kInvalidArgument,
                    "CarbonCost intensity must be finite and non-negative, got {} g/kWh",
                    p.intensity_g_per_kwh);
      }
      if (!(p.max_intensity_g_per_kwh > 0) || !std::isfinite(p.max_intensity_g_per_kwh)) {
        return fail(ErrorCode::kInvalidArgument,
                    "CarbonCost max_intensity must be positive and finite, got {} g/kWh",
                    p.max_intensity_g_per_kwh);
      }
      if (!(p.max_power_w > 0) || !std::isfinite(p.max_power_w)) {
        return fail(ErrorCode::kInvalidArgument,
                    "CarbonCost max_power_w must be positive and finite, got {} W", p.max_power_w);
      }
      return {};
    }
    Result<void> operator()(const Deadline& p) const {
      if (!(p.time_s >= 0) || !std::isfinite(p.time_s)) {
        return fail(ErrorCode::kInvalidArgument, "Deadline time_s must be finite and non-negative, got {} s",
                    p.time_s);
      }
      return {};
    }
    Result<void> operator()(const MaxSlowdown& p) const {
      if (!(p.factor >= 1) || !std::isfinite(p.factor)) {
        return fail(ErrorCode::kInvalidArgument, "MaxSlowdown factor must be finite and at least 1, got {}",
                    p.factor);
      }
      return {};
    }
    Result<void> operator()(const MinEnergy&) const { return {}; }
    Result<void> operator()(const MinTime&) const { return {}; }
  };
  return std::visit(Validator{}, policy);
}

Result<size_t> select_index(const std::vector<double>& times_s, const std::vector<double>& energies_j,
                            const Policy& policy) {
  JOULE_TRY(validate(policy));
  JOULE_TRY(check_points(times_s, energies_j));
  if (times_s.empty()) {
    return fail(ErrorCode::kState, "{}: there is no point to select from", describe(policy));
  }
  const auto all = [](size_t) { return true; };
  const auto time_of = [&](size_t i) { return times_s[i]; };
  const auto energy_of = [&](size_t i) { return energies_j[i]; };
  const size_t fastest = *argmin(times_s, energies_j, time_of, all);
  const double fastest_s = times_s[fastest];

  // The least-energy point no slower than `bound_s`; `what` describes the bound for the error.
  const auto least_energy_within = [&](double bound_s, const std::string& what) -> Result<size_t> {
    const auto chosen =
        argmin(times_s, energies_j, energy_of, [&](size_t i) { return times_s[i] <= bound_s; });
    if (!chosen) {
      return fail(ErrorCode::kNotFound, "no point meets {} of {} s: the fastest takes {} s", what, bound_s,
                  fastest_s);
    }
    return *chosen;
  };

  if (const auto* zeus = std::get_if<ZeusCost>(&policy)) {
    return *argmin(
        times_s, energies_j, [&](size_t i) { return zeus->cost(energies_j[i], times_s[i]); }, all);
  }
  if (const auto* carbon = std::get_if<CarbonCost>(&policy)) {
    return *argmin(
        times_s, energies_j, [&](size_t i) { return carbon->cost(energies_j[i], times_s[i]); }, all);
  }
  if (const auto* deadline = std::get_if<Deadline>(&policy)) {
    return least_energy_within(deadline->time_s, "the deadline");
  }
  if (const auto* slowdown = std::get_if<MaxSlowdown>(&policy)) {
    return least_energy_within(slowdown->factor * fastest_s,
                               fmt::format("the {}x slowdown bound", slowdown->factor));
  }
  if (std::holds_alternative<MinEnergy>(policy)) {
    return *argmin(times_s, energies_j, energy_of, all);
  }
  return fastest;
}

}  // namespace joule
