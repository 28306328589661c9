// SPDX-License-Identifier: Apache-2.0
// The live scheduler: warm-up, a top-down clock sweep that measures the profile, the plan, and stragglers.
#include "joule/plan/live.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/plan/planner.hpp"
#include "joule/plan/profile_codec.hpp"

namespace joule::plan {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "joule.plan.live";
constexpr int kFormatVersion = 1;
// The most computations a live job may have (as the planner routes' default limit).
constexpr int64_t kMaxComputations = int64_t{1} << 16;
// The planner walks about this many time units when LiveOptions::unit_time_s is 0.
constexpr double kAutoPlanningUnits = 20'000;
// Clocks above any GPU's (MHz): a larger value is garbage, not a clock.
constexpr uint32_t kMaxFrequencyMhz = 100'000;

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

}  // namespace

std::string_view to_string(LivePhase phase) {
  switch (phase) {
    case LivePhase::kRegistering:
      return "registering";
    case LivePhase::kWarmup:
      return "warmup";
    case LivePhase::kProfiling:
      return "profiling";
    case LivePhase::kPlanned:
      return "planned";
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
  if (options.straggler_exit > options.straggler_enter) {
    return fail(ErrorCode::kInvalidArgument,
                "straggler_exit: must not exceed straggler_enter ({}), got {}: without the gap between them "
                "detection would flap",
                options.straggler_enter, options.straggler_exit);
  }
  return {};
}

Result<std::shared_ptr<const LivePlan>> plan_live(const std::string& profile_csv, int stages,
                                                  int microbatches, Schedule schedule, double p_blocking_w,
                                                  double unit_time_s) {
  const auto started = std::chrono::steady_clock::now();
  auto plan = std::make_shared<LivePlan>();
  plan->dag = JOULE_TRY(build_pipeline(stages, microbatches, schedule));
  plan->profile = JOULE_TRY(Profile::parse(profile_csv, "the measured profile"));
  plan->p_blocking_w = p_blocking_w;
  PlannerOptions options;
  options.unit_time_s = unit_time_s;
  options.p_blocking_w = p_blocking_w;
  auto planned = JOULE_TRY(plan_frontier(plan->dag, plan->profile, options));
  plan->frontier = std::move(planned.frontier);
  plan->max_clock = planned.max_clock;
  plan->planning_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return std::shared_ptr<const LivePlan>(std::move(plan));
}

Result<LiveScheduler> LiveScheduler::create(LiveJobInfo info, LiveOptions options) {
  for (const auto& [name, value] : {std::pair<std::string_view, int>{"pp_degree", info.pp_degree},
                                    {"dp_degree", info.dp_degree},
                                    {"tp_degree", info.tp_degree},
                                    {"world_size", info.world_size},
                                    {"num_microbatches", info.num_microbatches}}) {
    if (value < 1) {
      return fail(ErrorCode::kInvalidArgument, "{}: ensure this value is greater than or equal to 1", name);
    }
  }
  const int64_t product = int64_t{info.pp_degree} * info.dp_degree * info.tp_degree;
  if (product != info.world_size) {
    return fail(ErrorCode::kInvalidArgument,
                "world_size: must equal pp_degree × dp_degree × tp_degree = {} × {} × {} = {}, got {}",
                info.pp_degree, info.dp_degree, info.tp_degree, product, info.world_size);
  }
  const int64_t computations = int64_t{2} * info.pp_degree * info.num_microbatches;
  if (computations > kMaxComputations) {
    return fail(ErrorCode::kInvalidArgument,
                "num_microbatches: {} stages × {} microbatches make {} computations per iteration, more than "
                "the {} the live scheduler plans",
                info.pp_degree, info.num_microbatches, computations, kMaxComputations);
  }
  JOULE_TRY(validate(options));
  LiveScheduler scheduler;
  scheduler.info_ = std::move(info);
  scheduler.options_ = options;
  return scheduler;
}

Result<void> LiveScheduler::use_profile(const std::string& profile_csv) {
  const Profile profile = JOULE_TRY(Profile::parse(profile_csv, "the given profile"));
  if (profile.stage_count() < info_.pp_degree) {
    return fail(ErrorCode::kInvalidArgument, "profile: has {} stages but the job has pp_degree {}",
                profile.stage_count(), info_.pp_degree);
  }
  given_profile_csv_ = plan::profile_csv(profile);
  return {};
}

const LiveRankInfo* LiveScheduler::find_rank(int rank) const {
  const auto found =
      std::find_if(ranks_.begin(), ranks_.end(), [&](const LiveRankInfo& info) { return info.rank == rank; });
  return found == ranks_.end() ? nullptr : &*found;
}

std::vector<int> LiveScheduler::missing_ranks() const {
  std::vector<int> missing;
  for (int rank = 0; rank < info_.world_size; ++rank) {
    if (find_rank(rank) == nullptr) {
      missing.push_back(rank);
    }
  }
  return missing;
}

Result<void> LiveScheduler::register_rank(const LiveRankInfo& rank, const LivePlanProvider& provider) {
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
  if (find_rank(rank.rank) != nullptr) {
    return fail(ErrorCode::kState, "rank: rank {} is already registered", rank.rank);
  }
  for (const LiveRankInfo& other : ranks_) {
    if (other.dp_rank == rank.dp_rank && other.pp_rank == rank.pp_rank && other.tp_rank == rank.tp_rank) {
      return fail(ErrorCode::kInvalidArgument,
                  "rank: rank {} claims dp_rank {}, pp_rank {}, tp_rank {}, which rank {} already has",
                  rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank, other.rank);
    }
  }
  if (rank.available_frequencies_mhz.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "available_frequencies: the GPU lists no SM clock (the scheduler needs at least one)");
  }
  std::set<uint32_t> seen;
  for (size_t i = 0; i < rank.available_frequencies_mhz.size(); ++i) {
    const uint32_t frequency = rank.available_frequencies_mhz[i];
    if (frequency == 0 || frequency > kMaxFrequencyMhz) {
      return fail(ErrorCode::kInvalidArgument, "available_frequencies[{}]: must be 1 to {} MHz, got {}", i,
                  kMaxFrequencyMhz, frequency);
    }
    if (!seen.insert(frequency).second) {
      return fail(ErrorCode::kInvalidArgument, "available_frequencies[{}]: {} MHz is listed twice", i,
                  frequency);
    }
  }
  LiveScheduler next = *this;
  next.ranks_.push_back(rank);
  std::sort(next.ranks_.begin(), next.ranks_.end(),
            [](const LiveRankInfo& a, const LiveRankInfo& b) { return a.rank < b.rank; });
  if (static_cast<int>(next.ranks_.size()) < info_.world_size) {
    *this = std::move(next);
    return {};
  }
  // The last rank: the clocks every GPU supports are the ones the sweep may use.
  std::set<uint32_t> common(next.ranks_.front().available_frequencies_mhz.begin(),
                            next.ranks_.front().available_frequencies_mhz.end());
  for (const LiveRankInfo& info : next.ranks_) {
    std::set<uint32_t> kept;
    for (const uint32_t frequency : info.available_frequencies_mhz) {
      if (common.contains(frequency)) {
        kept.insert(frequency);
      }
    }
    common = std::move(kept);
  }
  if (common.empty()) {
    return fail(ErrorCode::kOutOfRange,
                "available_frequencies: the ranks' GPUs share no SM clock (rank {} lists {} to {} MHz)",
                rank.rank, *seen.begin(), *seen.rbegin());
  }
  next.frequencies_mhz_.assign(common.rbegin(), common.rend());
  next.samples_.assign(static_cast<size_t>(info_.pp_degree), {});
  for (auto& stage : next.samples_) {
    for (auto& instruction : stage) {
      instruction.assign(next.frequencies_mhz_.size(), Sample{});
    }
  }
  if (given_profile_csv_) {
    const Profile profile = JOULE_TRY(Profile::parse(*given_profile_csv_, "the given profile"));
    for (const uint32_t frequency : profile.frequencies_mhz()) {
      for (const LiveRankInfo& info : next.ranks_) {
        if (std::find(info.available_frequencies_mhz.begin(), info.available_frequencies_mhz.end(),
                      frequency) == info.available_frequencies_mhz.end()) {
          return fail(ErrorCode::kOutOfRange,
                      "available_frequencies: the job's profile plans {} MHz, which rank {}'s GPU does not "
                      "support",
                      frequency, info.rank);
        }
      }
    }
    next.p_blocking_w_ = options_.default_p_blocking_w * info_.tp_degree;
    JOULE_TRY(next.plan_from(*given_profile_csv_, provider));
  } else {
    next.phase_ = LivePhase::kWarmup;
  }
  *this = std::move(next);
  return {};
}

int LiveScheduler::iterations_of_round() const {
  return phase_ == LivePhase::kPlanned ? options_.planned_round_iterations : 1;
}

size_t LiveScheduler::profiling_slot(int microbatch) const {
  // Microbatch m measures clock base + ⌊m · k / M⌋ of the k this round sweeps: each gets M/k samples.
  const size_t base = sweep_next_ - round_frequencies_;
  const size_t slot =
      static_cast<size_t>(microbatch) * round_frequencies_ / static_cast<size_t>(info_.num_microbatches);
  return std::min(base + slot, frequencies_mhz_.size() - 1);
}

std::vector<std::pair<std::string, uint32_t>> LiveScheduler::profiling_list(const PipelineDag& dag,
                                                                            int pp_rank) const {
  std::vector<std::pair<std::string, uint32_t>> list;
  for (const int node : dag.stage_order[static_cast<size_t>(pp_rank)]) {
    const Computation& computation = dag.computations[static_cast<size_t>(node)];
    const uint32_t frequency = phase_ == LivePhase::kProfiling
                                   ? frequencies_mhz_[profiling_slot(computation.microbatch)]
                                   : frequencies_mhz_.front();
    list.emplace_back(std::string(to_string(computation.instruction)), frequency);
  }
  return list;
}

Result<LiveSchedule> LiveScheduler::schedule(int rank) const {
  const LiveRankInfo* info = find_rank(rank);
  if (phase_ != LivePhase::kRegistering && info == nullptr) {
    return fail(ErrorCode::kNotFound, "rank: rank {} is not part of job {} (world_size {})", rank,
                info_.job_id, info_.world_size);
  }
  if (phase_ == LivePhase::kRegistering) {
    const std::vector<int> missing = missing_ranks();
    return fail(ErrorCode::kState, "rank: job {} is waiting for {} of {} ranks to register (missing: {})",
                info_.job_id, missing.size(), info_.world_size, fmt::join(missing, ", "));
  }
  LiveSchedule schedule;
  schedule.rank = rank;
  schedule.round = round_;
  schedule.phase = phase_;
  schedule.iterations = iterations_of_round();
  const PipelineDag dag = JOULE_TRY(build_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule));
  if (phase_ != LivePhase::kPlanned) {
    schedule.frequencies = profiling_list(dag, info->pp_rank);
    return schedule;
  }
  const Assignment& assignment = assignments_[static_cast<size_t>(info->dp_rank)];
  for (const int node : dag.stage_order[static_cast<size_t>(info->pp_rank)]) {
    const auto id = static_cast<size_t>(node);
    schedule.frequencies.emplace_back(std::string(to_string(dag.computations[id].instruction)),
                                      assignment.plan[id]);
  }
  schedule.predicted = assignment.predicted;
  return schedule;
}

bool LiveScheduler::has_reported(int rank) const {
  return pending_.contains(rank);
}

Result<void> LiveScheduler::check_result(const LiveResult& result, const LiveSchedule& schedule) const {
  const auto iterations = static_cast<size_t>(schedule.iterations);
  std::map<std::string, size_t> per_instruction;
  for (const auto& [name, frequency] : schedule.frequencies) {
    ++per_instruction[name];
  }
  for (const auto& [name, values] :
       {std::pair<std::string_view, const std::vector<double>*>{"iter_time", &result.iter_time_s},
        {"iter_energy", &result.iter_energy_j}}) {
    if (values->size() != iterations) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}: round {} ran {} iteration{} of its schedule, but the result lists {} values", name,
                  schedule.round, iterations, iterations == 1 ? "" : "s", values->size());
    }
    for (size_t i = 0; i < values->size(); ++i) {
      const double value = (*values)[i];
      if (!std::isfinite(value) || value < 0 || (name == "iter_time" && value == 0)) {
        return fail(ErrorCode::kInvalidArgument, "{}[{}]: must be a finite {} number, got {}", name, i,
                    name == "iter_time" ? "positive" : "non-negative", value);
      }
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
                    result.rank, fmt::join(known, ", "));
      }
      if (lists.size() != iterations) {
        return fail(ErrorCode::kInvalidArgument, "{}.{}: must list {} iteration{}, got {}", field, name,
                    iterations, iterations == 1 ? "" : "s", lists.size());
      }
      for (size_t i = 0; i < lists.size(); ++i) {
        if (lists[i].size() != expected->second) {
          return fail(ErrorCode::kInvalidArgument,
                      "{}.{}[{}]: the schedule runs {} {} computation{} per iteration, the result lists {}",
                      field, name, i, expected->second, name, expected->second == 1 ? "" : "s",
                      lists[i].size());
        }
        for (size_t k = 0; k < lists[i].size(); ++k) {
          const double value = lists[i][k];
          const bool is_time = field == "time_breakdown";
          if (!std::isfinite(value) || value < 0 || (is_time && value == 0)) {
            return fail(ErrorCode::kInvalidArgument, "{}.{}[{}][{}]: must be a finite {} number, got {}",
                        field, name, i, k, is_time ? "positive" : "non-negative", value);
          }
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

Result<bool> LiveScheduler::report(const LiveResult& result, const LivePlanProvider& provider) {
  const LiveSchedule schedule = JOULE_TRY(this->schedule(result.rank));
  if (pending_.contains(result.rank)) {
    return fail(ErrorCode::kState,
                "rank: rank {} already reported round {}; it gets the next schedule once every rank has "
                "reported",
                result.rank, round_);
  }
  JOULE_TRY(check_result(result, schedule));
  LiveScheduler next = *this;
  next.pending_.emplace(result.rank, result);
  if (static_cast<int>(next.pending_.size()) < info_.world_size) {
    *this = std::move(next);
    return false;
  }
  JOULE_TRY(next.observe_round(provider));
  next.pending_.clear();
  ++next.round_;
  *this = std::move(next);
  return true;
}

Result<void> LiveScheduler::observe_round(const LivePlanProvider& provider) {
  switch (phase_) {
    case LivePhase::kRegistering:
      return fail(ErrorCode::kInternal, "a round completed before every rank registered");
    case LivePhase::kWarmup: {
      profiling_iterations_ += 1;
      warmup_rounds_ += 1;
      // A GPU still heating up draws less leakage power than it will once warm: a profile measured now
      // would read low. Stay at the highest clock (the most heat) until every rank is steady.
      unsteady_ranks_.clear();
      for (const auto& [rank, result] : pending_) {
        if (result.thermally_steady == false) {
          unsteady_ranks_.push_back(rank);
        }
      }
      if (!unsteady_ranks_.empty() && warmup_rounds_ < options_.max_warmup_rounds) {
        return {};
      }
      warmup_gave_up_ = !unsteady_ranks_.empty();
      phase_ = LivePhase::kProfiling;
      break;
    }
    case LivePhase::kProfiling:
      profiling_iterations_ += 1;
      observe_profile();
      if (sweep_finished()) {
        // Σ over ranks: every GPU's energy outside its computations over its time outside them.
        const double total_time_s = idle_time_s_ + busy_time_s_;
        const double per_gpu_w = idle_time_s_ >= 0.01 * total_time_s && idle_time_s_ > 0
                                     ? idle_energy_j_ / idle_time_s_
                                     : options_.default_p_blocking_w;
        p_blocking_w_ = per_gpu_w * info_.tp_degree;
        std::vector<std::array<std::vector<ProfileOption>, 2>> options(static_cast<size_t>(info_.pp_degree));
        for (size_t stage = 0; stage < options.size(); ++stage) {
          for (size_t instruction = 0; instruction < 2; ++instruction) {
            for (size_t f = 0; f < sweep_next_; ++f) {
              const Sample& sample = samples_[stage][instruction][f];
              if (sample.count == 0) {
                return fail(ErrorCode::kInternal, "stage {} has no sample at {} MHz", stage,
                            frequencies_mhz_[f]);
              }
              const auto count = static_cast<double>(sample.count);
              // A counter too coarse for one computation can read 0 J: keep the profile valid.
              options[stage][instruction].push_back(
                  {frequencies_mhz_[f], sample.time_s / count, std::max(sample.energy_j / count, 1e-9)});
            }
          }
        }
        const Profile profile = JOULE_TRY(Profile::from_options(std::move(options)));
        JOULE_TRY(plan_from(plan::profile_csv(profile), provider));
        return {};
      }
      break;
    case LivePhase::kPlanned: {
      const auto before = std::make_pair(straggler_time_s_, slowed_);
      observe_stragglers();
      if (std::make_pair(straggler_time_s_, slowed_) != before) {
        // What some pipeline should run changed: pick from the frontier (cached by the provider).
        const auto plan = JOULE_TRY(provider(*profile_csv_, info_.pp_degree, info_.num_microbatches,
                                             info_.schedule, p_blocking_w_, unit_time_s_));
        JOULE_TRY(assign(*plan));
      }
      return {};
    }
  }
  // Next profiling round: the next clocks, M / samples of them (at least one).
  const size_t remaining = frequencies_mhz_.size() - sweep_next_;
  const auto per_iteration =
      static_cast<size_t>(std::max(1, info_.num_microbatches / options_.profile_samples));
  round_frequencies_ = std::min(per_iteration, remaining);
  sweep_next_ += round_frequencies_;
  return {};
}

void LiveScheduler::observe_profile() {
  // Per (dp, pp) position: per iteration and instruction occurrence, the time is the slowest tensor-parallel
  // rank's and the energy the sum of theirs (one stage is tp GPUs).
  const auto dag = build_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule);
  for (int dp = 0; dp < info_.dp_degree; ++dp) {
    for (int pp = 0; pp < info_.pp_degree; ++pp) {
      std::array<std::vector<size_t>, 2> slots;  // per instruction, the clock index of each occurrence
      for (const int node : dag->stage_order[static_cast<size_t>(pp)]) {
        const Computation& computation = dag->computations[static_cast<size_t>(node)];
        slots[index_of(computation.instruction)].push_back(profiling_slot(computation.microbatch));
      }
      for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
        const std::string name(to_string(instruction));
        const auto& indices = slots[index_of(instruction)];
        std::vector<double> time_s(indices.size(), 0.0);
        std::vector<double> energy_j(indices.size(), 0.0);
        // One iteration per profiling round.
        for (const auto& [rank, result] : pending_) {
          const LiveRankInfo* info = find_rank(rank);
          if (info->dp_rank != dp || info->pp_rank != pp) {
            continue;
          }
          const auto& times = result.time_breakdown_s.at(name).front();
          const auto& energies = result.energy_breakdown_j.at(name).front();
          for (size_t k = 0; k < indices.size(); ++k) {
            time_s[k] = std::max(time_s[k], times[k]);
            energy_j[k] += energies[k];
          }
        }
        for (size_t k = 0; k < indices.size(); ++k) {
          Sample& sample = samples_[static_cast<size_t>(pp)][index_of(instruction)][indices[k]];
          sample.time_s += time_s[k];
          sample.energy_j += energy_j[k];
          ++sample.count;
        }
      }
    }
  }
  for (const auto& [rank, result] : pending_) {
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

bool LiveScheduler::sweep_finished() const {
  if (sweep_next_ >= frequencies_mhz_.size()) {
    return true;
  }
  const auto patience = static_cast<size_t>(options_.profile_patience);
  if (sweep_next_ < patience + 1) {
    return false;
  }
  for (const auto& stage : samples_) {
    for (const auto& instruction : stage) {
      double least_j = INFINITY;
      for (size_t f = 0; f < sweep_next_; ++f) {
        least_j = std::min(least_j, instruction[f].energy_j / static_cast<double>(instruction[f].count));
      }
      for (size_t f = sweep_next_ - patience; f < sweep_next_; ++f) {
        const double energy_j = instruction[f].energy_j / static_cast<double>(instruction[f].count);
        if (energy_j <= least_j * (1 + options_.profile_stop_energy_rise)) {
          return false;  // this stage still gets cheaper (or not clearly dearer) at lower clocks
        }
      }
    }
  }
  return true;
}

Result<void> LiveScheduler::plan_from(const std::string& profile_csv, const LivePlanProvider& provider) {
  unit_time_s_ = options_.unit_time_s;
  if (unit_time_s_ == 0) {
    const Profile profile = JOULE_TRY(Profile::parse(profile_csv, "the measured profile"));
    const PipelineDag dag =
        JOULE_TRY(build_pipeline(info_.pp_degree, info_.num_microbatches, info_.schedule));
    const PlanningUnits units = JOULE_TRY(planning_units(dag, profile, 1.0));
    unit_time_s_ = units.slowest_iteration_s / kAutoPlanningUnits;
  }
  const auto plan = JOULE_TRY(provider(profile_csv, info_.pp_degree, info_.num_microbatches, info_.schedule,
                                       p_blocking_w_, unit_time_s_));
  if (plan->frontier.empty()) {
    return fail(ErrorCode::kInternal, "the planner returned no plan");
  }
  profile_csv_ = profile_csv;
  phase_ = LivePhase::kPlanned;
  slowed_.assign(static_cast<size_t>(info_.dp_degree), false);
  straggler_time_s_.reset();
  return assign(*plan);
}

Result<void> LiveScheduler::assign(const LivePlan& plan) {
  const auto stages = info_.pp_degree;
  const FrontierPoint<FrequencyPlan>& fastest = plan.frontier.fastest();
  const auto predict = [&](const FrontierPoint<FrequencyPlan>& point, double time_s) {
    LivePrediction prediction;
    prediction.iteration_time_s = time_s;
    prediction.compute_time_s = point.time_s;
    prediction.iteration_energy_j = energy_at_target(point, time_s, plan.p_blocking_w, stages);
    prediction.max_clock_time_s = plan.max_clock.time_s;
    prediction.max_clock_energy_j = plan.max_clock.energy_j;
    prediction.p_blocking_w = plan.p_blocking_w;
    return Assignment{point.knob, point.time_s, prediction};
  };
  fastest_ = predict(fastest, fastest.time_s);
  std::optional<Assignment> slowed;
  if (straggler_time_s_) {
    const size_t index =
        JOULE_TRY(select_for_target(plan.frontier, *straggler_time_s_, plan.p_blocking_w, stages));
    slowed = predict(plan.frontier.points()[index], *straggler_time_s_);
  }
  assignments_.clear();
  for (size_t pipeline = 0; pipeline < static_cast<size_t>(info_.dp_degree); ++pipeline) {
    assignments_.push_back(slowed && slowed_[pipeline] ? *slowed : *fastest_);
  }
  return {};
}

void LiveScheduler::observe_stragglers() {
  if (info_.dp_degree < 2 || !fastest_) {
    return;  // one pipeline sets its own pace: nothing else to slow down
  }
  const double fastest_s = fastest_->predicted.iteration_time_s;
  // Each pipeline's pace had it run the fastest plan: its measured time over its plan's own time (the
  // plan's critical path, not the target it was stretched to), times the fastest plan's time.
  std::vector<double> pace_s(static_cast<size_t>(info_.dp_degree), 0.0);
  for (int dp = 0; dp < info_.dp_degree; ++dp) {
    std::vector<double> times;
    for (const auto& [rank, result] : pending_) {
      if (find_rank(rank)->dp_rank != dp) {
        continue;
      }
      times.resize(std::max(times.size(), result.iter_time_s.size()), 0.0);
      for (size_t i = 0; i < result.iter_time_s.size(); ++i) {
        times[i] = std::max(times[i], result.iter_time_s[i]);
      }
    }
    // A slowed pipeline's plan ends before the target: its own critical path is what it measures.
    const double plan_time_s = assignments_[static_cast<size_t>(dp)].plan_time_s;
    pace_s[static_cast<size_t>(dp)] = median(times) / plan_time_s * fastest_s;
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

namespace {

json result_json(const LiveResult& result) {
  json value = {{"rank", result.rank},
                {"iter_time", result.iter_time_s},
                {"iter_energy", result.iter_energy_j},
                {"time_breakdown", result.time_breakdown_s},
                {"energy_breakdown", result.energy_breakdown_j}};
  if (result.thermally_steady) {
    value["thermally_steady"] = *result.thermally_steady;
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
  return result;
}

json prediction_json(const LivePrediction& prediction) {
  return {{"iteration_time_s", prediction.iteration_time_s},
          {"compute_time_s", prediction.compute_time_s},
          {"iteration_energy_j", prediction.iteration_energy_j},
          {"max_clock_time_s", prediction.max_clock_time_s},
          {"max_clock_energy_j", prediction.max_clock_energy_j},
          {"p_blocking_w", prediction.p_blocking_w}};
}

LivePrediction prediction_from(const json& value) {
  LivePrediction prediction;
  prediction.iteration_time_s = value.at("iteration_time_s").get<double>();
  prediction.compute_time_s = value.at("compute_time_s").get<double>();
  prediction.iteration_energy_j = value.at("iteration_energy_j").get<double>();
  prediction.max_clock_time_s = value.at("max_clock_time_s").get<double>();
  prediction.max_clock_energy_j = value.at("max_clock_energy_j").get<double>();
  prediction.p_blocking_w = value.at("p_blocking_w").get<double>();
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

}  // namespace

std::string LiveScheduler::dump() const {
  json ranks = json::array();
  for (const LiveRankInfo& rank : ranks_) {
    ranks.push_back({{"rank", rank.rank},
                     {"dp_rank", rank.dp_rank},
                     {"pp_rank", rank.pp_rank},
                     {"tp_rank", rank.tp_rank},
                     {"available_frequencies", rank.available_frequencies_mhz}});
  }
  json samples = json::array();
  for (const auto& stage : samples_) {
    json per_stage = json::array();
    for (const auto& instruction : stage) {
      json per_instruction = json::array();
      for (const Sample& sample : instruction) {
        per_instruction.push_back({sample.time_s, sample.energy_j, sample.count});
      }
      per_stage.push_back(std::move(per_instruction));
    }
    samples.push_back(std::move(per_stage));
  }
  const auto assignment_json = [](const Assignment& assignment) {
    return json{{"plan", assignment.plan},
                {"plan_time_s", assignment.plan_time_s},
                {"predicted", prediction_json(assignment.predicted)}};
  };
  json assignments = json::array();
  for (const Assignment& assignment : assignments_) {
    assignments.push_back(assignment_json(assignment));
  }
  json pending = json::array();
  for (const auto& [rank, result] : pending_) {
    pending.push_back(result_json(result));
  }
  const json options = {{"profile_samples", options_.profile_samples},
                        {"profile_stop_energy_rise", options_.profile_stop_energy_rise},
                        {"profile_patience", options_.profile_patience},
                        {"planned_round_iterations", options_.planned_round_iterations},
                        {"default_p_blocking_w", options_.default_p_blocking_w},
                        {"unit_time_s", options_.unit_time_s},
                        {"straggler_enter", options_.straggler_enter},
                        {"straggler_exit", options_.straggler_exit},
                        {"straggler_retarget", options_.straggler_retarget},
                        {"straggler_confirm_rounds", options_.straggler_confirm_rounds},
                        {"max_warmup_rounds", options_.max_warmup_rounds}};
  const json info = {{"job_id", info_.job_id},
                     {"pp_degree", info_.pp_degree},
                     {"dp_degree", info_.dp_degree},
                     {"tp_degree", info_.tp_degree},
                     {"world_size", info_.world_size},
                     {"job_metadata", info_.job_metadata},
                     {"num_microbatches", info_.num_microbatches},
                     {"schedule", to_string(info_.schedule)}};
  const json document = {{"format", kFormat},
                         {"version", kFormatVersion},
                         {"info", info},
                         {"options", options},
                         {"phase", to_string(phase_)},
                         {"round", round_},
                         {"ranks", std::move(ranks)},
                         {"frequencies_mhz", frequencies_mhz_},
                         {"sweep_next", sweep_next_},
                         {"round_frequencies", round_frequencies_},
                         {"samples", std::move(samples)},
                         {"idle_energy_j", idle_energy_j_},
                         {"idle_time_s", idle_time_s_},
                         {"busy_time_s", busy_time_s_},
                         {"given_profile", optional_json(given_profile_csv_)},
                         {"profile", optional_json(profile_csv_)},
                         {"p_blocking_w", p_blocking_w_},
                         {"unit_time_s", unit_time_s_},
                         {"profiling_iterations", profiling_iterations_},
                         {"warmup_rounds", warmup_rounds_},
                         {"unsteady_ranks", unsteady_ranks_},
                         {"warmup_gave_up", warmup_gave_up_},
                         {"assignments", std::move(assignments)},
                         {"fastest", fastest_ ? assignment_json(*fastest_) : json(nullptr)},
                         {"slowed", slowed_},
                         {"straggler_time_s", optional_json(straggler_time_s_)},
                         {"enter_streak", enter_streak_},
                         {"exit_streak", exit_streak_},
                         {"retarget_streak", retarget_streak_},
                         {"pending", std::move(pending)}};
  return document.dump();
}

Result<LiveScheduler> LiveScheduler::parse(std::string_view text) {
  try {
    const json document = json::parse(text);
    if (document.value("format", "") != kFormat || document.value("version", 0) != kFormatVersion) {
      return fail(ErrorCode::kParse, "not a version {} {} document", kFormatVersion, kFormat);
    }
    LiveScheduler scheduler;
    const json& info = document.at("info");
    scheduler.info_.job_id = info.at("job_id").get<std::string>();
    scheduler.info_.pp_degree = info.at("pp_degree").get<int>();
    scheduler.info_.dp_degree = info.at("dp_degree").get<int>();
    scheduler.info_.tp_degree = info.at("tp_degree").get<int>();
    scheduler.info_.world_size = info.at("world_size").get<int>();
    scheduler.info_.job_metadata = info.at("job_metadata").get<std::string>();
    scheduler.info_.num_microbatches = info.at("num_microbatches").get<int>();
    scheduler.info_.schedule = JOULE_TRY(parse_schedule(info.at("schedule").get<std::string>()));
    const json& options = document.at("options");
    LiveOptions& o = scheduler.options_;
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
    // Jobs stored before the thermal warm-up existed lack these: the defaults.
    o.max_warmup_rounds = options.value("max_warmup_rounds", LiveOptions{}.max_warmup_rounds);
    const std::string phase = document.at("phase").get<std::string>();
    bool known_phase = false;
    for (const LivePhase candidate :
         {LivePhase::kRegistering, LivePhase::kWarmup, LivePhase::kProfiling, LivePhase::kPlanned}) {
      if (phase == to_string(candidate)) {
        scheduler.phase_ = candidate;
        known_phase = true;
      }
    }
    if (!known_phase) {
      return fail(ErrorCode::kParse, "unknown phase '{}'", phase);
    }
    scheduler.round_ = document.at("round").get<int64_t>();
    for (const json& rank : document.at("ranks")) {
      scheduler.ranks_.push_back({rank.at("rank").get<int>(), rank.at("dp_rank").get<int>(),
                                  rank.at("pp_rank").get<int>(), rank.at("tp_rank").get<int>(),
                                  rank.at("available_frequencies").get<std::vector<uint32_t>>()});
    }
    scheduler.frequencies_mhz_ = document.at("frequencies_mhz").get<std::vector<uint32_t>>();
    scheduler.sweep_next_ = document.at("sweep_next").get<size_t>();
    scheduler.round_frequencies_ = document.at("round_frequencies").get<size_t>();
    if (scheduler.sweep_next_ > scheduler.frequencies_mhz_.size() ||
        scheduler.round_frequencies_ > scheduler.sweep_next_) {
      return fail(ErrorCode::kParse, "the sweep position is outside its clocks");
    }
    for (const json& stage : document.at("samples")) {
      auto& per_stage = scheduler.samples_.emplace_back();
      if (stage.size() != 2) {
        return fail(ErrorCode::kParse, "a stage's samples are not (forward, backward)");
      }
      for (size_t instruction = 0; instruction < 2; ++instruction) {
        for (const json& sample : stage[instruction]) {
          per_stage[instruction].push_back(
              {sample.at(0).get<double>(), sample.at(1).get<double>(), sample.at(2).get<int64_t>()});
        }
        if (per_stage[instruction].size() != scheduler.frequencies_mhz_.size()) {
          return fail(ErrorCode::kParse, "a stage has samples for {} clocks, not {}",
                      per_stage[instruction].size(), scheduler.frequencies_mhz_.size());
        }
      }
    }
    scheduler.idle_energy_j_ = document.at("idle_energy_j").get<double>();
    scheduler.idle_time_s_ = document.at("idle_time_s").get<double>();
    scheduler.busy_time_s_ = document.at("busy_time_s").get<double>();
    scheduler.given_profile_csv_ = optional_from<std::string>(document.at("given_profile"));
    scheduler.profile_csv_ = optional_from<std::string>(document.at("profile"));
    scheduler.p_blocking_w_ = document.at("p_blocking_w").get<double>();
    scheduler.unit_time_s_ = document.at("unit_time_s").get<double>();
    scheduler.profiling_iterations_ = document.at("profiling_iterations").get<int64_t>();
    scheduler.warmup_rounds_ = document.value("warmup_rounds", int64_t{0});
    scheduler.unsteady_ranks_ = document.value("unsteady_ranks", std::vector<int>{});
    scheduler.warmup_gave_up_ = document.value("warmup_gave_up", false);
    const auto assignment_from = [](const json& value) {
      return Assignment{value.at("plan").get<FrequencyPlan>(), value.at("plan_time_s").get<double>(),
                        prediction_from(value.at("predicted"))};
    };
    for (const json& assignment : document.at("assignments")) {
      scheduler.assignments_.push_back(assignment_from(assignment));
    }
    if (!document.at("fastest").is_null()) {
      scheduler.fastest_ = assignment_from(document.at("fastest"));
    }
    scheduler.slowed_ = document.at("slowed").get<std::vector<bool>>();
    scheduler.straggler_time_s_ = optional_from<double>(document.at("straggler_time_s"));
    scheduler.enter_streak_ = document.at("enter_streak").get<int>();
    scheduler.exit_streak_ = document.at("exit_streak").get<int>();
    scheduler.retarget_streak_ = document.at("retarget_streak").get<int>();
    for (const json& result : document.at("pending")) {
      LiveResult parsed = result_from(result);
      scheduler.pending_.emplace(parsed.rank, std::move(parsed));
    }
    const bool planned = scheduler.phase_ == LivePhase::kPlanned;
    if (planned && (!scheduler.profile_csv_ || !scheduler.fastest_ ||
                    scheduler.assignments_.size() != static_cast<size_t>(scheduler.info_.dp_degree) ||
                    scheduler.slowed_.size() != static_cast<size_t>(scheduler.info_.dp_degree))) {
      return fail(ErrorCode::kParse, "a planned job without its plan");
    }
    return scheduler;
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "{}", error.what());
  }
}

}  // namespace joule::plan
