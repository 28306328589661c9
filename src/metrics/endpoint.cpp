// SPDX-License-Identifier: Apache-2.0
// The stand-alone /metrics endpoint (on the project's HTTP listener), for commands without an HTTP server of
// their own.
#include "joule/metrics/endpoint.hpp"

#include <fmt/format.h>

#include "joule/metrics/gpu_metrics.hpp"
#include "joule/metrics/http_listener.hpp"

namespace joule::metrics {

namespace {

// Prometheus scrapes on one connection; a few threads leave room for curl and a second Prometheus.
constexpr size_t kThreads = 4;
// Scrapers are few; idle or slow connections beyond this are closed as they come.
constexpr size_t kMaxConnections = 256;
constexpr const char* kIndex =
    "<html><head><title>joule metrics</title></head><body><h1>joule</h1>"
    "<p><a href=\"/metrics\">/metrics</a> (Prometheus text format; see docs/metrics.md)</p></body></html>\n";

}  // namespace

struct MetricsEndpoint::Impl {
  std::unique_ptr<metrics::HttpListener> listener;
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl, std::string host, int port)
    : impl_(std::move(impl)), host_(std::move(host)), port_(port) {}

MetricsEndpoint::~MetricsEndpoint() {
  stop();
}

std::string MetricsEndpoint::url() const {
  return fmt::format("http://{}:{}/metrics", host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_,
                     port_);
}

void MetricsEndpoint::stop() {
  if (!impl_) {
    return;
  }
  impl_->listener->stop();
  impl_.reset();
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(std::string_view address,
                                                                std::function<std::string()> render,
                                                                std::string_view flag) {
  auto parsed = JOULE_TRY(parse_host_port(address, flag));
  auto [host, port] = std::move(parsed);
  metrics::HttpListenerOptions options;
  options.host = host;
  options.port = port;
  options.name = fmt::format("metrics ({})", flag);
  options.worker_threads = kThreads;
  // Scrapes carry no body; a small listener is enough (and keeps an exposed endpoint cheap to abuse).
  options.max_connections = kMaxConnections;
  options.max_body_bytes = 4096;  // scrapes have none; a POST gets its 405, not a 413
  const auto handle = [render = std::move(render)](const metrics::HttpRequest& request) {
    metrics::HttpResponse response;
    if (request.method != "GET") {
      response.status = 405;
      response.headers.emplace_back("Allow", "GET");
      response.body = "405 method not allowed: only GET /metrics\n";
    } else if (request.path == "/metrics") {
      response.body = render();
      response.content_type = kMetricsContentType;
    } else if (request.path == "/") {
      response.body = kIndex;
      response.content_type = "text/html; charset=utf-8";
    } else {
      response.status = 404;
      response.body = "404 (the metrics are at /metrics)\n";
    }
    return response;
  };
  auto listener = metrics::HttpListener::start(std::move(options), handle);
  if (!listener) {
    return fail(listener.error().code(), "{} {}: {}", flag, address, listener.error().message());
  }
  auto impl = std::make_unique<Impl>();
  port = (*listener)->port();
  impl->listener = std::move(*listener);
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl), std::move(host), port));
}

}  // namespace joule::metrics
