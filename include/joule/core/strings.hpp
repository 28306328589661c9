// SPDX-License-Identifier: Apache-2.0
// joule/core/strings.hpp — small text helpers shared by the parsers.
#pragma once

#include <string>
#include <string_view>

namespace joule {

/// @return `text` without leading and trailing ASCII white space (space, tab, CR, LF).
std::string_view trim(std::string_view text);

/// @return `text` with ASCII letters in lower case.
std::string to_lower(std::string_view text);

/// @return true if `text` starts with `prefix`, comparing ASCII letters case-insensitively.
bool starts_with_ignoring_case(std::string_view text, std::string_view prefix);

}  // namespace joule
