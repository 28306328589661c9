// SPDX-License-Identifier: Apache-2.0
// The minimum s–t cut of a network whose arcs have lower and upper bounds on their flow, via two maximum
// flows on integer capacities (in-house Dinic, or Boost.Graph push-relabel). Used by the pipeline planner
// (Phillips–Dessouky).
#pragma once

#include <cstdint>
#include <vector>

#include "joule/plan/planner.hpp"

namespace joule::plan::detail {

/// Capacities at or above this are unbounded. Finite capacities must stay far below it (the planner's are
/// costs in micro-joules per time unit).
constexpr int64_t kInfiniteCapacity = int64_t{1} << 55;

struct CutArc {
  int from = 0;
  int to = 0;
  int64_t lower = 0;  ///< the flow on the arc must be at least this
  int64_t upper = 0;  ///< and at most this (kInfiniteCapacity: unbounded)
  /// A guess at the arc's flow in a maximum flow, e.g. its flow in the previous cut of a similar network:
  /// the solver starts from it (clamped to the bounds) instead of from the lower bounds. Any guess gives
  /// the same cut; a good one saves most of the work.
  int64_t flow = 0;
};

struct CutResult {
  enum class Status {
    kOk,          ///< source_side holds a minimum cut
    kInfeasible,  ///< no flow satisfies the lower bounds
    kUnbounded,   ///< every cut crosses an unbounded arc forward: the maximum flow is infinite
  };
  Status status = Status::kOk;
  std::vector<char> source_side;  ///< per node: 1 if on the source side of the cut
  int64_t value = 0;              ///< Σ upper(forward arcs) − Σ lower(backward arcs)
  std::vector<int64_t> flow;      ///< per arc (kOk only): a maximum flow within the bounds, to warm-start
};

/// Finds a minimum cut between `source` and `sink`: the standard transformation for lower bounds (a feasible
/// circulation through a super source and sink, with an unbounded arc sink → source), started from the
/// arcs' `flow` guesses, then a maximum flow from source to sink in the residual network of that feasible
/// flow; the source side is what stays reachable from the source. That set is the same for every maximum
/// flow (the smallest source side of all minimum cuts), so the cut depends neither on the guesses nor on the
/// algorithm. Not thread-safe with kDinic (its buffers are per thread).
CutResult min_cut_with_lower_bounds(int node_count, int source, int sink, const std::vector<CutArc>& arcs,
                                    MaxFlowAlgorithm algorithm = MaxFlowAlgorithm::kDinic);

}  // namespace joule::plan::detail
