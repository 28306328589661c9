// SPDX-License-Identifier: Apache-2.0
// joule/plan/planner.hpp — the iteration time–energy frontier of a pipeline (Perseus, SOSP'24): for every
// achievable iteration time, a frequency plan with (close to) the least energy, by iterative minimum cuts
// (Phillips–Dessouky) on the computation DAG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// The maximum-flow implementation behind the minimum cuts. Both give the same cuts (of several minimum
/// cuts, the one with the smallest source side), hence the same frontier. Either runs only when the previous
/// cut's maximum flow, the start of every cut, is no longer maximal.
enum class MaxFlowAlgorithm {
  kDinic,             ///< in-house Dinic on reused compressed rows (default: the fastest on pipelines)
  kBoostPushRelabel,  ///< Boost.Graph push_relabel_max_flow on a compressed-sparse-row graph
};

/// The default of PlannerOptions::max_planning_units: 200 s of iteration at the slowest clocks in 1 ms
/// units; real pipelines need thousands (the example, 4 × 8 at 1 ms: 1,216; 8 × 128: 15,238).
inline constexpr double kDefaultMaxPlanningUnits = 200'000;
/// The largest max_planning_units accepted: durations in units are ints, and sums of them must stay ints.
inline constexpr double kMostPlanningUnits = 1 << 30;

struct PlannerOptions {
  double unit_time_s = 1e-3;  ///< τ: the planner shortens the critical path one τ at a time
  double p_blocking_w = 70;   ///< power of a GPU blocked waiting for its neighbours, W
  MaxFlowAlgorithm max_flow = MaxFlowAlgorithm::kDinic;
  /// The most time units the planner walks: it refuses (kInvalidArgument) a profile and unit time whose
  /// slowest iteration — every computation at its slowest profile row — lasts longer than this many units,
  /// because its work and memory grow with that number (see planning_units()). 1 to kMostPlanningUnits.
  double max_planning_units = kDefaultMaxPlanningUnits;
};

/// What the planner produced.
struct PlannerResult {
  /// Pareto-optimal plans, fastest first; every point's time and energy evaluated on the profile.
  Frontier<FrequencyPlan> frontier;
  PlanCost max_clock;           ///< every computation at the highest clock (the usual baseline)
  size_t iterations = 0;        ///< minimum cuts computed
  size_t plans_considered = 0;  ///< distinct plans evaluated before Pareto filtering
};

/// @return kInvalidArgument for a non-positive unit time, a negative or non-finite blocking power, or a
/// max_planning_units outside 1 … kMostPlanningUnits.
Result<void> validate(const PlannerOptions& options);

/// How much walking a plan_frontier() call would do, from every row of the profile.
struct PlanningUnits {
  double units = 0;                ///< slowest_iteration_s / unit_time_s: the most cuts the walk can take
  double slowest_iteration_s = 0;  ///< the iteration with every computation at its slowest row
  // The slowest row of the whole profile (the first such, by stage and instruction): what to check first.
  int slowest_stage = 0;
  Instruction slowest_instruction = Instruction::kForward;
  uint32_t slowest_frequency_mhz = 0;
  double slowest_time_s = 0;
};

/// @return the planner's work for this DAG, profile and unit: its walk starts from every computation at its
/// slowest useful row and shortens the iteration one unit at a time, so the slowest iteration (every row
/// counted, whatever its clock) in units bounds the number of steps, and each computation type's cost
/// table is as long as its slowest row in units. O(computations). Errors: check_inputs()'s, and
/// kInvalidArgument for a non-positive or non-finite unit time.
Result<PlanningUnits> planning_units(const PipelineDag& dag, const Profile& profile, double unit_time_s);

/// @return kInvalidArgument if planning_units() exceeds options.max_planning_units, naming the slowest row,
/// the limit and what to do, e.g. "the planner would walk 1.33e+07 time units of 0.001 s, more than its
/// limit of 200000: at its slowest rows one iteration takes 13325 s, and the slowest row is stage 1
/// backward at 810 MHz (13300 s); check that row of the profile, use a larger unit_time_s, or raise
/// max_planning_units". plan_frontier() calls it first; callers may call it to refuse early.
Result<PlanningUnits> check_planning_units(const PipelineDag& dag, const Profile& profile,
                                           const PlannerOptions& options);

/// Computes the frontier. Errors: validate()'s; check_planning_units()'s (kInvalidArgument, before any
/// work); kInvalidArgument if the profile has fewer stages than the DAG; kInternal if the solver's
/// invariants break (a bug). Logs every minimum cut's size at debug level (joule::log()).
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

/// What a plan is chosen for: an iteration time (s), or a slowdown (≥ 1) of the fastest plan's time. Neither:
/// the fastest plan, which removes the intrinsic energy bloat at no slowdown.
struct PlanTarget {
  std::optional<double> time_s = std::nullopt;
  std::optional<double> slowdown = std::nullopt;
};

/// The plan chosen for a PlanTarget, with the figures every caller reports (the CLI, the server's planner
/// routes, Python, live Perseus).
struct PlanChoice {
  size_t index = 0;  ///< into the frontier's points, fastest first
  std::optional<double>
      target_time_s;    ///< the target iteration time, s (a slowdown made absolute); none: none
  double time_s = 0;    ///< the iteration's time, s: the target, else the chosen plan's own
  double energy_j = 0;  ///< the iteration's energy, J: the plan's, plus blocking until time_s
  /// The same iteration with every computation at the highest clock, blocking until time_s if that is slower,
  /// J: the baseline the saving is measured against.
  double max_clock_energy_j = 0;
};

/// Chooses the plan for `target` on `frontier` (select_for_target(), or the fastest plan without a target)
/// and says what it costs next to `max_clock` (the all-highest-clock plan, PlannerResult::max_clock), with
/// blocking at p_blocking_w (W) on each of `stages`. Errors: kInvalidArgument for both a time and a
/// slowdown, a slowdown below 1 or not finite, or a bad target time; kNotFound if the target is faster than
/// the fastest plan; kState for an empty frontier. Callers name their own flags before calling.
Result<PlanChoice> choose_plan(const Frontier<FrequencyPlan>& frontier, const PlanCost& max_clock,
                               const PlanTarget& target, double p_blocking_w, int stages);

}  // namespace joule::plan
