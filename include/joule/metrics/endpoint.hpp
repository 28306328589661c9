// SPDX-License-Identifier: Apache-2.0
// joule/metrics/endpoint.hpp — a small HTTP endpoint serving `/metrics` for commands
// that have no HTTP server of their own (`joule power --serve`, `joule daemon --metrics`), on the project's
// HTTP listener (joule/metrics/http_listener.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "joule/core/error.hpp"

namespace joule::metrics {

/// Serves GET /metrics (the text `render` returns, as kMetricsContentType) and GET / (a pointer to
/// /metrics) on a few background threads; everything else is 404, other methods 405.
class MetricsEndpoint {
 public:
  /// Binds `address` ("HOST:PORT", port 0: any free port) and starts serving; returns once it accepts
  /// connections. @param flag names the option in messages, e.g. "--serve".
  /// @return kInvalidArgument for a malformed address, kIo naming the address if it cannot be bound
  /// (e.g. the port is in use).
  static Result<std::unique_ptr<MetricsEndpoint>> start(std::string_view address,
                                                        std::function<std::string()> render,
                                                        std::string_view flag = "metrics address");
  ~MetricsEndpoint();  ///< stops
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  /// @return the bound port (the chosen one for port 0).
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  /// @return "http://HOST:PORT/metrics" (IPv6 hosts in brackets).
  std::string url() const;
  /// Stops accepting, finishes requests in flight and joins the threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl, std::string host, int port);
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
};

}  // namespace joule::metrics
