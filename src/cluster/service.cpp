// SPDX-License-Identifier: Apache-2.0
// The machinery around the cluster autopilot's Controller (joule/cluster/service.hpp): changes applied to a
// copy and re-planned, stored in one transaction, then enforced node by node; the JSON forms of jobs and
// decisions; the enforcers.
#include "joule/cluster/service.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/device/daemon_client.hpp"
#include "joule/device/daemon_protocol.hpp"
#include "joule/store/store.hpp"

namespace joule::cluster {

namespace {

using nlohmann::json;

constexpr std::string_view kJobDocumentKind = "cluster_job";
constexpr std::string_view kStateDocumentKind = "cluster_state";
constexpr std::string_view kStateKey = "state";
// DaemonEnforcer's default request and connect timeout (see DaemonEnforcer::create()).
constexpr Nanos kDaemonTimeout = std::chrono::seconds(2);

// A field's problem while parsing JSON, carried to the parser's entry point as an exception: the parsers
// below are many small functions and each error names its field.
struct FieldError {
  std::string message;
};

[[noreturn]] void field_error(std::string_view where, std::string_view problem) {
  throw FieldError{fmt::format("{}: {}", where, problem)};
}

double number_at(const json& value, std::string_view where) {
  if (!value.is_number()) {
    field_error(where, fmt::format("expected a number, got {}", value.dump()));
  }
  const double number = value.get<double>();
  if (!std::isfinite(number)) {
    field_error(where, "expected a finite number");
  }
  return number;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

FrontierPoint frontier_point(const json& value, const std::string& where) {
  if (value.is_array() && value.size() == 2) {
    return {number_at(value[0], where + "[0]"), number_at(value[1], where + "[1]")};
  }
  if (value.is_object() && value.size() == 2 && value.contains("power_limit_w") && value.contains("time_s")) {
    return {number_at(value["power_limit_w"], where + ".power_limit_w"),
            number_at(value["time_s"], where + ".time_s")};
  }
  field_error(where,
              fmt::format("expected [power_limit_w, time_s] or {{\"power_limit_w\": W, \"time_s\": S}}, "
                          "got {}",
                          value.dump()));
}

JobSpec parse_job(const json& body, double now_s) {
  if (!body.is_object()) {
    field_error("body", "expected a JSON object (a job)");
  }
  static const std::set<std::string> kFields = {
      "id",          "kind",       "gpus",       "priority",      "frontier",
      "slo_floor_w", "deferrable", "deadline_s", "deadline_in_s", "remaining_s"};
  for (const auto& [key, value] : body.items()) {
    if (!kFields.contains(key)) {
      field_error(key, fmt::format("unknown field (expected one of: {})", fmt::join(kFields, ", ")));
    }
  }
  JobSpec spec;
  if (!body.contains("id") || !body["id"].is_string()) {
    field_error("id", "required: the job's id, a string");
  }
  spec.id = body["id"].get<std::string>();
  if (body.contains("kind")) {
    const json& kind = body["kind"];
    if (kind == "training") {
      spec.kind = JobKind::kTraining;
    } else if (kind == "inference") {
      spec.kind = JobKind::kInference;
    } else {
      field_error("kind", fmt::format("expected \"training\" or \"inference\", got {}", kind.dump()));
    }
  }
  if (!body.contains("gpus") || !body["gpus"].is_array()) {
    field_error("gpus", "required: a list of {\"node\": NAME, \"index\": I}");
  }
  for (size_t i = 0; i < body["gpus"].size(); ++i) {
    const json& gpu = body["gpus"][i];
    const std::string where = fmt::format("gpus[{}]", i);
    if (!gpu.is_object() || !gpu.contains("node") || !gpu["node"].is_string() || !gpu.contains("index")) {
      field_error(where, fmt::format("expected {{\"node\": NAME, \"index\": I}}, got {}", gpu.dump()));
    }
    if (!gpu["index"].is_number_integer() || gpu["index"].get<int64_t>() < 0 ||
        gpu["index"].get<int64_t>() > 1'000'000) {
      field_error(where + ".index", fmt::format("must be an integer ≥ 0, got {}", gpu["index"].dump()));
    }
    spec.gpus.push_back({gpu["node"].get<std::string>(), static_cast<int>(gpu["index"].get<int64_t>())});
  }
  if (body.contains("priority")) {
    spec.priority = number_at(body["priority"], "priority");
  }
  if (!body.contains("frontier") || !body["frontier"].is_array()) {
    field_error("frontier", "required: a list of [power_limit_w, time_s] per-GPU points");
  }
  for (size_t i = 0; i < body["frontier"].size(); ++i) {
    spec.frontier.push_back(frontier_point(body["frontier"][i], fmt::format("frontier[{}]", i)));
  }
  if (body.contains("slo_floor_w") && !body["slo_floor_w"].is_null()) {
    spec.slo_floor_w = number_at(body["slo_floor_w"], "slo_floor_w");
  }
  if (body.contains("deferrable")) {
    if (!body["deferrable"].is_boolean()) {
      field_error("deferrable", fmt::format("expected true or false, got {}", body["deferrable"].dump()));
    }
    spec.deferrable = body["deferrable"].get<bool>();
  }
  const bool absolute = body.contains("deadline_s");
  const bool relative = body.contains("deadline_in_s");
  if (absolute && relative) {
    field_error("deadline_s", "give deadline_s (Unix s) or deadline_in_s (s from now), not both");
  }
  if (!spec.deferrable && (absolute || relative || body.contains("remaining_s"))) {
    field_error(absolute ? "deadline_s" : (relative ? "deadline_in_s" : "remaining_s"),
                "only a deferrable job (\"deferrable\": true) has a deadline and remaining time");
  }
  if (spec.deferrable) {
    if (!absolute && !relative) {
      field_error("deadline_s",
                  "required for a deferrable job: deadline_s (Unix s) or deadline_in_s (s "
                  "from now)");
    }
    spec.deadline_s = absolute ? number_at(body["deadline_s"], "deadline_s")
                               : now_s + number_at(body["deadline_in_s"], "deadline_in_s");
    if (!body.contains("remaining_s")) {
      field_error("remaining_s", "required for a deferrable job: its running time left at full speed, s");
    }
    spec.remaining_s = number_at(body["remaining_s"], "remaining_s");
  }
  return spec;
}

struct StoredState {
  std::optional<double> cap_w;
  std::optional<std::vector<ForecastSlot>> forecast;
  double forecast_start_s = 0;
  uint64_t last_version = 0;
  int64_t next_sequence = 1;
};

json state_json(const StoredState& state) {
  json body = {{"cap_w", state.cap_w ? json(*state.cap_w) : json(nullptr)},
               {"last_version", state.last_version},
               {"next_sequence", state.next_sequence},
               {"forecast", nullptr}};
  if (state.forecast) {
    json slots = json::array();
    for (const ForecastSlot& slot : *state.forecast) {
      slots.push_back({{"length_s", slot.length_s}, {"intensity_g_per_kwh", slot.intensity_g_per_kwh}});
    }
    body["forecast"] = {{"start_s", state.forecast_start_s}, {"slots", std::move(slots)}};
  }
  return body;
}

StoredState parse_state(const json& body) {
  StoredState state;
  if (!body.is_object()) {
    field_error("cluster_state", "expected a JSON object");
  }
  if (body.contains("cap_w") && !body["cap_w"].is_null()) {
    state.cap_w = number_at(body["cap_w"], "cap_w");
  }
  if (!body.contains("last_version") || !body["last_version"].is_number_unsigned()) {
    field_error("last_version", "expected an integer ≥ 0");
  }
  state.last_version = body["last_version"].get<uint64_t>();
  if (!body.contains("next_sequence") || !body["next_sequence"].is_number_integer()) {
    field_error("next_sequence", "expected an integer");
  }
  state.next_sequence = body["next_sequence"].get<int64_t>();
  if (body.contains("forecast") && !body["forecast"].is_null()) {
    const json& forecast = body["forecast"];
    if (!forecast.is_object() || !forecast.contains("slots") || !forecast["slots"].is_array() ||
        !forecast.contains("start_s")) {
      field_error("forecast", "expected {start_s, slots}");
    }
    state.forecast_start_s = number_at(forecast["start_s"], "forecast.start_s");
    std::vector<ForecastSlot> slots;
    for (size_t i = 0; i < forecast["slots"].size(); ++i) {
      const json& slot = forecast["slots"][i];
      const std::string where = fmt::format("forecast.slots[{}]", i);
      if (!slot.is_object() || !slot.contains("length_s") || !slot.contains("intensity_g_per_kwh")) {
        field_error(where, "expected {length_s, intensity_g_per_kwh}");
      }
      slots.push_back({.length_s = number_at(slot["length_s"], where + ".length_s"),
                       .intensity_g_per_kwh = number_at(slot["intensity_g_per_kwh"], where + ".intensity")});
    }
    state.forecast = std::move(slots);
  }
  return state;
}

}  // namespace

// ---- JSON forms ----------------------------------------------------------------------------------------

json to_json(const JobSpec& spec) {
  json gpus = json::array();
  for (const GpuRef& gpu : spec.gpus) {
    gpus.push_back({{"node", gpu.node}, {"index", gpu.index}});
  }
  json frontier = json::array();
  for (const FrontierPoint& point : spec.frontier) {
    frontier.push_back({{"power_limit_w", point.power_limit_w}, {"time_s", point.time_s}});
  }
  json body = {{"id", spec.id},
               {"kind", std::string(to_string(spec.kind))},
               {"gpus", std::move(gpus)},
               {"priority", spec.priority},
               {"frontier", std::move(frontier)},
               {"deferrable", spec.deferrable}};
  if (spec.slo_floor_w) {
    body["slo_floor_w"] = *spec.slo_floor_w;
  }
  if (spec.deferrable) {
    body["deadline_s"] = spec.deadline_s;
    body["remaining_s"] = spec.remaining_s;
  }
  return body;
}

Result<JobSpec> job_spec_from_json(const json& body, double now_s) {
  try {
    return parse_job(body, now_s);
  } catch (const FieldError& error) {
    return fail(ErrorCode::kInvalidArgument, "{}", error.message);
  } catch (const json::exception& error) {
    return fail(ErrorCode::kInvalidArgument, "job: {}", error.what());
  }
}

json to_json(const ClusterDecision& decision) {
  json jobs = json::array();
  for (const JobDecision& job : decision.jobs) {
    jobs.push_back({{"id", job.id},
                    {"kind", std::string(to_string(job.kind))},
                    {"power_limit_w", job.power_limit_w},
                    {"throughput_loss", job.throughput_loss},
                    {"paused", job.paused},
                    {"at_risk", job.at_risk},
                    {"reason", job.reason}});
  }
  json gpus = json::array();
  for (const GpuLimit& limit : decision.limits) {
    gpus.push_back({{"node", limit.gpu.node},
                    {"index", limit.gpu.index},
                    {"job_id", limit.job_id},
                    {"power_limit_w", limit.power_limit_w},
                    {"paused", limit.paused},
                    {"silent", limit.silent}});
  }
  return {{"version", decision.version},
          {"now_s", decision.now_s},
          {"cap_w", decision.cap_w},
          {"allocated_w", decision.allocated_w},
          {"reserved_w", decision.reserved_w},
          {"paused_w", decision.paused_w},
          {"degraded", decision.degraded ? json(*decision.degraded) : json(nullptr)},
          {"weighted_loss", decision.allocation.weighted_loss},
          {"exact", decision.allocation.exact},
          {"silent_nodes", decision.silent_nodes},
          {"deferred_running", decision.deferred_running},
          {"deferred_waiting", decision.deferred_waiting},
          {"at_risk", decision.at_risk},
          {"jobs", std::move(jobs)},
          {"gpus", std::move(gpus)}};
}

// ---- Enforcers -----------------------------------------------------------------------------------------

Result<void> RecordingEnforcer::apply(const std::string& node, std::span<const GpuLimit> limits) {
  std::lock_guard lock(mutex_);
  ++calls_;
  if (failing_[node]) {
    return fail(ErrorCode::kIo, "node '{}' does not answer (test)", node);
  }
  auto& applied = applied_[node];
  applied.clear();
  for (const GpuLimit& limit : limits) {
    applied[limit.gpu.index] = limit.power_limit_w;
  }
  return {};
}

void RecordingEnforcer::set_failing(const std::string& node, bool failing) {
  std::lock_guard lock(mutex_);
  failing_[node] = failing;
}

std::map<std::string, std::map<int, double>> RecordingEnforcer::applied() const {
  std::lock_guard lock(mutex_);
  return applied_;
}

size_t RecordingEnforcer::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

DaemonEnforcer::DaemonEnforcer(std::vector<NodeAddress> nodes, device::DaemonClientOptions options)
    : options_(std::move(options)) {
  for (NodeAddress& node : nodes) {
    addresses_.emplace(std::move(node.name), std::move(node.address));
  }
}

DaemonEnforcer::~DaemonEnforcer() = default;

Result<std::unique_ptr<DaemonEnforcer>> DaemonEnforcer::create(std::vector<NodeAddress> nodes,
                                                               device::DaemonClientOptions options) {
  if (nodes.empty()) {
    return fail(ErrorCode::kInvalidArgument, "no node daemon given");
  }
  std::set<std::string> names;
  for (const NodeAddress& node : nodes) {
    if (node.name.empty() || node.address.empty()) {
      return fail(ErrorCode::kInvalidArgument, "node '{}' at '{}': a node needs a name and an address",
                  node.name, node.address);
    }
    if (!names.insert(node.name).second) {
      return fail(ErrorCode::kInvalidArgument, "node '{}' is given twice", node.name);
    }
  }
  if (options.client_name == device::DaemonClientOptions().client_name) {
    options.client_name = "joule cluster autopilot";
  }
  // Enforcement runs under the service's lock, node after node: a node that does not answer must not hold
  // every route for the default 10 s.
  if (options.timeout == device::DaemonClientOptions().timeout) {
    options.timeout = kDaemonTimeout;
  }
  return std::unique_ptr<DaemonEnforcer>(new DaemonEnforcer(std::move(nodes), std::move(options)));
}

Result<void> DaemonEnforcer::apply(const std::string& node, std::span<const GpuLimit> limits) {
  std::lock_guard lock(mutex_);
  const auto address = addresses_.find(node);
  if (address == addresses_.end()) {
    return fail(ErrorCode::kNotFound, "node '{}' has no daemon address (--cluster-nodes)", node);
  }
  const std::string prefix = fmt::format("node '{}' ({})", node, address->second);
  auto& client = clients_[node];
  if (client && !client->connected()) {
    client.reset();  // its settings are gone with it: all are set again below
    set_gpus_.erase(node);
  }
  if (!client) {
    auto connected = device::DaemonClient::connect(address->second, options_);
    if (!connected) {
      clients_.erase(node);
      set_gpus_.erase(node);
      return tl::make_unexpected(connected.error().with_context(prefix));
    }
    client = std::move(*connected);
  }
  for (const GpuLimit& limit : limits) {
    device::daemon_protocol::Request request;
    request.op = device::daemon_protocol::Op::kSetPowerLimit;
    request.gpu = limit.gpu.index;
    request.power_limit_mw = static_cast<uint32_t>(std::lround(limit.power_limit_w * 1000));
    auto answered = client->call(request);
    if (!answered) {
      const Error error = answered.error().with_context(
          fmt::format("{}: GPU {} to {:g} W", prefix, limit.gpu.index, limit.power_limit_w));
      if (!client->connected()) {
        clients_.erase(node);  // and with it every setting it made
        set_gpus_.erase(node);
      }
      return tl::make_unexpected(error);
    }
    set_gpus_[node].insert(limit.gpu.index);
  }
  // GPUs whose job ended: the daemon's own limit again (this connection gives up its setting).
  std::set<int> now_set;
  for (const GpuLimit& limit : limits) {
    now_set.insert(limit.gpu.index);
  }
  const std::set<int> set_before = set_gpus_[node];
  for (const int gpu : set_before) {
    if (now_set.contains(gpu)) {
      continue;
    }
    device::daemon_protocol::Request request;
    request.op = device::daemon_protocol::Op::kResetPowerLimit;
    request.gpu = gpu;
    auto answered = client->call(request);
    if (!answered) {
      if (!client->connected()) {
        clients_.erase(node);
        set_gpus_.erase(node);
      }
      return tl::make_unexpected(
          answered.error().with_context(fmt::format("{}: resetting GPU {}", prefix, gpu)));
    }
    set_gpus_[node].erase(gpu);
  }
  return {};
}

// ---- The service ---------------------------------------------------------------------------------------

struct ClusterService::State {
  explicit State(const ControllerOptions& options) : controller(options) {}
  Controller controller;
  std::vector<JobSpec> jobs;                // registration order
  std::map<std::string, int64_t> sequence;  // job id → its registration number (the store's order)
  StoredState stored;
};

ClusterService::ClusterService(std::shared_ptr<store::Store> store, ClusterServiceOptions options)
    : store_(std::move(store)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : SteadyClock::instance()) {}

ClusterService::~ClusterService() {
  {
    std::lock_guard lock(thread_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

double ClusterService::now_s() const {
  return static_cast<double>(clock_.to_unix_ns(clock_.now())) / 1e9;
}

Result<std::unique_ptr<ClusterService>> ClusterService::open(std::shared_ptr<store::Store> store,
                                                             ClusterServiceOptions options) {
  if (options.initial_cap_w && !(std::isfinite(*options.initial_cap_w) && *options.initial_cap_w > 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "the cluster power cap must be a positive number of watts, got {}", *options.initial_cap_w);
  }
  if (!(std::isfinite(options.control_period_s) && options.control_period_s >= 0)) {
    return fail(ErrorCode::kInvalidArgument, "the control period must be a number of seconds ≥ 0, got {}",
                options.control_period_s);
  }
  if (!(std::isfinite(options.controller.node_timeout_s) && options.controller.node_timeout_s > 0)) {
    return fail(ErrorCode::kInvalidArgument, "the node timeout must be a positive number of seconds, got {}",
                options.controller.node_timeout_s);
  }
  std::unique_ptr<ClusterService> service(new ClusterService(std::move(store), std::move(options)));
  {
    std::lock_guard lock(service->mutex_);
    JOULE_TRY(service->store_->run(
        [&](store::Transaction& transaction) { return service->load_locked(transaction); }));
  }
  // A cap from the options on a fresh database (one with none stored); then the first decision.
  if (!service->cap_w() && service->options_.initial_cap_w) {
    JOULE_TRY(service->set_cap(*service->options_.initial_cap_w));
  } else if (service->cap_w()) {
    auto first = service->tick();
    if (!first) {
      log().warn("cluster: the stored state does not re-plan: {}", first.error().message());
    }
  }
  if (service->options_.control_period_s > 0) {
    service->thread_ = std::thread([raw = service.get()] { raw->control_loop(); });
  }
  return service;
}

Result<void> ClusterService::load_locked(store::Transaction& transaction) {
  const double now = now_s();
  auto document = JOULE_TRY(transaction.get_for_update(kStateDocumentKind, kStateKey));
  StoredState stored;
  if (document) {
    try {
      stored = parse_state(json::parse(document->body));
    } catch (const FieldError& error) {
      return fail(ErrorCode::kParse, "stored cluster state ({}/{}): {}", kStateDocumentKind, kStateKey,
                  error.message);
    } catch (const json::exception& error) {
      return fail(ErrorCode::kParse, "stored cluster state ({}/{}): {}", kStateDocumentKind, kStateKey,
                  error.what());
    }
  }
  ControllerOptions controller_options = options_.controller;
  controller_options.first_version = stored.last_version + 1;
  auto state = std::make_unique<State>(controller_options);
  state->stored = stored;
  if (stored.cap_w) {
    JOULE_TRY(state->controller.set_cap(*stored.cap_w));
  }
  if (stored.forecast) {
    auto set = state->controller.set_forecast(*stored.forecast, stored.forecast_start_s);
    if (!set) {
      return fail(ErrorCode::kParse, "stored cluster forecast: {}", set.error().message());
    }
  }
  // Jobs in their registration order.
  std::vector<std::pair<int64_t, JobSpec>> jobs;
  for (const std::string& key : JOULE_TRY(transaction.keys(kJobDocumentKind, ""))) {
    auto job_document = JOULE_TRY(transaction.get_for_update(kJobDocumentKind, key));
    if (!job_document) {
      continue;
    }
    try {
      const json body = json::parse(job_document->body);
      if (!body.contains("sequence") || !body["sequence"].is_number_integer() || !body.contains("spec")) {
        field_error("body", "expected {sequence, spec}");
      }
      jobs.emplace_back(body["sequence"].get<int64_t>(), parse_job(body["spec"], now));
    } catch (const FieldError& error) {
      return fail(ErrorCode::kParse, "stored cluster job '{}': {}", key, error.message);
    } catch (const json::exception& error) {
      return fail(ErrorCode::kParse, "stored cluster job '{}': {}", key, error.what());
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [sequence, spec] : jobs) {
    if (spec.deferrable && spec.deadline_s <= now) {
      // The controller refuses a passed deadline at registration; a job stored before it passed runs now.
      log().warn(
          "cluster: job '{}': its deadline passed {:.0f} s ago while the service was down: it runs now, "
          "as non-deferrable",
          spec.id, now - spec.deadline_s);
      spec.deferrable = false;
    }
    auto added = state->controller.add_job(spec, now);
    if (!added) {
      return fail(ErrorCode::kParse, "stored cluster job '{}': {}", spec.id, added.error().message());
    }
    state->sequence[spec.id] = sequence;
    state->jobs.push_back(std::move(spec));
  }
  state_ = std::move(state);
  state_document_version_ = document ? document->version : 0;
  return {};
}

Result<std::optional<ClusterDecision>> ClusterService::change(
    const std::function<Result<void>(State&, double now_s)>& apply, std::string_view what) {
  const double started_s = seconds();
  const double now = now_s();
  std::unique_ptr<State> next;
  std::optional<ClusterDecision> decision;
  double controller_s = 0;
  int64_t written_version = 0;
  const auto stored = store_->run([&](store::Transaction& transaction) -> Result<void> {
    // Another process changed the state since this one last read it: start from what it wrote.
    auto document = JOULE_TRY(transaction.get_for_update(kStateDocumentKind, kStateKey));
    const int64_t version = document ? document->version : 0;
    if (version != state_document_version_) {
      log().info("cluster: the stored state changed elsewhere (version {} → {}): reloading it",
                 state_document_version_, version);
      JOULE_TRY(load_locked(transaction));
    }
    next = std::make_unique<State>(*state_);
    JOULE_TRY(apply(*next, now));
    decision.reset();
    if (next->controller.cap_w()) {
      const double replan_started_s = seconds();
      auto planned = next->controller.replan(now);
      controller_s = seconds() - replan_started_s;
      if (!planned) {
        return tl::make_unexpected(planned.error());
      }
      decision = std::move(*planned);
      next->stored.last_version = decision->version;
    }
    next->stored.cap_w = next->controller.cap_w();
    // The jobs that changed: registered, ended or updated.
    std::map<std::string, const JobSpec*> before;
    for (const JobSpec& job : state_->jobs) {
      before[job.id] = &job;
    }
    for (const JobSpec& job : next->jobs) {
      const auto found = before.find(job.id);
      const json body = {{"sequence", next->sequence.at(job.id)}, {"spec", to_json(job)}};
      if (found == before.end()) {
        if (!JOULE_TRY(transaction.insert(kJobDocumentKind, job.id, body.dump()))) {
          JOULE_TRY(transaction.update(kJobDocumentKind, job.id, body.dump()));
        }
      } else {
        if (to_json(*found->second) != body["spec"]) {
          JOULE_TRY(transaction.update(kJobDocumentKind, job.id, body.dump()));
        }
        before.erase(found);
      }
    }
    for (const auto& [id, job] : before) {
      JOULE_TRY(transaction.erase(kJobDocumentKind, id));
    }
    const std::string state_body = state_json(next->stored).dump();
    if (document) {
      JOULE_TRY(transaction.update(kStateDocumentKind, kStateKey, state_body));
      written_version = document->version + 1;
    } else {
      JOULE_TRY(transaction.insert(kStateDocumentKind, kStateKey, state_body));
      written_version = 1;
    }
    return {};
  });
  if (!stored) {
    const Error& error = stored.error();
    // Bad input names its job or field already; a re-plan the cap cannot hold says which change it refused.
    if (error.code() == ErrorCode::kOutOfRange || error.code() == ErrorCode::kState) {
      ++stats_.failed_replans;
      if (options_.on_replan) {
        options_.on_replan(nullptr, stats_);
      }
      return tl::make_unexpected(error.with_context(fmt::format("{} refused", what)));
    }
    if (error.code() == ErrorCode::kInvalidArgument || error.code() == ErrorCode::kNotFound) {
      return tl::make_unexpected(error);
    }
    return tl::make_unexpected(error.with_context(fmt::format("{}: store", what)));
  }
  state_ = std::move(next);
  state_document_version_ = written_version;
  if (!decision) {
    return decision;
  }
  decision_ = decision;
  ++stats_.replans;
  stats_.last_controller_s = controller_s;
  stats_.last_replan_s = seconds() - started_s;
  stats_.last_error.reset();
  enforce_locked(*decision_, now);
  if (options_.on_replan) {
    options_.on_replan(&*decision_, stats_);
  }
  return decision_;
}

void ClusterService::enforce_locked(const ClusterDecision& decision, double now) {
  if (!options_.enforcer) {
    return;
  }
  const double started_s = seconds();
  std::map<std::string, std::vector<GpuLimit>> by_node;
  for (const GpuLimit& limit : decision.limits) {
    by_node[limit.gpu.node].push_back(limit);
  }
  // Nodes whose last job ended: their GPUs go back to the node's own limits.
  for (const std::string& node : enforced_nodes_) {
    by_node.try_emplace(node);
  }
  const std::set<std::string> silent(decision.silent_nodes.begin(), decision.silent_nodes.end());
  std::vector<std::string> unanswered;
  for (const auto& [node, limits] : by_node) {
    // A silent node's GPUs are counted at their highest limit, so setting them there keeps the cap; the
    // attempt is also how the node is found answering again.
    auto applied = options_.enforcer->apply(node, limits);
    if (applied) {
      if (limits.empty()) {
        enforced_nodes_.erase(node);
      } else {
        enforced_nodes_.insert(node);
      }
      if (!limits.empty()) {  // a node without jobs is not watched for silence
        (void)state_->controller.heard_from(node, now);
      }
      if (enforce_errors_.erase(node) > 0 || silent.contains(node)) {
        log().info("cluster: node '{}' answers again: its GPUs rejoin the allocation at the next re-plan",
                   node);
      }
    } else {
      unanswered.push_back(node);
      // Said once per distinct failure: a node that stays down would otherwise be logged every period.
      auto& said = enforce_errors_[node];
      if (said != applied.error().message()) {
        said = applied.error().message();
        log().warn("cluster: decision {}: {} (not heard from: silent after {:g} s)", decision.version, said,
                   options_.controller.node_timeout_s);
      }
    }
  }
  stats_.unanswered_nodes = std::move(unanswered);
  stats_.last_enforce_s = seconds() - started_s;
}

Result<std::optional<ClusterDecision>> ClusterService::add_job(JobSpec spec) {
  std::lock_guard lock(mutex_);
  const std::string id = spec.id;
  return change(
      [&spec](State& state, double now) -> Result<void> {
        JOULE_TRY(state.controller.add_job(spec, now));
        state.sequence[spec.id] = state.stored.next_sequence++;
        state.jobs.push_back(spec);
        return {};
      },
      fmt::format("job '{}'", id));
}

Result<std::optional<ClusterDecision>> ClusterService::remove_job(std::string_view id) {
  std::lock_guard lock(mutex_);
  return change(
      [id](State& state, double /*now*/) -> Result<void> {
        JOULE_TRY(state.controller.remove_job(id));
        std::erase_if(state.jobs, [id](const JobSpec& job) { return job.id == id; });
        state.sequence.erase(std::string(id));
        return {};
      },
      fmt::format("removing job '{}'", id));
}

Result<std::optional<ClusterDecision>> ClusterService::update_progress(std::string_view id,
                                                                       double remaining_s) {
  std::lock_guard lock(mutex_);
  return change(
      [id, remaining_s](State& state, double /*now*/) -> Result<void> {
        JOULE_TRY(state.controller.update_progress(id, remaining_s));
        for (JobSpec& job : state.jobs) {
          if (job.id == id) {
            job.remaining_s = remaining_s;
          }
        }
        return {};
      },
      fmt::format("progress of job '{}'", id));
}

Result<std::optional<ClusterDecision>> ClusterService::set_cap(double cap_w) {
  std::lock_guard lock(mutex_);
  return change([cap_w](State& state, double /*now*/) { return state.controller.set_cap(cap_w); },
                fmt::format("cap {:g} W", cap_w));
}

Result<std::optional<ClusterDecision>> ClusterService::set_forecast(std::vector<ForecastSlot> slots,
                                                                    double start_s) {
  std::lock_guard lock(mutex_);
  return change(
      [&slots, start_s](State& state, double /*now*/) -> Result<void> {
        JOULE_TRY(state.controller.set_forecast(slots, start_s));
        state.stored.forecast = slots;
        state.stored.forecast_start_s = start_s;
        return {};
      },
      "forecast");
}

Result<std::optional<ClusterDecision>> ClusterService::clear_forecast() {
  std::lock_guard lock(mutex_);
  return change(
      [](State& state, double /*now*/) -> Result<void> {
        state.controller.clear_forecast();
        state.stored.forecast.reset();
        return {};
      },
      "clearing the forecast");
}

Result<std::optional<ClusterDecision>> ClusterService::heard_from(std::string_view node) {
  std::lock_guard lock(mutex_);
  return change([node](State& state, double now) { return state.controller.heard_from(node, now); },
                fmt::format("node '{}' heard from", node));
}

Result<std::optional<ClusterDecision>> ClusterService::tick() {
  std::lock_guard lock(mutex_);
  if (!state_->controller.cap_w()) {
    return std::optional<ClusterDecision>();
  }
  auto planned = change([](State&, double) -> Result<void> { return {}; }, "re-plan");
  if (!planned) {
    stats_.last_error = planned.error().message();
    // The previous decision stays enforced (and the attempt refreshes which nodes answer).
    if (decision_) {
      enforce_locked(*decision_, now_s());
    }
  }
  return planned;
}

std::optional<ClusterDecision> ClusterService::decision() const {
  std::lock_guard lock(mutex_);
  return decision_;
}

std::vector<JobSpec> ClusterService::jobs() const {
  std::lock_guard lock(mutex_);
  return state_->jobs;
}

std::optional<double> ClusterService::cap_w() const {
  std::lock_guard lock(mutex_);
  return state_->controller.cap_w();
}

ReplanStats ClusterService::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void ClusterService::control_loop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.control_period_s));
  std::optional<std::string> last_message;
  std::unique_lock lock(thread_mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    auto ticked = tick();
    if (!ticked) {
      // Said once per distinct message: a cap that stays short would otherwise log every period.
      if (last_message != ticked.error().message()) {
        log().warn("cluster: {}; the previous decision stands", ticked.error().message());
        last_message = ticked.error().message();
      }
    } else {
      last_message.reset();
    }
    lock.lock();
  }
}

}  // namespace joule::cluster
