// SPDX-License-Identifier: Apache-2.0
// joule/server/http_server.hpp — the service over HTTP/1.1 (cpp-httplib): what `joule serve` runs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "joule/core/error.hpp"
#include "joule/server/metrics.hpp"
#include "joule/server/service.hpp"

namespace httplib {
class Server;
}

namespace joule::server {

/// cpp-httplib serves each open connection on one pool thread for as long as the connection stays open
/// (keep-alive), so the pool must hold at least as many threads as clients connected at once; the threads
/// mostly wait on sockets and the store, so 2 cores carry many of them.
inline constexpr size_t kDefaultThreads = 128;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 7787;  ///< 0: any free port (see HttpServer::port())
  size_t threads = kDefaultThreads;
  size_t max_body_bytes = size_t{64} << 20;  ///< larger bodies get 413
  int keep_alive_timeout_s = 5;              ///< an idle keep-alive connection is closed after this
  /// Requests are counted here and GET /metrics renders it (docs/metrics.md). nullptr: the server makes
  /// its own (see HttpServer::metrics()).
  std::shared_ptr<ServerMetrics> metrics;
};

/// @return the (host, port) of "HOST:PORT", "[V6]:PORT" or ":PORT" (host 0.0.0.0). kInvalidArgument
/// otherwise.
Result<std::pair<std::string, int>> parse_listen_address(const std::string& text);

/// Serves a Service over HTTP on a background thread pool.
class HttpServer {
 public:
  HttpServer(Service& service, HttpServerOptions options);
  ~HttpServer();  ///< stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds and starts serving; returns once connections are accepted.
  /// @return kIo naming the address if it cannot be bound.
  Result<void> start();
  /// @return the bound port (the chosen one when the options said 0).
  int port() const { return port_; }
  /// Stops accepting connections, lets requests in flight finish, and joins the threads. Idempotent.
  void stop();
  /// @return the metrics GET /metrics shows.
  ServerMetrics& metrics() { return *options_.metrics; }

 private:
  Service& service_;
  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace joule::server
