// SPDX-License-Identifier: Apache-2.0
// The GPU configuration a batch-size job is registered with, read from the GPUs it runs on: the one rule that
// `joule job register` and the Python BatchSizeOptimizer share (as Zeus's client computes it).
#pragma once

#include <optional>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/optimize/batch_size.hpp"

namespace joule::optimize::batch_size {

/// The GpuConfig of a job that runs on `gpus` (GPU 0 first), as Zeus's BatchSizeOptimizer registers it:
/// gpu_model = GPU 0's name, number_of_gpus = the GPUs' count, and max_power = GPU 0's largest power limit in
/// whole W (rounded down) × the count.
/// @param max_power_w  given (W): used as max_power as is, and GPU 0's limits are not read; unset: computed.
/// @return kInvalidArgument if `gpus` is empty or holds a null pointer; GPU 0's power_limit_constraints()
/// error, unchanged. The result is not validated (GpuConfig::from_json/validate() do that).
Result<GpuConfig> gpu_config_of(const std::vector<device::Gpu*>& gpus,
                                std::optional<double> max_power_w = std::nullopt);

}  // namespace joule::optimize::batch_size
