// SPDX-License-Identifier: Apache-2.0
// The project's HTTP listener in front of the Service: every method and path goes to Service::handle(),
// which does the routing (so that unknown routes and methods get FastAPI's bodies, and everything is testable
// without sockets); GET /metrics is answered here.
#include "joule/server/http_server.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"
#include "joule/metrics/http_listener.hpp"

#include "server/service_internal.hpp"

namespace joule::server {

namespace {

Request to_request(const metrics::HttpRequest& in) {
  Request request;
  request.method = in.method;
  request.path = in.path;
  request.query = in.query;
  request.body = in.body;
  request.peer = in.peer;
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

bool is_live_result(std::string_view method, std::string_view path) {
  return method == "POST" && path.starts_with("/result/");
}

metrics::HttpResponse to_http(Response response) {
  metrics::HttpResponse out;
  out.status = response.status;
  out.content_type = std::move(response.content_type);
  out.body = std::move(response.body);
  out.headers = std::move(response.headers);
  if (response.replayed) {
    out.headers.emplace_back(kReplayedHeader, "true");
  }
  return out;
}

// The service's answer to one request, whenever it comes: counted in the metrics then, and sent.
class ListenerSink : public ResponseSink, public std::enable_shared_from_this<ListenerSink> {
 public:
  ListenerSink(metrics::HttpResponder responder, ServerMetrics& server_metrics, std::string method,
               std::string path)
      : responder_(std::move(responder)),
        metrics_(server_metrics),
        method_(std::move(method)),
        path_(std::move(path)),
        started_(std::chrono::steady_clock::now()) {}

  void respond(Response response) override {
    if (done_.exchange(true)) {
      return;
    }
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    metrics_.finish_request(method_, path_, response.status, response.replayed, elapsed_s);
    log().debug("{} {} {} ({:.2f} ms{})", method_, path_, response.status, elapsed_s * 1e3,
                response.replayed ? ", replayed" : "");
    responder_.respond(to_http(std::move(response)));
  }

  void on_cancel(std::function<void()> callback) override {
    responder_.on_cancel([weak = weak_from_this(), callback = std::move(callback)] {
      // The client went away: the request ends here, unanswered (counted as nginx's 499).
      if (auto self = weak.lock(); self && !self->done_.exchange(true)) {
        const double elapsed_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - self->started_).count();
        self->metrics_.finish_request(self->method_, self->path_, 499, false, elapsed_s);
      }
      callback();
    });
  }

 private:
  metrics::HttpResponder responder_;
  ServerMetrics& metrics_;
  std::string method_;
  std::string path_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> done_{false};
};

// /metrics' per-job series of live (pipeline-frequency) jobs, read from the store at every scrape.
class LiveJobsCollector : public prometheus::Collectable {
 public:
  explicit LiveJobsCollector(Service& service) : service_(&service) {}

  void detach() {
    std::lock_guard lock(mutex_);
    service_ = nullptr;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard lock(mutex_);
    if (service_ == nullptr) {
      return {};
    }
    const auto jobs = service_->live_jobs(kMaxJobs);
    if (!jobs) {
      log().warn("/metrics: reading the pipeline-frequency jobs: {}", jobs.error().message());
      return {};
    }
    const auto family = [](std::string name, std::string help) {
      prometheus::MetricFamily made;
      made.name = std::move(name);
      made.help = std::move(help);
      made.type = prometheus::MetricType::Gauge;
      return made;
    };
    auto phase = family("joule_pfo_job_phase", "Phase of each pipeline-frequency job (1 for its phase)");
    auto round = family("joule_pfo_job_round", "Round a pipeline-frequency job is at");
    auto ranks = family("joule_pfo_job_ranks_registered", "Ranks registered in a pipeline-frequency job");
    auto target =
        family("joule_pfo_job_target_time_seconds",
               "Iteration time a pipeline-frequency job's pipelines are planned for (the straggler's "
               "pace when one is followed)");
    auto saving = family("joule_pfo_job_predicted_saving_ratio",
                         "Predicted share of energy the plan saves against every computation at the highest "
                         "clock");
    auto count =
        family("joule_pfo_jobs", "Pipeline-frequency jobs in the store (at most 1000 shown per job)");
    const auto sample = [](prometheus::MetricFamily& into, const std::string& job_id, double value,
                           std::vector<prometheus::ClientMetric::Label> extra = {}) {
      prometheus::ClientMetric metric;
      metric.label.push_back({"job_id", job_id});
      for (auto& label : extra) {
        metric.label.push_back(std::move(label));
      }
      metric.gauge.value = value;
      into.metric.push_back(std::move(metric));
    };
    for (const auto& job : *jobs) {
      sample(phase, job.job_id, 1, {{"phase", job.phase}});
      sample(round, job.job_id, static_cast<double>(job.round));
      sample(ranks, job.job_id, job.registered);
      if (job.target_time_s) {
        sample(target, job.job_id, *job.target_time_s);
      }
      if (job.predicted_saving) {
        sample(saving, job.job_id, *job.predicted_saving);
      }
    }
    prometheus::ClientMetric total;
    total.gauge.value = static_cast<double>(jobs->size());
    count.metric.push_back(std::move(total));
    std::vector<prometheus::MetricFamily> families;
    for (auto* made : {&count, &phase, &round, &ranks, &target, &saving}) {
      if (!made->metric.empty()) {
        families.push_back(std::move(*made));
      }
    }
    return families;
  }

 private:
  static constexpr size_t kMaxJobs = 1000;
  mutable std::mutex mutex_;
  Service* service_;
};

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
  // A connection has at most one request read and unanswered, so the connection cap bounds the queue: the
  // ranks of a large job registering at once (4,096 requests in a burst) must all be taken, not 503'd.
  listen.max_queued_requests = std::max<size_t>(options_.max_connections, listen.max_queued_requests);
  listen.max_header_bytes = options_.max_header_bytes;
  listen.max_header_fields = options_.max_header_fields;
  listen.max_body_bytes = options_.max_body_bytes;
  listen.body_limit = [body = options_.max_body_bytes, profile = options_.max_profile_body_bytes,
                       result = std::max(options_.max_body_bytes, options_.max_result_body_bytes)](
                          std::string_view method, std::string_view path) {
    if (is_profile_upload(method, path)) {
      return profile;
    }
    return is_live_result(method, path) ? result : body;
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
  live_jobs_ = std::make_shared<LiveJobsCollector>(service_);
  server_metrics.registry().add_collector(live_jobs_);
  auto handler = [this, &server_metrics](const metrics::HttpRequest& in,
                                         const metrics::HttpResponder& responder) {
    server_metrics.start_request();
    if (in.path == "/metrics") {
      // Prometheus's scrape, on the service's own listener.
      Response response = detail::method_not_allowed();
      if (in.method == "GET") {
        response = Response{};
        response.body = server_metrics.render();
        response.content_type = metrics::kMetricsContentType;
      }
      std::make_shared<ListenerSink>(responder, server_metrics, in.method, in.path)
          ->respond(std::move(response));
      return;
    }
    const Request request = to_request(in);
    service_.handle_async(request,
                          std::make_shared<ListenerSink>(responder, server_metrics, in.method, in.path));
  };
  auto listener = JOULE_TRY(metrics::HttpListener::start(std::move(listen), std::move(handler)));
  listener_ = std::move(listener);
  port_ = listener_->port();
  return {};
}

void HttpServer::stop() {
  if (listener_) {
    // Waiting requests are answered (503) first, so that the listener's grace is for requests in flight.
    service_.stop();
    listener_->stop(options_.shutdown_grace);
    listener_.reset();
  }
  if (live_jobs_) {
    static_cast<LiveJobsCollector&>(*live_jobs_).detach();
    live_jobs_.reset();
  }
}

}  // namespace joule::server
