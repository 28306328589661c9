// SPDX-License-Identifier: Apache-2.0
// The simulated kernel runner: the probe's two kernels as workloads of a simulated GPU, whose time and power
// follow the GPU's power limit and SM clock lock (docs/cards.md, "On a simulated GPU").
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/probe/kernel_runner.hpp"
#include "joule/probe/sim_kernel.hpp"

namespace joule::probe {

std::string_view kernel_name(Kernel kernel) {
  return kernel == Kernel::kCompute ? "compute" : "memory";
}

namespace {

class SimKernelWorkload final : public device::sim::Workload {
 public:
  SimKernelWorkload(const device::sim::GpuModel& model, const SimKernelShape& shape, std::string description)
      : shape_(shape),
        description_(std::move(description)),
        idle_w_(model.idle_power_w),
        dynamic_w_(shape_.dynamic_share *
                   std::max(1.0, model.max_power_limit_mw / 1000.0 - model.idle_power_w)),
        max_clock_mhz_(std::max<double>(1, model.max_sm_clock_mhz)),
        min_ratio_(std::clamp(model.min_sm_clock_mhz / max_clock_mhz_, 0.05, 1.0)) {}

  std::string description() const override { return description_; }

  device::sim::OperatingPoint at(double power_limit_w,
                                 std::optional<double> locked_sm_clock_mhz) const override {
    return at_memory_clock(power_limit_w, locked_sm_clock_mhz, 1.0);
  }
  device::sim::OperatingPoint at_memory_clock(double power_limit_w, std::optional<double> locked_sm_clock_mhz,
                                              double memory_clock_ratio) const override {
    const double m = shape_.clock_free_power;
    const double q = std::clamp(memory_clock_ratio, 1e-3, 1.0);
    double ratio = 1;
    // P(r, q) ≤ limit ⇔ m·q + (1 − m)·r³ ≤ needed
    const double needed = (power_limit_w - idle_w_) / dynamic_w_;
    if (needed < m * q + (1 - m)) {
      ratio = std::cbrt(std::max(0.0, needed - m * q) / (1 - m));
    }
    if (locked_sm_clock_mhz) {
      ratio = std::min(ratio, *locked_sm_clock_mhz / max_clock_mhz_);
    }
    ratio = std::clamp(ratio, min_ratio_, 1.0);
    const double c = shape_.clock_bound_share;
    device::sim::OperatingPoint point;
    point.power_w = idle_w_ + dynamic_w_ * (m * q + (1 - m) * ratio * ratio * ratio);
    // (At q = 1 exactly the expression of cards made before the memory clock, so they stay bit-identical.)
    point.iteration_time_s =
        shape_.time_at_max_clock_s * (q == 1.0 ? c / ratio + 1 - c : c / ratio + (1 - c) / q);
    point.sm_clock_mhz = ratio * max_clock_mhz_;
    return point;
  }

 private:
  SimKernelShape shape_;
  std::string description_;
  double idle_w_;
  double dynamic_w_;
  double max_clock_mhz_;
  double min_ratio_;
};

class SimulatedRunner final : public KernelRunner {
 public:
  explicit SimulatedRunner(device::sim::SimulatedGpu& gpu)
      : gpu_(gpu),
        compute_(make_sim_kernel_workload(gpu.model(), kSimComputeKernel, "joule probe's compute kernel")),
        memory_(make_sim_kernel_workload(gpu.model(), kSimMemoryKernel, "joule probe's memory kernel")) {}

  std::string name() const override { return "simulated"; }
  std::string driver_version() const override { return "sim"; }

  Result<KernelRunResult> run(Kernel kernel, int64_t iterations, double between_interval_s,
                              const std::function<bool()>& between) override {
    const auto previous = gpu_.workload();
    gpu_.set_workload(kernel == Kernel::kCompute ? compute_ : memory_);
    gpu_.set_busy(true);
    Clock& clock = gpu_.clock();
    const Nanos start = clock.now();
    KernelRunResult result;
    double busy_s = 0;  // the kernels' time so far: each chunk ends at start + busy_s, so that on a real
                        // clock the sleeps' overshoot does not add up
    while (result.iterations < iterations) {
      // The settings may change in `between`, so each chunk takes the iteration time in force.
      const double iteration_s = std::max(1e-9, gpu_.operating_point().iteration_time_s);
      const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(between_interval_s / iteration_s), 1,
                                                iterations - result.iterations);
      busy_s += static_cast<double>(chunk) * iteration_s;
      const Nanos remaining = start + from_seconds(busy_s) - clock.now();
      if (remaining > Nanos(0)) {
        clock.sleep_for(remaining);
      }
      result.iterations += chunk;
      if (between && !between()) {
        break;
      }
    }
    result.time_s = to_seconds(clock.now() - start);
    gpu_.set_workload(previous);
    return result;
  }

 private:
  device::sim::SimulatedGpu& gpu_;
  std::shared_ptr<const device::sim::Workload> compute_;
  std::shared_ptr<const device::sim::Workload> memory_;
};

}  // namespace

std::shared_ptr<const device::sim::Workload> make_sim_kernel_workload(const device::sim::GpuModel& model,
                                                                      const SimKernelShape& shape,
                                                                      std::string description) {
  return std::make_shared<SimKernelWorkload>(model, shape, std::move(description));
}

std::unique_ptr<KernelRunner> make_simulated_runner(device::Gpu& gpu) {
  auto* simulated = dynamic_cast<device::sim::SimulatedGpu*>(&gpu);
  if (simulated == nullptr) {
    return nullptr;
  }
  return std::make_unique<SimulatedRunner>(*simulated);
}

}  // namespace joule::probe
