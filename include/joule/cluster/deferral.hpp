// SPDX-License-Identifier: Apache-2.0
// joule/cluster/deferral.hpp — when deferrable training work runs: in the cleanest hours of the carbon
// forecast before each job's deadline, within the watts the cap leaves (docs/cluster.md, "Deferrable work").
//
// The forecast is a list of consecutive slots (an hour each, typically) with a carbon intensity; each slot
// has watts available for deferrable work (the cap less what inference and non-deferrable training are
// given). Jobs are taken earliest deadline first; each gets running time in the cleanest slots before its
// deadline that still have watt-seconds to spare, a fraction of a slot where that is all that is left. A
// job that cannot finish by its deadline this way is marked at risk and given every slot it can use from
// now on, cleanest or not: deadlines are never traded for carbon silently.
//
// A slot's spare watts are shared as watt-seconds (available_w × length): jobs that do not fit together take
// turns within the slot, or, under the allocator, run together more slowly. That is an approximation at the
// slot's granularity, which the next re-plan corrects with what was actually done.
//
//   auto plan = joule::cluster::plan_deferrable(work, forecast);
//   for (const auto& job : plan->jobs) if (job.runs_now) start(job.id);
#pragma once

#include <span>
#include <string>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::cluster {

/// A deferrable job's remaining work.
struct DeferrableWork {
  std::string id;
  double power_w = 0;      ///< what the job draws while it runs (all its GPUs), W (> 0)
  double remaining_s = 0;  ///< running time it still needs, s (≥ 0)
  double deadline_s = 0;   ///< latest finish, s from now (> 0)
};

/// One slot of the forecast.
struct ForecastSlot {
  double length_s = 3600;          ///< s (> 0); slots follow each other from now
  double intensity_g_per_kwh = 0;  ///< the grid's carbon intensity, gCO2/kWh (≥ 0)
  double available_w = 0;          ///< watts the cap leaves to deferrable work in this slot (≥ 0)
};

/// One job's plan.
struct DeferralDecision {
  std::string id;
  std::vector<double> run_s;  ///< running time in each slot of the forecast, s
  bool runs_now = false;      ///< it has running time in the first slot
  bool at_risk = false;       ///< its deadline cannot be met within the forecast's spare watts
  double finish_s = 0;        ///< end of its last running time, s from now (each slot's share run first)
  double carbon_g = 0;        ///< its running time's emissions, g
};

/// The plan of every deferrable job.
struct DeferralPlan {
  std::vector<DeferralDecision> jobs;  ///< in the order given
  double carbon_g = 0;                 ///< Σ jobs' carbon, g
  /// The same work run as soon as possible (each job from now, in order, within the same spare watts), g:
  /// what deferring saves is the difference.
  double carbon_as_soon_as_possible_g = 0;
};

/// Plans `work` over `forecast`. Errors (kInvalidArgument) naming the job or slot: a power not > 0, a
/// negative remaining time, a deadline already passed (≤ 0: "job 'a': its deadline passed 120 s ago"), an
/// empty forecast, a slot with a length ≤ 0 or a negative intensity or available power.
Result<DeferralPlan> plan_deferrable(std::span<const DeferrableWork> work,
                                     std::span<const ForecastSlot> forecast);

}  // namespace joule::cluster
