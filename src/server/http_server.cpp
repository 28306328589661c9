// SPDX-License-Identifier: Apache-2.0
// The project's HTTP listener in front of the Service: every method and path goes to Service::handle(),
// which does the routing (so that unknown routes and methods get FastAPI's bodies, and everything is testable
// without sockets); GET /metrics is answered here.
#include "joule/server/http_server.hpp"

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"
#include "joule/metrics/http_listener.hpp"

namespace joule::server {

namespace {

Request to_request(const metrics::HttpRequest& in) {
  Request request;
  request.method = in.method;
  request.path = in.path;
  request.query = in.query;
  request.body = in.body;
  request.content_type = in.header("Content-Type");
  for (const auto& [name, value] : in.headers) {
    if (name.size() == std::string_view(kRequestIdHeader).size() &&
        starts_with_ignoring_case(name, kRequestIdHeader)) {
      request.request_id = value;
      break;
    }
  }
  return request;
}

bool is_profile_upload(std::string_view method, std::string_view path) {
  return (method == "PUT" || method == "POST") && path.starts_with("/pipelines/") &&
         path.ends_with("/profile");
}

}  // namespace

HttpServer::HttpServer(Service& service, HttpServerOptions options)
    : service_(service), options_(std::move(options)) {
  if (!options_.metrics) {
    options_.metrics = std::make_shared<ServerMetrics>();
  }
}

HttpServer::~HttpServer() {
  stop();
}

Result<void> HttpServer::start() {
  if (listener_) {
    return fail(ErrorCode::kState, "the server is already started");
  }
  if (options_.threads == 0) {
    return fail(ErrorCode::kInvalidArgument, "the server needs at least one thread");
  }
  metrics::HttpListenerOptions listen;
  listen.host = options_.host;
  listen.port = options_.port;
  listen.name = "joule serve";
  listen.worker_threads = options_.threads;
  listen.max_connections = options_.max_connections;
  listen.max_header_bytes = options_.max_header_bytes;
  listen.max_header_fields = options_.max_header_fields;
  listen.max_body_bytes = options_.max_body_bytes;
  listen.body_limit = [body = options_.max_body_bytes, profile = options_.max_profile_body_bytes](
                          std::string_view method, std::string_view path) {
    return is_profile_upload(method, path) ? profile : body;
  };
  listen.idle_timeout = std::chrono::seconds(options_.keep_alive_timeout_s);
  listen.header_timeout = options_.header_timeout;
  listen.body_timeout = options_.body_timeout;
  // Zeus's error body ({"message": …}) for what the listener refuses itself.
  listen.error_body = [](int status, std::string_view message) {
    metrics::HttpResponse response;
    response.status = status;
    response.content_type = "application/json";
    response.body =
        nlohmann::json{{"message", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return response;
  };

  ServerMetrics& server_metrics = *options_.metrics;
  auto handler = [this, &server_metrics](const metrics::HttpRequest& in) {
    const auto started = std::chrono::steady_clock::now();
    server_metrics.start_request();
    const Request request = to_request(in);
    Response response;
    if (request.path == "/metrics") {
      // Prometheus's scrape, on the service's own listener.
      if (request.method == "GET") {
        response.body = server_metrics.render();
        response.content_type = metrics::kMetricsContentType;
      } else {
        response.status = 405;
        response.body = R"({"detail":"Method Not Allowed"})";
      }
    } else {
      response = service_.handle(request);
    }
    metrics::HttpResponse out;
    out.status = response.status;
    out.content_type = response.content_type;
    out.body = std::move(response.body);
    if (response.replayed) {
      out.headers.emplace_back(kReplayedHeader, "true");
    }
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    server_metrics.finish_request(request.method, request.path, out.status, response.replayed, elapsed_s);
    log().debug("{} {} {} ({:.2f} ms{})", request.method, request.path, out.status, elapsed_s * 1e3,
                response.replayed ? ", replayed" : "");
    return out;
  };
  auto listener = JOULE_TRY(metrics::HttpListener::start(std::move(listen), std::move(handler)));
  listener_ = std::move(listener);
  port_ = listener_->port();
  return {};
}

void HttpServer::stop() {
  if (listener_) {
    listener_->stop();
    listener_.reset();
  }
}

}  // namespace joule::server
