// SPDX-License-Identifier: Apache-2.0
// The live scheduler: warm-up, a top-down clock sweep that measures the profile, the plan, and stragglers.
// LiveState is the bounded part every request touches; LiveData, the ranks and the reports are kept beside
// it (live_records.cpp serialises them; LiveScheduler at the end holds all of it in memory).
#include "joule/plan/live.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <list>
#include <mutex>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/plan/card_profile.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/profile_codec.hpp"
#include "joule/probe/prior.hpp"

#include "plan/live/live_internal.hpp"

namespace joule::plan {

namespace {

using nlohmann::json;

// The planner walks about this many time units when LiveOptions::unit_time_s is 0 (fewer for jobs so large
// that LiveLimits::max_planning_work bounds them).
constexpr double kAutoPlanningUnits = 20'000;
// Clocks above any GPU's (MHz): a larger value is garbage, not a clock.
constexpr uint32_t kMaxFrequencyMhz = 100'000;
// Ranks that a message or the state lists by number; the rest are counted.
constexpr size_t kListedRanks = 32;
// The longest text of one number in a client's JSON (Python's repr of a double: "-1.2345678901234567e-300"),
// with its separator.
constexpr size_t kNumberTextBytes = 26;

size_t index_of(Instruction instruction) {
  return instruction == Instruction::kForward ? 0 : 1;
}

double median(std::vector<double> values) {
  if (values.empty()) {
    return 0;
  }
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle), values.end());
  double result = values[middle];
  if (values.size() % 2 == 0) {
    result =
        (result + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle))) /
        2;
  }
  return result;
}

Result<void> check_fraction(double value, std::string_view name) {
  if (!std::isfinite(value) || value < 0 || value > 10) {
    return fail(ErrorCode::kInvalidArgument, "{}: must be between 0 and 10, got {}", name, value);
  }
  return {};
}

// One rank's measured value: finite, not negative (a time positive), within what a computation or an
// iteration can take. `field` is the value's path in the result, `what` "computation" or "iteration".
Result<void> check_measurement(double value, bool is_time, const std::string& field, int rank,
                               std::string_view what) {
  if (!std::isfinite(value) || value < 0 || (is_time && value == 0)) {
    return fail(ErrorCode::kInvalidArgument, "{}: must be a finite {} number, got {}", field,
                is_time ? "positive" : "non-negative", value);
  }
  const double most = is_time ? kMaxProfileTimeS : kMaxProfileEnergyJ;
  if (value > most) {
    return fail(ErrorCode::kInvalidArgument,
                "{}: rank {} reported {:g} {}, more than the {:g} {} any {} comes near (a unit mistake, or a "
                "broken measurement); the result is refused and the round goes on without it",
                field, rank, value, is_time ? "s" : "J", most, is_time ? "s" : "J", what);
  }
  return {};
}

// "0, 1, 2" or "0, 1, …, 31 and 4064 more".
std::string list_ranks(const std::vector<int>& ranks, size_t total) {
  if (total <= ranks.size()) {
    return fmt::format("{}", fmt::join(ranks, ", "));
  }
  return fmt::format("{} and {} more", fmt::join(ranks, ", "), total - ranks.size());
}

}  // namespace

namespace detail {

std::shared_ptr<const PipelineDag> shared_pipeline(int stages, int microbatches, Schedule schedule) {
  // The DAGs of the few shapes a process schedules, so that serving a schedule or checking a result does not
  // rebuild one (a 16 × 192 DAG has 6,144 computations).
  constexpr size_t kEntries = 8;
  static std::mutex mutex;
  static std::list<std::pair<std::tuple<int, int, Schedule>, std::shared_ptr<const PipelineDag>>> entries;
  const auto key = std::make_tuple(stages, microbatches, schedule);
  {
    std::lock_guard lock(mutex);
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (it->first == key) {
        entries.splice(entries.begin(), entries, it);
        return entries.front().second;
      }
    }
  }
  auto built = build_pipeline(stages, microbatches, schedule);
  if (!built) {
    return nullptr;
  }
  auto dag = std::make_shared<const PipelineDag>(std::move(*built));
  std::lock_guard lock(mutex);
  entries.emplace_front(key, dag);
  if (entries.size() > kEntries) {
    entries.pop_back();
  }
  return dag;
}

}  // namespace detail

using detail::shared_pipeline;

std::string_view to_string(LivePhase phase) {
  switch (phase) {
    case LivePhase::kRegistering:
      return "registering";
    case LivePhase::kWarmup:
      return "warmup";
    case LivePhase::kProfiling:
      return "profiling";
    case LivePhase::kPlanning:
      return "planning";
    case LivePhase::kPlanned:
      return "planned";
    case LivePhase::kFailed:
      return "failed";
  }
  return "unknown";
}

Result<void> validate(const LiveOptions& options) {
  if (options.profile_samples < 1 || options.profile_samples > 1024) {
    return fail(ErrorCode::kInvalidArgument, "profile_samples: must be 1 to 1024, got {}",
                options.profile_samples);
  }
  if (options.profile_patience < 1 || options.profile_patience > 1024) {
    return fail(ErrorCode::kInvalidArgument, "profile_patience: must be 1 to 1024, got {}",
                options.profile_patience);
  }
  if (options.planned_round_iterations < 1 || options.planned_round_iterations > 1'000'000) {
    return fail(ErrorCode::kInvalidArgument, "planned_round_iterations: must be 1 to 1000000, got {}",
                options.planned_round_iterations);
  }
  if (options.straggler_confirm_rounds < 1 || options.straggler_confirm_rounds > 1000) {
    return fail(ErrorCode::kInvalidArgument, "straggler_confirm_rounds: must be 1 to 1000, got {}",
                options.straggler_confirm_rounds);
  }
  if (options.max_warmup_rounds < 1 || options.max_warmup_rounds > 1'000'000) {
    return fail(ErrorCode::kInvalidArgument,
                "max_warmup_rounds: must be 1 to 1000000 (1: one warm-up round, no thermal wait), got {}",
                options.max_warmup_rounds);
  }
  if (!std::isfinite(options.default_p_blocking_w) || options.default_p_blocking_w < 0) {
    return fail(ErrorCode::kInvalidArgument, "default_p_blocking_w: must be finite and ≥ 0 W, got {}",
                options.default_p_blocking_w);
  }
  if (!std::isfinite(options.unit_time_s) || options.unit_time_s < 0) {
    return fail(ErrorCode::kInvalidArgument, "unit_time_s: must be finite and ≥ 0 s (0: automatic), got {}",
                options.unit_time_s);
  }
  JOULE_TRY(check_fraction(options.profile_stop_energy_rise, "profile_stop_energy_rise"));
  JOULE_TRY(check_fraction(options.straggler_enter, "straggler_enter"));
  JOULE_TRY(check_fraction(options.straggler_exit, "straggler_exit"));
  JOULE_TRY(check_fraction(options.straggler_retarget, "straggler_retarget"));
  JOULE_TRY(check_fraction(options.card_lowest_probe_ratio, "card_lowest_probe_ratio"));
  JOULE_TRY(check_fraction(options.card_max_residual, "card_max_residual"));
  if (options.card_probe_clocks < 2 || options.card_probe_clocks > 64) {
    return fail(ErrorCode::kInvalidArgument, "card_probe_clocks: must be 2 to 64, got {}",
                options.card_probe_clocks);
  }
  if (options.straggler_exit > options.straggler_enter) {
    return fail(ErrorCode::kInvalidArgument,
                "straggler_exit: must not exceed straggler_enter ({}), got {}: without the gap between them "
                "detection would flap",
                options.straggler_enter, options.straggler_exit);
  }
  return {};
}

Result<void> validate(const LiveLimits& limits) {
  if (limits.max_frequencies_per_rank < 1 || limits.max_frequencies_per_rank > 4096) {
    return fail(ErrorCode::kInvalidArgument, "max_frequencies_per_rank: must be 1 to 4096, got {}",
                limits.max_frequencies_per_rank);
  }
  if (limits.max_world_size < 1 || limits.max_world_size > (1 << 24)) {
    return fail(ErrorCode::kInvalidArgument, "max_world_size: must be 1 to {}, got {}", 1 << 24,
                limits.max_world_size);
  }
  if (limits.max_computations < 2 || limits.max_computations > (int64_t{1} << 24)) {
    return fail(ErrorCode::kInvalidArgument, "max_computations: must be 2 to {}, got {}", int64_t{1} << 24,
                limits.max_computations);
  }
  if (limits.max_data_bytes < 4096) {
    return fail(ErrorCode::kInvalidArgument, "max_data_bytes: must be at least 4096, got {}",
                limits.max_data_bytes);
  }
  if (!std::isfinite(limits.max_planning_work) || limits.max_planning_work < 1) {
    return fail(ErrorCode::kInvalidArgument, "max_planning_work: must be finite and ≥ 1, got {}",
                limits.max_planning_work);
  }
  if (!std::isfinite(limits.max_planning_units) || limits.max_planning_units < 1 ||
      limits.max_planning_units > kMostPlanningUnits) {
    return fail(ErrorCode::kInvalidArgument, "max_planning_units: must be 1 to {}, got {}",
                kMostPlanningUnits, limits.max_planning_units);
  }
  return {};
}

size_t LivePlan::memory_bytes() const {
  size_t bytes = sizeof(LivePlan);
  for (const auto& point : frontier.points()) {
    bytes += sizeof(point) + point.knob.size() * sizeof(uint32_t);
  }
  bytes += dag.computations.size() * (sizeof(Computation) + 4 * sizeof(int)) + dag.edges.size() * 16;
  for (int stage = 0; stage < profile.stage_count(); ++stage) {
    bytes += 2 * profile.frequencies_mhz().size() * sizeof(ProfileOption);
  }
  return bytes;
}

Result<std::shared_ptr<const LivePlan>> plan_live(const LivePlanRequest& request) {
  const auto started = std::chrono::steady_clock::now();
  auto plan = std::make_shared<LivePlan>();
  plan->dag = JOULE_TRY(build_pipeline(request.stages, request.microbatches, request.schedule));
  plan->profile = JOULE_TRY(Profile::parse(request.profile_csv, "the measured profile"));
  plan->p_blocking_w = request.p_blocking_w;
  PlannerOptions options;
  options.unit_time_s = request.unit_time_s;
  options.p_blocking_w = request.p_blocking_w;
  if (request.max_planning_units > 0) {
    options.max_planning_units = request.max_planning_units;
  }
  if (request.max_planning_work > 0) {
    const PlanningUnits units = JOULE_TRY(planning_units(plan->dag, plan->profile, request.unit_time_s));
    const double work = units.units * static_cast<double>(plan->dag.computations.size());
    if (work > request.max_planning_work) {
      return fail(
          ErrorCode::kInvalidArgument,
          "planning: {} computations × {:.0f} time units of {:g} s is {:.3g}, more than the {:.3g} the "
          "live planner may walk (a larger unit_time_s plans it)",
          plan->dag.computations.size(), units.units, request.unit_time_s, work, request.max_planning_work);
    }
  }
  auto planned = JOULE_TRY(plan_frontier(plan->dag, plan->profile, options));
  plan->frontier = std::move(planned.frontier);
  plan->max_clock = planned.max_clock;
  plan->planning_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return std::shared_ptr<const LivePlan>(std::move(plan));
}

// --- LiveState: registration ------------------------------------------------------------------------------

Result<LiveState> LiveState::create(LiveJobInfo info, LiveOptions options, LiveLimits limits) {
  for (const auto& [name, value] : {std::pair<std::string_view, int>{"pp_degree", info.pp_degree},
                                    {"dp_degree", info.dp_degree},
                                    {"tp_degree", info.tp_degree},
                                    {"world_size", info.world_size},
                                    {"num_microbatches", info.num_microbatches}}) {
    if (value < 1) {
      return fail(ErrorCode::kInvalidArgument, "{}: ensure this value is greater than or equal to 1", name);
    }
  }
  JOULE_TRY(validate(options));
  JOULE_TRY(validate(limits));
  const int64_t product = int64_t{info.pp_degree} * info.dp_degree * info.tp_degree;
  if (product != info.world_size) {
    return fail(ErrorCode::kInvalidArgument,
                "world_size: must equal pp_degree × dp_degree × tp_degree = {} × {} × {} = {}, got {}",
                info.pp_degree, info.dp_degree, info.tp_degree, product, info.world_size);
  }
  if (info.world_size > limits.max_world_size) {
    return fail(ErrorCode::kInvalidArgument, "world_size: {} ranks, more than the {} one job may have",
                info.world_size, limits.max_world_size);
  }
  const int64_t computations = int64_t{2} * info.pp_degree * info.num_microbatches;
  if (computations > limits.max_computations) {
    return fail(ErrorCode::kInvalidArgument,
                "num_microbatches: {} stages × {} microbatches make {} computations per iteration, more than "
                "the {} the live scheduler plans",
                info.pp_degree, info.num_microbatches, computations, limits.max_computations);
  }
  // The worst case of the job's data: every (stage, instruction) sampled at every clock a rank may list,
  // the profile's rows, and two plans.
  const auto rows =
      static_cast<size_t>(info.pp_degree) * 2 * static_cast<size_t>(limits.max_frequencies_per_rank);
  const size_t worst_data_bytes = rows * (3 * kNumberTextBytes + 4) + rows * (3 * kNumberTextBytes + 24) +
                                  2 * static_cast<size_t>(computations) * 7 + 1024;
  if (worst_data_bytes > limits.max_data_bytes) {
    return fail(
        ErrorCode::kInvalidArgument,
        "pp_degree: {} stages with up to {} clocks each may need {} bytes of profile, more than the {} "
        "a job may keep",
        info.pp_degree, limits.max_frequencies_per_rank, worst_data_bytes, limits.max_data_bytes);
  }
  LiveState state;
  state.info_ = std::move(info);
  state.options_ = options;
  state.limits_ = limits;
  return state;
}

Result<void> LiveState::use_profile(const std::string& profile_csv, LiveData& data) {
  if (registered_ > 0) {
    return fail(ErrorCode::kState, "profile: must be given before the first rank registers");
  }
  const Profile profile = JOULE_TRY(Profile::parse(profile_csv, "the given profile"));
  if (profile.stage_count() < info_.pp_degree) {
    return fail(ErrorCode::kInvalidArgument, "profile: has {} stages but the job has pp_degree {}",
                profile.stage_count(), info_.pp_degree);
  }
  if (profile.frequencies_mhz().size() > static_cast<size_t>(limits_.max_frequencies_per_rank)) {
    return fail(ErrorCode::kInvalidArgument, "profile: has {} clocks, more than the {} a rank may list",
                profile.frequencies_mhz().size(), limits_.max_frequencies_per_rank);
  }
  data.profile_csv = plan::profile_csv(profile);
  profile_given_ = true;
  profile_mhz_ = profile.frequencies_mhz();
  ++data_version_;
  data.version = data_version_;
  return {};
}

Result<void> LiveState::use_card(const probe::Card& card, const std::string& source, LiveData& data) {
  if (registered_ > 0) {
    return fail(ErrorCode::kState, "card: must be given before the first rank registers");
  }
  if (profile_given_) {
    return fail(ErrorCode::kInvalidArgument,
                "card: the job was given a profile, so nothing is profiled: a card would not be used");
  }
  if (auto prior = probe::KnobPrior::from_card(card, probe::CardKnob::kSmClock, source); !prior) {
    return fail(ErrorCode::kInvalidArgument, "card: {}", prior.error().message());
  }
  data.card_json = probe::render_card(card);
  card_given_ = true;
  card_source_ = source.substr(0, 256);  // a name for logs: the state stays small whatever the card says
  ++data_version_;
  data.version = data_version_;
  return {};
}

std::optional<int> LiveState::position_index(const LiveRankInfo& rank) const {
  if (rank.dp_rank < 0 || rank.dp_rank >= info_.dp_degree || rank.pp_rank < 0 ||
      rank.pp_rank >= info_.pp_degree || rank.tp_rank < 0 || rank.tp_rank >= info_.tp_degree) {
    return std::nullopt;
  }
  return position_index(LiveRankPosition{rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank});
}

int LiveState::position_index(const LiveRankPosition& rank) const {
  return (rank.dp_rank * info_.pp_degree + rank.pp_rank) * info_.tp_degree + rank.tp_rank;
}

Error LiveState::already_registered(int rank) {
  return Error(ErrorCode::kState, fmt::format("rank: rank {} is already registered", rank));
}

Error LiveState::position_taken(const LiveRankPosition& rank, int holder) {
  return Error(
      ErrorCode::kInvalidArgument,
      fmt::format("rank: rank {} claims dp_rank {}, pp_rank {}, tp_rank {}, which rank {} already has",
                  rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank, holder));
}

Error LiveState::already_reported(int rank) const {
  return Error(
      ErrorCode::kState,
      fmt::format("rank: rank {} already reported round {}; it gets the next schedule once every rank "
                  "has reported",
                  rank, round_));
}

Error LiveState::not_a_rank(int rank) const {
  return Error(ErrorCode::kNotFound, fmt::format("rank: rank {} is not part of job {} (world_size {})", rank,
                                                 info_.job_id, info_.world_size));
}

Error LiveState::registration_pending(const std::vector<int>& missing) const {
  const int count = info_.world_size - registered_;
  if (missing.empty()) {
    return Error(ErrorCode::kState, fmt::format("rank: job {} is waiting for {} of {} ranks to register",
                                                info_.job_id, count, info_.world_size));
  }
  return Error(
      ErrorCode::kState,
      fmt::format("rank: job {} is waiting for {} of {} ranks to register (missing: {})", info_.job_id, count,
                  info_.world_size, list_ranks(missing, static_cast<size_t>(count))));
}

Result<LiveRankPosition> LiveState::check_registration(const LiveRankInfo& rank) const {
  if (rank.rank < 0 || rank.rank >= info_.world_size) {
    return fail(ErrorCode::kInvalidArgument, "rank: must be 0 to {} (world_size {}), got {}",
                info_.world_size - 1, info_.world_size, rank.rank);
  }
  for (const auto& [name, value, degree] :
       {std::tuple<std::string_view, int, int>{"dp_rank", rank.dp_rank, info_.dp_degree},
        {"pp_rank", rank.pp_rank, info_.pp_degree},
        {"tp_rank", rank.tp_rank, info_.tp_degree}}) {
    if (value < 0 || value >= degree) {
      return fail(ErrorCode::kInvalidArgument, "{}: must be 0 to {} (the job's degree is {}), got {}", name,
                  degree - 1, degree, value);
    }
  }
  if (phase_ != LivePhase::kRegistering) {
    return fail(ErrorCode::kState, "rank: every rank of job {} is registered", info_.job_id);
  }
  const auto& clocks = rank.available_frequencies_mhz;
  if (clocks.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "available_frequencies: the GPU lists no SM clock (the scheduler needs at least one)");
  }
  if (clocks.size() > static_cast<size_t>(limits_.max_frequencies_per_rank)) {
    return fail(
        ErrorCode::kInvalidArgument,
        "available_frequencies: {} clocks, more than the {} a rank may list (GPUs offer a few hundred "
        "at most)",
        clocks.size(), limits_.max_frequencies_per_rank);
  }
  std::set<uint32_t> seen;
  for (size_t i = 0; i < clocks.size(); ++i) {
    if (clocks[i] == 0 || clocks[i] > kMaxFrequencyMhz) {
      return fail(ErrorCode::kInvalidArgument, "available_frequencies[{}]: must be 1 to {} MHz, got {}", i,
                  kMaxFrequencyMhz, clocks[i]);
    }
    if (!seen.insert(clocks[i]).second) {
      return fail(ErrorCode::kInvalidArgument, "available_frequencies[{}]: {} MHz is listed twice", i,
                  clocks[i]);
    }
  }
  for (const uint32_t frequency : profile_mhz_) {
    if (!seen.contains(frequency)) {
      return fail(
          ErrorCode::kOutOfRange,
          "available_frequencies: the job's profile plans {} MHz, which rank {}'s GPU does not support",
          frequency, rank.rank);
    }
  }
  if (registered_ > 0 && std::none_of(frequencies_mhz_.begin(), frequencies_mhz_.end(),
                                      [&](uint32_t mhz) { return seen.contains(mhz); })) {
    return fail(ErrorCode::kOutOfRange,
                "available_frequencies: the ranks' GPUs share no SM clock (rank {} lists {} to {} MHz; the "
                "ranks registered before share {} to {} MHz)",
                rank.rank, *seen.begin(), *seen.rbegin(), frequencies_mhz_.back(), frequencies_mhz_.front());
  }
  return LiveRankPosition{rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank};
}

void LiveState::add_rank(const LiveRankInfo& rank, LiveData& data) {
  std::set<uint32_t> clocks(rank.available_frequencies_mhz.begin(), rank.available_frequencies_mhz.end());
  if (registered_ > 0) {
    std::erase_if(clocks, [&](uint32_t mhz) {
      return !std::binary_search(frequencies_mhz_.rbegin(), frequencies_mhz_.rend(), mhz);
    });
  }
  frequencies_mhz_.assign(clocks.rbegin(), clocks.rend());
  ++registered_;
  if (registered_ < info_.world_size) {
    return;
  }
  data.samples.assign(static_cast<size_t>(info_.pp_degree), {});
  for (auto& stage : data.samples) {
    for (auto& instruction : stage) {
      instruction.assign(frequencies_mhz_.size(), LiveSample{});
    }
  }
  ++data_version_;
  data.version = data_version_;
  if (card_given_) {
    CardProfileOptions card_options;
    card_options.probe_clocks =
        card_probe_count(options_.card_probe_clocks, info_.num_microbatches, options_.profile_samples);
    card_options.lowest_probe_ratio = options_.card_lowest_probe_ratio;
    card_clocks_ = card_probe_indices(frequencies_mhz_, card_options);
  }
  if (profile_given_ && data.profile_csv) {
    p_blocking_w_ = options_.default_p_blocking_w * info_.tp_degree;
    slowed_.assign(static_cast<size_t>(info_.dp_degree), false);
    planning_after_round_ = false;
    const auto requested = request_plan(*data.profile_csv, data);
    if (!requested) {
      phase_ = LivePhase::kFailed;
      failure_ = requested.error().message();
    }
  } else {
    phase_ = LivePhase::kWarmup;
  }
}

// --- LiveState: schedules ---------------------------------------------------------------------------------

bool LiveState::serving() const {
  return phase_ != LivePhase::kRegistering && phase_ != LivePhase::kPlanning;
}

int LiveState::iterations_of_round() const {
  return phase_ == LivePhase::kPlanned || phase_ == LivePhase::kFailed ? options_.planned_round_iterations
                                                                       : 1;
}

size_t LiveState::profiling_slot(int microbatch) const {
  // Microbatch m measures clock base + ⌊m · k / M⌋ of the k this round sweeps: each gets M/k samples.
  const size_t base = sweep_next_ - round_frequencies_;
  const size_t slot =
      static_cast<size_t>(microbatch) * round_frequencies_ / static_cast<size_t>(info_.num_microbatches);
  return sweep_clock(std::min(base + slot, frequencies_mhz_.size() - 1));
}

size_t LiveState::sweep_clock(size_t position) const {
  if (!card_given_ || card_clocks_.empty()) {
    return position;
  }
  if (position < card_clocks_.size()) {
    return card_clocks_[position];
  }
  // The (position − k)-th clock that is not one of the card's k, from the highest down.
  size_t rest = position - card_clocks_.size();
  for (size_t index = 0; index < frequencies_mhz_.size(); ++index) {
    if (!std::binary_search(card_clocks_.begin(), card_clocks_.end(), index)) {
      if (rest == 0) {
        return index;
      }
      --rest;
    }
  }
  return frequencies_mhz_.size() - 1;
}

size_t LiveState::sweep_length() const {
  return card_given_ && !card_fallback_ ? std::min(card_clocks_.size(), frequencies_mhz_.size())
                                        : frequencies_mhz_.size();
}

std::vector<bool> LiveState::swept_clocks() const {
  std::vector<bool> swept(frequencies_mhz_.size(), false);
  for (size_t position = 0; position < sweep_next_; ++position) {
    swept[sweep_clock(position)] = true;
  }
  return swept;
}

std::vector<std::pair<std::string, uint32_t>> LiveState::profiling_list(const PipelineDag& dag,
                                                                        int pp_rank) const {
  std::vector<std::pair<std::string, uint32_t>> list;
  list.reserve(dag.stage_order[static_cast<size_t>(pp_rank)].size());
  for (const int node : dag.stage_order[static_cast<size_t>(pp_rank)]) {
    const Computation& computation = dag.computations[static_cast<size_t>(node)];
    const uint32_t frequency = phase_ == LivePhase::kProfiling
                                   ? frequencies_mhz_[profiling_slot(computation.microbatch)]
                                   : frequencies_mhz_.front();
    list.emplace_back(std::string(to_string(computation.instruction)), frequency);
  }
  return list;
}

Result<LiveSchedule> LiveState::schedule(const LiveRankPosition& rank, const LiveData& data) const {
  if (phase_ == LivePhase::kRegistering) {
    return tl::make_unexpected(registration_pending({}));
  }
  if (phase_ == LivePhase::kPlanning) {
    return fail(ErrorCode::kState,
                "rank: job {} is being planned from its profile; its next round starts "
                "when the plan is ready",
                info_.job_id);
  }
  const auto dag = shared_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule);
  if (!dag) {
    return fail(ErrorCode::kInternal, "cannot build the pipeline of job {}", info_.job_id);
  }
  LiveSchedule schedule;
  schedule.rank = rank.rank;
  schedule.round = round_;
  schedule.phase = phase_;
  schedule.iterations = iterations_of_round();
  if (phase_ != LivePhase::kPlanned) {
    schedule.frequencies = profiling_list(*dag, rank.pp_rank);
    return schedule;
  }
  const bool slowed = straggler_time_s_ && slowed_[static_cast<size_t>(rank.dp_rank)];
  const FrequencyPlan& plan = slowed ? data.slowed_plan : data.fastest_plan;
  if (plan.size() != dag->computations.size() || data.version != data_version_) {
    return fail(ErrorCode::kInternal, "the stored plan of job {} does not match its state", info_.job_id);
  }
  for (const int node : dag->stage_order[static_cast<size_t>(rank.pp_rank)]) {
    const auto id = static_cast<size_t>(node);
    schedule.frequencies.emplace_back(std::string(to_string(dag->computations[id].instruction)), plan[id]);
  }
  schedule.predicted = slowed ? slowed_prediction_ : fastest_;
  return schedule;
}

// --- LiveState: results and rounds ------------------------------------------------------------------------

size_t LiveState::max_result_bytes() const {
  const auto iterations = static_cast<size_t>(std::max(1, options_.planned_round_iterations));
  const auto computations = 2 * static_cast<size_t>(info_.num_microbatches);  // one stage's, per iteration
  // Per iteration: a time and an energy per computation and for the whole, each list's brackets and name.
  return iterations * ((2 * computations + 2) * kNumberTextBytes + 64) + 512;
}

Result<void> LiveState::check_result(const LiveResult& result, const LiveRankPosition& rank) const {
  if (phase_ == LivePhase::kRegistering) {
    return tl::make_unexpected(registration_pending({}));
  }
  if (phase_ == LivePhase::kPlanning) {
    return fail(ErrorCode::kState,
                "rank: job {} is being planned: every rank reported round {}; wait for the next schedule",
                info_.job_id, round_);
  }
  if (result.round && *result.round != round_) {
    return fail(ErrorCode::kState,
                "round: rank {} reported round {}, but job {} is at round {} (a repeated or late result; "
                "GET /schedule/{}?rank={} gives the current round)",
                rank.rank, *result.round, info_.job_id, round_, info_.job_id, rank.rank);
  }
  const auto dag = shared_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule);
  if (!dag) {
    return fail(ErrorCode::kInternal, "cannot build the pipeline of job {}", info_.job_id);
  }
  const auto iterations = static_cast<size_t>(iterations_of_round());
  std::map<std::string, size_t> per_instruction;
  for (const int node : dag->stage_order[static_cast<size_t>(rank.pp_rank)]) {
    ++per_instruction[std::string(to_string(dag->computations[static_cast<size_t>(node)].instruction))];
  }
  for (const auto& [name, values] :
       {std::pair<std::string_view, const std::vector<double>*>{"iter_time", &result.iter_time_s},
        {"iter_energy", &result.iter_energy_j}}) {
    if (values->size() != iterations) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}: round {} ran {} iteration{} of its schedule, but the result lists {} values", name,
                  round_, iterations, iterations == 1 ? "" : "s", values->size());
    }
    for (size_t i = 0; i < values->size(); ++i) {
      JOULE_TRY(check_measurement((*values)[i], name == "iter_time", fmt::format("{}[{}]", name, i),
                                  rank.rank, "iteration"));
    }
  }
  const bool profiling = phase_ == LivePhase::kProfiling;
  for (const auto& [field, breakdown] :
       {std::pair<std::string_view, const std::map<std::string, std::vector<std::vector<double>>>*>{
            "time_breakdown", &result.time_breakdown_s},
        {"energy_breakdown", &result.energy_breakdown_j}}) {
    for (const auto& [name, lists] : *breakdown) {
      const auto expected = per_instruction.find(name);
      if (expected == per_instruction.end()) {
        std::vector<std::string> known;
        known.reserve(per_instruction.size());
        for (const auto& [known_name, count] : per_instruction) {
          known.push_back(known_name);
        }
        return fail(ErrorCode::kInvalidArgument,
                    "{}.{}: unknown instruction '{}': the schedule of rank {} has only {}", field, name, name,
                    rank.rank, fmt::join(known, ", "));
      }
      if (lists.size() != iterations) {
        return fail(ErrorCode::kInvalidArgument, "{}.{}: must list {} iteration{}, got {}", field, name,
                    iterations, iterations == 1 ? "" : "s", lists.size());
      }
      const bool is_time = field == "time_breakdown";
      for (size_t i = 0; i < lists.size(); ++i) {
        if (lists[i].size() != expected->second) {
          return fail(ErrorCode::kInvalidArgument,
                      "{}.{}[{}]: the schedule runs {} {} computation{} per iteration, the result lists {}",
                      field, name, i, expected->second, name, expected->second == 1 ? "" : "s",
                      lists[i].size());
        }
        for (size_t k = 0; k < lists[i].size(); ++k) {
          JOULE_TRY(check_measurement(lists[i][k], is_time, fmt::format("{}.{}[{}][{}]", field, name, i, k),
                                      rank.rank, "computation"));
        }
      }
    }
    if (profiling) {
      for (const auto& [name, count] : per_instruction) {
        if (!breakdown->contains(name)) {
          return fail(ErrorCode::kInvalidArgument,
                      "{}.{}: field required while profiling (the {} of every {} is what the sweep measures)",
                      field, name, field == "time_breakdown" ? "time" : "energy", name);
        }
      }
    }
  }
  return {};
}

bool LiveState::count_report() {
  ++reported_;
  return reported_ >= info_.world_size;
}

void LiveState::next_round() {
  reported_ = 0;
  ++round_;
}

void LiveState::start_sweep_round() {
  // The next clocks, M / samples of them (at least one).
  const size_t remaining = sweep_length() - std::min(sweep_next_, sweep_length());
  const auto per_iteration =
      static_cast<size_t>(std::max(1, info_.num_microbatches / options_.profile_samples));
  round_frequencies_ = std::min(per_iteration, remaining);
  sweep_next_ += round_frequencies_;
}

Result<void> LiveState::complete_round(const std::vector<LiveReport>& reports, LiveData& data) {
  if (reports.size() != static_cast<size_t>(info_.world_size)) {
    return fail(ErrorCode::kInvalidArgument, "round {} of job {} has {} reports for {} ranks", round_,
                info_.job_id, reports.size(), info_.world_size);
  }
  std::vector<bool> seen(static_cast<size_t>(info_.world_size), false);
  for (const LiveReport& report : reports) {
    const int rank = report.rank.rank;
    if (report.round != round_ || rank < 0 || rank >= info_.world_size || seen[static_cast<size_t>(rank)] ||
        report.result.rank != rank) {
      return fail(ErrorCode::kInvalidArgument, "round {} of job {} has a report of rank {} for round {}",
                  round_, info_.job_id, rank, report.round);
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  rerun_reason_.clear();
  // Reports come back from a store: checked again, so that one spoilt since cannot break the observation.
  for (const LiveReport& report : reports) {
    if (auto checked = check_result(report.result, report.rank); !checked) {
      rerun_reason_ = checked.error().message();
      next_round();
      return {};
    }
  }
  LiveState next = *this;
  LiveData next_data = data;
  if (auto observed = next.observe(reports, next_data); !observed) {
    // The reports passed check_result() but cannot be used together (a stored state from before a bound):
    // measure the round again rather than refuse every later result.
    rerun_reason_ = observed.error().message();
    next_round();
    return {};
  }
  *this = std::move(next);
  data = std::move(next_data);
  return {};
}

Result<void> LiveState::observe(const std::vector<LiveReport>& reports, LiveData& data) {
  switch (phase_) {
    case LivePhase::kRegistering:
    case LivePhase::kPlanning:
      return fail(ErrorCode::kInternal, "a round completed while the job was {}", to_string(phase_));
    case LivePhase::kWarmup: {
      profiling_iterations_ += 1;
      warmup_rounds_ += 1;
      // A GPU still heating up draws less leakage power than it will once warm: a profile measured now
      // would read low. Stay at the highest clock (the most heat) until every rank is steady.
      std::vector<int> unsteady;
      for (const LiveReport& report : reports) {
        if (report.result.thermally_steady == false) {
          unsteady.push_back(report.rank.rank);
        }
      }
      std::sort(unsteady.begin(), unsteady.end());
      unsteady_count_ = static_cast<int>(unsteady.size());
      unsteady.resize(std::min(unsteady.size(), kListedRanks));
      unsteady_ranks_ = std::move(unsteady);
      if (unsteady_count_ > 0 && warmup_rounds_ < options_.max_warmup_rounds) {
        next_round();
        return {};
      }
      warmup_gave_up_ = unsteady_count_ > 0;
      phase_ = LivePhase::kProfiling;
      start_sweep_round();
      next_round();
      return {};
    }
    case LivePhase::kProfiling: {
      profiling_iterations_ += 1;
      if (data.samples.size() != static_cast<size_t>(info_.pp_degree)) {
        return fail(ErrorCode::kInternal, "the stored samples of job {} do not match its stages",
                    info_.job_id);
      }
      observe_profile(reports, data);
      if (card_given_ && !card_fallback_ && sweep_next_ >= sweep_length()) {
        return observe_card(data);
      }
      if (!sweep_finished(data)) {
        start_sweep_round();
        next_round();
        return {};
      }
      return plan_measured(data);
    }
    case LivePhase::kPlanned: {
      const auto before = std::make_pair(straggler_time_s_, slowed_);
      observe_stragglers(reports);
      if (std::make_pair(straggler_time_s_, slowed_) != before) {
        // What some pipeline should run changed: pick from the frontier (the planner's cache has it).
        planning_after_round_ = true;
        phase_ = LivePhase::kPlanning;
        ++planning_sequence_;
        return {};
      }
      next_round();
      return {};
    }
    case LivePhase::kFailed:
      next_round();
      return {};
  }
  return {};
}

Result<void> LiveState::plan_profile(const Profile& profile, LiveData& data) {
  // Σ over ranks: every GPU's energy outside its computations over its time outside them.
  const double total_time_s = idle_time_s_ + busy_time_s_;
  const double per_gpu_w = idle_time_s_ >= 0.01 * total_time_s && idle_time_s_ > 0
                               ? idle_energy_j_ / idle_time_s_
                               : options_.default_p_blocking_w;
  p_blocking_w_ = per_gpu_w * info_.tp_degree;
  slowed_.assign(static_cast<size_t>(info_.dp_degree), false);
  straggler_time_s_.reset();
  planning_after_round_ = true;
  return request_plan(plan::profile_csv(profile), data);
}

Result<void> LiveState::plan_measured(LiveData& data) {
  const std::vector<bool> swept = swept_clocks();
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(static_cast<size_t>(info_.pp_degree));
  for (size_t stage = 0; stage < options.size(); ++stage) {
    for (size_t instruction = 0; instruction < 2; ++instruction) {
      for (size_t f = 0; f < swept.size(); ++f) {
        if (!swept[f]) {
          continue;
        }
        const LiveSample& sample = data.samples[stage][instruction][f];
        if (sample.count == 0) {
          return fail(ErrorCode::kInternal, "stage {} has no sample at {} MHz", stage, frequencies_mhz_[f]);
        }
        const auto count = static_cast<double>(sample.count);
        // A counter too coarse for one computation can read 0 J: keep the profile valid.
        options[stage][instruction].push_back(
            {frequencies_mhz_[f], sample.time_s / count, std::max(sample.energy_j / count, 1e-9)});
      }
    }
  }
  return plan_profile(JOULE_TRY(Profile::from_options(std::move(options))), data);
}

Result<void> LiveState::observe_card(LiveData& data) {
  if (!data.card_json) {
    return fail(ErrorCode::kInternal, "the stored data of job {} lacks its card", info_.job_id);
  }
  const probe::Card card = JOULE_TRY(probe::parse_card(*data.card_json, card_source_));
  const probe::KnobPrior prior =
      JOULE_TRY(probe::KnobPrior::from_card(card, probe::CardKnob::kSmClock, card_source_));
  CardMeasurements measured(static_cast<size_t>(info_.pp_degree));
  for (size_t stage = 0; stage < measured.size(); ++stage) {
    for (size_t instruction = 0; instruction < 2; ++instruction) {
      for (const size_t f : card_clocks_) {
        const LiveSample& sample = data.samples[stage][instruction][f];
        if (sample.count == 0) {
          return fail(ErrorCode::kInternal, "stage {} has no sample at {} MHz", stage, frequencies_mhz_[f]);
        }
        const auto count = static_cast<double>(sample.count);
        measured[stage][instruction].push_back({static_cast<double>(frequencies_mhz_[f]),
                                                sample.time_s / count,
                                                std::max(sample.energy_j / count, 1e-9)});
      }
    }
  }
  CardProfileOptions card_options;
  card_options.probe_clocks = options_.card_probe_clocks;
  card_options.lowest_probe_ratio = options_.card_lowest_probe_ratio;
  card_options.max_residual = options_.card_max_residual;
  card_options.stop_energy_rise = options_.profile_stop_energy_rise;
  card_options.patience = options_.profile_patience;
  const CardProfile predicted =
      JOULE_TRY(predict_card_profile(prior, measured, frequencies_mhz_, card_options, card_source_));
  // Bounded: the state stays small whatever the card said.
  card_summary_ = predicted.summary.substr(0, 1024);
  if (!predicted.profile) {
    card_fallback_ = true;
    start_sweep_round();
    next_round();
    return {};
  }
  return plan_profile(*predicted.profile, data);
}

void LiveState::observe_profile(const std::vector<LiveReport>& reports, LiveData& data) {
  // Per (dp, pp) position: per instruction occurrence, the time is the slowest tensor-parallel rank's and the
  // energy the sum of theirs (one stage is tp GPUs). One iteration per profiling round.
  const auto dag = shared_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule);
  std::vector<std::array<std::vector<size_t>, 2>> slots(static_cast<size_t>(info_.pp_degree));
  for (int pp = 0; pp < info_.pp_degree; ++pp) {
    for (const int node : dag->stage_order[static_cast<size_t>(pp)]) {
      const Computation& computation = dag->computations[static_cast<size_t>(node)];
      slots[static_cast<size_t>(pp)][index_of(computation.instruction)].push_back(
          profiling_slot(computation.microbatch));
    }
  }
  std::map<std::pair<int, int>, std::vector<const LiveResult*>> by_position;
  for (const LiveReport& report : reports) {
    by_position[{report.rank.dp_rank, report.rank.pp_rank}].push_back(&report.result);
  }
  for (const auto& [position, results] : by_position) {
    const auto pp = static_cast<size_t>(position.second);
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      const std::string name(to_string(instruction));
      const auto& indices = slots[pp][index_of(instruction)];
      std::vector<double> time_s(indices.size(), 0.0);
      std::vector<double> energy_j(indices.size(), 0.0);
      for (const LiveResult* result : results) {
        const auto& times = result->time_breakdown_s.at(name).front();
        const auto& energies = result->energy_breakdown_j.at(name).front();
        for (size_t k = 0; k < indices.size(); ++k) {
          time_s[k] = std::max(time_s[k], times[k]);
          energy_j[k] += energies[k];
        }
      }
      for (size_t k = 0; k < indices.size(); ++k) {
        LiveSample& sample = data.samples[pp][index_of(instruction)][indices[k]];
        sample.time_s += time_s[k];
        sample.energy_j += energy_j[k];
        ++sample.count;
      }
    }
  }
  ++data_version_;
  data.version = data_version_;
  for (const LiveReport& report : reports) {
    const LiveResult& result = report.result;
    for (size_t i = 0; i < result.iter_time_s.size(); ++i) {
      double busy_s = 0;
      double busy_j = 0;
      for (const auto& [name, lists] : result.time_breakdown_s) {
        for (const double value : lists[i]) {
          busy_s += value;
        }
      }
      for (const auto& [name, lists] : result.energy_breakdown_j) {
        for (const double value : lists[i]) {
          busy_j += value;
        }
      }
      const double idle_s = result.iter_time_s[i] - busy_s;
      const double idle_j = result.iter_energy_j[i] - busy_j;
      busy_time_s_ += busy_s;
      if (idle_s > 0 && idle_j >= 0) {
        idle_time_s_ += idle_s;
        idle_energy_j_ += idle_j;
      }
    }
  }
}

bool LiveState::sweep_finished(const LiveData& data) const {
  if (sweep_next_ >= sweep_length()) {
    return true;
  }
  // The rule reads the clocks profiled from the highest down without a gap (with a card that failed its
  // check, the card's lower clocks were profiled first: they count once the sweep reaches them).
  const std::vector<bool> swept = swept_clocks();
  const auto prefix = static_cast<size_t>(std::find(swept.begin(), swept.end(), false) - swept.begin());
  const auto patience = static_cast<size_t>(options_.profile_patience);
  if (prefix < patience + 1) {
    return false;
  }
  for (const auto& stage : data.samples) {
    for (const auto& instruction : stage) {
      double least_j = INFINITY;
      for (size_t f = 0; f < prefix; ++f) {
        least_j = std::min(least_j, instruction[f].energy_j / static_cast<double>(instruction[f].count));
      }
      for (size_t f = prefix - patience; f < prefix; ++f) {
        const double energy_j = instruction[f].energy_j / static_cast<double>(instruction[f].count);
        if (energy_j <= least_j * (1 + options_.profile_stop_energy_rise)) {
          return false;  // this stage still gets cheaper (or not clearly dearer) at lower clocks
        }
      }
    }
  }
  return true;
}

Result<void> LiveState::request_plan(const std::string& profile_csv, LiveData& data) {
  unit_time_s_ = options_.unit_time_s;
  if (unit_time_s_ == 0) {
    const Profile profile = JOULE_TRY(Profile::parse(profile_csv, "the measured profile"));
    const auto dag = shared_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule);
    if (!dag) {
      return fail(ErrorCode::kInternal, "cannot build the pipeline of job {}", info_.job_id);
    }
    const PlanningUnits units = JOULE_TRY(planning_units(*dag, profile, 1.0));
    // The planner's work grows with computations × units: large pipelines get a coarser unit.
    const double computations = static_cast<double>(dag->computations.size());
    const double walk = std::max(1.0, std::min(kAutoPlanningUnits, limits_.max_planning_work / computations));
    unit_time_s_ = units.slowest_iteration_s / walk;
  }
  if (data.profile_csv != profile_csv) {
    data.profile_csv = profile_csv;
    ++data_version_;
    data.version = data_version_;
  }
  phase_ = LivePhase::kPlanning;
  ++planning_sequence_;
  return {};
}

std::optional<LivePlanRequest> LiveState::planning(const LiveData& data) const {
  if (phase_ != LivePhase::kPlanning || !data.profile_csv) {
    return std::nullopt;
  }
  LivePlanRequest request;
  request.profile_csv = *data.profile_csv;
  request.stages = info_.pp_degree;
  request.microbatches = info_.num_microbatches;
  request.schedule = info_.schedule;
  request.p_blocking_w = p_blocking_w_;
  request.unit_time_s = unit_time_s_;
  request.max_planning_units = limits_.max_planning_units;
  request.max_planning_work = limits_.max_planning_work;
  request.sequence = planning_sequence_;
  return request;
}

Result<void> LiveState::apply_plan(const LivePlan& plan, int64_t sequence, LiveData& data) {
  if (phase_ != LivePhase::kPlanning || sequence != planning_sequence_) {
    return fail(ErrorCode::kState, "plan: job {} no longer waits for plan {} (phase {}, plan {})",
                info_.job_id, sequence, to_string(phase_), planning_sequence_);
  }
  if (plan.frontier.empty()) {
    return fail(ErrorCode::kInternal, "the planner returned no plan for job {}", info_.job_id);
  }
  const size_t computations =
      2 * static_cast<size_t>(info_.pp_degree) * static_cast<size_t>(info_.num_microbatches);
  if (plan.dag.computations.size() != computations) {
    return fail(ErrorCode::kInvalidArgument, "plan: planned for {} computations, job {} has {}",
                plan.dag.computations.size(), info_.job_id, computations);
  }
  const auto predict = [&](const PlanChoice& choice) {
    LivePrediction prediction;
    prediction.iteration_time_s = choice.time_s;
    prediction.compute_time_s = plan.frontier.points()[choice.index].time_s;
    prediction.iteration_energy_j = choice.energy_j;
    prediction.max_clock_time_s = plan.max_clock.time_s;
    prediction.max_clock_energy_j = plan.max_clock.energy_j;
    prediction.p_blocking_w = plan.p_blocking_w;
    return prediction;
  };
  const PlanChoice fastest =
      JOULE_TRY(choose_plan(plan.frontier, plan.max_clock, {}, plan.p_blocking_w, info_.pp_degree));
  std::optional<LivePrediction> slowed_prediction;
  FrequencyPlan slowed_plan;
  if (straggler_time_s_) {
    const PlanChoice slowed = JOULE_TRY(choose_plan(
        plan.frontier, plan.max_clock, {.time_s = straggler_time_s_}, plan.p_blocking_w, info_.pp_degree));
    slowed_prediction = predict(slowed);
    slowed_plan = plan.frontier.points()[slowed.index].knob;
  }
  fastest_ = predict(fastest);
  slowed_prediction_ = slowed_prediction;
  data.fastest_plan = plan.frontier.points()[fastest.index].knob;
  data.slowed_plan = std::move(slowed_plan);
  ++data_version_;
  data.version = data_version_;
  phase_ = LivePhase::kPlanned;
  if (planning_after_round_) {
    next_round();
  }
  planning_after_round_ = false;
  planner_.clear();
  planner_since_unix_ns_ = 0;
  return {};
}

void LiveState::fail_planning(int64_t sequence, std::string why) {
  if (phase_ != LivePhase::kPlanning || sequence != planning_sequence_) {
    return;
  }
  failure_ = std::move(why);
  if (fastest_) {
    // A straggler's new target could not be planned: every pipeline keeps the fastest plan.
    straggler_time_s_.reset();
    slowed_.assign(slowed_.size(), false);
    slowed_prediction_.reset();
    phase_ = LivePhase::kPlanned;
  } else {
    phase_ = LivePhase::kFailed;
  }
  if (planning_after_round_) {
    next_round();
  }
  planning_after_round_ = false;
  planner_.clear();
  planner_since_unix_ns_ = 0;
}

void LiveState::observe_stragglers(const std::vector<LiveReport>& reports) {
  if (info_.dp_degree < 2 || !fastest_) {
    return;  // one pipeline sets its own pace: nothing else to slow down
  }
  const double fastest_s = fastest_->iteration_time_s;
  // Each pipeline's pace had it run the fastest plan: its measured time over its plan's own time (the
  // plan's critical path, not the target it was stretched to), times the fastest plan's time.
  std::vector<std::vector<double>> times(static_cast<size_t>(info_.dp_degree));
  for (const LiveReport& report : reports) {
    auto& pipeline = times[static_cast<size_t>(report.rank.dp_rank)];
    const auto& own = report.result.iter_time_s;
    pipeline.resize(std::max(pipeline.size(), own.size()), 0.0);
    for (size_t i = 0; i < own.size(); ++i) {
      pipeline[i] = std::max(pipeline[i], own[i]);
    }
  }
  std::vector<double> pace_s(static_cast<size_t>(info_.dp_degree), 0.0);
  for (size_t dp = 0; dp < pace_s.size(); ++dp) {
    // A slowed pipeline's plan ends before the target: its own critical path is what it measures.
    const bool slowed = straggler_time_s_ && slowed_[dp] && slowed_prediction_;
    const double plan_time_s = slowed ? slowed_prediction_->compute_time_s : fastest_->compute_time_s;
    pace_s[dp] = median(times[dp]) / plan_time_s * fastest_s;
  }
  const double slowest_s = *std::max_element(pace_s.begin(), pace_s.end());
  const double enter_s = fastest_s * (1 + options_.straggler_enter);
  std::vector<bool> straggling(pace_s.size());
  for (size_t p = 0; p < pace_s.size(); ++p) {
    straggling[p] = pace_s[p] > enter_s;
  }
  const int confirm = options_.straggler_confirm_rounds;
  if (!straggler_time_s_) {
    enter_streak_ = slowest_s > enter_s ? enter_streak_ + 1 : 0;
    if (enter_streak_ < confirm) {
      return;
    }
    enter_streak_ = 0;
    straggler_time_s_ = slowest_s;
    for (size_t p = 0; p < pace_s.size(); ++p) {
      slowed_[p] = !straggling[p];
    }
    return;
  }
  if (slowest_s < fastest_s * (1 + options_.straggler_exit)) {
    retarget_streak_ = 0;
    if (++exit_streak_ >= confirm) {
      exit_streak_ = 0;
      straggler_time_s_.reset();
      slowed_.assign(slowed_.size(), false);
    }
    return;
  }
  exit_streak_ = 0;
  bool moved = std::abs(slowest_s - *straggler_time_s_) > options_.straggler_retarget * *straggler_time_s_;
  for (size_t p = 0; p < pace_s.size(); ++p) {
    // A pipeline planned slow that now straggles itself, or a straggler that caught up.
    moved = moved || (straggling[p] == slowed_[p]);
  }
  retarget_streak_ = moved ? retarget_streak_ + 1 : 0;
  if (retarget_streak_ >= confirm) {
    retarget_streak_ = 0;
    straggler_time_s_ = std::max(slowest_s, enter_s);
    for (size_t p = 0; p < pace_s.size(); ++p) {
      slowed_[p] = !straggling[p];
    }
  }
}

// --- LiveScheduler: all of it in memory -------------------------------------------------------------------

Result<LiveScheduler> LiveScheduler::create(LiveJobInfo info, LiveOptions options, LiveLimits limits) {
  LiveScheduler scheduler;
  scheduler.state_ = JOULE_TRY(LiveState::create(std::move(info), options, limits));
  return scheduler;
}

Result<void> LiveScheduler::use_profile(const std::string& profile_csv) {
  return state_.use_profile(profile_csv, data_);
}

Result<void> LiveScheduler::use_card(const probe::Card& card, const std::string& source) {
  return state_.use_card(card, source, data_);
}

Result<void> LiveScheduler::register_rank(const LiveRankInfo& rank, const LivePlanProvider& provider) {
  if (ranks_.contains(rank.rank)) {
    return tl::make_unexpected(LiveState::already_registered(rank.rank));
  }
  if (const auto position = state_.position_index(rank)) {
    if (const auto holder = positions_.find(*position); holder != positions_.end()) {
      return tl::make_unexpected(
          LiveState::position_taken({rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank}, holder->second));
    }
  }
  const LiveRankPosition position = JOULE_TRY(state_.check_registration(rank));
  LiveScheduler next = *this;
  next.state_.add_rank(rank, next.data_);
  next.ranks_.emplace(rank.rank, position);
  next.positions_.emplace(next.state_.position_index(position), rank.rank);
  next.plan_now(provider);
  *this = std::move(next);
  return {};
}

std::vector<int> LiveScheduler::missing_ranks() const {
  std::vector<int> missing;
  for (int rank = 0; rank < state_.info().world_size; ++rank) {
    if (!ranks_.contains(rank)) {
      missing.push_back(rank);
    }
  }
  return missing;
}

Result<LiveSchedule> LiveScheduler::schedule(int rank) const {
  if (state_.phase() == LivePhase::kRegistering) {
    return tl::make_unexpected(state_.registration_pending(missing_ranks()));
  }
  const auto found = ranks_.find(rank);
  if (found == ranks_.end()) {
    return tl::make_unexpected(state_.not_a_rank(rank));
  }
  return state_.schedule(found->second, data_);
}

std::vector<LiveRankPosition> LiveScheduler::ranks() const {
  std::vector<LiveRankPosition> ranks;
  ranks.reserve(ranks_.size());
  for (const auto& [rank, position] : ranks_) {
    ranks.push_back(position);
  }
  return ranks;
}

std::vector<LiveReport> LiveScheduler::reports() const {
  std::vector<LiveReport> reports;
  reports.reserve(reports_.size());
  for (const auto& [rank, report] : reports_) {
    reports.push_back(report);
  }
  return reports;
}

bool LiveScheduler::has_reported(int rank) const {
  return reports_.contains(rank);
}

Result<bool> LiveScheduler::report(const LiveResult& result, const LivePlanProvider& provider) {
  if (state_.phase() == LivePhase::kRegistering) {
    return tl::make_unexpected(state_.registration_pending(missing_ranks()));
  }
  const auto found = ranks_.find(result.rank);
  if (found == ranks_.end()) {
    return tl::make_unexpected(state_.not_a_rank(result.rank));
  }
  if (reports_.contains(result.rank) && (!result.round || *result.round == state_.round())) {
    return tl::make_unexpected(state_.already_reported(result.rank));
  }
  JOULE_TRY(state_.check_result(result, found->second));
  LiveScheduler next = *this;
  next.reports_.emplace(result.rank, LiveReport{found->second, state_.round(), result});
  if (!next.state_.count_report()) {
    *this = std::move(next);
    return false;
  }
  std::vector<LiveReport> reports;
  reports.reserve(next.reports_.size());
  for (auto& [rank, report] : next.reports_) {
    reports.push_back(std::move(report));
  }
  next.reports_.clear();
  JOULE_TRY(next.state_.complete_round(reports, next.data_));
  next.plan_now(provider);
  *this = std::move(next);
  return true;
}

void LiveScheduler::plan_now(const LivePlanProvider& provider) {
  const auto request = state_.planning(data_);
  if (!request) {
    return;
  }
  auto planned = provider(*request);
  if (!planned) {
    state_.fail_planning(request->sequence, planned.error().message());
    return;
  }
  if (auto applied = state_.apply_plan(**planned, request->sequence, data_); !applied) {
    state_.fail_planning(request->sequence, applied.error().message());
  }
}

}  // namespace joule::plan
