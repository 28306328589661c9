// SPDX-License-Identifier: Apache-2.0
// The client: one request id per call, reused by every retry of the call, so that joule's server applies the
// call once however often the network makes us send it.
#include "joule/client/client.hpp"

#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/strings.hpp"
#include "joule/http/connection.hpp"
#include "joule/http/errors.hpp"
#include "joule/http/retry.hpp"
#include "joule/http/url.hpp"

namespace joule::client {

namespace bso = optimize::batch_size;
using nlohmann::json;

namespace {

ErrorCode code_of(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return ErrorCode::kInvalidArgument;
    case 404:
      return ErrorCode::kNotFound;
    case 409:
      return ErrorCode::kState;
    case 502:
    case 503:
    case 504:
      return ErrorCode::kIo;
    default:
      return ErrorCode::kInternal;
  }
}

// FastAPI's validation errors ({"detail": [{"loc": ["body", "x"], "msg": "…"}, …]}) as "x: …; y: …", read
// until there is more than a message shows; entries of another shape are skipped.
std::string validation_errors_text(const json& detail) {
  std::string text;
  for (const auto& entry : detail) {
    if (text.size() > http::kServerTextChars) {
      break;
    }
    if (!entry.is_object()) {
      continue;
    }
    std::string where;
    const auto loc = entry.find("loc");
    if (loc != entry.end() && loc->is_array()) {
      for (const auto& part : *loc) {
        if (part == "body" || part == "query") {
          continue;
        }
        if (!where.empty()) {
          where += '.';
        }
        where += part.is_string() ? part.get<std::string>() : describe_json(part, 20);
      }
    }
    const auto msg = entry.find("msg");
    text += fmt::format("{}{}{}{}", text.empty() ? "" : "; ", where, where.empty() ? "" : ": ",
                        msg != entry.end() && msg->is_string() ? msg->get_ref<const std::string&>() : "?");
  }
  return text;
}

// The server's explanation, as a printable excerpt of at most 200 characters: Zeus's {"message"},
// FastAPI's {"detail": "…"} or {"detail": [{"loc", "msg"}]}, else the body's start.
std::string server_message(const std::string& body) {
  const auto parsed = parse_json(body);
  if (parsed && parsed->is_object()) {
    const auto message = parsed->find("message");
    const auto detail = parsed->find("detail");
    if ((message == parsed->end() || !message->is_string()) && detail != parsed->end() &&
        detail->is_array()) {
      return printable_excerpt(validation_errors_text(*detail), http::kServerTextChars);
    }
  }
  return http::server_error_text(body);
}

}  // namespace

struct Client::Impl {
  std::vector<std::string> urls;
  std::vector<http::Url> parsed_urls;
  ClientOptions options;
  std::vector<std::unique_ptr<http::Connection>> connections;  // one per URL
  size_t current = 0;
  std::mutex mutex;
  std::string last_request_id;
  std::mt19937_64 random;
  uint64_t calls = 0;

  http::Connection& connection(size_t index) {
    auto& slot = connections[index];
    if (!slot) {
      slot = std::make_unique<http::Connection>(parsed_urls[index]);
    }
    return *slot;
  }

  // One attempt's bounds: the whole attempt within options.timeout, connecting within connect_timeout.
  http::RequestLimits limits() const {
    http::RequestLimits limits;
    limits.timeout_s = std::chrono::duration<double>(options.timeout).count();
    limits.connect_timeout_s = std::chrono::duration<double>(options.connect_timeout).count();
    limits.max_response_bytes = options.max_response_bytes;
    return limits;
  }

  std::string new_request_id() { return fmt::format("{:016x}-{}", random(), ++calls); }

  Error http_error(const std::string& method, const std::string& path, const RawResponse& response) const {
    return Error(code_of(response.status), fmt::format("{} {}: HTTP {}: {}", method, path, response.status,
                                                       server_message(response.body)));
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

Result<Client> Client::connect(const std::string& urls, ClientOptions options) {
  auto impl = std::make_unique<Impl>();
  size_t start = 0;
  while (start <= urls.size()) {
    size_t end = urls.find(',', start);
    if (end == std::string::npos) {
      end = urls.size();
    }
    std::string url = urls.substr(start, end - start);
    while (!url.empty() && url.back() == '/') {
      url.pop_back();
    }
    if (!url.starts_with("http://") && !url.starts_with("https://")) {
      return fail(ErrorCode::kInvalidArgument, "server URL '{}' must start with http:// or https://", url);
    }
    if (url.find('/', url.find("//") + 2) != std::string::npos) {
      return fail(ErrorCode::kInvalidArgument, "server URL '{}' must be http://HOST:PORT without a path",
                  url);
    }
    auto parsed = http::parse_url(url);
    if (!parsed) {
      return fail(ErrorCode::kInvalidArgument, "server URL '{}' {}", url, parsed.error().message);
    }
    impl->parsed_urls.push_back(std::move(*parsed));
    impl->urls.push_back(std::move(url));
    start = end + 1;
  }
  if (options.attempts < 1) {
    return fail(ErrorCode::kInvalidArgument, "a client needs at least one attempt per call");
  }
  impl->connections.resize(impl->urls.size());
  impl->options = std::move(options);
  std::random_device device;
  impl->random.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  // Spread clients over the servers.
  impl->current = static_cast<size_t>(impl->random() % impl->urls.size());
  return Client(std::move(impl));
}

const std::string& Client::last_request_id() const {
  return impl_->last_request_id;
}

namespace {

// What failed, in the words every joule HTTP client uses (joule/http), with where to look.
std::string describe_failure(const std::string& url, const http::Failure& failure) {
  if (failure.kind == http::Failure::Kind::kConnect) {
    return fmt::format("cannot connect to {}: {} (is joule serve running there?)", url, failure.message);
  }
  return fmt::format("cannot reach {}: {}", url, failure.message);
}

}  // namespace

Result<RawResponse> Client::call(const std::string& method, const std::string& path_and_query,
                                 const std::string& body, const std::string& content_type) {
  std::lock_guard lock(impl_->mutex);
  Impl& impl = *impl_;
  const std::string request_id = impl.options.request_id ? *impl.options.request_id : impl.new_request_id();
  impl.last_request_id = request_id;
  if (method != "GET" && method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE") {
    return fail(ErrorCode::kInvalidArgument, "unsupported HTTP method '{}'", method);
  }
  const http::Headers headers = {{"X-Request-Id", request_id}};
  const http::RequestLimits limits = impl.limits();
  const http::RetryPolicy policy{impl.options.attempts, impl.options.backoff, impl.options.max_backoff};
  size_t server = impl.current;
  // No answer: the request may or may not have been applied; the retry's id makes that safe. Each retry
  // goes to the next server, if there are several.
  auto outcome = http::with_retries(policy, [&](int /*attempt*/, bool last) {
    server = impl.current;
    auto answer = impl.connection(server).request(method, path_and_query, method == "GET" ? "" : body,
                                                  method == "GET" ? "" : content_type, headers, limits);
    if (answer ? http::retryable_status(answer->status) && !last : http::retryable(answer.error())) {
      impl.current = (server + 1) % impl.urls.size();
    }
    return answer;
  });
  if (!outcome) {
    if (!http::retryable(outcome.error())) {
      // An answer came (over the cap): the server is there, and would send the same again.
      return fail(ErrorCode::kIo, "{} {}: {}: {}", method, path_and_query, impl.urls[server],
                  outcome.error().message);
    }
    return fail(ErrorCode::kIo, "{} {}: {} ({} attempt{})", method, path_and_query,
                describe_failure(impl.urls[server], outcome.error()), impl.options.attempts,
                impl.options.attempts == 1 ? "" : "s");
  }
  const bool replayed = outcome->header("X-Idempotent-Replay") == "true";
  return RawResponse{outcome->status, std::move(outcome->body), replayed};
}

namespace {

template <class T>
Result<T> reparse(Result<T> value, const std::string& what) {
  if (!value) {
    return fail(ErrorCode::kParse, "the server's {} is malformed: {}", what, value.error().message());
  }
  return value;
}

// A typed answer of `method` `path` (results.hpp), its malformed fields named with the call.
template <class T>
Result<T> typed(Result<T> value, std::string_view method, const std::string& path, std::string_view what) {
  if (!value) {
    return fail(ErrorCode::kParse, "{} {}: the server's {} is malformed: {}", method, path, what,
                value.error().message());
  }
  return value;
}

}  // namespace

Result<std::pair<int, json>> Client::json_call(const std::string& method, const std::string& path,
                                               const json& body) {
  auto response = JOULE_TRY(call(method, path, body.is_null() ? std::string() : body.dump()));
  if (response.status < 200 || response.status >= 300) {
    return tl::make_unexpected(impl_->http_error(method, path, response));
  }
  auto parsed = parse_json(response.body);
  if (!parsed) {
    return fail(ErrorCode::kParse, "{} {}: the server's answer (HTTP {}) {}", method, path, response.status,
                describe_json_error(parsed.error(), response.body));
  }
  return std::pair{response.status, std::move(*parsed)};
}

Result<RegisteredJob> Client::register_job(const bso::JobSpec& spec, const bso::GpuConfig& gpu) {
  json body = spec.to_json();
  body.update(gpu.to_json());
  auto answer = JOULE_TRY(json_call("POST", "/jobs", body));
  auto parsed_spec = JOULE_TRY(reparse(bso::JobSpec::from_json(answer.second), "job spec"));
  auto parsed_gpu = JOULE_TRY(reparse(bso::GpuConfig::from_json(answer.second), "GPU config"));
  return RegisteredJob{std::move(parsed_spec), std::move(parsed_gpu), answer.first == 201};
}

Result<bso::TrialId> Client::next_batch_size(const std::string& job_id) {
  auto answer = JOULE_TRY(json_call("GET", "/jobs/batch_size?job_id=" + url_encode(job_id), json()));
  return reparse(bso::TrialId::from_json(answer.second), "trial");
}

Result<bso::ReportResponse> Client::report(const bso::TrainingResult& result) {
  auto answer = JOULE_TRY(json_call("POST", "/report", result.to_json()));
  return reparse(bso::ReportResponse::from_json(answer.second), "report response");
}

Result<void> Client::end_trial(const bso::TrialId& trial) {
  JOULE_TRY(json_call("PATCH", "/trials", trial.to_json()));
  return {};
}

Result<void> Client::delete_job(const std::string& job_id) {
  JOULE_TRY(json_call("DELETE", "/jobs?job_id=" + url_encode(job_id), json()));
  return {};
}

Result<JobStatus> Client::job_status(const std::string& job_id) {
  const std::string path = "/jobs/" + url_encode(job_id);
  auto answer = JOULE_TRY(json_call("GET", path, json()));
  return typed(parse_job_status(answer.second), "GET", path, "job status");
}

Result<JobStatus> Client::job_status(const std::string& job_id, int64_t limit,
                                     std::optional<int64_t> before) {
  std::string path = fmt::format("/jobs/{}?limit={}", url_encode(job_id), limit);
  if (before) {
    path += fmt::format("&before={}", *before);
  }
  auto answer = JOULE_TRY(json_call("GET", path, json()));
  return typed(parse_job_status(answer.second), "GET", path, "job status");
}

Result<Health> Client::health() {
  auto answer = JOULE_TRY(json_call("GET", "/healthz", json()));
  return typed(parse_health(answer.second), "GET", "/healthz", "health");
}

Result<std::pair<PipelineSpec, bool>> Client::register_pipeline(const PipelineSpec& spec) {
  auto answer = JOULE_TRY(json_call("POST", "/pipelines", spec.to_json()));
  auto parsed = JOULE_TRY(reparse(PipelineSpec::from_json(answer.second), "pipeline spec"));
  return std::pair{std::move(parsed), answer.first == 201};
}

Result<UploadedProfile> Client::upload_profile(const std::string& pipeline_id, const std::string& csv_text) {
  const std::string path = "/pipelines/" + url_encode(pipeline_id) + "/profile";
  auto response = JOULE_TRY(call("PUT", path, csv_text, "text/csv"));
  if (response.status != 200) {
    return tl::make_unexpected(impl_->http_error("PUT", path, response));
  }
  auto parsed = parse_json(response.body);
  if (!parsed) {
    return fail(ErrorCode::kParse, "PUT {}: the server's answer (HTTP {}) {}", path, response.status,
                describe_json_error(parsed.error(), response.body));
  }
  return typed(parse_uploaded_profile(*parsed), "PUT", path, "profile answer");
}

Result<PipelineFrontier> Client::frontier(const std::string& pipeline_id) {
  const std::string path = "/pipelines/" + url_encode(pipeline_id) + "/frontier";
  auto answer = JOULE_TRY(json_call("GET", path, json()));
  return typed(parse_pipeline_frontier(answer.second), "GET", path, "frontier");
}

Result<PipelinePlan> Client::plan(const std::string& pipeline_id, std::optional<double> target_time_s) {
  std::string path = "/pipelines/" + url_encode(pipeline_id) + "/plan";
  if (target_time_s) {
    path += fmt::format("?target_time_s={}", *target_time_s);
  }
  auto answer = JOULE_TRY(json_call("GET", path, json()));
  return typed(parse_pipeline_plan(answer.second), "GET", path, "plan");
}

Result<PipelinePlan> Client::report_straggler(const std::string& pipeline_id,
                                              std::optional<double> iteration_time_s) {
  const json body = {{"iteration_time_s", iteration_time_s ? json(*iteration_time_s) : json(nullptr)}};
  const std::string path = "/pipelines/" + url_encode(pipeline_id) + "/straggler";
  auto answer = JOULE_TRY(json_call("POST", path, body));
  return typed(parse_pipeline_plan(answer.second), "POST", path, "plan");
}

Result<PipelineStatus> Client::pipeline_status(const std::string& pipeline_id) {
  const std::string path = "/pipelines/" + url_encode(pipeline_id);
  auto answer = JOULE_TRY(json_call("GET", path, json()));
  return typed(parse_pipeline_status(answer.second), "GET", path, "pipeline status");
}

Result<void> Client::delete_pipeline(const std::string& pipeline_id) {
  JOULE_TRY(json_call("DELETE", "/pipelines/" + url_encode(pipeline_id), json()));
  return {};
}

std::string url_encode(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

}  // namespace joule::client
