// SPDX-License-Identifier: Apache-2.0
// Zeus's pipeline frequency optimizer routes (zeus/optimizer/pipeline_frequency/server/router.py, Zeus 0.16):
// GET /info, POST /register_job, POST /register_rank/{job_id}, GET /schedule/{job_id}?rank=,
// POST /result/{job_id}. Same field names, defaults and status codes (422 with pydantic's detail for a bad
// body); the decisions are the live scheduler's (joule/plan/live.hpp), stored per job so that a restart
// loses nothing. GET /schedule waits, as Zeus's does, until the round it answers is ready, holding only its
// connection (live_service.cpp). joule's additions: a round number in results, GET and DELETE /job/{job_id}.
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/json_fields.hpp"
#include "joule/core/log.hpp"
#include "joule/plan/profile_codec.hpp"

#include "server/live_service.hpp"
#include "server/service_internal.hpp"

namespace joule::server {

namespace {

using detail::json_response;
using detail::validation_response;
using nlohmann::json;

constexpr size_t kMaxJobMetadataLength = 200;
constexpr double kMaxWaitS = 3600;

// FastAPI's HTTPException body: {"detail": "..."}.
Response detail_response(int status, std::string_view message) {
  return json_response(status, {{"detail", message}});
}

Response unknown_job(const std::string& job_id) {
  return detail_response(404, fmt::format("job '{}' is not registered (POST /register_job first)", job_id));
}

// The scheduler's error as the response: a field problem is FastAPI's 422 naming the field, a request out of
// turn 409, anything else (planning) 500.
Response scheduler_error(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kNotFound:  // a rank that is not part of the job: the body's `rank` is wrong
      return validation_response(error);
    case ErrorCode::kState:
      return detail_response(409, error.message());
    default:
      return detail_response(500, error.message());
  }
}

template <class T, class Parse>
tl::expected<T, Response> parse_wire(const Request& request, Parse&& parse) {
  auto body = detail::parse_body(request);
  if (!body) {
    return tl::make_unexpected(body.error());
  }
  auto parsed = catch_json_fields<T>([&] { return parse(*body); });
  if (!parsed) {
    return tl::make_unexpected(validation_response(parsed.error()));
  }
  return std::move(*parsed);
}

int to_int(const JsonFields& fields, std::string_view key, int64_t value) {
  if (value < INT32_MIN || value > INT32_MAX) {
    throw_json_field_error(ErrorCode::kInvalidArgument, fields.where(key), "value is not a valid integer");
  }
  return static_cast<int>(value);
}

// Zeus's JobInfo: job_id "" (the server assigns it), pp/dp/tp_degree and world_size ≥ 1, their product the
// world size, job_metadata optional; joule's num_microbatches and schedule.
plan::LiveJobInfo parse_job_info(const json& body, const ServiceOptions& options) {
  const JsonFields fields(body, "", ErrorCode::kInvalidArgument);
  plan::LiveJobInfo info;
  if (const json* job_id = fields.optional("job_id")) {
    if (!fields.to_string_value(*job_id, "job_id").empty()) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "job_id",
                             "must be empty: the server assigns the job id");
    }
  }
  info.pp_degree = to_int(fields, "pp_degree", fields.integer("pp_degree"));
  info.dp_degree = to_int(fields, "dp_degree", fields.integer("dp_degree"));
  info.tp_degree = to_int(fields, "tp_degree", fields.integer("tp_degree"));
  info.world_size = to_int(fields, "world_size", fields.integer("world_size"));
  if (const json* metadata = fields.optional("job_metadata")) {
    info.job_metadata = fields.to_string_value(*metadata, "job_metadata");
    if (info.job_metadata.size() > kMaxJobMetadataLength) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "job_metadata",
                             fmt::format("must be at most {} characters", kMaxJobMetadataLength));
    }
    for (const char c : info.job_metadata) {
      if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        throw_json_field_error(ErrorCode::kInvalidArgument, "job_metadata",
                               "must not contain '/' or control characters (it becomes part of the job id "
                               "in URLs)");
      }
    }
  }
  info.num_microbatches = options.live_default_microbatches;
  if (const json* microbatches = fields.optional("num_microbatches")) {
    info.num_microbatches =
        to_int(fields, "num_microbatches", fields.to_integer(*microbatches, "num_microbatches"));
  } else if (info.num_microbatches == 0) {
    throw_json_field_error(ErrorCode::kInvalidArgument, "num_microbatches",
                           "field required (joule lays out an iteration from it; or start joule serve with "
                           "--pfo-microbatches N for clients that do not send it)");
  }
  if (const json* schedule = fields.optional("schedule")) {
    auto parsed = plan::parse_schedule(fields.to_string_value(*schedule, "schedule"));
    if (!parsed) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "schedule", parsed.error().message());
    }
    info.schedule = *parsed;
  }
  return info;
}

// A job's registration: Zeus's JobInfo and joule's `card` (a frontier card of the stage GPUs, as `joule
// probe` writes it; the client checked it against its GPU: plan::read_stage_card()).
struct JobRegistration {
  plan::LiveJobInfo info;
  std::optional<probe::Card> card;
};

JobRegistration parse_job_registration(const json& body, const ServiceOptions& options) {
  JobRegistration registration{parse_job_info(body, options), std::nullopt};
  const JsonFields fields(body, "", ErrorCode::kInvalidArgument);
  if (const json* card = fields.optional("card"); card != nullptr && !card->is_null()) {
    if (!card->is_object()) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "card",
                             "must be a frontier card (a JSON object, as joule probe writes it)");
    }
    auto parsed = probe::parse_card(card->dump(), "the job's card");
    if (!parsed) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "card", parsed.error().message());
    }
    registration.card = std::move(*parsed);
  }
  return registration;
}

// Zeus's RankInfo.
plan::LiveRankInfo parse_rank_info(const json& body) {
  const JsonFields fields(body, "", ErrorCode::kInvalidArgument);
  plan::LiveRankInfo info;
  info.rank = to_int(fields, "rank", fields.integer("rank"));
  info.dp_rank = to_int(fields, "dp_rank", fields.integer("dp_rank"));
  info.pp_rank = to_int(fields, "pp_rank", fields.integer("pp_rank"));
  info.tp_rank = to_int(fields, "tp_rank", fields.integer("tp_rank"));
  for (const auto& [name, value] : {std::pair<std::string_view, int>{"rank", info.rank},
                                    {"dp_rank", info.dp_rank},
                                    {"pp_rank", info.pp_rank},
                                    {"tp_rank", info.tp_rank}}) {
    if (value < 0) {
      throw_json_field_error(ErrorCode::kInvalidArgument, std::string(name),
                             "ensure this value is greater than or equal to 0");
    }
  }
  const json& frequencies = fields.require("available_frequencies");
  if (!frequencies.is_array()) {
    throw_json_field_error(ErrorCode::kInvalidArgument, "available_frequencies", "value is not a valid list");
  }
  for (size_t i = 0; i < frequencies.size(); ++i) {
    const std::string at = fmt::format("available_frequencies[{}]", i);
    const int64_t mhz = fields.to_integer(frequencies[i], at);
    if (mhz <= 0 || mhz > UINT32_MAX) {
      throw_json_field_error(ErrorCode::kInvalidArgument, at,
                             fmt::format("must be a clock in MHz, got {}", mhz));
    }
    info.available_frequencies_mhz.push_back(static_cast<uint32_t>(mhz));
  }
  return info;
}

std::vector<double> number_list(const JsonFields& fields, const json& value, const std::string& at) {
  if (!value.is_array()) {
    throw_json_field_error(ErrorCode::kInvalidArgument, at, "value is not a valid list");
  }
  std::vector<double> numbers;
  numbers.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    numbers.push_back(fields.to_number(value[i], fmt::format("{}[{}]", at, i)));
  }
  return numbers;
}

// Zeus's ProfilingResult: time_breakdown and energy_breakdown default to {}; joule's thermally_steady is
// optional (absent or null: steady, so Zeus's clients warm up for one round as before).
plan::LiveResult parse_result(const json& body) {
  const JsonFields fields(body, "", ErrorCode::kInvalidArgument);
  plan::LiveResult result;
  result.rank = to_int(fields, "rank", fields.integer("rank"));
  if (result.rank < 0) {
    throw_json_field_error(ErrorCode::kInvalidArgument, "rank",
                           "ensure this value is greater than or equal to 0");
  }
  result.iter_time_s = number_list(fields, fields.require("iter_time"), "iter_time");
  result.iter_energy_j = number_list(fields, fields.require("iter_energy"), "iter_energy");
  if (const json* steady = fields.optional("thermally_steady")) {
    result.thermally_steady = fields.to_boolean(*steady, "thermally_steady");
  }
  if (const json* round = fields.optional("round"); round != nullptr && !round->is_null()) {
    result.round = fields.to_integer(*round, "round");
    if (*result.round < 0) {
      throw_json_field_error(ErrorCode::kInvalidArgument, "round",
                             "ensure this value is greater than or equal to 0");
    }
  }
  for (const auto& [key, target] : {std::pair<std::string_view, decltype(&result.time_breakdown_s)>{
                                        "time_breakdown", &result.time_breakdown_s},
                                    {"energy_breakdown", &result.energy_breakdown_j}}) {
    const json* breakdown = fields.optional(key);
    if (breakdown == nullptr) {
      continue;
    }
    if (!breakdown->is_object()) {
      throw_json_field_error(ErrorCode::kInvalidArgument, std::string(key), "value is not a valid dict");
    }
    for (const auto& [name, lists] : breakdown->items()) {
      const std::string at = fmt::format("{}.{}", key, name);
      if (!lists.is_array()) {
        throw_json_field_error(ErrorCode::kInvalidArgument, at, "value is not a valid list");
      }
      auto& parsed = (*target)[name];
      for (size_t i = 0; i < lists.size(); ++i) {
        parsed.push_back(number_list(fields, lists[i], fmt::format("{}[{}]", at, i)));
      }
    }
  }
  return result;
}

json schedule_json(const plan::LiveSchedule& schedule, const std::string& failure) {
  json frequencies = json::array();
  for (const auto& [name, mhz] : schedule.frequencies) {
    frequencies.push_back(json::array({name, mhz}));
  }
  json body = {{"rank", schedule.rank},
               {"frequencies", std::move(frequencies)},
               {"round", schedule.round},
               {"phase", plan::to_string(schedule.phase)},
               {"iterations", schedule.iterations},
               {"predicted", nullptr}};
  if (!failure.empty()) {
    body["failure"] = failure;
  }
  if (schedule.predicted) {
    const plan::LivePrediction& predicted = *schedule.predicted;
    body["predicted"] = {{"iteration_time_s", predicted.iteration_time_s},
                         {"compute_time_s", predicted.compute_time_s},
                         {"iteration_energy_j", predicted.iteration_energy_j},
                         {"max_clock_time_s", predicted.max_clock_time_s},
                         {"max_clock_energy_j", predicted.max_clock_energy_j},
                         {"p_blocking_w", predicted.p_blocking_w}};
  }
  return body;
}

std::string utc_stamp(int64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}-{:02}-{:02}-{:02}", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec);
}

// A GET /schedule whose wait ended before the others were done: nothing is wrong, the rank asks again
// (joule's client does when Retry-After is given; Zeus's never gets here, as it reports nothing).
Response ask_again(Response response) {
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

// What to wait for, and whom: the message of a GET /schedule that waited until its deadline.
std::string waiting_for_reports(const plan::LiveState& state, int rank, const std::vector<int>& missing,
                                int count) {
  return fmt::format(
      "rank: rank {} reported round {}; the next round starts when ranks {} report it", rank, state.round(),
      count > static_cast<int>(missing.size())
          ? fmt::format("{} and {} more", fmt::join(missing, ", "), count - static_cast<int>(missing.size()))
          : fmt::format("{}", fmt::join(missing, ", ")));
}

// Logs what a completed round changed in a job (once per change, not per round of a long warm-up).
// GET /job's `card`: null without one; else its name, the clocks it profiles, and the decision.
json card_json(const plan::LiveState& state) {
  if (!state.card_given()) {
    return nullptr;
  }
  std::vector<uint32_t> clocks;
  for (const size_t index : state.card_clocks()) {
    clocks.push_back(state.frequencies_mhz()[index]);
  }
  return {{"source", state.card_source()},
          {"probe_clocks", clocks},
          {"fallback", state.card_fallback()},
          {"summary", state.card_summary()}};
}

void log_round(const std::string& job_id, const plan::LiveState& before, const plan::LiveState& after) {
  if (!after.rerun_reason().empty()) {
    log().warn("pipeline-frequency job {}: round {} is run again: {}", job_id, before.round(),
               after.rerun_reason());
    return;
  }
  if (before.phase() == plan::LivePhase::kWarmup) {
    if (after.phase() == plan::LivePhase::kWarmup && after.warmup_rounds() == 1) {
      log().info(
          "pipeline-frequency job {}: waiting for a thermal steady state ({} ranks not steady yet: {})",
          job_id, after.unsteady_count(), fmt::join(after.unsteady_ranks(), ", "));
    } else if (after.warmup_gave_up()) {
      log().warn(
          "pipeline-frequency job {}: profiling after {} warm-up rounds (max_warmup_rounds) although {} "
          "ranks "
          "are not thermally steady ({})",
          job_id, after.warmup_rounds(), after.unsteady_count(), fmt::join(after.unsteady_ranks(), ", "));
    } else if (after.phase() != plan::LivePhase::kWarmup && after.warmup_rounds() > 1) {
      log().info("pipeline-frequency job {}: every rank is thermally steady after {} warm-up rounds", job_id,
                 after.warmup_rounds());
    }
  }
  if (after.card_summary() != before.card_summary() && !after.card_summary().empty()) {
    // Which path the card's job takes, and why.
    if (after.card_fallback()) {
      log().warn("pipeline-frequency job {}: {}", job_id, after.card_summary());
    } else {
      log().info("pipeline-frequency job {}: {}", job_id, after.card_summary());
    }
  }
  if (after.phase() != before.phase()) {
    log().info("pipeline-frequency job {}: round {} is {}", job_id, after.round(),
               plan::to_string(after.phase()));
  }
  if (after.straggler_time_s() != before.straggler_time_s()) {
    log().info(
        "pipeline-frequency job {}: straggler pace {}", job_id,
        after.straggler_time_s() ? fmt::format("{:.6f} s", *after.straggler_time_s()) : "none (recovered)");
  }
}

}  // namespace

namespace detail {

Response LiveService::info() const {
  const ServiceOptions& options = service_.options;
  const plan::LiveOptions& live = options.live;
  const plan::LiveLimits& limits = options.live_limits;
  return json_response(200, {{"scheduler", "joule.perseus"},
                             {"scheduler_args",
                              {{"profile_samples", live.profile_samples},
                               {"profile_stop_energy_rise", live.profile_stop_energy_rise},
                               {"profile_patience", live.profile_patience},
                               {"planned_round_iterations", live.planned_round_iterations},
                               {"default_p_blocking_w", live.default_p_blocking_w},
                               {"unit_time_s", live.unit_time_s},
                               {"straggler_enter", live.straggler_enter},
                               {"straggler_exit", live.straggler_exit},
                               {"straggler_retarget", live.straggler_retarget},
                               {"straggler_confirm_rounds", live.straggler_confirm_rounds},
                               {"max_warmup_rounds", live.max_warmup_rounds},
                               {"default_microbatches", options.live_default_microbatches},
                               {"profile_given", options.live_profile_csv.has_value()},
                               {"card_given", options.live_card.has_value()},
                               {"max_world_size", limits.max_world_size},
                               {"max_frequencies_per_rank", limits.max_frequencies_per_rank},
                               {"max_computations", limits.max_computations},
                               {"max_result_bytes", options.live_max_result_bytes},
                               {"max_job_idle_s", options.live_max_job_idle.count()},
                               {"registrations_per_minute", options.live_registrations_per_minute}}},
                             {"store", service_.store.description()}});
}

void LiveService::handle(const Request& request, std::string_view route, const std::string& job_id,
                         const std::shared_ptr<ResponseSink>& sink) {
  const std::string& method = request.method;
  if (route == "/schedule/" && method == "GET") {
    schedule(request, job_id, sink);  // answers now or once the round is ready
  } else if (route == "/info") {
    sink->respond(method == "GET" ? info() : method_not_allowed());
  } else if (route == "/register_job") {
    sink->respond(method == "POST" ? register_job(request) : method_not_allowed());
  } else if (route == "/register_rank/") {
    sink->respond(method == "POST" ? register_rank(request, job_id) : method_not_allowed());
  } else if (route == "/result/") {
    sink->respond(method == "POST" ? report_result(request, job_id) : method_not_allowed());
  } else if (route == "/job/" && method == "GET") {
    sink->respond(get_job(request, job_id));
  } else if (route == "/job/" && method == "DELETE") {
    sink->respond(delete_job(request, job_id));
  } else {
    sink->respond(method_not_allowed());
  }
}

Response LiveService::register_job(const Request& request) {
  const ServiceOptions& options = service_.options;
  if (double retry_after_s = 0; !admit_registration(request.peer, retry_after_s)) {
    Response refused = detail_response(
        429, fmt::format("too many job registrations from {}: at most {} per minute (joule serve "
                         "--pfo-registrations-per-minute); retry in {:.0f} s",
                         request.peer.empty() ? "this client" : request.peer,
                         options.live_registrations_per_minute, std::ceil(retry_after_s)));
    refused.headers.emplace_back("Retry-After", fmt::format("{:.0f}", std::ceil(retry_after_s)));
    return refused;
  }
  auto registration = parse_wire<JobRegistration>(
      request, [&](const json& body) { return parse_job_registration(body, options); });
  if (!registration) {
    return registration.error();
  }
  const plan::LiveJobInfo* info = &registration->info;
  struct Created {
    plan::LiveState state;
    plan::LiveData data;
  };
  const auto make_job = [&](const std::string& id) -> Result<Created> {
    plan::LiveJobInfo named = *info;
    named.job_id = id;
    plan::LiveData data;
    auto state = JOULE_TRY(plan::LiveState::create(std::move(named), options.live, options.live_limits));
    if (options.live_profile_csv) {
      JOULE_TRY(state.use_profile(*options.live_profile_csv, data));
    }
    if (registration->card) {
      JOULE_TRY(state.use_card(*registration->card,
                               fmt::format("the job's card ({})", registration->card->device.model), data));
    } else if (options.live_card && !options.live_profile_csv) {
      JOULE_TRY(state.use_card(*options.live_card, options.live_card_source, data));
    }
    return Created{std::move(state), std::move(data)};
  };
  // Checked once before the transaction; the job is created again below under its drawn id.
  const auto checked = make_job("");
  if (!checked) {
    return scheduler_error(checked.error());
  }
  if (const size_t most = checked->state.max_result_bytes(); most > options.live_max_result_bytes) {
    return validation_response(Error(
        ErrorCode::kInvalidArgument,
        fmt::format("num_microbatches: a rank's result of {} microbatches over {} iterations a round can be "
                    "{} bytes, more than the {} this server takes in POST /result (joule serve "
                    "--pfo-max-result-kib; fewer --pfo-round-iterations also shrink it)",
                    info->num_microbatches, options.live.planned_round_iterations, most,
                    options.live_max_result_bytes)));
  }
  // Zeus's id (time, degrees, scheduler, metadata) and 64 random bits: an id cannot be guessed, and it is
  // what a rank's requests present.
  const std::string base =
      fmt::format("{}+dp{}+pp{}+tp{}+perseus{}", utc_stamp(now_unix_ns()), info->dp_degree, info->pp_degree,
                  info->tp_degree, info->job_metadata.empty() ? "" : "+" + info->job_metadata);
  std::optional<std::pair<std::string, plan::LiveState>> created;
  Response response = service_.transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    created.reset();
    if (auto replayed = JOULE_TRY(service_.replay(transaction, request))) {
      return std::move(*replayed);
    }
    return draw_unused_id("job id", [&](int /*draw*/) -> Result<std::optional<Response>> {
      const std::string candidate = fmt::format("{}+{:016x}", base, random_u64());
      Created job = JOULE_TRY(make_job(candidate));
      job.state.touch(now_unix_ns());
      if (!JOULE_TRY(transaction.insert(kLiveJobKind, candidate, job.state.dump()))) {
        return std::nullopt;  // taken: draw another id
      }
      JOULE_TRY(save_data(transaction, candidate, job.data));
      log().info("pipeline-frequency job {} registered ({} ranks, {} microbatches)", candidate,
                 info->world_size, info->num_microbatches);
      created.emplace(candidate, std::move(job.state));
      return json_response(200, candidate);
    });
  });
  if (created) {
    changed(created->first, created->second);  // starts expiry, which also covers jobs never continued
  }
  return response;
}

Response LiveService::change_job(const Request& request, const std::string& job_id,
                                 const StateChange& apply) {
  std::optional<plan::LiveState> changed_state;
  const auto lock = [&](store::Transaction& transaction) {
    changed_state.reset();
    return load_state(transaction, job_id);
  };
  Response response = service_.transact_locked(
      request, lock,
      [&](store::Transaction& transaction, std::optional<plan::LiveState>& state) -> Result<Response> {
        if (!state) {
          return unknown_job(job_id);
        }
        if (auto refused = JOULE_TRY(apply(transaction, *state))) {
          return std::move(*refused);
        }
        state->touch(now_unix_ns());
        JOULE_TRY(save_state(transaction, job_id, *state));
        changed_state = *state;
        return json_response(200, nullptr);
      });
  if (changed_state && !response.replayed) {
    changed(job_id, *changed_state);
  }
  return response;
}

Response LiveService::register_rank(const Request& request, const std::string& job_id) {
  auto rank = parse_wire<plan::LiveRankInfo>(request, parse_rank_info);
  if (!rank) {
    return rank.error();
  }
  return change_job(
      request, job_id,
      [&](store::Transaction& transaction, plan::LiveState& state) -> Result<std::optional<Response>> {
        if (JOULE_TRY(load_rank(transaction, job_id, state, rank->rank))) {
          return scheduler_error(plan::LiveState::already_registered(rank->rank));
        }
        if (const auto position = state.position_index(*rank)) {
          if (const auto holder = JOULE_TRY(position_holder(transaction, job_id, state, *position))) {
            return scheduler_error(plan::LiveState::position_taken(
                {rank->rank, rank->dp_rank, rank->pp_rank, rank->tp_rank}, *holder));
          }
        }
        const auto position = state.check_registration(*rank);
        if (!position) {
          return scheduler_error(position.error());
        }
        const bool last = state.registered() + 1 == state.info().world_size;
        plan::LiveData data;
        if (last) {
          data = *JOULE_TRY(load_data(transaction, job_id, state));
        }
        state.add_rank(*rank, data);
        JOULE_TRY(save_rank(transaction, job_id, state, *position));
        if (last) {
          JOULE_TRY(save_data(transaction, job_id, data));
          log().info(
              "pipeline-frequency job {}: every rank registered; {}", job_id,
              state.phase() == plan::LivePhase::kPlanning ? "planning from the given profile" : "warming up");
        }
        return std::nullopt;
      });
}

Response LiveService::report_result(const Request& request, const std::string& job_id) {
  auto result = parse_wire<plan::LiveResult>(request, parse_result);
  if (!result) {
    return result.error();
  }
  return change_job(
      request, job_id,
      [&](store::Transaction& transaction, plan::LiveState& state) -> Result<std::optional<Response>> {
        if (state.phase() == plan::LivePhase::kRegistering) {
          const auto [missing_ranks, count] = JOULE_TRY(missing(transaction, job_id, state, false, 16));
          return scheduler_error(state.registration_pending(missing_ranks));
        }
        const auto position = JOULE_TRY(load_rank(transaction, job_id, state, result->rank));
        if (!position) {
          return scheduler_error(state.not_a_rank(result->rank));
        }
        const auto reported = JOULE_TRY(reported_round(transaction, job_id, state, result->rank));
        if (reported == state.round() && (!result->round || *result->round == state.round())) {
          return scheduler_error(state.already_reported(result->rank));
        }
        if (const auto checked = state.check_result(*result, *position); !checked) {
          return scheduler_error(checked.error());
        }
        JOULE_TRY(save_report(transaction, job_id, state, {*position, state.round(), *result}));
        if (state.count_report()) {
          const plan::LiveState before = state;
          const auto reports = JOULE_TRY(load_reports(transaction, job_id, state));
          plan::LiveData data = *JOULE_TRY(load_data(transaction, job_id, state));
          if (const auto completed = state.complete_round(reports, data); !completed) {
            return fail(ErrorCode::kInternal, "pipeline-frequency job {}: {}", job_id,
                        completed.error().message());
          }
          if (data.version != before.data_version()) {
            JOULE_TRY(save_data(transaction, job_id, data));
          }
          log_round(job_id, before, state);
        }
        return std::nullopt;
      });
}

Response LiveService::delete_job(const Request& request, const std::string& job_id) {
  bool erased = false;
  Response response = service_.transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    if (auto replayed = JOULE_TRY(service_.replay(transaction, request))) {
      return std::move(*replayed);
    }
    erased = JOULE_TRY(erase_job(transaction, job_id));
    if (!erased) {
      return unknown_job(job_id);
    }
    return json_response(200, {{"deleted", job_id}});
  });
  if (erased) {
    log().info("pipeline-frequency job {} deleted", job_id);
    std::lock_guard lock(mutex_);
    dirty_.insert(job_id);
    wake_.notify_all();
  }
  return response;
}

Response LiveService::get_job(const Request& request, const std::string& job_id) {
  return service_.transact_read(request, [&](store::Transaction& transaction) -> Result<Response> {
    const auto state = JOULE_TRY(load_state(transaction, job_id));
    if (!state) {
      return unknown_job(job_id);
    }
    const auto& slowed = state->slowed_pipelines();
    json body = {
        {"job_id", job_id},
        {"phase", plan::to_string(state->phase())},
        {"round", state->round()},
        {"world_size", state->info().world_size},
        {"registered", state->registered()},
        {"reported", state->reported()},
        {"clocks", state->frequencies_mhz().size()},
        {"profiled_clocks", state->profiled_frequencies()},
        {"profiling_iterations", state->profiling_iterations()},
        {"p_blocking_w", state->p_blocking_w()},
        {"straggler_time_s", state->straggler_time_s() ? json(*state->straggler_time_s()) : json(nullptr)},
        {"slowed_pipelines", std::count(slowed.begin(), slowed.end(), true)},
        {"predicted", nullptr},
        {"failure", state->failure()},
        {"card", card_json(*state)},
        {"idle_s",
         static_cast<double>(std::max<int64_t>(0, now_unix_ns() - state->touched_unix_ns())) / 1e9}};
    if (const auto& fastest = state->fastest_prediction()) {
      body["predicted"] = {{"iteration_time_s", fastest->iteration_time_s},
                           {"iteration_energy_j", fastest->iteration_energy_j},
                           {"max_clock_time_s", fastest->max_clock_time_s},
                           {"max_clock_energy_j", fastest->max_clock_energy_j}};
    }
    return json_response(200, body);
  });
}

// Looks at job `job_id` for waiting request `waiter`; `final`: its deadline passed (answer whatever the job's
// state). Runs inside a store transaction; `state` was read in it (nullopt: no such job).
std::optional<Response> LiveService::examine(store::Transaction& transaction, const std::string& job_id,
                                             const std::optional<plan::LiveState>& state, Waiter& waiter,
                                             bool final, std::string* error) {
  const auto attempt = [&]() -> Result<std::optional<Response>> {
    if (!state) {
      return std::optional<Response>(unknown_job(job_id));
    }
    waiter.world_size = state->info().world_size;
    if (state->phase() == plan::LivePhase::kRegistering) {
      if (!final) {
        return std::optional<Response>();
      }
      const auto [missing_ranks, count] = JOULE_TRY(missing(transaction, job_id, *state, false, 16));
      return std::optional<Response>(ask_again(scheduler_error(state->registration_pending(missing_ranks))));
    }
    if (!waiter.position) {
      waiter.position = JOULE_TRY(load_rank(transaction, job_id, *state, waiter.rank));
      if (!waiter.position) {
        return std::optional<Response>(scheduler_error(state->not_a_rank(waiter.rank)));
      }
    }
    if (!waiter.reported_known) {
      waiter.reported_round = JOULE_TRY(reported_round(transaction, job_id, *state, waiter.rank));
      waiter.reported_known = true;
    }
    if (waiter.reported_round && *waiter.reported_round >= state->round()) {
      if (!final) {
        return std::optional<Response>();
      }
      const auto [missing_ranks, count] = JOULE_TRY(missing(transaction, job_id, *state, true, 16));
      return std::optional<Response>(
          ask_again(detail_response(409, waiting_for_reports(*state, waiter.rank, missing_ranks, count))));
    }
    if (!state->serving()) {  // planning
      if (!final) {
        return std::optional<Response>();
      }
      return std::optional<Response>(
          ask_again(detail_response(409, state->schedule(*waiter.position, {}).error().message())));
    }
    std::shared_ptr<const plan::LiveData> data;
    if (state->phase() == plan::LivePhase::kPlanned) {
      data = JOULE_TRY(load_data(transaction, job_id, *state));
    }
    static const plan::LiveData no_data;  // warm-up and profiling schedules read none
    const auto schedule = state->schedule(*waiter.position, data ? *data : no_data);
    if (!schedule) {
      return std::optional<Response>(scheduler_error(schedule.error()));
    }
    return std::optional<Response>(json_response(200, schedule_json(*schedule, state->failure())));
  };
  auto outcome = attempt();
  if (!outcome) {
    *error = outcome.error().message();
    return std::nullopt;
  }
  return std::move(*outcome);
}

void LiveService::schedule(const Request& request, const std::string& job_id,
                           const std::shared_ptr<ResponseSink>& sink) {
  const auto rank_text = request.query.find("rank");
  if (rank_text == request.query.end()) {
    sink->respond(missing_query_response("rank"));
    return;
  }
  auto waiter = std::make_shared<Waiter>();
  waiter->job_id = job_id;
  waiter->sink = sink;
  try {
    size_t used = 0;
    const long long parsed = std::stoll(rank_text->second, &used);
    if (used != rank_text->second.size() || parsed < 0 || parsed > INT32_MAX) {
      throw std::invalid_argument("rank");
    }
    waiter->rank = static_cast<int>(parsed);
  } catch (const std::exception&) {
    sink->respond(validation_response(
        Error(ErrorCode::kInvalidArgument, "rank: value is not a valid integer"), "query"));
    return;
  }
  auto wait = service_.options.live_schedule_wait;
  if (const auto wait_text = request.query.find("wait_s"); wait_text != request.query.end()) {
    try {
      size_t used = 0;
      const double seconds = std::stod(wait_text->second, &used);
      if (used != wait_text->second.size() || !(seconds >= 0 && seconds <= kMaxWaitS)) {
        throw std::invalid_argument("wait_s");
      }
      wait = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    } catch (const std::exception&) {
      sink->respond(validation_response(
          Error(ErrorCode::kInvalidArgument, fmt::format("wait_s: must be 0 to {} seconds", kMaxWaitS)),
          "query"));
      return;
    }
  }
  waiter->deadline = std::chrono::steady_clock::now() + wait;
  const bool final = wait.count() == 0;
  std::optional<Response> answer;
  std::string error;
  const auto looked = service_.store.run([&](store::Transaction& transaction) -> Result<void> {
    error.clear();
    const auto state = JOULE_TRY(load_state(transaction, job_id));
    answer = examine(transaction, job_id, state, *waiter, final, &error);
    return {};
  });
  if (!looked || !error.empty()) {
    const std::string why = !looked ? looked.error().message() : error;
    log().error("GET {}: {}", request.path, why);
    sink->respond(message_response(503, fmt::format("store unavailable: {}", why)));
    return;
  }
  if (answer) {
    sink->respond(std::move(*answer));
    return;
  }
  wait_for_change(waiter);
}

}  // namespace detail
}  // namespace joule::server
