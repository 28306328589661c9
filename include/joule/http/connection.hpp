// SPDX-License-Identifier: Apache-2.0
// joule/http/connection.hpp — bounded outgoing HTTP/1.1 requests, over plain TCP (http://) or TLS
// (https://): one whole-request deadline (connecting, sending, the status line, the headers and the body,
// however slowly the server trickles them) and one cap on what a response may hold, applied while reading,
// so that no server can make a client hang or buffer without bound.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tl/expected.hpp>

#include "joule/http/url.hpp"

namespace joule::http {

/// The cap on a response by default: far above any JSON answer joule reads (a completion of 100,000 tokens
/// is well under 1 MiB), small enough that 256 of them in flight at once fit in memory.
inline constexpr size_t kDefaultMaxResponseBytes = size_t{8} << 20;

/// The bounds of one request.
struct RequestLimits {
  /// The whole request, in seconds: connecting, sending, and receiving the status line, the headers and
  /// the whole body. A server that sends one byte a second is cut off here, not after each byte.
  double timeout_s = 300;
  /// Connecting (TCP), in seconds, within timeout_s.
  double connect_timeout_s = 10;
  /// The most a response's body may hold, in bytes, as sent and once decoded (Content-Encoding undone); the
  /// status line and header fields may add 64 KiB on the wire. Applied while reading: a Content-Length over
  /// it is refused before the body, and nothing past it is read.
  size_t max_response_bytes = kDefaultMaxResponseBytes;
};

/// Header fields: (name, value) pairs.
using Headers = std::vector<std::pair<std::string, std::string>>;

/// Receives a successful (2xx) response's body piece by piece as it is read (decoded), instead of its being
/// held in Response::body: a streamed answer (server-sent events). Runs on the requesting thread, within the
/// request's deadline and size cap (the pieces count against max_response_bytes as a held body would).
/// @return false to stop reading: the request then fails with Failure::Kind::kStopped.
using BodySink = std::function<bool(std::string_view piece)>;

/// A complete response.
struct Response {
  int status = 0;
  std::string body;  ///< decoded; at most max_response_bytes
  Headers headers;   ///< the response's header fields, in the order received

  /// @return the value of the first header field called `name` (case-insensitive), or "" if there is none.
  std::string header(std::string_view name) const;
};

/// Why a request got no complete response.
struct Failure {
  enum class Kind {
    kConnect,   ///< refused, unreachable, or the name did not resolve
    kTimeout,   ///< the request was not done within timeout_s (or connecting within connect_timeout_s)
    kTooLarge,  ///< the response is larger than max_response_bytes
    kTls,       ///< the TLS handshake or the server's certificate failed
    kSend,      ///< the request could not be sent
    kReceive,   ///< the connection closed early, or what came back is not HTTP
    kStopped,   ///< the BodySink asked to stop reading (it knows why)
    kOther,
  };
  Kind kind = Kind::kOther;
  /// A printable phrase for "<method> <url>: <message>", e.g. "no complete response within 0.2 s" or
  /// "the response is larger than 64 KiB, the most accepted".
  std::string message;
};

/// How a connection checks the server, over TLS.
struct ConnectionOptions {
  /// A PEM file of the certificate authorities trusted for https:// instead of the system's (a private CA,
  /// tests); empty: the system's (OpenSSL's default paths).
  std::string ca_cert_file;
};

/// @return the header field of HTTP basic authentication: ("Authorization", "Basic base64(user:password)").
std::pair<std::string, std::string> basic_authorization(std::string_view user, std::string_view password);
/// @return ("Authorization", "Bearer <token>").
std::pair<std::string, std::string> bearer_authorization(std::string_view token);

/// One keep-alive connection to a server, opened on the first request and reopened when the server closed
/// it. Not thread-safe: one request at a time (give each thread its own).
///
/// Over TLS the server's certificate is verified (against the system's certificate authorities, or
/// ConnectionOptions::ca_cert_file) and must be for the URL's host; a failed handshake is a Failure kTls
/// ("TLS handshake failed: is the server plain http?", the usual cause). The handshake itself is
/// cpp-httplib's: each of its waits is bounded by connect_timeout_s, not the whole of it by timeout_s;
/// everything after it is bounded as over plain TCP.
class Connection {
 public:
  /// A connection to http://`host`:`port` (opened lazily: never fails here).
  Connection(const std::string& host, int port);
  /// A connection to `url`'s host and port, over TLS for https:// (opened lazily: never fails here). Request
  /// paths are sent as given: add url.path_prefix where the server needs it.
  explicit Connection(const Url& url, const ConnectionOptions& options = {});
  ~Connection();
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Sends `method` `path` with `body` (of `content_type`, if not empty) and reads the whole response,
  /// within `limits`. Never throws for what the server or the network does.
  /// @return the response (whatever its status), or why there is none.
  tl::expected<Response, Failure> request(std::string_view method, const std::string& path,
                                          const std::string& body, std::string_view content_type,
                                          const Headers& headers, const RequestLimits& limits);

  /// The same, with a 2xx response's body handed to `sink` as it arrives (Response::body stays empty); the
  /// body of any other status is held in Response::body as usual (an error text). The deadline and the cap
  /// bound the whole stream: a server that trickles it, or sends it without end, is cut off.
  tl::expected<Response, Failure> request(std::string_view method, const std::string& path,
                                          const std::string& body, std::string_view content_type,
                                          const Headers& headers, const RequestLimits& limits,
                                          const BodySink& sink);

  /// request("GET", path, "", "", headers, limits).
  tl::expected<Response, Failure> get(const std::string& path, const Headers& headers,
                                      const RequestLimits& limits);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace joule::http
