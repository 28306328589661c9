// SPDX-License-Identifier: Apache-2.0
// The service's routing, its transaction runner (commit only 2xx, replay stored responses by request id) and
// the helpers every route uses.
#include "joule/server/service.hpp"

#include <condition_variable>
#include <mutex>
#include <random>
#include <regex>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/log.hpp"

#include "server/live_service.hpp"
#include "server/service_internal.hpp"

namespace joule::server {

namespace detail {

namespace {

// The error a handler's non-2xx response travels in through Store::run(), so that the store rolls back.
constexpr std::string_view kRollback = "joule.server: rollback of a refused request";

std::string pydantic_type(std::string_view message) {
  static const std::map<std::string_view, std::string_view> types = {
      {"field required", "value_error.missing"},
      {"value is not a valid integer", "type_error.integer"},
      {"value is not a valid float", "type_error.float"},
      {"str type expected", "type_error.str"},
      {"value could not be parsed to a boolean", "type_error.bool"},
      {"value is not a valid list", "type_error.list"},
      {"value is not a valid dict", "type_error.dict"},
      {"none is not an allowed value", "type_error.none.not_allowed"},
      {"ensure this value is greater than 0", "value_error.number.not_gt"},
      {"ensure this value is greater than or equal to 0", "value_error.number.not_ge"},
  };
  const auto found = types.find(message);
  return std::string(found == types.end() ? "value_error" : found->second);
}

// "batch_sizes[1]" → ["batch_sizes", 1]; "spec.eta_knob" → ["spec", "eta_knob"].
void append_path(nlohmann::json& loc, std::string_view path) {
  static const std::regex part_pattern(R"(([^.\[\]]+)|\[(\d+)\])");
  const std::string text(path);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), part_pattern); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1].matched) {
      loc.push_back((*it)[1].str());
    } else {
      loc.push_back(std::stoll((*it)[2].str()));
    }
  }
}

}  // namespace

Response json_response(int status, const nlohmann::json& body) {
  Response response;
  response.status = status;
  // Replace invalid UTF-8 (echoed user text) instead of throwing.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

Response method_not_allowed() {
  return json_response(405, {{"detail", "Method Not Allowed"}});
}

Response message_response(int status, std::string_view message) {
  return json_response(status, {{"message", message}});
}

Response validation_response(const Error& error, std::string_view source) {
  const std::string& message = error.message();
  nlohmann::json loc = nlohmann::json::array({source});
  std::string problem = message;
  // "<field path>: <problem>", the field path holding no spaces.
  const auto colon = message.find(": ");
  if (colon != std::string::npos && colon > 0 && message.find(' ') > colon) {
    const std::string_view field = std::string_view(message).substr(0, colon);
    problem = message.substr(colon + 2);
    // Zeus's root validators (pydantic puts them under "__root__").
    if (problem.starts_with("Default BS(") || problem.starts_with("Job_id(")) {
      loc.push_back("__root__");
    } else {
      append_path(loc, field);
    }
  }
  nlohmann::json entry = {{"loc", loc}, {"msg", problem}, {"type", pydantic_type(problem)}};
  if (entry["type"] == "value_error.number.not_gt" || entry["type"] == "value_error.number.not_ge") {
    entry["ctx"] = {{"limit_value", 0}};
  }
  return json_response(422, {{"detail", nlohmann::json::array({entry})}});
}

Response json_decode_response(const JsonError& error) {
  if (error.kind == JsonError::Kind::kNumberOutOfRange) {
    // A value, not the syntax, is wrong: name its field as any other out-of-range value.
    return validation_response(Error(ErrorCode::kInvalidArgument, error.message));
  }
  nlohmann::json loc = {"body"};
  if (error.kind == JsonError::Kind::kSyntax) {
    loc.push_back(error.byte);
  }
  return json_response(
      422,
      {{"detail", {{{"loc", std::move(loc)}, {"msg", error.message}, {"type", "value_error.jsondecode"}}}}});
}

Response missing_query_response(std::string_view name) {
  return json_response(
      422,
      {{"detail", {{{"loc", {"query", name}}, {"msg", "field required"}, {"type", "value_error.missing"}}}}});
}

tl::expected<nlohmann::json, Response> parse_body(const Request& request) {
  auto parsed = parse_json(request.body);
  if (!parsed) {
    return tl::make_unexpected(json_decode_response(parsed.error()));
  }
  return std::move(*parsed);
}

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string fingerprint(const Request& request) {
  std::string text = request.method + " " + request.path;
  char separator = '?';
  for (const auto& [name, value] : request.query) {
    text += fmt::format("{}{}={}", separator, name, value);
    separator = '&';
  }
  return fmt::format("{} #{:016x}", text, fnv1a(request.body));
}

uint64_t random_u64() {
  static thread_local std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

int64_t unix_ns(const Clock& clock) {
  return clock.to_unix_ns(clock.now());
}

std::optional<std::vector<optimize::batch_size::Trial>> SucceededCache::find(
    const std::string& job_id, int64_t batch_size, const SucceededTrials& expected) {
  std::lock_guard lock(mutex_);
  const Entry* found = entries_.find({job_id, batch_size});
  if (found == nullptr || found->identity != expected) {
    return std::nullopt;
  }
  return found->trials;
}

void SucceededCache::put(const std::string& job_id, int64_t batch_size, SucceededTrials identity,
                         std::vector<optimize::batch_size::Trial> trials) {
  std::lock_guard lock(mutex_);
  entries_.put({job_id, batch_size}, Entry{identity, std::move(trials)});
}

void SucceededCache::append(const std::string& job_id, int64_t batch_size, const SucceededTrials& before,
                            const optimize::batch_size::Trial& trial) {
  std::lock_guard lock(mutex_);
  Entry* found = entries_.find({job_id, batch_size});
  if (found == nullptr) {
    return;
  }
  if (found->identity != before) {
    entries_.erase({job_id, batch_size});
    return;
  }
  found->trials.push_back(trial);
  found->identity = {before.count + 1, trial.trial_number};
}

void SucceededCache::erase_job(const std::string& job_id) {
  std::lock_guard lock(mutex_);
  entries_.erase_if([&](const std::pair<std::string, int64_t>& key) { return key.first == job_id; });
}

std::shared_ptr<const CachedFrontier> FrontierCache::find(const std::string& token) {
  std::lock_guard lock(mutex_);
  const auto* found = entries_.find(token);
  return found == nullptr ? nullptr : *found;
}

void FrontierCache::put(const std::string& token, std::shared_ptr<const CachedFrontier> frontier) {
  std::lock_guard lock(mutex_);
  entries_.put(token, std::move(frontier));
}

Result<std::shared_ptr<const CachedFrontier>> SingleFlight::run(
    const std::string& key, const std::function<Result<std::shared_ptr<const CachedFrontier>>()>& compute) {
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::unique_lock lock(mutex_);
    auto& slot = flights_[key];
    if (!slot) {
      slot = std::make_shared<Flight>();
      leader = true;
    }
    flight = slot;
    if (!leader) {
      finished_.wait(lock, [&] { return flight->done; });
      return *flight->result;
    }
  }
  Result<std::shared_ptr<const CachedFrontier>> result =
      fail(ErrorCode::kInternal, "planning did not finish");
  try {
    result = compute();
  } catch (const std::exception& error) {
    result = fail(ErrorCode::kInternal, "planning failed: {}", error.what());
  }
  {
    std::lock_guard lock(mutex_);
    flight->result = result;
    flight->done = true;
    flights_.erase(key);
  }
  finished_.notify_all();
  return result;
}

}  // namespace detail

using detail::json_response;
using detail::message_response;
using detail::method_not_allowed;

Service::Impl::Impl(store::Store& store_ref, const ServiceOptions& service_options)
    : store(store_ref),
      options(service_options),
      clock(service_options.clock != nullptr ? *service_options.clock : SteadyClock::instance()),
      frontiers(service_options.frontier_cache_entries),
      jobs(service_options.job_cache_entries),
      succeeded(service_options.job_cache_entries),
      live(std::make_unique<detail::LiveService>(*this)) {}

Service::Impl::~Impl() {
  live->stop();
}

Response Service::Impl::transact(const Request& request, const detail::Work& work) {
  std::optional<Response> response;
  const auto done = store.run([&](store::Transaction& transaction) -> Result<void> {
    response.reset();
    Result<Response> outcome = fail(ErrorCode::kInternal, "no outcome");
    try {
      outcome = work(transaction);
    } catch (const std::exception& error) {
      return fail(ErrorCode::kInternal, "unexpected exception: {}", error.what());
    }
    if (!outcome) {
      return tl::make_unexpected(outcome.error());
    }
    response = std::move(*outcome);
    if (response->status >= 500) {
      log().warn("{} {}: {} {}", request.method, request.path, response->status, response->body);
    }
    if (response->status < 200 || response->status >= 300) {
      return fail(ErrorCode::kState, "{}", detail::kRollback);
    }
    if (request.request_id && !response->replayed) {
      const nlohmann::json saved = {{"fingerprint", detail::fingerprint(request)},
                                    {"status", response->status},
                                    {"content_type", response->content_type},
                                    {"body", response->body}};
      JOULE_TRY(transaction.save_response(*request.request_id, saved.dump()));
    }
    return {};
  });
  if (done) {
    if (request.request_id && !response->replayed) {
      prune_responses();
    }
    return std::move(*response);
  }
  if (response && done.error().code() == ErrorCode::kState && done.error().message() == detail::kRollback) {
    return std::move(*response);
  }
  const Error& error = done.error();
  if (error.code() == ErrorCode::kIo || error.code() == ErrorCode::kPermissionDenied) {
    log().error("{} {}: store unavailable: {}", request.method, request.path, error.message());
    return message_response(503, fmt::format("store unavailable: {}", error.message()));
  }
  log().error("{} {}: {}", request.method, request.path, error.message());
  return message_response(500, error.message());
}

Response Service::Impl::transact_read(const Request& request, const detail::Work& work) {
  Request without_id = request;
  without_id.request_id.reset();
  return transact(without_id, work);
}

void Service::Impl::prune_responses() {
  // One batch per kPruneEvery saved responses keeps up with any request rate, in small transactions.
  constexpr uint64_t kPruneEvery = 512;
  constexpr size_t kPruneBatch = 1024;
  if (options.response_ttl.count() <= 0 || ++saved_responses % kPruneEvery != 0) {
    return;
  }
  auto erased = store.transact<int64_t>([&](store::Transaction& transaction) {
    return transaction.erase_responses_older_than(options.response_ttl, kPruneBatch);
  });
  if (!erased) {
    log().warn("pruning stored responses older than {} s: {}", options.response_ttl.count(),
               erased.error().message());
  } else if (*erased > 0) {
    log().debug("pruned {} stored responses older than {} s", *erased, options.response_ttl.count());
  }
}

Result<std::optional<Response>> Service::Impl::replay(store::Transaction& transaction,
                                                      const Request& request) {
  if (!request.request_id) {
    return std::optional<Response>();
  }
  auto stored = transaction.find_response(*request.request_id);
  if (!stored) {
    return tl::make_unexpected(stored.error());
  }
  if (!*stored) {
    return std::optional<Response>();
  }
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(**stored);
  } catch (const nlohmann::json::exception& error) {
    return fail(ErrorCode::kInternal, "the stored response of request id '{}' is corrupt: {}",
                *request.request_id, error.what());
  }
  const std::string expected = detail::fingerprint(request);
  if (saved.value("fingerprint", "") != expected) {
    return std::optional<Response>(message_response(
        409, fmt::format("request id '{}' was already used for a different request ({}); use a new id for a "
                         "new request",
                         *request.request_id, saved.value("fingerprint", "?"))));
  }
  Response response;
  response.status = saved.value("status", 200);
  response.content_type = saved.value("content_type", "application/json");
  response.body = saved.value("body", "");
  response.replayed = true;
  return std::optional<Response>(std::move(response));
}

Response Service::Impl::health(const Request& request) {
  const auto probe = store.run([](store::Transaction& transaction) -> Result<void> {
    auto keys = transaction.keys(detail::kJobKind, "\x01");  // matches nothing: a cheap round trip
    if (!keys) {
      return tl::make_unexpected(keys.error());
    }
    return {};
  });
  if (!probe) {
    log().error("{} {}: store unavailable: {}", request.method, request.path, probe.error().message());
    return json_response(
        503,
        {{"status", "unavailable"}, {"store", store.description()}, {"message", probe.error().message()}});
  }
  return json_response(
      200, {{"status", "ok"}, {"store", store.description()}, {"schema_version", store.schema_version()}});
}

Service::Service(std::shared_ptr<store::Store> store, const ServiceOptions& options)
    : store_(std::move(store)), impl_(std::make_unique<Impl>(*store_, options)) {}

Service::~Service() {
  stop();
}

void Service::stop() {
  impl_->live->stop();
}

Result<std::vector<Service::LiveJobSummary>> Service::live_jobs(size_t max_jobs) {
  return impl_->live->jobs(max_jobs);
}

namespace {

constexpr size_t kMaxRequestIdLength = 200;

Response not_found() {
  return json_response(404, {{"detail", "Not Found"}});
}

// What handle() waits on: the one answer of a request that may wait.
class BlockingSink : public ResponseSink {
 public:
  void respond(Response response) override {
    {
      std::lock_guard lock(mutex_);
      if (response_) {
        return;
      }
      response_ = std::move(response);
    }
    answered_.notify_all();
  }
  void on_cancel(std::function<void()> /*callback*/) override {}  // the caller never goes away
  Response wait() {
    std::unique_lock lock(mutex_);
    answered_.wait(lock, [&] { return response_.has_value(); });
    return std::move(*response_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable answered_;
  std::optional<Response> response_;
};

}  // namespace

Response Service::handle(const Request& request) {
  const auto sink = std::make_shared<BlockingSink>();
  handle_async(request, sink);
  return sink->wait();
}

void Service::handle_async(const Request& request, const std::shared_ptr<ResponseSink>& sink) {
  if (request.request_id &&
      (request.request_id->empty() || request.request_id->size() > kMaxRequestIdLength)) {
    sink->respond(message_response(
        400, fmt::format("{} must be 1 to {} characters", kRequestIdHeader, kMaxRequestIdLength)));
    return;
  }
  try {
    // Zeus's pipeline frequency optimizer server (zeus/optimizer/pipeline_frequency/server/router.py), and
    // joule's GET/DELETE /job/{job_id}: answered through the sink, at once or after a wait.
    const std::string& path = request.path;
    for (const std::string_view route : {"/register_job", "/info"}) {
      if (path == route) {
        impl_->live->handle(request, route, "", sink);
        return;
      }
    }
    for (const std::string_view route : {"/register_rank/", "/schedule/", "/result/", "/job/"}) {
      if (path.starts_with(route)) {
        const std::string job_id = path.substr(route.size());
        if (job_id.empty() || job_id.find('/') != std::string::npos) {
          sink->respond(not_found());
          return;
        }
        impl_->live->handle(request, route, job_id, sink);
        return;
      }
    }
  } catch (const std::exception& error) {
    log().error("{} {}: unexpected exception: {}", request.method, request.path, error.what());
    sink->respond(message_response(500, fmt::format("internal error: {}", error.what())));
    return;
  }
  sink->respond(handle_now(request));
}

Response Service::handle_now(const Request& request) {
  try {
    const std::string& path = request.path;
    const std::string& method = request.method;
    if (request.request_id &&
        (request.request_id->empty() || request.request_id->size() > kMaxRequestIdLength)) {
      return message_response(
          400, fmt::format("{} must be 1 to {} characters", kRequestIdHeader, kMaxRequestIdLength));
    }
    if (path == "/healthz") {
      return method == "GET" ? impl_->health(request) : method_not_allowed();
    }
    if (path == "/jobs") {
      if (method == "POST") {
        return impl_->register_job(request);
      }
      if (method == "DELETE") {
        return impl_->delete_job(request);
      }
      return method_not_allowed();
    }
    if (path == "/jobs/batch_size") {
      return method == "GET" ? impl_->next_batch_size(request) : method_not_allowed();
    }
    if (path.starts_with("/jobs/")) {
      const std::string job_id = path.substr(6);
      if (job_id.empty() || job_id.find('/') != std::string::npos) {
        return not_found();
      }
      return method == "GET" ? impl_->job_status(request, job_id) : method_not_allowed();
    }
    if (path == "/report") {
      return method == "POST" ? impl_->report(request) : method_not_allowed();
    }
    if (path == "/trials") {
      return method == "PATCH" ? impl_->end_trial(request) : method_not_allowed();
    }
    if (path.starts_with("/cluster/")) {
      return impl_->cluster_route(request, path.substr(8));
    }
    if (path == "/pipelines") {
      return method == "POST" ? impl_->register_pipeline(request) : method_not_allowed();
    }
    if (path.starts_with("/pipelines/")) {
      const std::string rest = path.substr(11);
      const auto slash = rest.find('/');
      const std::string pipeline_id = rest.substr(0, slash);
      if (pipeline_id.empty()) {
        return not_found();
      }
      return impl_->pipeline_route(request, pipeline_id,
                                   slash == std::string::npos ? std::string() : rest.substr(slash));
    }
    return not_found();
  } catch (const std::exception& error) {
    log().error("{} {}: unexpected exception: {}", request.method, request.path, error.what());
    return message_response(500, fmt::format("internal error: {}", error.what()));
  }
}

}  // namespace joule::server
