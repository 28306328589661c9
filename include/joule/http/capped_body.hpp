// SPDX-License-Identifier: Apache-2.0
// joule/http/capped_body.hpp — a cap on the body of a response read by cpp-httplib's own client
// (httplib::Client), for the clients that still need it because it speaks https:// (the carbon providers,
// the client of joule serve): Connection (connection.hpp) bounds plain http:// requests more fully.
#pragma once

#include <cstddef>
#include <string>

// cpp-httplib's request, declared here so that this header needs no httplib.h.
namespace httplib {
struct Request;
}  // namespace httplib

namespace joule::http {

/// Receives one response's body, decoded (Content-Encoding undone), up to `max_bytes`: a declared
/// Content-Length over the cap is refused before any of the body is read, and reading stops at the first
/// chunk past it, so no server makes the client buffer more. A request stopped so fails with httplib's
/// Error::Canceled; exceeded() then says why. One request at a time.
///
/// Not bounded here (httplib's own reading, until Connection speaks TLS): the number of header lines, and
/// the request's total time (httplib's timeouts apply to each read and write, not to the whole).
class CappedBody {
 public:
  explicit CappedBody(size_t max_bytes) : max_bytes_(max_bytes) {}

  /// Empties the body and points `request`'s response handler and content receiver at this object, which
  /// must outlive the request's sending.
  void attach(httplib::Request& request);

  /// @return whether the cap stopped the last request.
  bool exceeded() const { return exceeded_; }
  /// @return "the response is larger than 8 MiB, the most accepted" (Connection's words).
  std::string message() const;
  /// @return the body received (all of it when the request succeeded).
  std::string& body() { return body_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  size_t max_bytes_;
  std::string body_;
  bool exceeded_ = false;
};

}  // namespace joule::http
