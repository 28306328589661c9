// SPDX-License-Identifier: Apache-2.0
// joule/probe/sim_kernel.hpp — the law of `joule probe`'s kernels on a simulated GPU, for anything that needs
// a kernel-shaped workload on one (the simulated runner; Perseus's simulated stage profiles): time and power
// as functions of the SM clock ratio r and the memory clock ratio q, under a power limit (docs/cards.md, "On
// a simulated GPU").
//
//   time  t(r, q) = t0 · (c/r + (1 − c)/q)
//   power P(r, q) = idle + dyn · (m·q + (1 − m)·r³),  dyn = dynamic_share · (largest power limit − idle)
//
// A power limit below P(1, q) lowers r until P(r, q) fits; an SM clock lock caps r; r never goes below the
// model's lowest clock.
#pragma once

#include <memory>
#include <string>

#include "joule/device/sim_gpu.hpp"

namespace joule::probe {

/// One kernel's shape.
struct SimKernelShape {
  double time_at_max_clock_s = 1e-3;  ///< t0: an iteration at the highest clocks, s (> 0)
  double clock_bound_share = 0.95;    ///< c in (0, 1]: the share of the time that follows the SM clock
  double dynamic_share = 0.9;         ///< in (0, 1]: dyn as a share of (largest power limit − idle)
  double clock_free_power = 0.1;  ///< m in [0, 1): the dynamic power's share that follows the memory clock
};

/// The probe's compute kernel (an FMA loop) and memory kernel (a streaming copy).
inline constexpr SimKernelShape kSimComputeKernel{1e-3, 0.95, 0.9, 0.1};
inline constexpr SimKernelShape kSimMemoryKernel{1e-3, 0.15, 0.55, 0.5};

/// @return a workload of `model` that follows `shape` (the shares are not checked: callers validate their
/// own inputs), described as `description`.
std::shared_ptr<const device::sim::Workload> make_sim_kernel_workload(const device::sim::GpuModel& model,
                                                                      const SimKernelShape& shape,
                                                                      std::string description);

}  // namespace joule::probe
