// SPDX-License-Identifier: Apache-2.0
#include "joule/http/url.hpp"

#include <charconv>
#include <system_error>

#include <fmt/format.h>

namespace joule::http {

tl::expected<Url, UrlError> parse_url(std::string_view text) {
  using Kind = UrlError::Kind;
  const size_t scheme_end = text.find("://");
  Url url;
  url.scheme = std::string(scheme_end == std::string_view::npos ? "" : text.substr(0, scheme_end));
  if (url.scheme != "http" && url.scheme != "https") {
    return tl::make_unexpected(UrlError{Kind::kScheme, "must start with http:// or https://"});
  }
  const std::string_view rest = text.substr(scheme_end + 3);
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string_view host = authority;
  std::string_view port;
  bool port_written = false;
  if (authority.starts_with('[')) {
    // [IPv6 address] or [IPv6 address]:port
    const size_t close = authority.find(']');
    const std::string_view after = close == std::string_view::npos ? "" : authority.substr(close + 1);
    if (close == std::string_view::npos || (!after.empty() && after.front() != ':')) {
      return tl::make_unexpected(UrlError{Kind::kHost, "has no host"});
    }
    host = authority.substr(1, close - 1);
    port_written = !after.empty();
    port = port_written ? after.substr(1) : after;
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    port_written = true;
  }
  if (host.empty() || host.find_first_of("@?#") != std::string_view::npos) {
    return tl::make_unexpected(UrlError{Kind::kHost, "has no host"});
  }
  url.host = std::string(host);
  url.port = url.tls() ? 443 : 80;
  if (port_written) {
    int number = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 1 ||
        number > 65535) {
      return tl::make_unexpected(
          UrlError{Kind::kPort, fmt::format("has a port that is not a number from 1 to 65535: '{}'", port)});
    }
    url.port = number;
  }
  url.origin = fmt::format("{}://{}", url.scheme, authority);
  if (slash != std::string_view::npos) {
    url.path_prefix = std::string(rest.substr(slash));
    while (!url.path_prefix.empty() && url.path_prefix.back() == '/') {
      url.path_prefix.pop_back();
    }
  }
  return url;
}

}  // namespace joule::http
