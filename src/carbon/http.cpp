// SPDX-License-Identifier: Apache-2.0
#include "carbon/http.hpp"

#include <cmath>

#include <fmt/format.h>
#include <httplib.h>

#include "joule/core/json.hpp"
#include "joule/http/capped_body.hpp"
#include "joule/http/errors.hpp"

namespace joule::carbon::detail {

Result<BaseUrl> parse_base_url(std::string_view url, std::string_view provider) {
  const size_t scheme_end = url.find("://");
  const std::string_view scheme = scheme_end == std::string_view::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return fail(ErrorCode::kInvalidArgument, "{}: base URL '{}' must start with http:// or https://",
                provider, url);
  }
  const std::string_view rest = url.substr(scheme_end + 3);
  const size_t slash = rest.find('/');
  const std::string_view host = rest.substr(0, slash);
  if (host.empty()) {
    return fail(ErrorCode::kInvalidArgument, "{}: base URL '{}' has no host", provider, url);
  }
  BaseUrl base{fmt::format("{}://{}", scheme, host), ""};
  if (slash != std::string_view::npos) {
    base.path_prefix = std::string(rest.substr(slash));
    while (!base.path_prefix.empty() && base.path_prefix.back() == '/') {
      base.path_prefix.pop_back();
    }
  }
  return base;
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
  httplib::Client client(base.origin);
  const auto whole_s = static_cast<time_t>(std::floor(request.timeout_s));
  const auto rest_us = static_cast<time_t>((request.timeout_s - std::floor(request.timeout_s)) * 1e6);
  client.set_connection_timeout(whole_s, rest_us);
  client.set_read_timeout(whole_s, rest_us);
  client.set_write_timeout(whole_s, rest_us);
  if (request.basic_auth) {
    client.set_basic_auth(request.basic_auth->first, request.basic_auth->second);
  }
  if (!request.bearer_token.empty()) {
    client.set_bearer_token_auth(request.bearer_token);
  }
  httplib::Request get;
  get.method = "GET";
  get.path = path;
  for (const auto& [name, value] : request.headers) {
    get.headers.emplace(name, value);
  }
  get.headers.emplace("Accept", "application/json");
  // The body is read within the cap: an endless answer stops there.
  http::CappedBody body(request.max_response_bytes);
  body.attach(get);
  httplib::Response response;
  auto error = httplib::Error::Success;
  if (!client.send(get, response, error)) {
    if (body.exceeded()) {
      return fail(ErrorCode::kIo, "{}: GET {}: {}", provider, path, body.message());
    }
    return fail(ErrorCode::kIo, "{}: cannot reach {}{}: {}", provider, base.origin, path,
                http::describe_transport_error(error));
  }
  if (response.status < 200 || response.status >= 300) {
    const ErrorCode code = response.status == 401 || response.status == 403 ? ErrorCode::kPermissionDenied
                           : response.status == 404                         ? ErrorCode::kNotFound
                                                                            : ErrorCode::kIo;
    return fail(code, "{}: GET {}: HTTP {}: {}", provider, path, response.status,
                error_body_message(body.body()));
  }
  auto json = parse_json(body.body());
  if (!json) {
    return fail(ErrorCode::kParse, "{}: GET {}: the response {}", provider, path,
                describe_json_error(json.error(), body.body()));
  }
  return std::move(*json);
}

}  // namespace joule::carbon::detail
