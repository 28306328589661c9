// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: CUDA_VISIBLE_DEVICES parsing and resolution never crash or select a device twice.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "joule/device/visible_devices.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string value(reinterpret_cast<const char*>(data), size);
  if (value.find('\0') != std::string::npos) {
    return 0;  // environment variables cannot hold NUL
  }
  auto visible = joule::device::parse_visible_devices("CUDA_VISIBLE_DEVICES", value.c_str());
  if (!visible) {
    return 0;
  }
  const std::vector<std::string> uuids = {"GPU-0a1b2c3d-0000", "GPU-0a1b9999-1111", "GPU-ffee0000-2222"};
  auto order = joule::device::resolve_visible_devices(*visible, uuids);
  if (order) {
    const std::set<int> unique(order->begin(), order->end());
    if (unique.size() != order->size()) {
      std::abort();
    }
    for (const int index : *order) {
      if (index < 0 || index >= static_cast<int>(uuids.size())) {
        std::abort();
      }
    }
  }
  return 0;
}
