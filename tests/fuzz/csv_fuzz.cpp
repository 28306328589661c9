// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the CSV reader must never crash, and a parsed table must be self-consistent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "joule/core/csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto table = joule::csv::parse(text, "fuzz.csv");
  if (!table) {
    return 0;
  }
  for (size_t r = 0; r < table->row_count(); ++r) {
    const auto row = table->row(r);
    for (size_t c = 0; c < table->header().size(); ++c) {
      (void)row.text(c);
      (void)row.number(c);
      (void)row.integer(c);
    }
  }
  return 0;
}
