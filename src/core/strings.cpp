// SPDX-License-Identifier: Apache-2.0
#include "joule/core/strings.hpp"

#include <cctype>

namespace joule {

namespace {
char lower_char(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}
}  // namespace

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) {
    return {};
  }
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    c = lower_char(c);
  }
  return out;
}

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) {
    return false;
  }
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (lower_char(text[i]) != lower_char(prefix[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace joule
