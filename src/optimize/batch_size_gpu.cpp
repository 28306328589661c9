// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/batch_size_gpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace joule::optimize::batch_size {

Result<GpuConfig> gpu_config_of(const std::vector<device::Gpu*>& gpus, std::optional<double> max_power_w) {
  if (gpus.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a batch-size job's GPU configuration needs at least one GPU");
  }
  if (std::ranges::any_of(gpus, [](const device::Gpu* gpu) { return gpu == nullptr; })) {
    throw Exception(ErrorCode::kInvalidArgument, "gpu_config_of: a GPU pointer is null");
  }
  device::Gpu& first = *gpus.front();
  GpuConfig config;
  config.number_of_gpus = static_cast<int64_t>(gpus.size());
  config.gpu_model = first.info().name;
  if (max_power_w) {
    config.max_power = *max_power_w;
  } else {
    const device::PowerLimitConstraints constraints = JOULE_TRY(first.power_limit_constraints());
    // Whole W, as Zeus's client: int(max power limit in W) × number of GPUs.
    config.max_power = std::floor(constraints.max_mw / 1000.0) * static_cast<double>(config.number_of_gpus);
  }
  return config;
}

}  // namespace joule::optimize::batch_size
