// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the JSON bodies of Electricity Maps, WattTime and the UK API must never crash the
// parsers, and every point they accept is a finite, non-negative intensity. The first byte picks the
// provider ('e', 'w', 'u'; anything else tries all three).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/carbon/signal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (const std::string_view provider : {"electricitymaps", "watttime", "uk"}) {
    if (data[0] != static_cast<uint8_t>(provider[0]) &&
        (data[0] == 'e' || data[0] == 'w' || data[0] == 'u')) {
      continue;
    }
    const auto points = joule::carbon::parse_provider_body(provider, body);
    if (!points) {
      continue;
    }
    for (const auto& point : *points) {
      if (!(point.intensity_g_per_kwh >= 0) || !std::isfinite(point.intensity_g_per_kwh)) {
        std::abort();
      }
    }
  }
  return 0;
}
