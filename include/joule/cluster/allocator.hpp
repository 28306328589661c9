// SPDX-License-Identifier: Apache-2.0
// joule/cluster/allocator.hpp — one cluster-wide power cap shared among jobs by their frontiers: each job
// gets the per-GPU power limit at which the watts buy the most throughput, inference SLOs first
// (docs/cluster.md).
//
// Every job says, for each per-GPU power limit it can run at, how long one unit of its work takes (a training
// step, an inference replica's iteration at its SLO load): its time–power frontier, from profiling or a
// frontier card. The allocator chooses one limit per job so that the sum of the limits over all GPUs stays
// within the cap and the priority-weighted throughput lost is least:
//
//   minimise  Σ_j priority_j · gpus_j · (1 − t_j(max) / t_j(p_j))   subject to   Σ_j gpus_j · p_j ≤ cap,
//
// with p_j at least job j's floor (an inference job's SLO floor, else its lowest limit). A limit is a
// guarantee, so the cap holds whatever the jobs do; a job drawing less than its limit gives the difference
// away at no cost, because its frontier is flat there.
//
// Method and optimality: each job's (power, lost throughput) points from its floor up are reduced to their
// lower convex hull, and the watts go, one hull segment at a time, to the segment with the greatest
// throughput gained per watt (a heap over jobs). That is the optimum of the continuous relaxation (each
// job may take a fraction of a segment) up to the first segment that no longer fits, so the result's cost is
// within `gap_bound` (that segment's gain) of the discrete optimum; it equals it when the cap falls on a hull
// breakpoint. The leftover watts then buy the best single steps that still fit, and exchanges (one job up a
// step, another down one) follow while they lower the loss. Then, unless the floors had to be degraded, an
// exact search improves on that where it can: a dynamic programme over the jobs keeping only the
// (watts, loss) states no other state beats on both (dominance pruning), bounded by
// AllocateOptions::exact_work_limit; when it completes, the result is the discrete optimum (`gap_bound` 0).
// Tested against an exhaustive search (tests/cluster/allocator_test.cpp); timed in bench/cluster_bench.
//
//   std::vector<joule::cluster::JobDemand> jobs = {...};
//   auto allocation = joule::cluster::allocate(jobs, 0.8 * 1000 * 700.0);
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::cluster {

/// One point of a job's frontier: every GPU of the job at `power_limit_w`.
struct FrontierPoint {
  double power_limit_w = 0;  ///< per GPU, W (> 0)
  double time_s = 0;         ///< time of one unit of the job's work at that limit, s (> 0)
};

/// What kind of work a job is; inference jobs are served first.
enum class JobKind {
  kTraining,
  kInference,
};

/// @return "training" or "inference".
std::string_view to_string(JobKind kind);

/// A job as the allocator sees it.
struct JobDemand {
  std::string id;                       ///< unique among the jobs given (any printable text)
  JobKind kind = JobKind::kTraining;    ///< inference jobs get their SLO floor before any training job a watt
  int gpus = 1;                         ///< GPUs the job runs on, all at the same limit (≥ 1)
  double priority = 1;                  ///< weight of its lost throughput (> 0)
  std::vector<FrontierPoint> frontier;  ///< any order; at least one point
  /// The lowest per-GPU limit that holds the job's SLO (inference), W; the allocator never goes below it
  /// unless AllocateOptions::degrade_slos. Must lie within the frontier's range.
  std::optional<double> slo_floor_w;
};

/// What allocate() may do when the cap is short.
struct AllocateOptions {
  /// When even every job at its floor exceeds the cap: false refuses (kOutOfRange, naming the shortfall);
  /// true places the inference jobs below their SLO floors too and says so in Allocation::degraded.
  bool degrade_slos = false;
  /// The exact search (below) gives up once it has weighed this many (state, point) pairs and the
  /// heuristic's answer stands; 0 skips it. The default keeps it to a few milliseconds: a small cluster (a
  /// few dozen GPUs) gets its optimum, a large one the heuristic, whose bound is then a tiny share of it.
  size_t exact_work_limit = 300'000;
  /// The exact search runs only where the heuristic's bound is above this share of the cluster's weighted
  /// throughput (Σ priority · gpus): on a large cluster the bound is a few millionths of it and the search
  /// would be wasted work.
  double exact_search_above_share = 1e-4;
};

/// One job's share.
struct JobAllocation {
  std::string id;
  double power_limit_w = 0;    ///< per GPU, W: one of the job's frontier points
  double time_s = 0;           ///< time of one unit at that limit, s
  double throughput_loss = 0;  ///< 1 − t(max)/t(limit): the share of its uncapped throughput it gives up
  bool below_slo_floor = false;
};

/// The allocation of a cap.
struct Allocation {
  std::vector<JobAllocation> jobs;  ///< in the order the jobs were given
  double cap_w = 0;
  double allocated_w = 0;    ///< Σ gpus · limit, W (≤ cap_w unless degraded below every floor)
  double weighted_loss = 0;  ///< Σ priority · gpus · throughput_loss (the objective)
  double gap_bound = 0;      ///< the objective is within this of the discrete optimum (0: optimal)
  /// The allocation is the discrete optimum: the exact search completed, or the heuristic met the
  /// relaxation's bound (then `gap_bound` is 0 too).
  bool exact = false;
  std::optional<std::string> degraded;  ///< why SLO floors were not held (AllocateOptions::degrade_slos)
};

/// Allocates `cap_w` (W, > 0) among `jobs`. Errors (kInvalidArgument), each naming the job: an empty or
/// repeated id, gpus < 1, a priority not > 0, no frontier point, a point whose limit or time is not positive
/// and finite, an SLO floor outside the frontier's range; a frontier whose time *rises* with the limit by
/// more than 10% (a frontier taken in the wrong units or order); kOutOfRange when the floors alone exceed the
/// cap and degrade_slos is false ("the cap of 50000 W is 1200 W short of the jobs' floors (…)").
Result<Allocation> allocate(std::span<const JobDemand> jobs, double cap_w,
                            const AllocateOptions& options = {});

}  // namespace joule::cluster
