// SPDX-License-Identifier: Apache-2.0
// joule/server/http_server.hpp — the service over HTTP/1.1: what `joule serve` runs. The project's HTTP
// listener (joule/metrics/http_listener.hpp) reads requests asynchronously and bounds each of them; the
// service's routes run on a worker pool. docs/serve.md ("Limits and slow clients") documents every limit.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "joule/core/error.hpp"
#include "joule/server/metrics.hpp"
#include "joule/server/service.hpp"

namespace joule::metrics {
class HttpListener;
}
namespace prometheus {
class Collectable;
}

namespace joule::server {

/// Requests handled at once. Connections do not take threads (they wait on the listener's I/O thread), so
/// this only bounds concurrent store transactions and planning; measured best on 2 cores (docs/serve.md).
inline constexpr size_t kDefaultThreads = 16;
/// Connections open at once; beyond it new ones are closed at accept.
inline constexpr size_t kDefaultMaxConnections = 8192;
/// Body of every route but profile uploads: real ones are a few hundred bytes (a registration with many
/// batch sizes stays under 16 KiB).
inline constexpr size_t kDefaultMaxBodyBytes = size_t{64} * 1024;
/// Body of `PUT|POST /pipelines/{id}/profile`: the JSON rows of the largest profile joule plans — 128
/// stages × 2 instructions × 160 clocks × ~120 bytes a row ≈ 4.9 MB — with room to spare.
inline constexpr size_t kDefaultMaxProfileBodyBytes = size_t{8} * 1024 * 1024;

/// The port `joule serve` listens on by default (and the port of a "HOST" without one).
inline constexpr int kDefaultPort = 7787;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = kDefaultPort;                                      ///< 0: any free port (see HttpServer::port())
  size_t threads = kDefaultThreads;                             ///< requests handled at once
  size_t max_connections = kDefaultMaxConnections;              ///< open connections
  size_t max_body_bytes = kDefaultMaxBodyBytes;                 ///< larger bodies get 413
  size_t max_profile_body_bytes = kDefaultMaxProfileBodyBytes;  ///< profile uploads: larger get 413
  /// `POST /result/{job_id}` (a pipeline rank's measurements grow with its microbatches): larger get 413.
  /// Set it to the service's ServiceOptions::live_max_result_bytes, which refuses jobs that could exceed it.
  size_t max_result_body_bytes = size_t{1} << 20;
  size_t max_header_bytes = size_t{16} * 1024;  ///< request line + header fields: 431 beyond
  size_t max_header_fields = 100;               ///< header fields: 431 beyond
  int keep_alive_timeout_s = 5;                 ///< an idle keep-alive connection is closed after this
  /// From a request's first byte to the end of its header (then the connection is closed): what keeps
  /// clients that trickle bytes from holding connections.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};  ///< to receive a whole body
  /// stop(): how long requests in flight may take to finish once waiting ones were answered 503.
  std::chrono::milliseconds shutdown_grace{10000};
  /// Requests are counted here and GET /metrics renders it (docs/metrics.md). nullptr: the server makes
  /// its own (see HttpServer::metrics()).
  std::shared_ptr<ServerMetrics> metrics;
};

/// Serves a Service over HTTP on background threads.
class HttpServer {
 public:
  HttpServer(Service& service, HttpServerOptions options);
  ~HttpServer();  ///< stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds and starts serving; returns once connections are accepted.
  /// @return kIo naming the address if it cannot be bound, kState if already started.
  Result<void> start();
  /// @return the bound port (the chosen one when the options said 0).
  int port() const { return port_; }
  /// Answers waiting requests 503 and stops the service's background work (Service::stop()), stops accepting
  /// connections, lets requests in flight finish (at most options.shutdown_grace), and joins the threads.
  /// Idempotent.
  void stop();
  /// @return the metrics GET /metrics shows.
  ServerMetrics& metrics() { return *options_.metrics; }

 private:
  Service& service_;
  HttpServerOptions options_;
  std::unique_ptr<metrics::HttpListener> listener_;
  std::shared_ptr<prometheus::Collectable> live_jobs_;  // /metrics' live jobs, detached at stop()
  int port_ = 0;
};

}  // namespace joule::server
