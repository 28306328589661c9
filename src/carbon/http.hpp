// SPDX-License-Identifier: Apache-2.0
// Private: the HTTP GET + JSON plumbing the carbon-intensity providers share (over joule/http's Connection).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/http/connection.hpp"
#include "joule/http/url.hpp"

namespace joule::carbon::detail {

/// A provider's base URL: its origin ("https://host:port") and path prefix ("/v3", no trailing slash).
using BaseUrl = http::Url;

/// @return the parts of `url` (http:// or https://, http::parse_url()), or kInvalidArgument naming
/// `provider` and the URL.
Result<BaseUrl> parse_base_url(std::string_view url, std::string_view provider);

/// @return `text` percent-encoded for a query value or path segment (unreserved characters kept).
std::string url_encode(std::string_view text);

struct HttpGet {
  std::string path;  // after the prefix, starting with '/', query included
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<std::pair<std::string, std::string>> basic_auth;  // user, password
  std::string bearer_token;
  /// The whole request (connecting, sending, the whole response), s.
  double timeout_s = 30;
  /// The most the body may hold, decoded; a larger answer is refused while reading it. 8 MiB is far above
  /// any provider's answer (a month of 5-minute points is about 1 MB).
  size_t max_response_bytes = http::kDefaultMaxResponseBytes;
};

/// Sends the GET and parses the body as JSON (with the depth-limited parse_json(), joule/core/json.hpp).
/// Errors name the provider and "GET <prefix><path>" (never a credential): kIo when the server cannot be
/// reached or gave no complete answer within timeout_s (in Connection's words) or its answer is larger
/// than max_response_bytes; for a
/// non-2xx status kPermissionDenied (401, 403), kNotFound (404) or kIo, quoting the body's
/// "error"/"message" (or the body's start) as a printable excerpt (error_body_message()); kParse for a body
/// that is not JSON, is nested too deep or holds a number no double holds.
Result<nlohmann::json> get_json(const BaseUrl& base, const HttpGet& request, std::string_view provider);

/// @return a kParse error "<provider>: GET <what>: <problem>" for a response of an unexpected shape.
Error shape_error(std::string_view provider, std::string_view what, std::string_view problem);

}  // namespace joule::carbon::detail
