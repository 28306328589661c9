// SPDX-License-Identifier: Apache-2.0
// joule/http/url.hpp — the URLs of joule's outgoing requests: http:// or https://, a host, an optional port
// and an optional path prefix, parsed once for every client (carbon providers, the client of joule serve).
#pragma once

#include <string>
#include <string_view>

#include <tl/expected.hpp>

namespace joule::http {

/// A parsed http:// or https:// URL.
struct Url {
  std::string scheme;       ///< "http" or "https"
  std::string host;         ///< a name or an address; an IPv6 address without its brackets
  int port = 0;             ///< as written, else 80 (http) or 443 (https)
  std::string origin;       ///< "scheme://authority" as written (with the port if one was written)
  std::string path_prefix;  ///< the path after the authority, without trailing slashes; may be empty

  /// @return whether requests go over TLS (https).
  bool tls() const { return scheme == "https"; }
};

/// Why a text is not a URL.
struct UrlError {
  enum class Kind {
    kScheme,  ///< not http:// or https://
    kHost,    ///< no host (or user information, a query or a fragment where the host should be)
    kPort,    ///< a port that is not a number from 1 to 65535
  };
  Kind kind = Kind::kScheme;
  /// A phrase for "URL '<text>' <message>": "must start with http:// or https://", "has no host",
  /// "has a port that is not a number from 1 to 65535: '99999'".
  std::string message;
};

/// @return `text` parsed: scheme, host (a bracketed IPv6 address unbracketed), port and path prefix (the
/// rest of the path, trailing slashes dropped; a query is kept in it as written). Nothing is resolved.
tl::expected<Url, UrlError> parse_url(std::string_view text);

}  // namespace joule::http
