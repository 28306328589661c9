// SPDX-License-Identifier: Apache-2.0
// Placeholder until the RAPL backend lands.
#include "joule/device/rapl.hpp"

namespace joule::device {
Result<std::vector<std::unique_ptr<Cpu>>> open_rapl_cpus(const RaplOptions&) {
  return fail(ErrorCode::kNotSupported, "the RAPL backend is not built yet");
}
}  // namespace joule::device
