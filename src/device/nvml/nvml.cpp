// SPDX-License-Identifier: Apache-2.0
// Placeholder until the NVML backend lands.
#include "joule/device/nvml.hpp"

namespace joule::device {
Result<std::vector<std::unique_ptr<Gpu>>> open_nvml_gpus(const NvmlOptions&, const VisibleDevices&) {
  return fail(ErrorCode::kNotSupported, "the NVML backend is not built yet");
}
}  // namespace joule::device
