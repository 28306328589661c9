// SPDX-License-Identifier: Apache-2.0
// joule/http/errors.hpp — what went wrong with an outgoing HTTP request, in words a person can act on: the
// one description of a transport failure (cpp-httplib's error codes) and the safe excerpt of a server's
// error body, shared by every HTTP client in joule (carbon providers, the client of joule serve, infer
// bench).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

// cpp-httplib's error code, declared here so that this header needs no httplib.h (its values are its own).
namespace httplib {
enum class Error;  // its definition (in httplib.h) has the same, implicit, underlying type: int
}  // namespace httplib

namespace joule::http {

/// @return what a failed request's `error` means, as a phrase for "cannot reach <url>: <phrase>", e.g.
/// "connection refused or host unreachable" (Connection), "TLS handshake failed: is the server plain
/// http?" (SSLConnection: an https:// URL aimed at a plain-http server, the usual cause), "the connection
/// closed before a complete response arrived" (Read). Never httplib's one-word name.
std::string describe_transport_error(httplib::Error error);

/// How many characters of a server's error text a message quotes by default.
inline constexpr size_t kServerTextChars = 200;

/// @return the message an HTTP API put in an error body, safe to print on one line: error_body_message()
/// (joule/core/json.hpp): the string of "error", "message" or "detail" (or their "message" field), else the
/// body itself, either way through printable_excerpt() (control bytes, CR, LF and NUL escaped, at most
/// about `max_chars` characters, "…" after a cut); "empty body" for an empty body. The body is parsed with
/// the depth-limited parse_json().
std::string server_error_text(std::string_view body, size_t max_chars = kServerTextChars);

/// @return `bytes` for a message: "8 MiB", "64 KiB" when exact, else "65537 bytes".
std::string format_byte_count(size_t bytes);

}  // namespace joule::http
