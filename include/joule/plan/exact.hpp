// SPDX-License-Identifier: Apache-2.0
// joule/plan/exact.hpp — the exact iteration time–energy frontier of a tiny pipeline by enumerating every
// frequency plan, and a measure of how far another frontier (e.g. the planner's) is from it. For tests and
// for judging the planner's approximation; the cost grows as frequencies^computations.
#pragma once

#include <cstddef>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// The default bound on the plans exact_frontier() enumerates (a few seconds of work).
inline constexpr size_t kDefaultMaxExactPlans = 5'000'000;

/// Evaluates every plan (every frequency of the profile for every computation, evaluate()'s time and energy)
/// and keeps the Pareto-optimal ones (Frontier::from_points(): fastest first; of plans equal in time and
/// energy, the first enumerated is kept, where plans are enumerated as numbers whose digit v is the
/// position of node v's frequency in profile.frequencies_mhz(), node 0 the least significant digit — so the
/// all-fastest plan comes first).
/// @param p_blocking_w power of a blocked GPU, W (finite, ≥ 0).
/// @return kInvalidArgument if frequencies^computations exceeds `max_plans` (the message gives both), for
/// a profile with fewer stages than the DAG, or for a negative or non-finite blocking power.
Result<Frontier<FrequencyPlan>> exact_frontier(const PipelineDag& dag, const Profile& profile,
                                               double p_blocking_w, size_t max_plans = kDefaultMaxExactPlans);

/// How much more energy a frontier needs than the exact one, over the exact frontier's points.
///
/// For every exact point (T_x, E_x): among the other frontier's points with time ≤ T_x + time_tolerance_s,
/// take the least energy E_o; the point's gap is (E_o − E_x) / E_x (0.05: 5 % more energy for a plan at
/// least as fast). If the other frontier has no point that fast, the exact point is counted in
/// `unmatched` and left out of the max and the mean. The gap is not clamped: a slightly negative value can
/// only come from the tolerance or from rounding.
struct FrontierGap {
  double max_gap = 0;       ///< the largest gap over matched exact points (0 if none matched)
  double mean_gap = 0;      ///< the mean gap over matched exact points (0 if none matched)
  double worst_time_s = 0;  ///< T_x of the exact point with the largest gap
  size_t matched = 0;       ///< exact points for which the other frontier has a point at least as fast
  size_t unmatched = 0;     ///< exact points faster than every point of the other frontier
};

/// @return the gap of `other` to `exact` as FrontierGap describes. @param time_tolerance_s slack on the time
/// comparison, s (≥ 0), for times computed along different paths. Does not look at the plans.
FrontierGap compare_to_exact(const Frontier<FrequencyPlan>& exact, const Frontier<FrequencyPlan>& other,
                             double time_tolerance_s = 1e-9);

}  // namespace joule::plan
