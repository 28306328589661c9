// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optimize/batch_size_internal.hpp"

namespace joule::optimize::batch_size::detail {

std::string python_float_repr(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? "inf" : "-inf";
  }
  // Shortest round-trip digits in scientific form ("d.ddde±XX") are exactly the digits Python's repr uses;
  // only the layout differs.
  std::array<char, 64> buffer{};
  const auto [end, ec] =
      std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::scientific);
  const std::string text(buffer.data(), end);
  const size_t e_pos = text.find('e');
  std::string digits;
  bool negative = false;
  for (size_t i = 0; i < e_pos; ++i) {
    if (text[i] == '-') {
      negative = true;
    } else if (text[i] != '.') {
      digits.push_back(text[i]);
    }
  }
  const int exponent = std::atoi(text.c_str() + e_pos + 1);
  const int decimal_point = exponent + 1;  // value = 0.digits × 10^decimal_point
  const int num_digits = static_cast<int>(digits.size());
  std::string out = negative ? "-" : "";
  if (decimal_point <= -4 || decimal_point > 16) {
    out += digits[0];
    if (num_digits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decimal_point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decimal_point), '0');
    out += digits;
  } else if (decimal_point >= num_digits) {
    out += digits;
    out.append(static_cast<size_t>(decimal_point - num_digits), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decimal_point));
    out += '.';
    out += digits.substr(static_cast<size_t>(decimal_point));
  }
  return out;
}

std::string python_int_list(const std::vector<int64_t>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

std::string python_str_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : text) {
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

}  // namespace joule::optimize::batch_size::detail
