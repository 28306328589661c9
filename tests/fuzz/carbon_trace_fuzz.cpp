// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the carbon trace reader must never crash, and a parsed trace must be regular.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/carbon/signal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto trace = joule::carbon::CarbonTrace::parse(text, "fuzz.csv");
  if (!trace) {
    return 0;
  }
  const auto& points = trace->points();
  for (size_t i = 1; i < points.size(); ++i) {
    if (points[i].time_unix_s - points[i - 1].time_unix_s != trace->period_s()) {
      std::abort();
    }
  }
  if (!trace->at(trace->start_unix_s()) || trace->at(trace->end_unix_s())) {
    std::abort();
  }
  (void)joule::carbon::CarbonTrace::parse(trace->to_csv(), "again");
  return 0;
}
