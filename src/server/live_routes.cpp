// SPDX-License-Identifier: Apache-2.0
// Zeus's pipeline frequency optimizer routes (zeus/optimizer/pipeline_frequency/server/router.py, Zeus 0.16):
// GET /info, POST /register_job, POST /register_rank/{job_id}, GET /schedule/{job_id}?rank=,
// POST /result/{job_id}. Same field names, defaults and status codes (422 with pydantic's detail for a bad
// body); the decisions are the live scheduler's (joule/plan/live.hpp), stored per job so that a restart
// loses nothing. GET /schedule waits, as Zeus's does, until the round it answers is ready.
#include <chrono>
#include <ctime>
#include <set>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/json_fields.hpp"
#include "joule/core/log.hpp"
#include "joule/plan/profile_codec.hpp"

#include "server/service_internal.hpp"

namespace joule::server {

namespace {

using detail::json_response;
using detail::validation_response;
using nlohmann::json;
using plan::LiveScheduler;

constexpr size_t kMaxJobMetadataLength = 200;
constexpr int kMaxIdDraws = 16;
// How often a waiting GET /schedule re-reads the store even without a wake-up (another process's change).
constexpr auto kPollInterval = std::chrono::milliseconds(200);
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

json schedule_json(const plan::LiveSchedule& schedule) {
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

// Reads and locks job `job_id`: nullopt if there is none.
Result<std::optional<LiveScheduler>> load_job(store::Transaction& transaction, const std::string& job_id) {
  auto found = JOULE_TRY(transaction.get_for_update(detail::kLiveJobKind, job_id));
  if (!found) {
    return std::optional<LiveScheduler>();
  }
  auto parsed = LiveScheduler::parse(found->body);
  if (!parsed) {
    return fail(ErrorCode::kInternal, "the stored pipeline-frequency job {} is corrupt: {}", job_id,
                parsed.error().message());
  }
  return std::optional<LiveScheduler>(std::move(*parsed));
}

}  // namespace

Response Service::Impl::live_route(const Request& request, std::string_view route,
                                   const std::string& job_id) {
  const auto wake_waiters = [this] {
    {
      std::lock_guard lock(live_mutex);
      ++live_generation;
    }
    live_changed.notify_all();
  };
  // The frontier of a job's measured profile, planned once per process and kept for its stragglers.
  const plan::LivePlanProvider provider =
      [this, &job_id](const std::string& csv, int stages, int microbatches, plan::Schedule schedule,
                      double p_blocking_w,
                      double unit_time_s) -> Result<std::shared_ptr<const plan::LivePlan>> {
    const std::string key = fmt::format("{}#{:016x}#{}#{}#{}#{}", job_id, detail::fnv1a(csv), stages,
                                        microbatches, p_blocking_w, unit_time_s);
    if (auto cached = live_plans.find(key)) {
      return cached;
    }
    auto planned = JOULE_TRY(plan::plan_live(csv, stages, microbatches, schedule, p_blocking_w, unit_time_s));
    log().info("pipeline-frequency job {}: planned {} frontier points in {:.3f} s", job_id,
               planned->frontier.size(), planned->planning_time_s);
    live_plans.put(key, planned);
    return planned;
  };

  if (route == "/info") {
    if (request.method != "GET") {
      return detail_response(405, "Method Not Allowed");
    }
    const plan::LiveOptions& live = options.live;
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
                                 {"max_world_size", options.live_max_waiting}}},
                               {"store", store.description()}});
  }

  if (route == "/register_job") {
    if (request.method != "POST") {
      return detail_response(405, "Method Not Allowed");
    }
    auto info = parse_wire<plan::LiveJobInfo>(
        request, [&](const json& body) { return parse_job_info(body, options); });
    if (!info) {
      return info.error();
    }
    // Checked once before the transaction; the job is created again below under its drawn id.
    const auto make_job = [&](const std::string& job_id_candidate) -> Result<LiveScheduler> {
      plan::LiveJobInfo named = *info;
      named.job_id = job_id_candidate;
      auto job = JOULE_TRY(LiveScheduler::create(std::move(named), options.live));
      if (options.live_profile_csv) {
        JOULE_TRY(job.use_profile(*options.live_profile_csv));
      }
      return job;
    };
    if (auto checked = make_job(""); !checked) {
      return scheduler_error(checked.error());
    }
    if (info->world_size > options.live_max_waiting) {
      return validation_response(Error(
          ErrorCode::kInvalidArgument,
          fmt::format("world_size: every rank waits for its schedule on one of the server's request threads, "
                      "so this server takes at most {} ranks; start joule serve with --threads {} or more",
                      options.live_max_waiting, info->world_size + 1)));
    }
    const std::string base = fmt::format("{}+dp{}+pp{}+tp{}+perseus{}", utc_stamp(detail::unix_ns(clock)),
                                         info->dp_degree, info->pp_degree, info->tp_degree,
                                         info->job_metadata.empty() ? "" : "+" + info->job_metadata);
    return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
      if (auto replayed = JOULE_TRY(replay(transaction, request))) {
        return std::move(*replayed);
      }
      for (int draw = 0; draw < kMaxIdDraws; ++draw) {
        // Zeus's id has a one-second resolution; two jobs in one second get a random suffix.
        const std::string candidate =
            draw == 0 ? base : fmt::format("{}+{:08x}", base, detail::random_u64() >> 32);
        const LiveScheduler job = JOULE_TRY(make_job(candidate));
        if (JOULE_TRY(transaction.insert(detail::kLiveJobKind, candidate, job.dump()))) {
          log().info("pipeline-frequency job {} registered ({} ranks, {} microbatches)", candidate,
                     info->world_size, info->num_microbatches);
          return json_response(200, candidate);
        }
      }
      return fail(ErrorCode::kInternal, "could not draw an unused job id");
    });
  }

  // POST /register_rank and POST /result: parse, lock the job, change it, store it, wake the waiting ranks.
  const auto change_job = [&](const auto& parse, const auto& change) -> Response {
    if (request.method != "POST") {
      return detail_response(405, "Method Not Allowed");
    }
    auto body = parse_wire<std::decay_t<decltype(parse(json()))>>(request, parse);
    if (!body) {
      return body.error();
    }
    const auto lock = [&](store::Transaction& transaction) { return load_job(transaction, job_id); };
    const auto apply = [&](store::Transaction& transaction,
                           std::optional<LiveScheduler>& job) -> Result<Response> {
      if (!job) {
        return unknown_job(job_id);
      }
      if (auto changed = change(*job, *body); !changed) {
        return scheduler_error(changed.error());
      }
      JOULE_TRY(transaction.update(detail::kLiveJobKind, job_id, job->dump()));
      return json_response(200, nullptr);
    };
    Response response = transact_locked(request, lock, apply);
    wake_waiters();
    return response;
  };
  if (route == "/register_rank/") {
    return change_job(parse_rank_info, [&](LiveScheduler& job, const plan::LiveRankInfo& rank) {
      return job.register_rank(rank, provider);
    });
  }
  if (route == "/result/") {
    return change_job(parse_result, [&](LiveScheduler& job, const plan::LiveResult& result) -> Result<void> {
      const plan::LivePhase before = job.phase();
      const auto straggler_before = job.straggler_time_s();
      const bool completed = JOULE_TRY(job.report(result, provider));
      if (completed && before == plan::LivePhase::kWarmup) {
        // Once when the wait begins, not every round of it (a warm-up lasts up to minutes of iterations).
        if (job.phase() == plan::LivePhase::kWarmup && job.warmup_rounds() == 1) {
          log().info(
              "pipeline-frequency job {}: waiting for a thermal steady state (ranks {} not steady yet)",
              job_id, fmt::join(job.unsteady_ranks(), ", "));
        } else if (job.warmup_gave_up()) {
          log().warn(
              "pipeline-frequency job {}: profiling after {} warm-up rounds (max_warmup_rounds) although "
              "ranks {} are not thermally steady",
              job_id, job.warmup_rounds(), fmt::join(job.unsteady_ranks(), ", "));
        } else if (job.phase() != plan::LivePhase::kWarmup && job.warmup_rounds() > 1) {
          log().info("pipeline-frequency job {}: every rank is thermally steady after {} warm-up rounds",
                     job_id, job.warmup_rounds());
        }
      }
      if (completed && job.phase() != before) {
        log().info("pipeline-frequency job {}: round {} is {}", job_id, job.round(),
                   plan::to_string(job.phase()));
      }
      if (completed && job.straggler_time_s() != straggler_before) {
        log().info(
            "pipeline-frequency job {}: straggler pace {}", job_id,
            job.straggler_time_s() ? fmt::format("{:.6f} s", *job.straggler_time_s()) : "none (recovered)");
      }
      return {};
    });
  }

  // GET /schedule/{job_id}?rank=K[&wait_s=S]
  if (request.method != "GET") {
    return detail_response(405, "Method Not Allowed");
  }
  const auto rank_text = request.query.find("rank");
  if (rank_text == request.query.end()) {
    return detail::missing_query_response("rank");
  }
  int rank = 0;
  try {
    size_t used = 0;
    const long long parsed = std::stoll(rank_text->second, &used);
    if (used != rank_text->second.size() || parsed < 0 || parsed > INT32_MAX) {
      throw std::invalid_argument("rank");
    }
    rank = static_cast<int>(parsed);
  } catch (const std::exception&) {
    return validation_response(Error(ErrorCode::kInvalidArgument, "rank: value is not a valid integer"),
                               "query");
  }
  auto wait = options.live_schedule_wait;
  if (const auto wait_text = request.query.find("wait_s"); wait_text != request.query.end()) {
    try {
      size_t used = 0;
      const double seconds = std::stod(wait_text->second, &used);
      if (used != wait_text->second.size() || !(seconds >= 0 && seconds <= kMaxWaitS)) {
        throw std::invalid_argument("wait_s");
      }
      wait = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    } catch (const std::exception&) {
      return validation_response(
          Error(ErrorCode::kInvalidArgument, fmt::format("wait_s: must be 0 to {} seconds", kMaxWaitS)),
          "query");
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  bool counted = false;
  const auto uncount = [&] {
    if (counted) {
      --live_waiting;
      counted = false;
    }
  };
  while (true) {
    uint64_t generation = 0;
    {
      std::lock_guard lock(live_mutex);
      generation = live_generation;
    }
    std::optional<std::string> why_wait;
    Response response = transact_read(request, [&](store::Transaction& transaction) -> Result<Response> {
      why_wait.reset();
      auto job = JOULE_TRY(load_job(transaction, job_id));
      if (!job) {
        return unknown_job(job_id);
      }
      if (!job->all_registered()) {
        why_wait = job->schedule(rank).error().message();
        return detail_response(409, *why_wait);
      }
      if (job->has_reported(rank)) {
        std::vector<int> waiting_for;
        for (int other = 0; other < job->info().world_size; ++other) {
          if (!job->has_reported(other)) {
            waiting_for.push_back(other);
          }
        }
        why_wait =
            fmt::format("rank: rank {} reported round {}; the next round starts when ranks {} report it",
                        rank, job->round(), fmt::join(waiting_for, ", "));
        return detail_response(409, *why_wait);
      }
      auto schedule = job->schedule(rank);
      if (!schedule) {
        return scheduler_error(schedule.error());
      }
      return json_response(200, schedule_json(*schedule));
    });
    if (!why_wait || std::chrono::steady_clock::now() >= deadline) {
      uncount();
      return response;
    }
    if (!counted) {
      if (++live_waiting > options.live_max_waiting) {
        --live_waiting;
        return detail_response(503, fmt::format("{} ranks already wait for their schedules on this server's "
                                                "request threads; start joule serve with more --threads",
                                                options.live_max_waiting));
      }
      counted = true;
    }
    std::unique_lock lock(live_mutex);
    live_changed.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kPollInterval),
                            [&] { return live_generation != generation; });
  }
}

}  // namespace joule::server
