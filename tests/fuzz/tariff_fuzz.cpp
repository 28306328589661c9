// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the hourly tariff reader must never crash, and a parsed tariff has 24 valid prices.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/carbon/price.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tariff = joule::carbon::HourlyTariff::parse(text, "fuzz.csv");
  if (!tariff) {
    return 0;
  }
  for (const double price : tariff->prices_usd_per_kwh()) {
    if (!(price >= 0) || !std::isfinite(price)) {
      std::abort();
    }
  }
  return 0;
}
