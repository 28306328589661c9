// SPDX-License-Identifier: Apache-2.0
// Placeholder until the ROCm SMI backend lands.
#include "joule/device/rocm.hpp"

namespace joule::device {
Result<std::vector<std::unique_ptr<Gpu>>> open_rocm_gpus(const RocmOptions&, const VisibleDevices&) {
  return fail(ErrorCode::kNotSupported, "the ROCm SMI backend is not built yet");
}
}  // namespace joule::device
