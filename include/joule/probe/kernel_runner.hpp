// SPDX-License-Identifier: Apache-2.0
// joule/probe/kernel_runner.hpp — runs the probe's two kernels on one GPU: a compute-bound FMA loop and a
// memory-bound streaming copy, each a fixed amount of work per iteration.
//
// Two implementations: the simulated runner drives a simulated GPU (joule::device::sim), whose kernels take
// the time and draw the power its settings (power limit, SM clock lock) give them; the CUDA runner
// (cuda_runner.hpp) loads the CUDA driver API at run time and launches PTX kernels embedded in joule.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"

namespace joule::probe {

enum class Kernel {
  kCompute,  ///< FMA loop: time follows the SM clock
  kMemory,   ///< streaming copy: time follows memory bandwidth, little the SM clock
};

/// @return "compute" or "memory".
std::string_view kernel_name(Kernel kernel);

/// What one run did.
struct KernelRunResult {
  int64_t iterations = 0;  ///< iterations completed
  double time_s = 0;       ///< time they took on the runner's clock, s
};

/// Runs kernels on one GPU. Not thread-safe.
class KernelRunner {
 public:
  virtual ~KernelRunner() = default;
  /// @return "simulated" or "cuda".
  virtual std::string name() const = 0;
  /// @return the driver's version as the card records it ("sim" for the simulated runner).
  virtual std::string driver_version() const = 0;
  /// Runs up to `iterations` iterations of `kernel` back to back, calling `between` at least every
  /// `between_interval_s` of run time (between iterations); stops early when `between` returns false.
  /// @return what ran; kDevice (or the driver's error) if a launch fails.
  virtual Result<KernelRunResult> run(Kernel kernel, int64_t iterations, double between_interval_s,
                                      const std::function<bool()>& between) = 0;
};

/// @return the simulated runner for `gpu` if it is a simulated GPU (joule::device::sim::SimulatedGpu); it
/// runs on the GPU's own clock and sets its workload back after each run. nullptr for any other GPU.
std::unique_ptr<KernelRunner> make_simulated_runner(device::Gpu& gpu);

}  // namespace joule::probe
