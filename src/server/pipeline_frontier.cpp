// SPDX-License-Identifier: Apache-2.0
// A pipeline's frontier: planned once per profile token (single flight in this process), kept in the
// FrontierCache and stored next to the pipeline, so that other requests and other servers on the database
// reuse it instead of planning again.
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/frontier.hpp"
#include "joule/core/log.hpp"
#include "joule/plan/planner.hpp"

#include "server/pipeline_internal.hpp"

namespace joule::server::detail {

namespace {

using client::PipelineSpec;
using nlohmann::json;

constexpr std::string_view kFrontierFormat = "joule.server.pipeline_frontier";
constexpr int kFrontierFormatVersion = 1;

Result<std::shared_ptr<const CachedFrontier>> compute_frontier(const PipelineDocument& document,
                                                               double max_planning_units) {
  auto profile = JOULE_TRY(plan::Profile::parse(*document.profile, "stored profile"));
  const PipelineSpec& spec = document.spec;
  auto dag = JOULE_TRY(plan::build_pipeline(static_cast<int>(spec.stages),
                                            static_cast<int>(spec.microbatches), spec.schedule));
  plan::PlannerOptions options;
  options.unit_time_s = spec.unit_time_s;
  options.p_blocking_w = spec.p_blocking_w;
  options.max_planning_units = max_planning_units;
  // The planner's work follows the iteration at every computation's slowest row (whatever its clock), in
  // units of unit_time_s: refused here, before anything is planned or allocated.
  if (auto bounded = plan::check_planning_units(dag, profile, options); !bounded) {
    return fail(ErrorCode::kInvalidArgument, "unit_time_s: {} s is too fine for this profile: {}",
                spec.unit_time_s, bounded.error().message());
  }
  const auto started = std::chrono::steady_clock::now();
  auto result = JOULE_TRY(plan::plan_frontier(dag, profile, options));
  auto frontier = std::make_shared<CachedFrontier>();
  frontier->planning_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  frontier->frontier = std::move(result.frontier);
  frontier->max_clock = result.max_clock;
  frontier->cuts = static_cast<int64_t>(result.iterations);
  frontier->dag = std::make_shared<const plan::PipelineDag>(std::move(dag));
  log().info("planned pipeline {}: {} plans in {:.3f} s", *spec.pipeline_id, frontier->frontier.size(),
             frontier->planning_time_s);
  return std::shared_ptr<const CachedFrontier>(std::move(frontier));
}

std::string dump_frontier(const std::string& token, const CachedFrontier& frontier) {
  json points = json::array();
  for (const auto& point : frontier.frontier.points()) {
    points.push_back({point.time_s, point.energy_j, point.knob});
  }
  return json{
      {"format", kFrontierFormat},  {"version", kFrontierFormatVersion},
      {"profile_token", token},     {"max_clock", {frontier.max_clock.time_s, frontier.max_clock.energy_j}},
      {"cuts", frontier.cuts},      {"planning_time_s", frontier.planning_time_s},
      {"points", std::move(points)}}
      .dump();
}

Result<std::shared_ptr<const CachedFrontier>> parse_frontier(const PipelineDocument& document,
                                                             std::string_view body) {
  try {
    const json stored = json::parse(body);
    std::vector<FrontierPoint<plan::FrequencyPlan>> points;
    for (const auto& point : stored.at("points")) {
      points.push_back(
          {point.at(2).get<plan::FrequencyPlan>(), point.at(0).get<double>(), point.at(1).get<double>()});
    }
    const PipelineSpec& spec = document.spec;
    auto dag = JOULE_TRY(plan::build_pipeline(static_cast<int>(spec.stages),
                                              static_cast<int>(spec.microbatches), spec.schedule));
    auto frontier = std::make_shared<CachedFrontier>();
    frontier->frontier = Frontier<plan::FrequencyPlan>::from_points(std::move(points));
    frontier->max_clock = {stored.at("max_clock").at(0).get<double>(),
                           stored.at("max_clock").at(1).get<double>()};
    frontier->cuts = stored.at("cuts").get<int64_t>();
    frontier->planning_time_s = stored.at("planning_time_s").get<double>();
    frontier->dag = std::make_shared<const plan::PipelineDag>(std::move(dag));
    return std::shared_ptr<const CachedFrontier>(std::move(frontier));
  } catch (const std::exception& error) {
    return fail(ErrorCode::kParse, "the stored frontier of pipeline {} is corrupt: {}",
                *document.spec.pipeline_id, error.what());
  }
}

}  // namespace

tl::expected<Planned, Response> ensure_frontier(Service::Impl& impl, const Request& request,
                                                const std::string& id) {
  std::optional<PipelineDocument> snapshot;
  std::shared_ptr<const CachedFrontier> found;
  const auto look = [&](store::Transaction& transaction, PipelineDocument& document) -> Result<Response> {
    snapshot.reset();
    found.reset();
    if (!document.profile) {
      return message_response(
          409, fmt::format("pipeline {} has no profile yet: PUT /pipelines/{}/profile first", id, id));
    }
    snapshot = std::move(document);
    found = impl.frontiers.find(snapshot->profile_token);
    if (!found && snapshot->frontier_token == snapshot->profile_token) {
      auto stored = transaction.get_for_update(kFrontierKind, id);
      if (!stored) {
        return tl::make_unexpected(stored.error());
      }
      if (*stored) {
        auto parsed = parse_frontier(*snapshot, (*stored)->body);
        if (!parsed) {
          // A damaged cache entry is planned again rather than failing the pipeline.
          log().warn("{}", parsed.error().message());
        } else {
          found = *parsed;
          impl.frontiers.put(snapshot->profile_token, found);
        }
      }
    }
    return json_response(200, nullptr);
  };
  Response looked = read_pipeline(impl, request, id, look);
  if (looked.status != 200) {
    return tl::make_unexpected(looked);
  }
  if (found) {
    return Planned{std::move(*snapshot), std::move(found), true};
  }
  const std::string token = snapshot->profile_token;
  auto computed =
      impl.planning.run(token, [&] { return compute_frontier(*snapshot, impl.options.max_planning_units); });
  if (!computed) {
    if (computed.error().code() == ErrorCode::kInvalidArgument ||
        computed.error().code() == ErrorCode::kParse) {
      return tl::make_unexpected(bad_request(computed.error()));
    }
    log().error("planning pipeline {}: {}", id, computed.error().message());
    return tl::make_unexpected(message_response(500, computed.error().message()));
  }
  // Store it for every server on this database, unless the profile changed meanwhile.
  Response stored = impl.transact_read(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load_pipeline(transaction, id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    if (!*document || (*document)->profile_token != token || (*document)->frontier_token == token) {
      return json_response(200, nullptr);
    }
    auto existing = JOULE_TRY(transaction.get_for_update(kFrontierKind, id));
    const std::string body = dump_frontier(token, **computed);
    JOULE_TRY(existing ? transaction.update(kFrontierKind, id, body)
                       : transaction.insert(kFrontierKind, id, body).map([](bool) {}));
    (*document)->frontier_token = token;
    JOULE_TRY(transaction.update(kPipelineKind, id, (*document)->dump()));
    return json_response(200, nullptr);
  });
  if (stored.status != 200) {
    return tl::make_unexpected(stored);
  }
  impl.frontiers.put(token, *computed);
  return Planned{std::move(*snapshot), std::move(*computed), false};
}

}  // namespace joule::server::detail
