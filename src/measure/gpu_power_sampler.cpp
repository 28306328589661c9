// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/gpu_power_sampler.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace joule::measure {

GpuPowerSampler::GpuPowerSampler(const std::vector<device::Gpu*>& gpus, Clock& clock, Nanos period,
                                 size_t max_points)
    : clock_(&clock), sampler_(std::make_unique<PowerSampler>(gpus, clock, period, max_points)) {
  gpu_indices_.reserve(gpus.size());
  for (const auto* gpu : gpus) {
    gpu_indices_.push_back(gpu->info().index);
  }
}

Result<size_t> GpuPowerSampler::channel(int gpu_index) const {
  const auto found = std::find(gpu_indices_.begin(), gpu_indices_.end(), gpu_index);
  if (found == gpu_indices_.end()) {
    return fail(ErrorCode::kNotFound, "GPU {} is not sampled (sampled GPUs: {})", gpu_index,
                fmt::join(gpu_indices_, ", "));
  }
  return static_cast<size_t>(found - gpu_indices_.begin());
}

void GpuPowerSampler::sample_for(Nanos duration) {
  if (clock_->is_virtual()) {
    // No thread: nothing would run while the virtual clock jumps.
    sampler_->sample_now();
    clock_->sleep_for(duration);
    sampler_->sample_now();
    return;
  }
  const bool started = !sampler_->running();
  if (started) {
    sampler_->start();
  }
  clock_->sleep_for(duration);
  sampler_->sample_now();
  if (started) {
    sampler_->stop();
  }
}

Result<std::vector<std::pair<int, double>>> GpuPowerSampler::energy_j(Nanos start, Nanos end) const {
  std::vector<std::pair<int, double>> energies;
  energies.reserve(gpu_indices_.size());
  for (size_t channel = 0; channel < gpu_indices_.size(); ++channel) {
    energies.emplace_back(gpu_indices_[channel], JOULE_TRY(sampler_->energy_j(channel, start, end)));
  }
  return energies;
}

}  // namespace joule::measure
