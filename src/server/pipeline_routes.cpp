// SPDX-License-Identifier: Apache-2.0
// The pipeline frequency planner's routes (Perseus): register a pipeline, upload its profile, fetch the
// time–energy frontier (computed once per profile and cached in the store, since planning can take seconds),
// fetch the plan for a target iteration time or with no slowdown, and report a straggler's iteration time to
// get the plan that fits it. Errors are {"message": …} with 400 (bad input), 404 (unknown pipeline) or 409
// (state: no profile yet, a registration that differs). The stored document is pipeline_document.cpp's, the
// frontier planning and caching pipeline_frontier.cpp's, the profile codec plan's (profile_codec.hpp).
#include <charconv>
#include <utility>

#include <fmt/format.h>

#include "joule/client/pipeline_spec.hpp"
#include "joule/core/json.hpp"
#include "joule/core/log.hpp"
#include "joule/core/validate.hpp"
#include "joule/plan/plan_io.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/profile_codec.hpp"

#include "server/pipeline_internal.hpp"
#include "server/service_internal.hpp"

namespace joule::server {

namespace {

using client::PipelineSpec;
using detail::bad_request;
using detail::ensure_frontier;
using detail::json_response;
using detail::load_pipeline;
using detail::LoadedPipeline;
using detail::message_response;
using detail::method_not_allowed;
using detail::PipelineDocument;
using detail::Planned;
using detail::read_pipeline;
using detail::unknown_pipeline;
using nlohmann::json;

// A profile replaced while its frontier was being planned makes a route plan again; this bounds it.
constexpr int kMaxPlanningRounds = 3;

// The planner routes answer malformed JSON with 400 and the parser's message (which names the field of a
// number out of range).
tl::expected<json, Response> parse_request_json(const Request& request) {
  auto parsed = parse_json(request.body);
  if (!parsed) {
    const JsonError& error = parsed.error();
    return tl::make_unexpected(message_response(400, error.kind == JsonError::Kind::kNumberOutOfRange
                                                         ? error.message
                                                         : fmt::format("malformed JSON: {}", error.message)));
  }
  return std::move(*parsed);
}

std::string random_token() {
  return fmt::format("{:016x}{:016x}", detail::random_u64(), detail::random_u64());
}

// The plan for `target` (neither a time nor a slowdown: the fastest plan, no slowdown) as plan_to_json() plus
// context.
tl::expected<json, Response> plan_response(const Planned& planned, const plan::PlanTarget& target) {
  const auto& frontier = planned.frontier->frontier;
  const PipelineSpec& spec = planned.document.spec;
  auto choice = plan::choose_plan(frontier, planned.frontier->max_clock, target, spec.p_blocking_w,
                                  static_cast<int>(spec.stages));
  if (!choice) {
    return tl::make_unexpected(bad_request(choice.error()));
  }
  const auto& point = frontier.points()[choice->index];
  json out = plan::plan_to_json(*planned.frontier->dag, point.knob, {point.time_s, point.energy_j});
  out["pipeline_id"] = *spec.pipeline_id;
  out["profile_revision"] = planned.document.profile_revision;
  out["index"] = choice->index;
  out["frontier_size"] = frontier.size();
  out["p_blocking_w"] = spec.p_blocking_w;
  out["target_time_s"] = choice->target_time_s ? json(*choice->target_time_s) : json(nullptr);
  out["energy_at_target_j"] = choice->energy_j;
  out["straggler_time_s"] =
      planned.document.straggler_time_s ? json(*planned.document.straggler_time_s) : json(nullptr);
  return out;
}

// The target a straggler's pace sets: none if it is no slower than our fastest plan.
std::optional<double> straggler_target(const Planned& planned) {
  const auto& straggler = planned.document.straggler_time_s;
  if (straggler && *straggler > planned.frontier->frontier.fastest().time_s) {
    return straggler;
  }
  return std::nullopt;
}

Result<double> parse_positive(const std::string& text, std::string_view name) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return fail(ErrorCode::kInvalidArgument, "{}: must be a number, got '{}'", name, text);
  }
  if (const auto checked = check_number(value, NumberRule::positive(), ""); !checked) {
    return fail(ErrorCode::kInvalidArgument, "{}: {}", name, checked.error().message());
  }
  return value;
}

Response frontier_route(Service::Impl& impl, const Request& request, const std::string& id) {
  auto planned = ensure_frontier(impl, request, id);
  if (!planned) {
    return planned.error();
  }
  const auto& cached = *planned->frontier;
  json points = json::array();
  for (size_t i = 0; i < cached.frontier.size(); ++i) {
    const auto& point = cached.frontier.points()[i];
    points.push_back({{"index", i}, {"time_s", point.time_s}, {"energy_j", point.energy_j}});
  }
  return json_response(
      200, {{"pipeline_id", id},
            {"profile_revision", planned->document.profile_revision},
            {"max_clock", {{"time_s", cached.max_clock.time_s}, {"energy_j", cached.max_clock.energy_j}}},
            {"points", std::move(points)},
            {"cuts", cached.cuts},
            {"planning_time_s", cached.planning_time_s},
            {"cached", planned->cached}});
}

Response plan_route(Service::Impl& impl, const Request& request, const std::string& id) {
  std::optional<double> target;
  std::optional<double> slowdown;
  if (const auto found = request.query.find("target_time_s"); found != request.query.end()) {
    auto value = parse_positive(found->second, "target_time_s");
    if (!value) {
      return bad_request(value.error());
    }
    target = *value;
  }
  if (const auto found = request.query.find("straggler_slowdown"); found != request.query.end()) {
    auto value = parse_positive(found->second, "straggler_slowdown");
    if (!value) {
      return bad_request(value.error());
    }
    if (const auto checked = check_number(*value, NumberRule{.min = 1}, ""); !checked) {
      return message_response(400, fmt::format("straggler_slowdown: {}", checked.error().message()));
    }
    slowdown = *value;
  }
  if (target && slowdown) {
    return message_response(400, "give target_time_s or straggler_slowdown, not both");
  }
  auto planned = ensure_frontier(impl, request, id);
  if (!planned) {
    return planned.error();
  }
  if (!target && !slowdown) {
    target = straggler_target(*planned);
  }
  auto out = plan_response(*planned, {.time_s = target, .slowdown = slowdown});
  return out ? json_response(200, *out) : out.error();
}

Response straggler_route(Service::Impl& impl, const Request& request, const std::string& id) {
  auto body = parse_request_json(request);
  if (!body) {
    return body.error();
  }
  if (!body->is_object() || !body->contains("iteration_time_s")) {
    return message_response(
        400, "iteration_time_s: field required (the straggler's iteration time in s, or null)");
  }
  std::optional<double> straggler;
  const json& value = (*body)["iteration_time_s"];
  if (!value.is_null()) {
    if (!value.is_number()) {
      return message_response(
          400, fmt::format("iteration_time_s: must be a number or null, got {}", describe_json(value)));
    }
    if (const auto checked = check_number(value.get<double>(), NumberRule::positive(), ""); !checked) {
      return message_response(400, fmt::format("iteration_time_s: {}", checked.error().message()));
    }
    straggler = value.get<double>();
  }
  for (int round = 0; round < kMaxPlanningRounds; ++round) {
    auto planned = ensure_frontier(impl, request, id);
    if (!planned) {
      return planned.error();
    }
    bool replan = false;
    const auto lock = [&](store::Transaction& transaction) {
      replan = false;
      return load_pipeline(transaction, id);
    };
    const auto apply = [&](store::Transaction& transaction, LoadedPipeline& document) -> Result<Response> {
      if (!document) {
        return unknown_pipeline(id);
      }
      if (document->profile_token != planned->document.profile_token) {
        replan = true;  // the profile changed since the frontier was planned
        return message_response(409, "the profile changed while planning; retry");
      }
      document->straggler_time_s = straggler;
      JOULE_TRY(transaction.update(detail::kPipelineKind, id, document->dump()));
      Planned current{*document, planned->frontier, planned->cached};
      auto out = plan_response(current, {.time_s = straggler_target(current)});
      if (!out) {
        return out.error();
      }
      return json_response(200, *out);
    };
    Response response = impl.transact_locked(request, lock, apply);
    if (!replan) {
      return response;
    }
  }
  return message_response(409, "the profile kept changing while planning; retry");
}

Response upload_profile(Service::Impl& impl, const Request& request, const std::string& id) {
  const auto lock = [&](store::Transaction& transaction) { return load_pipeline(transaction, id); };
  const auto apply = [&](store::Transaction& transaction, LoadedPipeline& document) -> Result<Response> {
    if (!document) {
      return unknown_pipeline(id);
    }
    PipelineDocument& pipeline = *document;
    auto profile = plan::parse_profile_upload(request.body, request.content_type, pipeline.spec.stages);
    if (!profile) {
      return bad_request(profile.error());
    }
    if (profile->stage_count() != pipeline.spec.stages) {
      return message_response(400, fmt::format("the profile has {} stages but pipeline {} has {}",
                                               profile->stage_count(), id, pipeline.spec.stages));
    }
    std::string text = plan::profile_csv(*profile);
    const bool changed = !pipeline.profile || *pipeline.profile != text;
    if (changed) {
      pipeline.profile = std::move(text);
      ++pipeline.profile_revision;
      pipeline.profile_token = random_token();
      auto erased = transaction.erase(detail::kFrontierKind, id);  // the old frontier is stale
      if (!erased) {
        return tl::make_unexpected(erased.error());
      }
      JOULE_TRY(transaction.update(detail::kPipelineKind, id, pipeline.dump()));
    }
    return json_response(200, {{"pipeline_id", id},
                               {"profile_revision", pipeline.profile_revision},
                               {"changed", changed},
                               {"stages", profile->stage_count()},
                               {"frequencies_mhz", profile->frequencies_mhz()}});
  };
  return impl.transact_locked(request, lock, apply);
}

Response pipeline_status(Service::Impl& impl, const Request& request, const std::string& id) {
  const auto status = [&](store::Transaction&, const PipelineDocument& pipeline) -> Result<Response> {
    return json_response(
        200,
        {{"pipeline_id", id},
         {"spec", pipeline.spec.to_json()},
         {"profile_revision", pipeline.profile_revision},
         {"has_profile", pipeline.profile.has_value()},
         {"frontier_ready", pipeline.profile && pipeline.frontier_token == pipeline.profile_token},
         {"straggler_time_s", pipeline.straggler_time_s ? json(*pipeline.straggler_time_s) : json(nullptr)},
         {"registered", format_iso8601_utc(pipeline.registered_unix_ns)}});
  };
  return read_pipeline(impl, request, id, status);
}

Response get_profile(Service::Impl& impl, const Request& request, const std::string& id) {
  const auto profile = [&](store::Transaction&, const PipelineDocument& pipeline) -> Result<Response> {
    if (!pipeline.profile) {
      return message_response(404, fmt::format("pipeline {} has no profile yet", id));
    }
    Response response;
    response.body = *pipeline.profile;
    response.content_type = "text/csv";
    return response;
  };
  return read_pipeline(impl, request, id, profile);
}

Response delete_pipeline(Service::Impl& impl, const Request& request, const std::string& id) {
  const auto lock = [&](store::Transaction& transaction) {
    return transaction.get_for_update(detail::kPipelineKind, id);
  };
  const auto apply = [&](store::Transaction& transaction, const auto& found) -> Result<Response> {
    if (!found) {
      return unknown_pipeline(id);
    }
    for (const auto kind : {detail::kFrontierKind, detail::kPipelineKind}) {
      JOULE_TRY(transaction.erase(kind, id));
    }
    return json_response(200, nullptr);
  };
  return impl.transact_locked(request, lock, apply);
}

}  // namespace

Response Service::Impl::register_pipeline(const Request& request) {
  auto body = parse_request_json(request);
  if (!body) {
    return body.error();
  }
  auto spec = PipelineSpec::from_json(*body);
  if (!spec) {
    return bad_request(spec.error());
  }
  constexpr int64_t kMaxSide = int64_t{1} << 20;
  if (spec->stages > kMaxSide || spec->microbatches > kMaxSide ||
      2 * spec->stages * spec->microbatches > options.max_pipeline_computations) {
    return message_response(
        400,
        fmt::format("stages x microbatches: {} x {} pipelines have {} computations, more than this server "
                    "plans ({})",
                    spec->stages, spec->microbatches,
                    2 * std::min(spec->stages, kMaxSide) * std::min(spec->microbatches, kMaxSide),
                    options.max_pipeline_computations));
  }
  const uint64_t base_entropy =
      request.request_id ? detail::fnv1a(*request.request_id) : detail::random_u64();
  const bool generated = !spec->pipeline_id;
  const auto candidate_of = [&](int draw) {
    PipelineSpec candidate = *spec;
    if (generated) {
      const uint64_t entropy = detail::fnv1a(fmt::format("{:x}/{}", base_entropy, draw));
      candidate.pipeline_id = fmt::format("{}-{:08x}", candidate.pipeline_id_prefix, entropy >> 32);
    }
    return candidate;
  };
  // The first draw's pipeline is locked before the replay check (a retry draws the same ids).
  const auto lock = [&](store::Transaction& transaction) {
    return load_pipeline(transaction, *candidate_of(0).pipeline_id);
  };
  const auto apply = [&](store::Transaction& transaction, LoadedPipeline& first) -> Result<Response> {
    const auto attempt = [&](int draw) -> Result<std::optional<Response>> {
      const PipelineSpec candidate = candidate_of(draw);
      const std::string& id = *candidate.pipeline_id;
      LoadedPipeline existing;
      if (draw == 0) {
        existing.swap(first);  // loaded (and locked) by `lock`
      } else {
        auto loaded = JOULE_TRY(load_pipeline(transaction, id));
        existing = std::move(loaded);
      }
      if (existing) {
        if (generated) {
          return std::nullopt;  // taken: draw another id
        }
        if (existing->spec != candidate) {
          return message_response(
              409, fmt::format("pipeline {} is registered with a different configuration ({}); "
                               "use a new pipeline_id",
                               id, existing->spec.to_json().dump()));
        }
        return json_response(200, candidate.to_json());
      }
      PipelineDocument document;
      document.spec = candidate;
      document.registered_unix_ns = detail::unix_ns(clock);
      auto inserted = transaction.insert(detail::kPipelineKind, id, document.dump());
      if (!inserted) {
        return tl::make_unexpected(inserted.error());
      }
      if (!*inserted) {
        if (generated) {
          return std::nullopt;
        }
        return message_response(503, fmt::format("pipeline {} is being registered concurrently; retry", id));
      }
      log().info("registered pipeline {}", id);
      return json_response(201, candidate.to_json());
    };
    return detail::draw_unused_id(fmt::format("pipeline id with prefix '{}'", spec->pipeline_id_prefix),
                                  attempt);
  };
  return transact_locked(request, lock, apply);
}

Response Service::Impl::pipeline_route(const Request& request, const std::string& id,
                                       const std::string& rest) {
  const std::string& method = request.method;
  if (rest.empty() || rest == "/") {
    if (method == "GET") {
      return pipeline_status(*this, request, id);
    }
    return method == "DELETE" ? delete_pipeline(*this, request, id) : method_not_allowed();
  }
  if (rest == "/profile") {
    if (method == "PUT" || method == "POST") {
      return upload_profile(*this, request, id);
    }
    return method == "GET" ? get_profile(*this, request, id) : method_not_allowed();
  }
  if (rest == "/frontier") {
    return method == "GET" ? frontier_route(*this, request, id) : method_not_allowed();
  }
  if (rest == "/plan") {
    return method == "GET" ? plan_route(*this, request, id) : method_not_allowed();
  }
  if (rest == "/straggler") {
    return method == "POST" ? straggler_route(*this, request, id) : method_not_allowed();
  }
  return json_response(404, {{"detail", "Not Found"}});
}

}  // namespace joule::server
