// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the Prometheus exposition parser (what `joule infer govern` reads from an engine) must
// never crash, and what it keeps must read back as an engine's figures or a clear error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "joule/govern/engine.hpp"
#include "joule/metrics/exposition.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto exposition = joule::metrics::parse_exposition(text, "fuzz");
  if (!exposition) {
    return 0;
  }
  for (const auto& family : exposition->families) {
    if (family.type == joule::metrics::MetricType::kHistogram) {
      if (const auto histogram = joule::metrics::read_histogram(family); histogram && *histogram) {
        (void)(*histogram)->quantile(0.99);
      }
    } else {
      (void)joule::metrics::read_sum(family);
    }
  }
  for (const auto kind : {joule::govern::EngineKind::kVllm, joule::govern::EngineKind::kSglang,
                          joule::govern::EngineKind::kTgi}) {
    (void)joule::govern::read_snapshot(*exposition, joule::govern::engine_metric_names(kind), 0);
  }
  (void)joule::govern::detect_engine(*exposition, "fuzz");
  return 0;
}
