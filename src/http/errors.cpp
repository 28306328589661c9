// SPDX-License-Identifier: Apache-2.0
#include "joule/http/errors.hpp"

#include <fmt/format.h>

#include "joule/core/json.hpp"

#include "http/transport.hpp"

namespace joule::http {

std::string describe_transport_error(httplib::Error error) {
  // httplib names its failures in one word ("SSLConnection"); a person needs what happened and what to check.
  // (The codes by value: httplib.h lives in the transport module, transport.hpp.)
  using transport::TransportError;
  switch (static_cast<TransportError>(static_cast<int>(error))) {
    case TransportError::kSuccess:
      return "no error";
    case TransportError::kConnection:
      return "connection refused or host unreachable";
    case TransportError::kConnectionTimeout:
      return "the connection timed out (no answer from the host)";
    case TransportError::kBindIpAddress:
      return "cannot bind the local address or network interface";
    case TransportError::kRead:
      return "no complete response (the connection closed, the server went silent past the read timeout, or "
             "the answer is not HTTP)";
    case TransportError::kWrite:
      return "the request could not be sent (the connection broke)";
    case TransportError::kExceedRedirectCount:
      return "too many redirects";
    case TransportError::kCanceled:
      return "the request was cancelled";
    case TransportError::kSslConnection:
      return "TLS handshake failed: is the server plain http?";
    case TransportError::kSslLoadingCerts:
      return "the TLS certificates (the CA bundle or the client certificate) could not be loaded";
    case TransportError::kSslServerVerification:
      return "the server's TLS certificate could not be verified (untrusted, expired, or for another host "
             "name)";
    case TransportError::kUnsupportedMultipartBoundaryChars:
      return "the multipart boundary has characters HTTP does not allow";
    case TransportError::kCompression:
      return "the response could not be decompressed (its Content-Encoding data is corrupt)";
    case TransportError::kUnknown:
      break;
  }
  return fmt::format("transport failure (cpp-httplib error {})", static_cast<int>(error));
}

std::string server_error_text(std::string_view body, size_t max_chars) {
  // One reading of error bodies for every client: core's (carbon's and the server's tools use it too).
  return error_body_message(body, max_chars);
}

std::string format_byte_count(size_t bytes) {
  constexpr size_t kKib = size_t{1} << 10;
  constexpr size_t kMib = size_t{1} << 20;
  if (bytes >= kMib && bytes % kMib == 0) {
    return fmt::format("{} MiB", bytes / kMib);
  }
  if (bytes >= kKib && bytes % kKib == 0) {
    return fmt::format("{} KiB", bytes / kKib);
  }
  return fmt::format("{} bytes", bytes);
}

}  // namespace joule::http
