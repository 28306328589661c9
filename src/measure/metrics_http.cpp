// SPDX-License-Identifier: Apache-2.0
// The stand-alone /metrics endpoint (cpp-httplib), for commands without an HTTP server of their own.
#include "joule/measure/metrics_http.hpp"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include "joule/core/log.hpp"
#include "joule/measure/metrics.hpp"

namespace joule::measure {

namespace {

// Prometheus scrapes on one connection; a few threads leave room for curl and a second Prometheus.
constexpr size_t kThreads = 4;
constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr const char* kIndex =
    "<html><head><title>joule metrics</title></head><body><h1>joule</h1>"
    "<p><a href=\"/metrics\">/metrics</a> (Prometheus text format; see docs/metrics.md)</p></body></html>\n";

}  // namespace

Result<std::pair<std::string, int>> parse_metrics_address(std::string_view text, std::string_view flag) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return fail(ErrorCode::kInvalidArgument,
                "{} '{}' is not HOST:PORT (e.g. 127.0.0.1:9400, or :0 for any port)", flag, text);
  }
  std::string host(text.substr(0, colon));
  const std::string_view port_text = text.substr(colon + 1);
  int port = -1;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return fail(ErrorCode::kInvalidArgument, "{} '{}': port '{}' is not a number in [0, 65535]", flag, text,
                port_text);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return fail(ErrorCode::kInvalidArgument, "{} '{}': write an IPv6 host in brackets, e.g. [::1]:9400", flag,
                text);
  }
  if (host.empty()) {
    host = "0.0.0.0";
  }
  return std::pair{host, port};
}

struct MetricsEndpoint::Impl {
  httplib::Server server;
  std::thread thread;
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
  impl_->server.stop();
  if (impl_->thread.joinable()) {
    impl_->thread.join();
  }
  impl_.reset();
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(std::string_view address,
                                                                std::function<std::string()> render,
                                                                std::string_view flag) {
  auto parsed = parse_metrics_address(address, flag);
  if (!parsed) {
    return tl::make_unexpected(parsed.error());
  }
  auto [host, port] = std::move(*parsed);
  auto impl = std::make_unique<Impl>();
  httplib::Server& server = impl->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  // Without it a keep-alive scrape waits for the client's delayed ACK (tens of ms) before the body goes out.
  server.set_tcp_nodelay(true);
  // Not cpp-httplib's default SO_REUSEPORT, which would let a second exporter share a port silently.
  server.set_socket_options([](socket_t socket) {
    const int on = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  });
  server.Get("/metrics", [render](const httplib::Request&, httplib::Response& response) {
    response.set_content(render(), kMetricsContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(kIndex, "text/html; charset=utf-8");
  });
  const auto not_allowed = [](const httplib::Request&, httplib::Response& response) {
    response.status = 405;
    response.set_header("Allow", "GET");
    response.set_content("405 method not allowed: only GET /metrics\n", "text/plain; charset=utf-8");
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (response.body.empty()) {
      response.set_content(fmt::format("{} (the metrics are at /metrics)\n", response.status),
                           "text/plain; charset=utf-8");
    }
  });
  server.set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr error) {
        const std::string what = exception_message(error);
        log().error("metrics: {} {}: {}", request.method, request.path, what);
        response.status = 500;
        response.set_content("internal error: " + what + "\n", "text/plain; charset=utf-8");
      });
  errno = 0;
  if (port == 0) {
    port = server.bind_to_any_port(host);
    if (port < 0) {
      return fail(ErrorCode::kIo, "{} {}: cannot listen on {}: {}", flag, address, host,
                  errno != 0 ? std::strerror(errno) : "bind failed");
    }
  } else if (!server.bind_to_port(host, port)) {
    return fail(ErrorCode::kIo, "{} {}: cannot listen on {}:{}: {}", flag, address, host, port,
                errno != 0 ? std::strerror(errno) : "bind failed");
  }
  impl->thread = std::thread([&server] { server.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!server.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      server.stop();
      impl->thread.join();
      return fail(ErrorCode::kIo, "{} {}: the HTTP server did not start within {} s", flag, address,
                  kStartTimeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl), std::move(host), port));
}

}  // namespace joule::measure
