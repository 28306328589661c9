// SPDX-License-Identifier: Apache-2.0
// joule/core/strings.hpp — small text helpers shared by the parsers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace joule {

/// @return `text` without leading and trailing ASCII white space (space, tab, CR, LF).
std::string_view trim(std::string_view text);

/// @return `text` with ASCII letters in lower case.
std::string to_lower(std::string_view text);

/// @return true if `text` starts with `prefix`, comparing ASCII letters case-insensitively.
bool starts_with_ignoring_case(std::string_view text, std::string_view prefix);

/// @return the value (0–15) of the ASCII hex digit `c` (either case), or -1 if it is not one.
int hex_digit_value(char c);

/// How many characters of quoted input an error message shows by default: enough to recognise a value,
/// short enough that one bad megabyte does not flood the terminal.
inline constexpr size_t kExcerptChars = 40;

/// @return `text` made safe to print inside an error message: printable ASCII and valid UTF-8 (from U+00A0)
/// as they are; a backslash as `\\`; tab, CR and LF as `\t`, `\r`, `\n`; every other byte (control
/// characters, C1 controls, invalid UTF-8) as `\xNN`. Stops after about `max_chars` characters of output and
/// then ends with "…". Every parser quotes its input through this (or quoted_excerpt), so that binary
/// garbage in a file never reaches a terminal raw.
std::string printable_excerpt(std::string_view text, size_t max_chars = kExcerptChars);

/// @return printable_excerpt() in double quotes, with `"` inside escaped as `\"`: e.g. `"ab\x00c"`.
std::string quoted_excerpt(std::string_view text, size_t max_chars = kExcerptChars);

/// @return the edit distance between `a` and `b`: insertions, deletions, substitutions and swaps of two
/// adjacent characters, each counting 1 (optimal string alignment), compared byte by byte.
size_t edit_distance(std::string_view a, std::string_view b);

/// @return the candidate closest to `word` for a "did you mean …?" hint: the one with the smallest
/// edit_distance (the first listed on a tie), if that distance is at most max(1, word.size() / 3) (so a
/// typo is matched, an unrelated word is not), or a candidate that `word` is a prefix of when `word` has at
/// least 3 characters; nullopt otherwise.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace joule
