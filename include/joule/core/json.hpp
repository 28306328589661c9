// SPDX-License-Identifier: Apache-2.0
// joule/core/json.hpp — JSON text from untrusted sources (HTTP bodies, socket lines, stored documents):
// nesting depth bounded while parsing, numbers that do not fit a double refused with the field named, and
// error messages that quote at most a short, printable excerpt of the input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

namespace joule {

/// The deepest nesting parse_json() accepts by default: far more than any joule document needs (the deepest
/// is 4 levels), far less than what makes a recursive dump(), comparison or destructor overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

/// Why a JSON text was refused.
struct JsonError {
  enum class Kind {
    kSyntax,            ///< not JSON
    kTooDeep,           ///< nested deeper than the limit
    kNumberOutOfRange,  ///< a number no double holds (e.g. 1e999)
  };
  Kind kind = Kind::kSyntax;
  size_t byte = 0;      ///< 0-based offset in the text where the problem was found
  std::string path;     ///< where in the document: "" (the top), "rows[3].time_s"
  std::string message;  ///< one line, e.g. "rows[3].time_s: the number 1e999 is out of range (…)"
};

/// Parses `text`, refusing (without recursing on it) a document nested deeper than `max_depth` levels and
/// numbers outside a double's range. Duplicate keys keep the last value, as nlohmann::json::parse() does.
/// @return the value, or what is wrong with the text (never throws for bad input).
tl::expected<nlohmann::json, JsonError> parse_json(std::string_view text, int max_depth = kMaxJsonDepth);

/// @return `value` described for an error message in at most about `max_chars` characters: the JSON text
/// itself if it is short (quoted through printable_excerpt(), joule/core/strings.hpp) ("12.5", "\"abc\"",
/// "[1,2]"), else its type and an excerpt ("an object of 3 keys
/// {\"a\":[1,2,…", "a string of 12000 bytes \"abcd…\""). Safe on any value that parse_json() returns.
std::string describe_json(const nlohmann::json& value, size_t max_chars = 60);

/// How many characters of a server's error text error_body_message() quotes by default.
inline constexpr size_t kErrorBodyChars = 200;

/// @return the message an HTTP API put in an error body, safe to print on one line: the string of "error",
/// "message" or "detail" (or their "message" field: {"error": {"message": "…"}}, as OpenAI answers), else
/// the body itself, either way through printable_excerpt() (joule/core/strings.hpp: control bytes, CR, LF
/// and NUL escaped, at most about `max_chars` characters, "…" after a cut); "empty body" for an empty body.
/// The body is parsed with parse_json() (a body nested too deep is quoted as text, never recursed into).
std::string error_body_message(std::string_view body, size_t max_chars = kErrorBodyChars);

/// @return error_body_message() of a body already parsed: the message its "error", "message" or "detail"
/// holds, as a printable excerpt; else describe_json() of the first of those fields present ("3"), else of
/// the body.
std::string parsed_error_body_message(const nlohmann::json& body, size_t max_chars = kErrorBodyChars);

/// @return why parse_json() refused `text`, as a phrase for "the response …": "is not JSON: \"<html>…\""
/// (a syntax error: the text's start, quoted through quoted_excerpt()), "is JSON nested deeper than 64
/// levels" (`max_depth`, the limit it was parsed with), or "is not usable JSON: <error.message>" (a number
/// no double holds, with its field).
std::string describe_json_error(const JsonError& error, std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace joule
