// SPDX-License-Identifier: Apache-2.0
// cpp-httplib in front of the Service: every method and path goes to Service::handle(), which does the
// routing (so that unknown routes and methods get FastAPI's bodies, and everything is testable without
// sockets).
#include "joule/server/http_server.hpp"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "joule/core/log.hpp"

namespace joule::server {

namespace {

// Requests a connection may carry before the server closes it (the library's default is 5, which makes
// clients reconnect all the time).
constexpr size_t kKeepAliveRequests = 100000;
constexpr auto kStartTimeout = std::chrono::seconds(10);

// Exposes the listening socket, to raise its backlog: cpp-httplib 0.11 listens with a backlog of 5, and
// 64 clients connecting at once would see dropped SYNs (a 1 s retransmission each).
class Listener final : public httplib::Server {
 public:
  int socket() const { return svr_sock_; }
};

std::string status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    default:
      return fmt::format("HTTP error {}", status);
  }
}

Request to_request(const httplib::Request& in) {
  Request request;
  request.method = in.method;
  request.path = in.path;
  for (const auto& [name, value] : in.params) {
    request.query[name] = value;
  }
  request.body = in.body;
  request.content_type = in.get_header_value("Content-Type");
  if (std::string id = in.get_header_value(kRequestIdHeader); !id.empty()) {
    request.request_id = std::move(id);
  }
  return request;
}

}  // namespace

Result<std::pair<std::string, int>> parse_listen_address(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    return fail(ErrorCode::kInvalidArgument, "listen address '{}' is not HOST:PORT", text);
  }
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  int port = -1;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return fail(ErrorCode::kInvalidArgument, "listen address '{}': port '{}' is not a number in [0, 65535]",
                text, port_text);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) {
    host = "0.0.0.0";
  }
  return std::pair{host, port};
}

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
  if (server_) {
    return fail(ErrorCode::kState, "the server is already started");
  }
  if (options_.threads == 0) {
    return fail(ErrorCode::kInvalidArgument, "the server needs at least one thread");
  }
  auto listener = std::make_unique<Listener>();
  const size_t threads = options_.threads;
  listener->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  listener->set_keep_alive_max_count(kKeepAliveRequests);
  listener->set_keep_alive_timeout(options_.keep_alive_timeout_s);
  listener->set_payload_max_length(options_.max_body_bytes);
  listener->set_tcp_nodelay(true);
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind a port already in use and
  // silently share its connections; SO_REUSEADDR alone still allows a quick restart on the same port.
  listener->set_socket_options([](socket_t socket) {
    const int on = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  });

  ServerMetrics& metrics = *options_.metrics;
  const httplib::Server::Handler handler = [this, &metrics](const httplib::Request& in,
                                                            httplib::Response& out) {
    const auto started = std::chrono::steady_clock::now();
    metrics.start_request();
    const Request request = to_request(in);
    Response response;
    if (request.path == "/metrics") {
      // Prometheus's scrape, on the service's own listener.
      if (request.method == "GET") {
        response.body = metrics.render();
        response.content_type = measure::kMetricsContentType;
      } else {
        response.status = 405;
        response.body = R"({"detail":"Method Not Allowed"})";
      }
    } else {
      response = service_.handle(request);
    }
    out.status = response.status;
    out.set_content(response.body, response.content_type.c_str());
    if (response.replayed) {
      out.set_header(kReplayedHeader, "true");
    }
    metrics.finish_request(request.method, request.path, response.status, response.replayed,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    log().debug("{} {} {} ({:.2f} ms{})", request.method, request.path, response.status,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
                response.replayed ? ", replayed" : "");
  };
  listener->Get(".*", handler);
  listener->Post(".*", handler);
  listener->Put(".*", handler);
  listener->Patch(".*", handler);
  listener->Delete(".*", handler);
  listener->set_exception_handler(
      [](const httplib::Request& in, httplib::Response& out, std::exception_ptr error) {
        const std::string what = exception_message(error);
        log().error("{} {}: unexpected exception: {}", in.method, in.path, what);
        out.status = 500;
        out.set_content(nlohmann::json{{"message", "internal error: " + what}}.dump(), "application/json");
      });
  // Errors cpp-httplib answers itself (a malformed request line, a body over the limit) get a JSON body too.
  listener->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& out) {
        if (!out.body.empty()) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        out.set_content(nlohmann::json{{"message", status_text(out.status)}}.dump(), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));

  if (options_.port == 0) {
    port_ = listener->bind_to_any_port(options_.host);
    if (port_ < 0) {
      return fail(ErrorCode::kIo, "cannot listen on {}: {}", options_.host, std::strerror(errno));
    }
  } else {
    if (!listener->bind_to_port(options_.host, options_.port)) {
      return fail(ErrorCode::kIo, "cannot listen on {}:{}: {}", options_.host, options_.port,
                  errno != 0 ? std::strerror(errno) : "bind failed");
    }
    port_ = options_.port;
  }
  ::listen(listener->socket(), SOMAXCONN);
  server_ = std::move(listener);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!server_->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      stop();
      return fail(ErrorCode::kIo, "the HTTP server did not start within {} s", kStartTimeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return {};
}

void HttpServer::stop() {
  if (server_) {
    server_->stop();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  server_.reset();
}

}  // namespace joule::server
