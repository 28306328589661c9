// SPDX-License-Identifier: Apache-2.0
// Connection: the requests go through joule's HTTP transport module (transport.hpp: cpp-httplib and
// OpenSSL, loaded on the first request); what they come to is put in words here.
#include "joule/http/connection.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "joule/http/errors.hpp"

#include "http/transport.hpp"

namespace joule::http {

namespace {

using transport::TransportError;

Failure describe_failure(const transport::Outcome& outcome, const RequestLimits& limits) {
  using Kind = Failure::Kind;
  if (outcome.stopped) {
    return {Kind::kStopped, "the receiver stopped reading the response"};
  }
  if (outcome.too_large) {
    return {Kind::kTooLarge, fmt::format("the response is larger than {}, the most accepted",
                                         format_byte_count(limits.max_response_bytes))};
  }
  const auto error = static_cast<httplib::Error>(outcome.error);
  if (outcome.timed_out ||
      (outcome.error == TransportError::kConnectionTimeout && outcome.elapsed_s >= limits.timeout_s)) {
    return {Kind::kTimeout, fmt::format("no complete response within {:g} s", limits.timeout_s)};
  }
  switch (outcome.error) {
    case TransportError::kConnection:
      return {Kind::kConnect, describe_transport_error(error)};
    case TransportError::kConnectionTimeout:
      return {Kind::kTimeout, fmt::format("no answer to the connection within {:g} s",
                                          std::min(limits.connect_timeout_s, limits.timeout_s))};
    case TransportError::kSslConnection:
    case TransportError::kSslLoadingCerts:
      return {Kind::kTls, describe_transport_error(error)};
    case TransportError::kSslServerVerification:
      // OpenSSL's reason, when it has one (e.g. "self-signed certificate").
      if (!outcome.verify_failure.empty()) {
        return {Kind::kTls, fmt::format("{}: {}", describe_transport_error(error), outcome.verify_failure)};
      }
      return {Kind::kTls, describe_transport_error(error)};
    case TransportError::kWrite:
      return {Kind::kSend, describe_transport_error(error)};
    case TransportError::kRead:
      // Not a timeout (the deadline is checked above): the general words would suggest one.
      return {Kind::kReceive,
              "the connection closed before a complete response arrived (or the answer is not HTTP)"};
    default:
      return {Kind::kOther, describe_transport_error(error)};
  }
}

}  // namespace

class Connection::Impl {
 public:
  Impl(std::string host, int port, bool tls, std::string ca_cert_file)
      : host_(std::move(host)), port_(port), tls_(tls), ca_cert_file_(std::move(ca_cert_file)) {}
  ~Impl() {
    if (client_ != nullptr) {
      api_->close(client_);
    }
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  tl::expected<Response, Failure> request(std::string_view method, const std::string& path,
                                          const std::string& body, std::string_view content_type,
                                          const Headers& headers, const RequestLimits& limits,
                                          const BodySink* sink) {
    if (client_ == nullptr) {
      // The module is loaded on the first request, not when the connection is made (constructing one
      // never fails, and most joule processes never send one).
      auto api = transport::api();
      if (!api) {
        return tl::make_unexpected(Failure{Failure::Kind::kOther, api.error().message()});
      }
      api_ = *api;
      client_ = api_->open(host_, port_, tls_, ca_cert_file_);
    }
    transport::Outcome outcome;
    api_->request(client_, method, path, body, content_type, headers, limits, sink, outcome);
    if (outcome.complete) {
      return std::move(outcome.response);
    }
    return tl::make_unexpected(describe_failure(outcome, limits));
  }

 private:
  std::string host_;
  int port_;
  bool tls_;
  std::string ca_cert_file_;
  const transport::Api* api_ = nullptr;
  void* client_ = nullptr;  // the module's, once the first request loaded it
};

Connection::Connection(const std::string& host, int port)
    : impl_(std::make_unique<Impl>(host, port, false, "")) {}
Connection::Connection(const Url& url, const ConnectionOptions& options)
    : impl_(std::make_unique<Impl>(url.host, url.port, url.tls(), options.ca_cert_file)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

tl::expected<Response, Failure> Connection::request(std::string_view method, const std::string& path,
                                                    const std::string& body, std::string_view content_type,
                                                    const Headers& headers, const RequestLimits& limits) {
  return impl_->request(method, path, body, content_type, headers, limits, nullptr);
}

tl::expected<Response, Failure> Connection::request(std::string_view method, const std::string& path,
                                                    const std::string& body, std::string_view content_type,
                                                    const Headers& headers, const RequestLimits& limits,
                                                    const BodySink& sink) {
  return impl_->request(method, path, body, content_type, headers, limits, &sink);
}

tl::expected<Response, Failure> Connection::get(const std::string& path, const Headers& headers,
                                                const RequestLimits& limits) {
  return request("GET", path, "", "", headers, limits);
}

std::string Response::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        })) {
      return value;
    }
  }
  return {};
}

std::pair<std::string, std::string> basic_authorization(std::string_view user, std::string_view password) {
  // Base64 (RFC 4648, with padding) of "user:password", as RFC 7617 asks.
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const std::string credentials = fmt::format("{}:{}", user, password);
  std::string encoded;
  encoded.reserve(4 * ((credentials.size() + 2) / 3));
  for (size_t i = 0; i < credentials.size(); i += 3) {
    const size_t count = std::min<size_t>(3, credentials.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) {
      group = (group << 8) | (j < count ? static_cast<unsigned char>(credentials[i + j]) : 0U);
    }
    for (size_t j = 0; j < 4; ++j) {
      encoded.push_back(j <= count ? kAlphabet[(group >> (18 - 6 * j)) & 0x3F] : '=');
    }
  }
  return {"Authorization", "Basic " + encoded};
}

std::pair<std::string, std::string> bearer_authorization(std::string_view token) {
  return {"Authorization", fmt::format("Bearer {}", token)};
}

}  // namespace joule::http
