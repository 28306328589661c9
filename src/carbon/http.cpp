// SPDX-License-Identifier: Apache-2.0
#include "carbon/http.hpp"

#include <cctype>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"

namespace joule::carbon::detail {

Result<BaseUrl> parse_base_url(std::string_view url, std::string_view provider) {
  auto parsed = http::parse_url(url);
  if (!parsed) {
    return fail(ErrorCode::kInvalidArgument, "{}: base URL '{}' {}", provider, url, parsed.error().message);
  }
  return std::move(*parsed);
}

std::string url_encode(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

Error shape_error(std::string_view provider, std::string_view what, std::string_view problem) {
  return Error(ErrorCode::kParse, fmt::format("{}: GET {}: {}", provider, what, problem));
}

Result<nlohmann::json> get_json(const BaseUrl& base, const HttpGet& request, std::string_view provider) {
  const std::string path = base.path_prefix + request.path;
  http::Headers headers = request.headers;
  if (request.basic_auth) {
    headers.push_back(http::basic_authorization(request.basic_auth->first, request.basic_auth->second));
  }
  if (!request.bearer_token.empty()) {
    headers.push_back(http::bearer_authorization(request.bearer_token));
  }
  headers.emplace_back("Accept", "application/json");
  http::RequestLimits limits;
  limits.timeout_s = request.timeout_s;
  limits.connect_timeout_s = request.timeout_s;
  // The body is read within the cap: an endless answer stops there.
  limits.max_response_bytes = request.max_response_bytes;
  http::Connection connection(base);
  const auto response = connection.get(path, headers, limits);
  if (!response) {
    if (response.error().kind == http::Failure::Kind::kTooLarge) {
      return fail(ErrorCode::kIo, "{}: GET {}: {}", provider, path, response.error().message);
    }
    return fail(ErrorCode::kIo, "{}: cannot reach {}{}: {}", provider, base.origin, path,
                response.error().message);
  }
  if (response->status < 200 || response->status >= 300) {
    const ErrorCode code = response->status == 401 || response->status == 403 ? ErrorCode::kPermissionDenied
                           : response->status == 404                          ? ErrorCode::kNotFound
                                                                              : ErrorCode::kIo;
    return fail(code, "{}: GET {}: HTTP {}: {}", provider, path, response->status,
                error_body_message(response->body));
  }
  auto json = parse_json(response->body);
  if (!json) {
    return fail(ErrorCode::kParse, "{}: GET {}: the response {}", provider, path,
                describe_json_error(json.error(), response->body));
  }
  return std::move(*json);
}

}  // namespace joule::carbon::detail
