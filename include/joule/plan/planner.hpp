// SPDX-License-Identifier: Apache-2.0
// joule/plan/planner.hpp — the iteration time–energy frontier of a pipeline (Perseus, SOSP'24): for every
// achievable iteration time, a frequency plan with (close to) the least energy, by iterative minimum cuts
// (Phillips–Dessouky) on the computation DAG.
#pragma once

#include <cstddef>
#include <cstdint>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// The maximum-flow implementation behind the minimum cuts. Both give minimum cuts of the same value; the
/// frontiers can differ only where several minimum cuts exist.
enum class MaxFlowAlgorithm {
  kDinic,             ///< in-house Dinic on reused arrays (default: the fastest on pipeline networks)
  kBoostPushRelabel,  ///< Boost.Graph push_relabel_max_flow on a compressed-sparse-row graph
};

struct PlannerOptions {
  double unit_time_s = 1e-3;  ///< τ: the planner shortens the critical path one τ at a time
  double p_blocking_w = 70;   ///< power of a GPU blocked waiting for its neighbours, W
  MaxFlowAlgorithm max_flow = MaxFlowAlgorithm::kDinic;
};

/// What the planner produced.
struct PlannerResult {
  /// Pareto-optimal plans, fastest first; every point's time and energy evaluated on the profile.
  Frontier<FrequencyPlan> frontier;
  PlanCost max_clock;           ///< every computation at the highest clock (the usual baseline)
  size_t iterations = 0;        ///< minimum cuts computed
  size_t plans_considered = 0;  ///< distinct plans evaluated before Pareto filtering
};

/// @return kInvalidArgument for a non-positive unit time or a negative or non-finite blocking power.
Result<void> validate(const PlannerOptions& options);

/// Computes the frontier. Errors: validate()'s; kInvalidArgument if the profile has fewer stages than the
/// DAG; kInternal if the solver's invariants break (a bug).
Result<PlannerResult> plan_frontier(const PipelineDag& dag, const Profile& profile,
                                    const PlannerOptions& options);

/// Picks the plan for an iteration that must take `target_time_s` anyway (a straggler elsewhere sets the
/// pace): among points no slower than the target, the one minimising its energy plus blocking at
/// p_blocking_w on every stage until the target (Perseus §1.7). kNotFound if the target is faster than the
/// fastest point (the message gives both); kInvalidArgument for a non-finite or non-positive target.
Result<size_t> select_for_target(const Frontier<FrequencyPlan>& frontier, double target_time_s,
                                 double p_blocking_w, int stages);

/// @return the energy of `point` when the iteration is stretched to `target_time_s` (≥ its own time) by
/// blocking on every stage: energy_j + p_blocking_w · stages · (target − time_s).
double energy_at_target(const FrontierPoint<FrequencyPlan>& point, double target_time_s, double p_blocking_w,
                        int stages);

}  // namespace joule::plan
