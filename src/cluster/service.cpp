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
// The latest decision, written by the leader with each re-plan, read by the followers.
constexpr std::string_view kDecisionDocumentKind = "cluster_decision";
constexpr std::string_view kDecisionKey = "latest";
// The lease among replicas (LeaseOptions).
constexpr std::string_view kLeaderDocumentKind = "cluster_leader";
constexpr std::string_view kLeaderKey = "leader";
// The holder counts its lease valid for this share of it after the start of its last renewal: a margin
// for the clocks' rates and the time the renewal's commit takes to be seen.
constexpr double kLeaseSafety = 0.9;
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

// The lease document (LeaseOptions).
struct StoredLease {
  std::string holder;
  std::string address;
  uint64_t epoch = 0;
  bool released = false;
};

json lease_json(const StoredLease& lease, double lease_s) {
  return {{"holder", lease.holder},
          {"address", lease.address},
          {"epoch", lease.epoch},
          {"lease_s", lease_s},
          {"released", lease.released}};
}

Result<StoredLease> parse_lease(const std::string& text) {
  try {
    const json body = json::parse(text);
    if (!body.is_object() || !body.contains("holder") || !body["holder"].is_string() ||
        !body.contains("address") || !body["address"].is_string() || !body.contains("epoch") ||
        !body["epoch"].is_number_unsigned()) {
      return fail(ErrorCode::kParse,
                  "stored cluster lease ({}/{}): expected {{holder, address, epoch}}, got {}",
                  kLeaderDocumentKind, kLeaderKey, text);
    }
    return StoredLease{.holder = body["holder"].get<std::string>(),
                       .address = body["address"].get<std::string>(),
                       .epoch = body["epoch"].get<uint64_t>(),
                       .released = body.value("released", false)};
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "stored cluster lease ({}/{}): {}", kLeaderDocumentKind, kLeaderKey,
                error.what());
  }
}

const json& field_at(const json& body, const char* key, std::string_view where) {
  if (!body.is_object() || !body.contains(key)) {
    field_error(fmt::format("{}{}", where, key), "missing");
  }
  return body[key];
}

std::vector<std::string> strings_at(const json& value, std::string_view where) {
  if (!value.is_array()) {
    field_error(where, "expected a list of strings");
  }
  std::vector<std::string> strings;
  for (const json& item : value) {
    if (!item.is_string()) {
      field_error(where, "expected a list of strings");
    }
    strings.push_back(item.get<std::string>());
  }
  return strings;
}

bool bool_at(const json& value, std::string_view where) {
  if (!value.is_boolean()) {
    field_error(where, "expected true or false");
  }
  return value.get<bool>();
}

std::string string_at(const json& value, std::string_view where) {
  if (!value.is_string()) {
    field_error(where, "expected a string");
  }
  return value.get<std::string>();
}

JobKind kind_at(const json& value, std::string_view where) {
  const std::string kind = string_at(value, where);
  if (kind == to_string(JobKind::kInference)) {
    return JobKind::kInference;
  }
  if (kind == to_string(JobKind::kTraining)) {
    return JobKind::kTraining;
  }
  field_error(where, fmt::format("expected \"training\" or \"inference\", got \"{}\"", kind));
}

ClusterDecision parse_decision(const json& body) {
  ClusterDecision decision;
  const json& version = field_at(body, "version", "");
  if (!version.is_number_unsigned()) {
    field_error("version", "expected an integer ≥ 0");
  }
  decision.version = version.get<uint64_t>();
  decision.now_s = number_at(field_at(body, "now_s", ""), "now_s");
  decision.cap_w = number_at(field_at(body, "cap_w", ""), "cap_w");
  decision.allocated_w = number_at(field_at(body, "allocated_w", ""), "allocated_w");
  decision.reserved_w = number_at(field_at(body, "reserved_w", ""), "reserved_w");
  decision.paused_w = number_at(field_at(body, "paused_w", ""), "paused_w");
  if (body.contains("degraded") && !body["degraded"].is_null()) {
    decision.degraded = string_at(body["degraded"], "degraded");
  }
  decision.allocation.cap_w = decision.cap_w;
  decision.allocation.allocated_w = decision.allocated_w;
  decision.allocation.weighted_loss = number_at(field_at(body, "weighted_loss", ""), "weighted_loss");
  decision.allocation.exact = bool_at(field_at(body, "exact", ""), "exact");
  decision.allocation.degraded = decision.degraded;
  decision.silent_nodes = strings_at(field_at(body, "silent_nodes", ""), "silent_nodes");
  decision.deferred_running = strings_at(field_at(body, "deferred_running", ""), "deferred_running");
  decision.deferred_waiting = strings_at(field_at(body, "deferred_waiting", ""), "deferred_waiting");
  decision.at_risk = strings_at(field_at(body, "at_risk", ""), "at_risk");
  const json& jobs = field_at(body, "jobs", "");
  if (!jobs.is_array()) {
    field_error("jobs", "expected a list");
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string where = fmt::format("jobs[{}].", i);
    const json& job = jobs[i];
    decision.jobs.push_back(
        {.id = string_at(field_at(job, "id", where), where + "id"),
         .kind = kind_at(field_at(job, "kind", where), where + "kind"),
         .power_limit_w = number_at(field_at(job, "power_limit_w", where), where + "power_limit_w"),
         .throughput_loss = number_at(field_at(job, "throughput_loss", where), where + "throughput_loss"),
         .paused = bool_at(field_at(job, "paused", where), where + "paused"),
         .at_risk = bool_at(field_at(job, "at_risk", where), where + "at_risk"),
         .reason = string_at(field_at(job, "reason", where), where + "reason")});
  }
  const json& gpus = field_at(body, "gpus", "");
  if (!gpus.is_array()) {
    field_error("gpus", "expected a list");
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string where = fmt::format("gpus[{}].", i);
    const json& gpu = gpus[i];
    const json& index = field_at(gpu, "index", where);
    if (!index.is_number_integer()) {
      field_error(where + "index", "expected an integer");
    }
    decision.limits.push_back(
        {.gpu = {string_at(field_at(gpu, "node", where), where + "node"), index.get<int>()},
         .job_id = string_at(field_at(gpu, "job_id", where), where + "job_id"),
         .power_limit_w = number_at(field_at(gpu, "power_limit_w", where), where + "power_limit_w"),
         .paused = bool_at(field_at(gpu, "paused", where), where + "paused"),
         .silent = bool_at(field_at(gpu, "silent", where), where + "silent")});
  }
  return decision;
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

Result<ClusterDecision> decision_from_json(const json& body) {
  try {
    return parse_decision(body);
  } catch (const FieldError& error) {
    return fail(ErrorCode::kParse, "cluster decision: {}", error.message);
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "cluster decision: {}", error.what());
  }
}

json to_json(const Leadership& leadership) {
  return {{"leading", leadership.leading},
          {"holder", leadership.holder},
          {"address", leadership.address},
          {"epoch", leadership.epoch}};
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
  if (lease_thread_.joinable()) {
    lease_thread_.join();
  }
  if (options_.lease && options_.lease->release_on_close) {
    release_lease();
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
  if (options.lease) {
    const LeaseOptions& lease = *options.lease;
    if (lease.holder.empty()) {
      return fail(ErrorCode::kInvalidArgument, "the cluster lease needs a holder id (unique per replica)");
    }
    if (!(std::isfinite(lease.lease_s) && lease.lease_s > 0)) {
      return fail(ErrorCode::kInvalidArgument,
                  "the cluster lease must be a positive number of seconds, got {}", lease.lease_s);
    }
    if (!(std::isfinite(lease.renew_period_s) && lease.renew_period_s >= 0 &&
          lease.renew_period_s < lease.lease_s / 2)) {
      return fail(ErrorCode::kInvalidArgument,
                  "the cluster lease's renewal period ({:g} s) must be ≥ 0 and shorter than half the lease "
                  "({:g} s), so that a renewal that is late once does not lose the lease",
                  lease.renew_period_s, lease.lease_s);
    }
  }
  std::unique_ptr<ClusterService> service(new ClusterService(std::move(store), std::move(options)));
  if (service->options_.lease) {
    service->address_ = service->options_.lease->address;
  }
  {
    std::lock_guard lock(service->mutex_);
    JOULE_TRY(service->store_->run(
        [&](store::Transaction& transaction) { return service->load_locked(transaction); }));
  }
  if (service->options_.lease) {
    // Leads at once on a database no live replica leads; otherwise follows (and waits a lease to take over).
    auto round = service->lease_round();
    if (!round) {
      return tl::make_unexpected(round.error().with_context("cluster lease"));
    }
    if (service->options_.lease->renew_period_s > 0) {
      service->lease_thread_ = std::thread([raw = service.get()] { raw->lease_loop(); });
    }
  }
  if (service->options_.lease) {
    // lease_round() above re-planned (and set the initial cap) if this replica leads; a follower leaves that
    // to the leader.
  } else if (!service->cap_w() && service->options_.initial_cap_w) {
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
  if (!lease_valid()) {
    return tl::make_unexpected(not_leader_error());
  }
  std::optional<Leadership> fenced;  // who holds the lease, when a write was fenced
  const auto stored = store_->run([&](store::Transaction& transaction) -> Result<void> {
    fenced.reset();
    if (options_.lease) {
      // Fencing: the write commits only while the lease is still this replica's, at its epoch. The lease
      // document is locked first, as lease_round() does, so the two never wait on each other in a cycle.
      auto lease_document = JOULE_TRY(transaction.get_for_update(kLeaderDocumentKind, kLeaderKey));
      const Leadership mine = leadership();
      std::optional<StoredLease> lease;
      if (lease_document) {
        lease = JOULE_TRY(parse_lease(lease_document->body));
      }
      if (!lease || lease->holder != options_.lease->holder || lease->epoch != mine.epoch ||
          lease->released) {
        fenced = lease ? Leadership{.holder = lease->holder, .address = lease->address, .epoch = lease->epoch}
                       : Leadership{};
        return fail(ErrorCode::kState, "fenced");
      }
    }
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
    if (decision && options_.lease) {
      // The followers serve it (GET /cluster/decision) without re-planning.
      const std::string decision_body = to_json(*decision).dump();
      if (!JOULE_TRY(transaction.insert(kDecisionDocumentKind, kDecisionKey, decision_body))) {
        JOULE_TRY(transaction.update(kDecisionDocumentKind, kDecisionKey, decision_body));
      }
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
  if (!stored && fenced) {
    // Another replica took the lease over (this one was paused or cut off longer than its lease): it stops
    // enforcing before anything else, and follows.
    uint64_t epoch = 0;
    {
      std::lock_guard lease_lock(lease_mutex_);
      epoch = leadership_.epoch;
      leadership_ = *fenced;
      lease_valid_until_ = Nanos(0);
    }
    log().warn(
        "cluster: {} not written: this replica's lease (epoch {}) was taken over by {} (epoch {}); it "
        "follows now",
        what, epoch, fenced->holder, fenced->epoch);
    return tl::make_unexpected(not_leader_error());
  }
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
    if (!lease_valid()) {
      // The lease ran out mid-round (a slow node): another replica may lead now, and only one may enforce.
      log().warn(
          "cluster: decision {}: the lease ran out while enforcing: nodes from '{}' on are left to the "
          "next leader",
          decision.version, node);
      break;
    }
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
  if (!lease_valid()) {
    return tl::make_unexpected(not_leader_error());
  }
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
    if (!lease_valid()) {  // a follower: the leader re-plans; lease_loop() keeps this one's view fresh
      lock.lock();
      continue;
    }
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

// ---- Leadership (LeaseOptions) -------------------------------------------------------------------------

bool ClusterService::lease_valid() const {
  if (!options_.lease) {
    return true;
  }
  std::lock_guard lock(lease_mutex_);
  return leadership_.leading && clock_.now() < lease_valid_until_;
}

Leadership ClusterService::leadership() const {
  if (!options_.lease) {
    Leadership always;
    always.leading = true;
    return always;
  }
  std::lock_guard lock(lease_mutex_);
  Leadership seen = leadership_;
  seen.leading = seen.leading && clock_.now() < lease_valid_until_;
  return seen;
}

void ClusterService::advertise(std::string address) {
  if (!options_.lease) {
    return;
  }
  {
    std::lock_guard lock(lease_mutex_);
    address_ = std::move(address);
  }
  // Written at once, so that a replica started next names it, rather than at the next renewal.
  if (auto round = lease_round(); !round) {
    log().warn("cluster: {}", round.error().message());
  }
}

Error ClusterService::not_leader_error() const {
  const Leadership seen = leadership();
  if (seen.holder.empty() || seen.holder == options_.lease->holder) {
    return Error(ErrorCode::kState,
                 fmt::format("this replica ({}) does not lead: no replica holds the cluster lease now; retry "
                             "in a few seconds",
                             options_.lease->holder));
  }
  return Error(ErrorCode::kState,
               fmt::format("this replica ({}) does not lead: changes go to the leader at {} (epoch {})",
                           options_.lease->holder, seen.address, seen.epoch));
}

Result<Leadership> ClusterService::lease_round() {
  if (!options_.lease) {
    return fail(ErrorCode::kInvalidArgument,
                "this cluster service has no lease (ClusterServiceOptions::lease)");
  }
  std::lock_guard round_lock(lease_round_mutex_);
  const LeaseOptions& options = *options_.lease;
  const Nanos started = clock_.now();
  const Nanos lease_length =
      std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(options.lease_s));
  Leadership before;
  int64_t seen_version = 0;
  Nanos seen_at{0};
  std::string address;
  {
    std::lock_guard lock(lease_mutex_);
    before = leadership_;
    address = address_;
    seen_version = seen_lease_version_;
    seen_at = seen_lease_at_;
  }
  // The round's outcome, applied once the transaction commits (run() may retry the work).
  Leadership after;
  bool holds = false;
  int64_t observed_version = seen_version;
  Nanos observed_at = seen_at;
  const auto ran = store_->run([&](store::Transaction& transaction) -> Result<void> {
    auto document = JOULE_TRY(transaction.get_for_update(kLeaderDocumentKind, kLeaderKey));
    StoredLease mine{.holder = options.holder, .address = address};
    holds = false;
    observed_version = seen_version;
    observed_at = seen_at;
    if (!document) {
      mine.epoch = 1;
      if (!JOULE_TRY(transaction.insert(kLeaderDocumentKind, kLeaderKey,
                                        lease_json(mine, options.lease_s).dump()))) {
        return fail(ErrorCode::kState, "the cluster lease was created concurrently");  // retried
      }
      holds = true;
      after = {.leading = true, .holder = mine.holder, .address = mine.address, .epoch = 1};
      return {};
    }
    const StoredLease stored = JOULE_TRY(parse_lease(document->body));
    const bool ours = stored.holder == options.holder && stored.epoch == before.epoch && before.epoch > 0 &&
                      !stored.released;
    if (ours) {
      // Nobody took it over since this replica's last renewal (a take-over would have changed the epoch).
      mine.epoch = stored.epoch;
      JOULE_TRY(
          transaction.update(kLeaderDocumentKind, kLeaderKey, lease_json(mine, options.lease_s).dump()));
      holds = true;
    } else {
      if (document->version != seen_version) {
        // The holder renewed (or changed): its lease runs a full lease from now on this replica's clock.
        observed_version = document->version;
        observed_at = started;
      }
      const bool expired = document->version == seen_version && started - seen_at >= lease_length;
      if (stored.released || expired) {
        mine.epoch = stored.epoch + 1;
        JOULE_TRY(
            transaction.update(kLeaderDocumentKind, kLeaderKey, lease_json(mine, options.lease_s).dump()));
        holds = true;
      } else {
        after = {.leading = false, .holder = stored.holder, .address = stored.address, .epoch = stored.epoch};
        return {};
      }
    }
    after = {.leading = true, .holder = mine.holder, .address = mine.address, .epoch = mine.epoch};
    return {};
  });
  if (!ran) {
    // The store does not answer: a leader keeps leading until its lease runs out on its own clock.
    bool ran_out = false;
    {
      std::lock_guard lock(lease_mutex_);
      if (leadership_.leading && clock_.now() >= lease_valid_until_) {
        leadership_.leading = false;  // said once; it renews (if still its own) once the store answers
        ran_out = true;
      }
    }
    if (ran_out) {
      log().warn("cluster: the lease (epoch {}) ran out unrenewed ({}): this replica stops enforcing",
                 before.epoch, ran.error().message());
    }
    if (options_.on_leadership) {
      options_.on_leadership(leadership());
    }
    return tl::make_unexpected(ran.error().with_context("cluster lease"));
  }
  {
    std::lock_guard lock(lease_mutex_);
    leadership_ = after;
    if (holds) {
      lease_valid_until_ = started + std::chrono::duration_cast<Nanos>(lease_length * kLeaseSafety);
      seen_lease_version_ = -1;  // as a follower again, it waits a whole lease after its first look
    } else {
      lease_valid_until_ = Nanos(0);
      seen_lease_version_ = observed_version;
      seen_lease_at_ = observed_at;
    }
  }
  if (holds && (!before.leading || before.epoch != after.epoch)) {
    log().info("cluster: this replica ({}) leads now (epoch {}{})", options.holder, after.epoch,
               before.holder.empty() || before.holder == options.holder
                   ? std::string()
                   : fmt::format(", after {} at {}", before.holder, before.address));
    // Re-plans from the stored state (version continues) and enforces at once: the daemons' leases hold the
    // previous leader's limits until then.
    auto ticked = tick();
    if (!ticked) {
      log().warn("cluster: the first re-plan as leader failed: {}", ticked.error().message());
    } else if (!*ticked && options_.initial_cap_w) {
      // A fresh database: the cap from the options.
      (void)set_cap(*options_.initial_cap_w);
    }
  } else if (!holds) {
    if (before.leading) {
      log().warn("cluster: this replica ({}) lost the lease to {} at {} (epoch {}); it follows now",
                 options.holder, after.holder, after.address, after.epoch);
    }
    std::lock_guard lock(mutex_);
    auto followed = follow_locked();
    if (!followed) {
      log().warn("cluster: following the leader: {}", followed.error().message());
    }
  }
  const Leadership now = leadership();
  if (options_.on_leadership) {
    options_.on_leadership(now);
  }
  return now;
}

Result<void> ClusterService::follow_locked() {
  std::optional<ClusterDecision> decision;
  bool reloaded = false;
  const auto read = store_->run([&](store::Transaction& transaction) -> Result<void> {
    decision.reset();
    reloaded = false;
    auto document = JOULE_TRY(transaction.get_for_update(kStateDocumentKind, kStateKey));
    const int64_t version = document ? document->version : 0;
    if (version == state_document_version_ && state_ && decision_) {
      return {};  // nothing new (a follower that opened after the last decision still reads it once)
    }
    JOULE_TRY(load_locked(transaction));
    reloaded = true;
    auto stored = JOULE_TRY(transaction.get_for_update(kDecisionDocumentKind, kDecisionKey));
    if (stored) {
      try {
        decision = JOULE_TRY(decision_from_json(json::parse(stored->body)));
      } catch (const json::exception& error) {
        return fail(ErrorCode::kParse, "stored cluster decision: {}", error.what());
      }
    }
    return {};
  });
  if (!read) {
    return read;
  }
  if (reloaded && decision) {
    decision_ = std::move(decision);
  }
  return {};
}

void ClusterService::lease_loop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.lease->renew_period_s));
  std::optional<std::string> last_message;
  std::unique_lock lock(thread_mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    auto round = lease_round();
    if (!round) {
      if (last_message != round.error().message()) {  // once per distinct message
        log().warn("cluster: {}", round.error().message());
        last_message = round.error().message();
      }
    } else {
      last_message.reset();
    }
    lock.lock();
  }
}

void ClusterService::release_lease() {
  const Leadership mine = leadership();
  if (!mine.leading) {
    return;
  }
  const auto released = store_->run([&](store::Transaction& transaction) -> Result<void> {
    auto document = JOULE_TRY(transaction.get_for_update(kLeaderDocumentKind, kLeaderKey));
    if (!document) {
      return {};
    }
    StoredLease stored = JOULE_TRY(parse_lease(document->body));
    if (stored.holder != options_.lease->holder || stored.epoch != mine.epoch) {
      return {};
    }
    stored.released = true;
    return transaction.update(kLeaderDocumentKind, kLeaderKey,
                              lease_json(stored, options_.lease->lease_s).dump());
  });
  if (!released) {
    log().warn("cluster: releasing the lease: {} (a follower takes over when it runs out)",
               released.error().message());
  } else {
    log().info("cluster: this replica ({}) released the lease (epoch {})", options_.lease->holder,
               mine.epoch);
  }
}

}  // namespace joule::cluster
