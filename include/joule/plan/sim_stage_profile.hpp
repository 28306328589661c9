// SPDX-License-Identifier: Apache-2.0
// joule/plan/sim_stage_profile.hpp — the Perseus profile of a pipeline whose stages run on one of the
// device layer's simulated GPU models (`joule --sim v100`, joule/device/sim_gpu.hpp): each stage's forward
// and backward is one of the Zeus power traces' workloads, measured at every supported SM clock on a
// SimulatedGpu with a virtual clock (lock the clock, run one computation, read the energy counter).
//
// Benches and tests use it as the "true" GPUs of a pipeline whose frontier card is the simulated model's
// (data/cards/sim-*.json, made by `joule probe` with its own compute and memory kernels, not from these
// workloads), so that a card's predictions are checked against GPUs it was not built from.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// A kernel that follows the law of `joule probe`'s simulated kernels (joule/probe/sim_kernel.hpp, which runs
/// it, with t0 = 1 s scaled afterwards) with shares of its own: time t(r) = t0·(c/r + 1 − c) and power P(r) =
/// idle + dyn·(m + (1 − m)·r³) at SM clock ratio r, dyn = dynamic_share × (largest power limit − idle). The
/// probe's compute kernel is {0.95, 0.9, 0.1}, its memory kernel {0.15, 0.55, 0.5}.
struct SimKernelShape {
  double clock_bound_share = 0.6;  ///< c in (0, 1]
  double dynamic_share = 0.7;      ///< in (0, 1]
  double clock_free_power = 0.3;   ///< m in [0, 1)
};

/// One kernel of a computation made of kernels, and its share of the computation's time at the highest
/// clock.
struct SimKernelPart {
  SimKernelShape shape;
  double time_share = 1;  ///< > 0; the parts' shares are normalised to sum to 1
};

/// One computation of a simulated stage, scaled to take `time_at_max_clock_s` at the highest SM clock: a
/// Zeus trace workload ("imagenet", "squad", …; sim_gpu.hpp's workloads()) at its default batch size, or,
/// when `kernels` is not empty, those kernels run one after the other (as a forward or backward is a
/// sequence of compute-bound and memory-bound kernels).
struct SimComputation {
  std::string workload = "imagenet";
  double time_at_max_clock_s = 0.02;  ///< s, > 0
  std::vector<SimKernelPart> kernels;
};

/// One stage: its forward and backward.
struct SimStage {
  SimComputation forward;
  SimComputation backward;
};

/// @return the profile of `stages` on simulated GPUs of `model`, at every SM clock the model supports
/// (descending). Errors: kNotFound for an unknown workload or one the model's trace lacks (find_workload(),
/// make_trace_workload()); kInvalidArgument for no stages or a time that is not positive and finite; the
/// simulated GPU's errors.
Result<Profile> simulated_stage_profile(const device::sim::GpuModel& model, std::span<const SimStage> stages);

}  // namespace joule::plan
