// SPDX-License-Identifier: Apache-2.0
// The cluster autopilot's routes (/cluster/…, docs/cluster.md "Serving the controller"): parse the body,
// call joule::cluster::ClusterService, convert its decision or error. The service keeps its own state in
// the store (one transaction per change), so these routes do not go through transact(): a retried request
// id is applied again (a repeated POST /cluster/jobs is refused as already registered). A replica that does
// not lead answers changes 503 with the leader's address (docs/cluster.md "High availability").
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/cluster/service.hpp"
#include "joule/core/json.hpp"
#include "joule/core/log.hpp"

#include "server/service_internal.hpp"

namespace joule::server {

namespace {

using detail::json_response;
using detail::message_response;
using detail::method_not_allowed;
using nlohmann::json;

int status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 422;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kOutOfRange:  // the cap cannot hold the jobs after the change
    case ErrorCode::kState:
      return 409;
    case ErrorCode::kIo:
    case ErrorCode::kPermissionDenied:
      return 503;
    default:
      return 500;
  }
}

Response error_response(const Error& error) {
  const int status = status_of(error.code());
  if (status >= 500) {
    log().error("cluster: {}", error.message());
  }
  return message_response(status, error.message());
}

// The decision as the routes answer it: to_json(decision) and how enforcement went.
Response decision_response(int status, const cluster::ClusterService& service,
                           const std::optional<cluster::ClusterDecision>& decision) {
  const cluster::ReplanStats stats = service.stats();
  json body = decision ? cluster::to_json(*decision) : json::object({{"version", nullptr}});
  body["enforced"] = service.enforces();
  body["unanswered_nodes"] = stats.unanswered_nodes;
  body["last_error"] = stats.last_error ? json(*stats.last_error) : json(nullptr);
  body["leader"] = cluster::to_json(service.leadership());
  return json_response(status, body);
}

// The body as a JSON object with exactly the fields allowed; otherwise the 422 to answer.
tl::expected<json, Response> object_body(const Request& request, const std::set<std::string>& allowed) {
  auto parsed = parse_json(request.body);
  if (!parsed) {
    return tl::make_unexpected(
        message_response(422, fmt::format("body: not valid JSON: {}", parsed.error().message)));
  }
  if (!parsed->is_object()) {
    return tl::make_unexpected(message_response(422, "body: expected a JSON object"));
  }
  for (const auto& [key, value] : parsed->items()) {
    if (!allowed.contains(key)) {
      return tl::make_unexpected(message_response(
          422, fmt::format("{}: unknown field (expected one of: {})", key, fmt::join(allowed, ", "))));
    }
  }
  return std::move(*parsed);
}

// A required finite number; otherwise an error naming the field and what it means.
Result<double> number_field(const json& body, const std::string& key, std::string_view what) {
  if (!body.contains(key)) {
    return fail(ErrorCode::kInvalidArgument, "{}: required: {}", key, what);
  }
  const json& value = body[key];
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    return fail(ErrorCode::kInvalidArgument, "{}: expected a number ({}), got {}", key, what,
                describe_json(value));
  }
  return value.get<double>();
}

template <class Call>
Response change_response(cluster::ClusterService& service, int status, Call&& call) {
  auto changed = call();
  if (!changed) {
    const cluster::Leadership leadership = service.leadership();
    if (changed.error().code() == ErrorCode::kState && !leadership.leading) {
      // A follower (docs/cluster.md "High availability"): the client retries at the leader's address.
      return json_response(
          503, {{"message", changed.error().message()},
                {"leader", leadership.address.empty() ? json(nullptr) : json(leadership.address)}});
    }
    return error_response(changed.error());
  }
  return decision_response(status, service, *changed);
}

Response add_job(cluster::ClusterService& service, const Request& request) {
  auto parsed = parse_json(request.body);
  if (!parsed) {
    return message_response(422, fmt::format("body: not valid JSON: {}", parsed.error().message));
  }
  auto spec = cluster::job_spec_from_json(*parsed, service.now_s());
  if (!spec) {
    return error_response(spec.error());
  }
  return change_response(service, 201, [&] { return service.add_job(std::move(*spec)); });
}

Response set_cap(cluster::ClusterService& service, const Request& request) {
  auto body = object_body(request, {"cap_w"});
  if (!body) {
    return std::move(body.error());
  }
  auto cap_w = number_field(*body, "cap_w", "the cluster's power cap, W");
  if (!cap_w) {
    return error_response(cap_w.error());
  }
  return change_response(service, 200, [&] { return service.set_cap(*cap_w); });
}

Response set_progress(cluster::ClusterService& service, const Request& request, const std::string& id) {
  auto body = object_body(request, {"remaining_s"});
  if (!body) {
    return std::move(body.error());
  }
  auto remaining_s = number_field(*body, "remaining_s", "running time still needed at full speed, s");
  if (!remaining_s) {
    return error_response(remaining_s.error());
  }
  return change_response(service, 200, [&] { return service.update_progress(id, *remaining_s); });
}

Response set_forecast(cluster::ClusterService& service, const Request& request) {
  auto body = object_body(request, {"start_s", "slots"});
  if (!body) {
    return std::move(body.error());
  }
  double start_s = service.now_s();
  if (body->contains("start_s")) {
    auto start = number_field(*body, "start_s", "when the first slot starts, s since the Unix epoch");
    if (!start) {
      return error_response(start.error());
    }
    start_s = *start;
  }
  if (!body->contains("slots") || !(*body)["slots"].is_array()) {
    return message_response(
        422,
        "slots: required: a list of {\"length_s\": S, \"intensity_g_per_kwh\": G}, one per forecast slot");
  }
  std::vector<cluster::ForecastSlot> slots;
  const json& listed = (*body)["slots"];
  for (size_t i = 0; i < listed.size(); ++i) {
    const json& slot = listed[i];
    const std::string where = fmt::format("slots[{}]", i);
    if (!slot.is_object() || slot.size() != 2 || !slot.contains("length_s") ||
        !slot.contains("intensity_g_per_kwh")) {
      return message_response(
          422, fmt::format("{}: expected {{\"length_s\": S, \"intensity_g_per_kwh\": G}}, got {}", where,
                           describe_json(slot)));
    }
    auto length_s = number_field(slot, "length_s", "the slot's length, s");
    auto intensity = number_field(slot, "intensity_g_per_kwh", "the grid's carbon intensity, gCO2/kWh");
    if (!length_s || !intensity) {
      return message_response(
          422, fmt::format("{}.{}", where, (!length_s ? length_s.error() : intensity.error()).message()));
    }
    slots.push_back({.length_s = *length_s, .intensity_g_per_kwh = *intensity});
  }
  return change_response(service, 200, [&] { return service.set_forecast(std::move(slots), start_s); });
}

}  // namespace

Response Service::Impl::cluster_route(const Request& request, const std::string& rest) {
  if (!options.cluster) {
    return message_response(
        404,
        "the cluster autopilot is off: start joule serve with --cluster-power-cap-w W to serve /cluster/…");
  }
  cluster::ClusterService& service = *options.cluster;
  const std::string& method = request.method;
  if (rest == "/jobs") {
    if (method == "POST") {
      return add_job(service, request);
    }
    if (method == "GET") {
      json listed = json::array();
      for (const cluster::JobSpec& job : service.jobs()) {
        listed.push_back(cluster::to_json(job));
      }
      return json_response(200, {{"jobs", std::move(listed)}});
    }
    return method_not_allowed();
  }
  if (rest.starts_with("/jobs/")) {
    std::string id = rest.substr(6);
    constexpr std::string_view kProgress = "/progress";
    if (id.ends_with(kProgress)) {
      id.resize(id.size() - kProgress.size());
      if (id.empty() || id.find('/') != std::string::npos) {
        return json_response(404, {{"detail", "Not Found"}});
      }
      return method == "POST" ? set_progress(service, request, id) : method_not_allowed();
    }
    if (id.empty() || id.find('/') != std::string::npos) {
      return json_response(404, {{"detail", "Not Found"}});
    }
    if (method == "DELETE") {
      return change_response(service, 200, [&] { return service.remove_job(id); });
    }
    if (method == "GET") {
      for (const cluster::JobSpec& job : service.jobs()) {
        if (job.id == id) {
          return json_response(200, cluster::to_json(job));
        }
      }
      return message_response(404, fmt::format("no job '{}' is registered", id));
    }
    return method_not_allowed();
  }
  if (rest == "/cap") {
    if (method == "PUT") {
      return set_cap(service, request);
    }
    if (method == "GET") {
      const auto cap_w = service.cap_w();
      return json_response(200, {{"cap_w", cap_w ? json(*cap_w) : json(nullptr)}});
    }
    return method_not_allowed();
  }
  if (rest == "/forecast") {
    if (method == "PUT") {
      return set_forecast(service, request);
    }
    if (method == "DELETE") {
      return change_response(service, 200, [&] { return service.clear_forecast(); });
    }
    return method_not_allowed();
  }
  if (rest == "/leader") {
    return method == "GET" ? json_response(200, cluster::to_json(service.leadership()))
                           : method_not_allowed();
  }
  if (rest == "/decision") {
    if (method != "GET") {
      return method_not_allowed();
    }
    const auto decision = service.decision();
    if (!decision) {
      return message_response(404, "no decision yet: no cap is set (PUT /cluster/cap)");
    }
    return decision_response(200, service, decision);
  }
  if (rest.starts_with("/nodes/") && rest.ends_with("/heard")) {
    const std::string node = rest.substr(7, rest.size() - 7 - 6);
    if (node.empty() || node.find('/') != std::string::npos) {
      return json_response(404, {{"detail", "Not Found"}});
    }
    return method == "POST" ? change_response(service, 200, [&] { return service.heard_from(node); })
                            : method_not_allowed();
  }
  return json_response(404, {{"detail", "Not Found"}});
}

}  // namespace joule::server
