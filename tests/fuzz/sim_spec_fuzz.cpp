// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: sim specs (--sim / JOULE_SIM) never crash; an accepted spec always opens.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/device/sim_gpu.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = joule::device::sim::parse_spec(text);
  if (!spec) {
    return 0;
  }
  auto clock = std::make_shared<joule::VirtualClock>();
  auto gpus = joule::device::sim::open_sim_gpus(*spec, clock);
  if (!gpus || static_cast<int>(gpus->size()) != spec->count) {
    std::abort();
  }
  return 0;
}
