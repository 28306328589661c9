// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the daemon's token-file parser must never crash, never quote a token in a message, and
// find every token it accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/daemon/tokens.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto table = joule::daemon::TokenTable::parse(text, "fuzz.tokens");
  if (!table) {
    // No word of 32 characters or more (what could be a token) may reach a message.
    const std::string& message = table.error().message();
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find_first_of(" \t\r\n", start);
      end = end == std::string_view::npos ? text.size() : end;
      if (end - start >= 32 && message.find(text.substr(start, end - start)) != std::string::npos) {
        std::abort();
      }
      start = end + 1;
    }
    return 0;
  }
  if (table->size() == 0) {
    std::abort();
  }
  (void)table->describe();
  (void)table->find(text);
  return 0;
}
