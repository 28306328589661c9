// SPDX-License-Identifier: Apache-2.0
// The stored forms of the live scheduler: LiveState, LiveData and LiveReport as JSON (each checked when
// parsed back, since a store's text is input like any other), and LiveScheduler's whole document, which
// also reads the single document of version 1 (joule before the state was split).
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/plan/live.hpp"
#include "joule/plan/profile_codec.hpp"

namespace joule::plan {

namespace {

using nlohmann::json;

constexpr std::string_view kSchedulerFormat = "joule.plan.live";
constexpr int kSchedulerVersion = 2;
constexpr std::string_view kStateFormat = "joule.plan.live_state";
constexpr std::string_view kDataFormat = "joule.plan.live_data";
constexpr int kPartVersion = 1;

LivePhase parse_phase(const std::string& text) {
  for (const LivePhase phase : {LivePhase::kRegistering, LivePhase::kWarmup, LivePhase::kProfiling,
                                LivePhase::kPlanning, LivePhase::kPlanned, LivePhase::kFailed}) {
    if (text == to_string(phase)) {
      return phase;
    }
  }
  throw std::invalid_argument(fmt::format("unknown phase '{}'", text));
}

json result_json(const LiveResult& result) {
  json value = {{"rank", result.rank},
                {"iter_time", result.iter_time_s},
                {"iter_energy", result.iter_energy_j},
                {"time_breakdown", result.time_breakdown_s},
                {"energy_breakdown", result.energy_breakdown_j}};
  if (result.thermally_steady) {
    value["thermally_steady"] = *result.thermally_steady;
  }
  if (result.round) {
    value["round"] = *result.round;
  }
  return value;
}

LiveResult result_from(const json& value) {
  LiveResult result;
  result.rank = value.at("rank").get<int>();
  result.iter_time_s = value.at("iter_time").get<std::vector<double>>();
  result.iter_energy_j = value.at("iter_energy").get<std::vector<double>>();
  result.time_breakdown_s =
      value.at("time_breakdown").get<std::map<std::string, std::vector<std::vector<double>>>>();
  result.energy_breakdown_j =
      value.at("energy_breakdown").get<std::map<std::string, std::vector<std::vector<double>>>>();
  if (const auto steady = value.find("thermally_steady"); steady != value.end()) {
    result.thermally_steady = steady->get<bool>();
  }
  if (const auto round = value.find("round"); round != value.end()) {
    result.round = round->get<int64_t>();
  }
  return result;
}

json prediction_json(const std::optional<LivePrediction>& prediction) {
  if (!prediction) {
    return nullptr;
  }
  return {{"iteration_time_s", prediction->iteration_time_s},
          {"compute_time_s", prediction->compute_time_s},
          {"iteration_energy_j", prediction->iteration_energy_j},
          {"max_clock_time_s", prediction->max_clock_time_s},
          {"max_clock_energy_j", prediction->max_clock_energy_j},
          {"p_blocking_w", prediction->p_blocking_w}};
}

std::optional<LivePrediction> prediction_from(const json& value) {
  if (value.is_null()) {
    return std::nullopt;
  }
  LivePrediction prediction;
  prediction.iteration_time_s = value.at("iteration_time_s").get<double>();
  prediction.compute_time_s = value.at("compute_time_s").get<double>();
  prediction.iteration_energy_j = value.at("iteration_energy_j").get<double>();
  prediction.max_clock_time_s = value.at("max_clock_time_s").get<double>();
  prediction.max_clock_energy_j = value.at("max_clock_energy_j").get<double>();
  prediction.p_blocking_w = value.at("p_blocking_w").get<double>();
  if (!(prediction.compute_time_s > 0) || !(prediction.iteration_time_s >= prediction.compute_time_s)) {
    throw std::invalid_argument("a prediction's times are not positive and ordered");
  }
  return prediction;
}

template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

template <class T>
std::optional<T> optional_from(const json& value) {
  return value.is_null() ? std::nullopt : std::optional<T>(value.get<T>());
}

json options_json(const LiveOptions& options) {
  return {{"profile_samples", options.profile_samples},
          {"profile_stop_energy_rise", options.profile_stop_energy_rise},
          {"profile_patience", options.profile_patience},
          {"planned_round_iterations", options.planned_round_iterations},
          {"default_p_blocking_w", options.default_p_blocking_w},
          {"unit_time_s", options.unit_time_s},
          {"straggler_enter", options.straggler_enter},
          {"straggler_exit", options.straggler_exit},
          {"straggler_retarget", options.straggler_retarget},
          {"straggler_confirm_rounds", options.straggler_confirm_rounds},
          {"max_warmup_rounds", options.max_warmup_rounds},
          {"card_probe_clocks", options.card_probe_clocks},
          {"card_lowest_probe_ratio", options.card_lowest_probe_ratio},
          {"card_max_residual", options.card_max_residual}};
}

LiveOptions options_from(const json& options) {
  LiveOptions o;
  o.profile_samples = options.at("profile_samples").get<int>();
  o.profile_stop_energy_rise = options.at("profile_stop_energy_rise").get<double>();
  o.profile_patience = options.at("profile_patience").get<int>();
  o.planned_round_iterations = options.at("planned_round_iterations").get<int>();
  o.default_p_blocking_w = options.at("default_p_blocking_w").get<double>();
  o.unit_time_s = options.at("unit_time_s").get<double>();
  o.straggler_enter = options.at("straggler_enter").get<double>();
  o.straggler_exit = options.at("straggler_exit").get<double>();
  o.straggler_retarget = options.at("straggler_retarget").get<double>();
  o.straggler_confirm_rounds = options.at("straggler_confirm_rounds").get<int>();
  // Jobs stored before the thermal warm-up existed lack it: the default.
  o.max_warmup_rounds = options.value("max_warmup_rounds", LiveOptions{}.max_warmup_rounds);
  // Jobs stored before cards existed lack these: the defaults.
  o.card_probe_clocks = options.value("card_probe_clocks", LiveOptions{}.card_probe_clocks);
  o.card_lowest_probe_ratio = options.value("card_lowest_probe_ratio", LiveOptions{}.card_lowest_probe_ratio);
  o.card_max_residual = options.value("card_max_residual", LiveOptions{}.card_max_residual);
  return o;
}

json info_json(const LiveJobInfo& info) {
  return {{"job_id", info.job_id},
          {"pp_degree", info.pp_degree},
          {"dp_degree", info.dp_degree},
          {"tp_degree", info.tp_degree},
          {"world_size", info.world_size},
          {"job_metadata", info.job_metadata},
          {"num_microbatches", info.num_microbatches},
          {"schedule", to_string(info.schedule)}};
}

Result<LiveJobInfo> info_from(const json& info) {
  LiveJobInfo parsed;
  parsed.job_id = info.at("job_id").get<std::string>();
  parsed.pp_degree = info.at("pp_degree").get<int>();
  parsed.dp_degree = info.at("dp_degree").get<int>();
  parsed.tp_degree = info.at("tp_degree").get<int>();
  parsed.world_size = info.at("world_size").get<int>();
  parsed.job_metadata = info.at("job_metadata").get<std::string>();
  parsed.num_microbatches = info.at("num_microbatches").get<int>();
  parsed.schedule = JOULE_TRY(parse_schedule(info.at("schedule").get<std::string>()));
  return parsed;
}

json limits_json(const LiveLimits& limits) {
  return {{"max_frequencies_per_rank", limits.max_frequencies_per_rank},
          {"max_world_size", limits.max_world_size},
          {"max_computations", limits.max_computations},
          {"max_data_bytes", limits.max_data_bytes},
          {"max_planning_work", limits.max_planning_work},
          {"max_planning_units", limits.max_planning_units}};
}

LiveLimits limits_from(const json& limits) {
  LiveLimits parsed;
  parsed.max_frequencies_per_rank = limits.at("max_frequencies_per_rank").get<int>();
  parsed.max_world_size = limits.at("max_world_size").get<int>();
  parsed.max_computations = limits.at("max_computations").get<int64_t>();
  parsed.max_data_bytes = limits.at("max_data_bytes").get<size_t>();
  parsed.max_planning_work = limits.at("max_planning_work").get<double>();
  parsed.max_planning_units = limits.at("max_planning_units").get<double>();
  return parsed;
}

json position_json(const LiveRankPosition& rank) {
  return json::array({rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank});
}

LiveRankPosition position_from(const json& value) {
  if (!value.is_array() || value.size() != 4) {
    throw std::invalid_argument("a rank position is not [rank, dp_rank, pp_rank, tp_rank]");
  }
  return {value[0].get<int>(), value[1].get<int>(), value[2].get<int>(), value[3].get<int>()};
}

json report_json(const LiveReport& report) {
  return {
      {"rank", position_json(report.rank)}, {"round", report.round}, {"result", result_json(report.result)}};
}

LiveReport report_from(const json& value) {
  return {position_from(value.at("rank")), value.at("round").get<int64_t>(), result_from(value.at("result"))};
}

json data_json(const LiveData& data) {
  json samples = json::array();
  for (const auto& stage : data.samples) {
    json per_stage = json::array();
    for (const auto& instruction : stage) {
      json per_instruction = json::array();
      for (const LiveSample& sample : instruction) {
        per_instruction.push_back({sample.time_s, sample.energy_j, sample.count});
      }
      per_stage.push_back(std::move(per_instruction));
    }
    samples.push_back(std::move(per_stage));
  }
  return {{"format", kDataFormat},
          {"version", kPartVersion},
          {"samples", std::move(samples)},
          {"profile", optional_json(data.profile_csv)},
          {"fastest_plan", data.fastest_plan},
          {"slowed_plan", data.slowed_plan},
          {"card", optional_json(data.card_json)},
          {"data_version", data.version}};
}

std::vector<std::array<std::vector<LiveSample>, 2>> samples_from(const json& stages) {
  std::vector<std::array<std::vector<LiveSample>, 2>> samples;
  for (const json& stage : stages) {
    auto& per_stage = samples.emplace_back();
    if (!stage.is_array() || stage.size() != 2) {
      throw std::invalid_argument("a stage's samples are not (forward, backward)");
    }
    for (size_t instruction = 0; instruction < 2; ++instruction) {
      for (const json& sample : stage[instruction]) {
        per_stage[instruction].push_back(
            {sample.at(0).get<double>(), sample.at(1).get<double>(), sample.at(2).get<int64_t>()});
      }
      if (per_stage[instruction].size() != per_stage[0].size()) {
        throw std::invalid_argument("a stage has forward and backward samples for different clocks");
      }
    }
  }
  return samples;
}

LiveData data_from(const json& document) {
  if (document.value("format", "") != kDataFormat || document.value("version", 0) != kPartVersion) {
    throw std::invalid_argument(fmt::format("not a version {} {} document", kPartVersion, kDataFormat));
  }
  LiveData data;
  data.samples = samples_from(document.at("samples"));
  data.profile_csv = optional_from<std::string>(document.at("profile"));
  data.fastest_plan = document.at("fastest_plan").get<FrequencyPlan>();
  data.slowed_plan = document.at("slowed_plan").get<FrequencyPlan>();
  data.version = document.at("data_version").get<int64_t>();
  if (const auto card = document.find("card"); card != document.end()) {
    data.card_json = optional_from<std::string>(*card);
  }
  return data;
}

std::string slowed_text(const std::vector<bool>& slowed) {
  std::string text(slowed.size(), '0');
  for (size_t i = 0; i < slowed.size(); ++i) {
    text[i] = slowed[i] ? '1' : '0';
  }
  return text;
}

std::vector<bool> slowed_from(const std::string& text) {
  std::vector<bool> slowed(text.size(), false);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '0' && text[i] != '1') {
      throw std::invalid_argument("the slowed pipelines are not a string of 0 and 1");
    }
    slowed[i] = text[i] == '1';
  }
  return slowed;
}

template <class Parse>
auto parse_guarded(std::string_view text, Parse&& parse) -> Result<decltype(parse(json()))> {
  try {
    return parse(json::parse(text));
  } catch (const std::exception& error) {
    return fail(ErrorCode::kParse, "{}", error.what());
  }
}

}  // namespace

// The state's JSON, with the checks that keep a parsed state's later calls in bounds.
struct LiveStateCodec {
  static json to_json(const LiveState& state) {
    return {{"format", kStateFormat},
            {"version", kPartVersion},
            {"info", info_json(state.info_)},
            {"options", options_json(state.options_)},
            {"limits", limits_json(state.limits_)},
            {"phase", to_string(state.phase_)},
            {"round", state.round_},
            {"registered", state.registered_},
            {"reported", state.reported_},
            {"frequencies_mhz", state.frequencies_mhz_},
            {"profile_given", state.profile_given_},
            {"profile_mhz", state.profile_mhz_},
            {"card_given", state.card_given_},
            {"card_source", state.card_source_},
            {"card_clocks", state.card_clocks_},
            {"card_fallback", state.card_fallback_},
            {"card_summary", state.card_summary_},
            {"sweep_next", state.sweep_next_},
            {"round_frequencies", state.round_frequencies_},
            {"idle_energy_j", state.idle_energy_j_},
            {"idle_time_s", state.idle_time_s_},
            {"busy_time_s", state.busy_time_s_},
            {"p_blocking_w", state.p_blocking_w_},
            {"unit_time_s", state.unit_time_s_},
            {"profiling_iterations", state.profiling_iterations_},
            {"warmup_rounds", state.warmup_rounds_},
            {"unsteady_ranks", state.unsteady_ranks_},
            {"unsteady_count", state.unsteady_count_},
            {"warmup_gave_up", state.warmup_gave_up_},
            {"fastest", prediction_json(state.fastest_)},
            {"slowed_prediction", prediction_json(state.slowed_prediction_)},
            {"slowed", slowed_text(state.slowed_)},
            {"straggler_time_s", optional_json(state.straggler_time_s_)},
            {"enter_streak", state.enter_streak_},
            {"exit_streak", state.exit_streak_},
            {"retarget_streak", state.retarget_streak_},
            {"planning_sequence", state.planning_sequence_},
            {"planning_after_round", state.planning_after_round_},
            {"failure", state.failure_},
            {"rerun_reason", state.rerun_reason_},
            {"data_version", state.data_version_},
            {"touched_unix_ns", state.touched_unix_ns_},
            {"planner", state.planner_},
            {"planner_since_unix_ns", state.planner_since_unix_ns_}};
  }

  static Result<LiveState> from_json(const json& document) {
    if (document.value("format", "") != kStateFormat || document.value("version", 0) != kPartVersion) {
      return fail(ErrorCode::kParse, "not a version {} {} document", kPartVersion, kStateFormat);
    }
    const LiveJobInfo info = JOULE_TRY(info_from(document.at("info")));
    auto created =
        LiveState::create(info, options_from(document.at("options")), limits_from(document.at("limits")));
    if (!created) {
      return fail(ErrorCode::kParse, "{}", created.error().message());
    }
    LiveState state = std::move(*created);
    state.phase_ = parse_phase(document.at("phase").get<std::string>());
    state.round_ = document.at("round").get<int64_t>();
    state.registered_ = document.at("registered").get<int>();
    state.reported_ = document.at("reported").get<int>();
    state.frequencies_mhz_ = document.at("frequencies_mhz").get<std::vector<uint32_t>>();
    state.profile_given_ = document.at("profile_given").get<bool>();
    state.profile_mhz_ = document.at("profile_mhz").get<std::vector<uint32_t>>();
    // States stored before cards existed have none.
    state.card_given_ = document.value("card_given", false);
    state.card_source_ = document.value("card_source", std::string());
    state.card_clocks_ = document.value("card_clocks", std::vector<size_t>());
    state.card_fallback_ = document.value("card_fallback", false);
    state.card_summary_ = document.value("card_summary", std::string());
    state.sweep_next_ = document.at("sweep_next").get<size_t>();
    state.round_frequencies_ = document.at("round_frequencies").get<size_t>();
    state.idle_energy_j_ = document.at("idle_energy_j").get<double>();
    state.idle_time_s_ = document.at("idle_time_s").get<double>();
    state.busy_time_s_ = document.at("busy_time_s").get<double>();
    state.p_blocking_w_ = document.at("p_blocking_w").get<double>();
    state.unit_time_s_ = document.at("unit_time_s").get<double>();
    state.profiling_iterations_ = document.at("profiling_iterations").get<int64_t>();
    state.warmup_rounds_ = document.at("warmup_rounds").get<int64_t>();
    state.unsteady_ranks_ = document.at("unsteady_ranks").get<std::vector<int>>();
    state.unsteady_count_ = document.at("unsteady_count").get<int>();
    state.warmup_gave_up_ = document.at("warmup_gave_up").get<bool>();
    state.fastest_ = prediction_from(document.at("fastest"));
    state.slowed_prediction_ = prediction_from(document.at("slowed_prediction"));
    state.slowed_ = slowed_from(document.at("slowed").get<std::string>());
    state.straggler_time_s_ = optional_from<double>(document.at("straggler_time_s"));
    state.enter_streak_ = document.at("enter_streak").get<int>();
    state.exit_streak_ = document.at("exit_streak").get<int>();
    state.retarget_streak_ = document.at("retarget_streak").get<int>();
    state.planning_sequence_ = document.at("planning_sequence").get<int64_t>();
    state.planning_after_round_ = document.at("planning_after_round").get<bool>();
    state.failure_ = document.at("failure").get<std::string>();
    state.rerun_reason_ = document.at("rerun_reason").get<std::string>();
    state.data_version_ = document.at("data_version").get<int64_t>();
    state.touched_unix_ns_ = document.value("touched_unix_ns", int64_t{0});
    state.planner_ = document.value("planner", std::string());
    state.planner_since_unix_ns_ = document.value("planner_since_unix_ns", int64_t{0});
    JOULE_TRY(check(state));
    return state;
  }

  // What the calls rely on: counts within the job, the sweep within its clocks, a plan where one is served.
  static Result<void> check(const LiveState& state) {
    const LiveJobInfo& info = state.info_;
    const auto clocks = state.frequencies_mhz_.size();
    const bool registering = state.phase_ == LivePhase::kRegistering;
    const auto bad = [](std::string_view what) { return fail(ErrorCode::kParse, "{}", what); };
    if (state.registered_ < 0 || state.registered_ > info.world_size ||
        (registering == (state.registered_ == info.world_size))) {
      return bad("the registered ranks do not match the phase");
    }
    if (state.reported_ < 0 || state.reported_ > info.world_size || state.round_ < 0) {
      return bad("the round's reports are outside the job");
    }
    if (clocks > static_cast<size_t>(state.limits_.max_frequencies_per_rank) ||
        (state.registered_ > 0 && clocks == 0) ||
        state.profile_mhz_.size() > static_cast<size_t>(state.limits_.max_frequencies_per_rank) ||
        !std::is_sorted(state.frequencies_mhz_.rbegin(), state.frequencies_mhz_.rend()) ||
        std::adjacent_find(state.frequencies_mhz_.begin(), state.frequencies_mhz_.end()) !=
            state.frequencies_mhz_.end()) {
      return bad("the clocks are not a descending list within the limit");
    }
    if (state.card_clocks_.size() > 64 ||
        !std::is_sorted(state.card_clocks_.begin(), state.card_clocks_.end()) ||
        std::adjacent_find(state.card_clocks_.begin(), state.card_clocks_.end()) !=
            state.card_clocks_.end() ||
        (!state.card_clocks_.empty() && (state.card_clocks_.back() >= clocks || !state.card_given_)) ||
        state.card_summary_.size() > 1024 || state.card_source_.size() > 4096) {
      return bad("the card's clocks are not ascending indices of the clocks");
    }
    if (state.sweep_next_ > clocks || state.round_frequencies_ > state.sweep_next_) {
      return bad("the sweep position is outside its clocks");
    }
    if (state.phase_ == LivePhase::kProfiling && state.round_frequencies_ == 0) {
      return bad("a profiling round sweeps no clock");
    }
    if (state.unsteady_ranks_.size() > 32 || state.unsteady_count_ < 0 ||
        state.unsteady_count_ > info.world_size) {
      return bad("the unsteady ranks are outside the job");
    }
    if (!state.slowed_.empty() && state.slowed_.size() != static_cast<size_t>(info.dp_degree)) {
      return bad("the slowed pipelines do not match dp_degree");
    }
    if (state.phase_ == LivePhase::kPlanned &&
        (!state.fastest_ || state.slowed_.size() != static_cast<size_t>(info.dp_degree) ||
         (state.straggler_time_s_.has_value() != state.slowed_prediction_.has_value()))) {
      return bad("a planned job without its plan");
    }
    return {};
  }
};

Result<void> LiveState::check_data(const LiveData& data) const {
  const auto bad = [&](std::string_view what) {
    return fail(ErrorCode::kParse, "the stored data of job {} does not match its state: {}", info_.job_id,
                what);
  };
  if (data.version != data_version_) {
    return bad(fmt::format("version {}, the state's {}", data.version, data_version_));
  }
  if (phase_ != LivePhase::kRegistering) {
    if (data.samples.size() != static_cast<size_t>(info_.pp_degree) ||
        std::any_of(data.samples.begin(), data.samples.end(),
                    [&](const auto& stage) { return stage[0].size() != frequencies_mhz_.size(); })) {
      return bad("samples for other stages or clocks");
    }
  }
  const size_t computations =
      2 * static_cast<size_t>(info_.pp_degree) * static_cast<size_t>(info_.num_microbatches);
  if (phase_ == LivePhase::kPlanned && (data.fastest_plan.size() != computations ||
                                        (straggler_time_s_ && data.slowed_plan.size() != computations))) {
    return bad("plans for another pipeline");
  }
  if ((phase_ == LivePhase::kPlanning || phase_ == LivePhase::kPlanned) && !data.profile_csv) {
    return bad("no profile");
  }
  return {};
}

std::string LiveState::dump() const {
  return LiveStateCodec::to_json(*this).dump();
}

Result<LiveState> LiveState::parse(std::string_view text) {
  try {
    return LiveStateCodec::from_json(json::parse(text));
  } catch (const std::exception& error) {
    return fail(ErrorCode::kParse, "{}", error.what());
  }
}

std::string LiveData::dump() const {
  return data_json(*this).dump();
}

Result<LiveData> LiveData::parse(std::string_view text) {
  return parse_guarded(text, [](const json& document) { return data_from(document); });
}

std::string LiveReport::dump() const {
  return report_json(*this).dump();
}

Result<LiveReport> LiveReport::parse(std::string_view text) {
  return parse_guarded(text, [](const json& document) { return report_from(document); });
}

// --- LiveScheduler's document ------------------------------------------------------------------------------

namespace {

// Version 1: the whole scheduler in one document, ranks with their clocks and pending reports inside.
struct V1Document {
  LiveState state;
  LiveData data;
  std::map<int, LiveRankPosition> ranks;
  std::map<int, LiveReport> reports;
};

}  // namespace

std::string LiveScheduler::dump() const {
  json ranks = json::array();
  for (const auto& [rank, position] : ranks_) {
    ranks.push_back(position_json(position));
  }
  json reports = json::array();
  for (const auto& [rank, report] : reports_) {
    reports.push_back(report_json(report));
  }
  return json{{"format", kSchedulerFormat},
              {"version", kSchedulerVersion},
              {"state", LiveStateCodec::to_json(state_)},
              {"ranks", std::move(ranks)},
              {"reports", std::move(reports)},
              {"data", data_json(data_)}}
      .dump();
}

struct LiveSchedulerCodec {
  // Reads a version 1 document into the split state (what `joule serve` stored before).
  static Result<LiveScheduler> from_v1(const json& document) {
    LiveScheduler scheduler;
    const LiveJobInfo info = JOULE_TRY(info_from(document.at("info")));
    auto created = LiveState::create(info, options_from(document.at("options")));
    if (!created) {
      return fail(ErrorCode::kParse, "{}", created.error().message());
    }
    LiveState& state = scheduler.state_ = std::move(*created);
    LiveData& data = scheduler.data_;
    const std::string phase = document.at("phase").get<std::string>();
    if (phase != "registering" && phase != "warmup" && phase != "profiling" && phase != "planned") {
      return fail(ErrorCode::kParse, "unknown phase '{}'", phase);
    }
    state.phase_ = parse_phase(phase);
    state.round_ = document.at("round").get<int64_t>();
    std::set<uint32_t> shared;
    bool first = true;
    for (const json& rank : document.at("ranks")) {
      const LiveRankPosition position{rank.at("rank").get<int>(), rank.at("dp_rank").get<int>(),
                                      rank.at("pp_rank").get<int>(), rank.at("tp_rank").get<int>()};
      const auto clocks = rank.at("available_frequencies").get<std::vector<uint32_t>>();
      if (position.rank < 0 || position.rank >= info.world_size || position.dp_rank < 0 ||
          position.dp_rank >= info.dp_degree || position.pp_rank < 0 || position.pp_rank >= info.pp_degree ||
          position.tp_rank < 0 || position.tp_rank >= info.tp_degree ||
          scheduler.ranks_.contains(position.rank)) {
        return fail(ErrorCode::kParse, "a stored rank is outside the job");
      }
      scheduler.ranks_.emplace(position.rank, position);
      scheduler.positions_.emplace(state.position_index(position), position.rank);
      std::set<uint32_t> own(clocks.begin(), clocks.end());
      if (!first) {
        std::erase_if(own, [&](uint32_t mhz) { return !shared.contains(mhz); });
      }
      shared = std::move(own);
      first = false;
    }
    state.registered_ = static_cast<int>(scheduler.ranks_.size());
    state.frequencies_mhz_ = document.at("frequencies_mhz").get<std::vector<uint32_t>>();
    if (state.phase_ == LivePhase::kRegistering) {
      state.frequencies_mhz_.assign(shared.rbegin(), shared.rend());
    }
    state.sweep_next_ = document.at("sweep_next").get<size_t>();
    state.round_frequencies_ = document.at("round_frequencies").get<size_t>();
    data.samples = samples_from(document.at("samples"));
    if (state.phase_ != LivePhase::kRegistering &&
        (data.samples.size() != static_cast<size_t>(info.pp_degree) ||
         std::any_of(data.samples.begin(), data.samples.end(),
                     [&](const auto& stage) { return stage[0].size() != state.frequencies_mhz_.size(); }))) {
      return fail(ErrorCode::kParse, "a stage has samples for another number of clocks");
    }
    state.idle_energy_j_ = document.at("idle_energy_j").get<double>();
    state.idle_time_s_ = document.at("idle_time_s").get<double>();
    state.busy_time_s_ = document.at("busy_time_s").get<double>();
    const auto given = optional_from<std::string>(document.at("given_profile"));
    const auto measured = optional_from<std::string>(document.at("profile"));
    if (given) {
      const Profile profile = JOULE_TRY(Profile::parse(*given, "the given profile"));
      state.profile_given_ = true;
      state.profile_mhz_ = profile.frequencies_mhz();
    }
    data.profile_csv = measured ? measured : given;
    state.p_blocking_w_ = document.at("p_blocking_w").get<double>();
    state.unit_time_s_ = document.at("unit_time_s").get<double>();
    state.profiling_iterations_ = document.at("profiling_iterations").get<int64_t>();
    state.warmup_rounds_ = document.value("warmup_rounds", int64_t{0});
    state.unsteady_ranks_ = document.value("unsteady_ranks", std::vector<int>{});
    state.unsteady_count_ = static_cast<int>(state.unsteady_ranks_.size());
    if (state.unsteady_ranks_.size() > 32) {
      state.unsteady_ranks_.resize(32);
    }
    state.warmup_gave_up_ = document.value("warmup_gave_up", false);
    state.slowed_ = document.at("slowed").get<std::vector<bool>>();
    state.straggler_time_s_ = optional_from<double>(document.at("straggler_time_s"));
    state.enter_streak_ = document.at("enter_streak").get<int>();
    state.exit_streak_ = document.at("exit_streak").get<int>();
    state.retarget_streak_ = document.at("retarget_streak").get<int>();
    // The fastest assignment, and the one every slowed pipeline runs in straggler mode.
    if (!document.at("fastest").is_null()) {
      const json& fastest = document.at("fastest");
      data.fastest_plan = fastest.at("plan").get<FrequencyPlan>();
      state.fastest_ = prediction_from(fastest.at("predicted"));
    }
    const json& assignments = document.at("assignments");
    for (size_t p = 0; p < assignments.size() && p < state.slowed_.size(); ++p) {
      if (state.straggler_time_s_ && state.slowed_[p]) {
        data.slowed_plan = assignments[p].at("plan").get<FrequencyPlan>();
        state.slowed_prediction_ = prediction_from(assignments[p].at("predicted"));
        break;
      }
    }
    if (state.straggler_time_s_ && !state.slowed_prediction_) {
      // Straggler mode with no pipeline slowed: nothing runs a slowed plan.
      state.slowed_prediction_ = state.fastest_;
      data.slowed_plan = data.fastest_plan;
    }
    for (const json& value : document.at("pending")) {
      LiveResult result = result_from(value);
      const auto rank = scheduler.ranks_.find(result.rank);
      if (rank == scheduler.ranks_.end() || scheduler.reports_.contains(result.rank)) {
        return fail(ErrorCode::kParse, "a pending report of a rank that is not registered");
      }
      const int reporting_rank = result.rank;
      scheduler.reports_.emplace(reporting_rank, LiveReport{rank->second, state.round_, std::move(result)});
    }
    state.reported_ = static_cast<int>(scheduler.reports_.size());
    state.data_version_ = 1;
    data.version = 1;
    JOULE_TRY(LiveStateCodec::check(state));
    JOULE_TRY(state.check_data(data));
    return scheduler;
  }

  static Result<LiveScheduler> from_v2(const json& document) {
    LiveScheduler scheduler;
    scheduler.state_ = JOULE_TRY(LiveStateCodec::from_json(document.at("state")));
    scheduler.data_ = data_from(document.at("data"));
    const LiveState& state = scheduler.state_;
    for (const json& value : document.at("ranks")) {
      const LiveRankPosition position = position_from(value);
      LiveRankInfo as_registered{position.rank, position.dp_rank, position.pp_rank, position.tp_rank, {}};
      const auto index = state.position_index(as_registered);
      if (position.rank < 0 || position.rank >= state.info().world_size || !index ||
          scheduler.ranks_.contains(position.rank) || scheduler.positions_.contains(*index)) {
        return fail(ErrorCode::kParse, "a stored rank is outside the job or registered twice");
      }
      scheduler.ranks_.emplace(position.rank, position);
      scheduler.positions_.emplace(*index, position.rank);
    }
    if (static_cast<int>(scheduler.ranks_.size()) != state.registered()) {
      return fail(ErrorCode::kParse, "the stored ranks do not match the registered count");
    }
    for (const json& value : document.at("reports")) {
      LiveReport report = report_from(value);
      const auto rank = scheduler.ranks_.find(report.rank.rank);
      if (rank == scheduler.ranks_.end() || rank->second != report.rank || report.round != state.round() ||
          report.result.rank != report.rank.rank || scheduler.reports_.contains(report.rank.rank)) {
        return fail(ErrorCode::kParse, "a stored report does not belong to this round's ranks");
      }
      scheduler.reports_.emplace(report.rank.rank, std::move(report));
    }
    if (static_cast<int>(scheduler.reports_.size()) != state.reported()) {
      return fail(ErrorCode::kParse, "the stored reports do not match the reported count");
    }
    JOULE_TRY(state.check_data(scheduler.data_));
    return scheduler;
  }
};

Result<LiveScheduler> LiveScheduler::parse(std::string_view text) {
  try {
    const json document = json::parse(text);
    const int version = document.is_object() && document.value("format", "") == kSchedulerFormat
                            ? document.value("version", 0)
                            : 0;
    if (version == 1) {
      return LiveSchedulerCodec::from_v1(document);
    }
    if (version == kSchedulerVersion) {
      return LiveSchedulerCodec::from_v2(document);
    }
    return fail(ErrorCode::kParse, "not a version 1 or {} {} document", kSchedulerVersion, kSchedulerFormat);
  } catch (const std::exception& error) {
    return fail(ErrorCode::kParse, "{}", error.what());
  }
}

}  // namespace joule::plan
