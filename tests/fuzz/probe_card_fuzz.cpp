// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: frontier cards (joule/probe/card.hpp) never crash the reader; an accepted card renders
// and reads back to the same card.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/probe/card.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto card = joule::probe::parse_card(text, "card.json");
  if (!card) {
    if (card.error().message().rfind("card.json: ", 0) != 0) {
      std::abort();  // every refusal names the card
    }
    return 0;
  }
  const std::string rendered = joule::probe::render_card(*card);
  const auto again = joule::probe::parse_card(rendered, "card.json");
  if (!again || joule::probe::render_card(*again) != rendered) {
    std::abort();
  }
  return 0;
}
