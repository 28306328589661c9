// SPDX-License-Identifier: Apache-2.0
// joule/measure/gpu_power_sampler.hpp — a PowerSampler over GPUs named by their framework index (what the
// Python joule.PowerSampler and other callers that speak in GPU indices use), and a sampling run of a given
// length that works on the real and on a virtual clock.
//
//   joule::measure::GpuPowerSampler sampler(set.gpus_ptrs(), clock, std::chrono::milliseconds(100));
//   sampler.sample_for(std::chrono::seconds(5));
//   auto energies = sampler.energy_j(start, end);  // {GPU index, J}
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/power_sampler.hpp"

namespace joule::measure {

/// One PowerSampler over some GPUs, each found by its framework index (device::GpuInfo::index).
class GpuPowerSampler {
 public:
  /// Polls `gpus` (which, and `clock`, must outlive the sampler) every `period`; channel i is gpus[i].
  /// @param max_points bound on stored timeline points per GPU (oldest dropped); 0 = unbounded.
  GpuPowerSampler(const std::vector<device::Gpu*>& gpus, Clock& clock, Nanos period, size_t max_points = 0);

  /// @return the sampler (start(), stop(), timeline(), …), whose channels are in gpu_indices() order.
  PowerSampler& sampler() { return *sampler_; }
  const PowerSampler& sampler() const { return *sampler_; }
  /// @return the framework indices of the sampled GPUs, in channel order.
  const std::vector<int>& gpu_indices() const { return gpu_indices_; }

  /// @return the channel of GPU `gpu_index`; kNotFound "GPU 3 is not sampled (sampled GPUs: 0, 1)".
  Result<size_t> channel(int gpu_index) const;

  /// Samples for `duration` of the clock and returns. On a virtual clock: reads now, advances the clock by
  /// `duration`, reads again. On a real one: runs the background thread for `duration` if it was not
  /// running (stopping it after), and reads once more at the end, so the timeline reaches the end.
  /// @throws joule::Exception as PowerSampler::start().
  void sample_for(Nanos duration);

  /// @return {GPU index, energy over [start, end], J} for every sampled GPU, in channel order; the first
  /// GPU's error of PowerSampler::energy_j() (kNotFound before a reading, kInvalidArgument if end < start).
  Result<std::vector<std::pair<int, double>>> energy_j(Nanos start, Nanos end) const;

 private:
  Clock* clock_;
  std::vector<int> gpu_indices_;
  std::unique_ptr<PowerSampler> sampler_;
};

}  // namespace joule::measure
