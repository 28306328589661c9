// SPDX-License-Identifier: Apache-2.0
#include "joule/core/strings.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

namespace joule {

namespace {
char lower_char(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

// Code points that are valid but change how a terminal lays text out (zero-width and bidirectional
// controls, line and paragraph separators, the BOM): shown as bytes, so that a message reads as it prints.
bool invisible_code_point(uint32_t code) {
  return (code >= 0x200B && code <= 0x200F) || (code >= 0x2028 && code <= 0x202E) ||
         (code >= 0x2060 && code <= 0x206F) || code == 0xFEFF;
}

// @return the length of the well-formed UTF-8 sequence at text[pos] if it encodes a visible character from
// U+00A0 on; 0 otherwise (ASCII, C1 controls, truncated, overlong or surrogate sequences).
size_t visible_utf8_length(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  size_t length = 0;
  uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1FU;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0FU;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07U;
  } else {
    return 0;
  }
  if (pos + length > text.size()) {
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(text[pos + i]);
    if ((next & 0xC0U) != 0x80U) {
      return 0;
    }
    code = (code << 6U) | (next & 0x3FU);
  }
  constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};  // below these a form is overlong
  if (code < kSmallest[length] || code < 0xA0 || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF ||
      invisible_code_point(code)) {
    return 0;
  }
  return length;
}

std::string excerpt(std::string_view text, size_t max_chars, bool escape_quotes) {
  std::string out;
  size_t shown = 0;  // characters of output, an escape counting as its length
  size_t pos = 0;
  while (pos < text.size()) {
    const char c = text[pos];
    const auto byte = static_cast<unsigned char>(c);
    std::string piece;
    size_t consumed = 1;
    size_t width = 0;
    if (c == '\\' || (c == '"' && escape_quotes)) {
      piece = {'\\', c};
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (byte >= 0x20 && byte < 0x7F) {
      piece = std::string(1, c);
    } else if (const size_t length = visible_utf8_length(text, pos); length > 0) {
      piece = std::string(text.substr(pos, length));
      consumed = length;
      width = 1;
    } else {
      piece = fmt::format("\\x{:02x}", byte);
    }
    if (width == 0) {
      width = piece.size();
    }
    if (shown + width > max_chars) {
      out += "…";
      return out;
    }
    out += piece;
    shown += width;
    pos += consumed;
  }
  return out;
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

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

std::string printable_excerpt(std::string_view text, size_t max_chars) {
  return excerpt(text, max_chars, false);
}

std::string quoted_excerpt(std::string_view text, size_t max_chars) {
  return fmt::format("\"{}\"", excerpt(text, max_chars, true));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic-programming table: the swap of adjacent characters looks two rows back.
  std::vector<size_t> before(b.size() + 1);
  std::vector<size_t> previous(b.size() + 1);
  std::vector<size_t> current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    previous[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (best == nullptr || distance < best_distance) {
      best = &candidate;
      best_distance = distance;
    }
  }
  if (best != nullptr && best_distance <= std::max<size_t>(1, word.size() / 3)) {
    return *best;
  }
  if (word.size() >= 3) {
    for (const auto& candidate : candidates) {
      if (candidate.size() > word.size() && std::string_view(candidate).substr(0, word.size()) == word) {
        return candidate;
      }
    }
  }
  return std::nullopt;
}

}  // namespace joule
