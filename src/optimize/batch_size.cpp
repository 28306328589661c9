// SPDX-License-Identifier: Apache-2.0
// The batch-size optimizer's decisions: spec validation, the pruning walk, Gaussian Thompson sampling and
// the report logic, following Zeus's server (zeus/optimizer/batch_size/server) call for call.
#include "joule/optimize/batch_size.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/numeric.hpp"
#include "joule/core/units.hpp"

#include "optimize/batch_size_internal.hpp"

namespace joule::optimize::batch_size {

namespace {

// Pydantic v1's messages for Field(gt=0) / Field(ge=0), which Zeus's API returns for these rules.
constexpr std::string_view kNotGreaterThanZero = "ensure this value is greater than 0";
constexpr std::string_view kNotAtLeastZero = "ensure this value is greater than or equal to 0";

tl::unexpected<Error> invalid(std::string_view field, std::string_view message) {
  return fail(ErrorCode::kInvalidArgument, "{}: {}", field, message);
}

// Mixes entropy into well-spread bits (splitmix64's finaliser), so that nearby entropy values give unrelated
// job ids.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t random_device_entropy() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

int64_t wall_ns(const Clock& clock) {
  return clock.to_unix_ns(clock.now());
}

// Zeus's pydantic repr of a TrialId, used in its "not found" messages.
std::string describe_trial(std::string_view job_id, int64_t batch_size, int64_t trial_number) {
  return fmt::format("job_id={} batch_size={} trial_number={}", detail::python_str_repr(job_id), batch_size,
                     trial_number);
}

}  // namespace

std::string TrialId::describe() const {
  return describe_trial(job_id, batch_size, trial_number);
}

namespace {

// What the pruning walk decided.
struct WalkOutcome {
  enum class Kind { kExplore, kConcurrent, kSurvivors };
  Kind kind = Kind::kExplore;
  int64_t batch_size = 0;          // kExplore, kConcurrent: the trial's batch size
  int64_t round_default = 0;       // the exploration default of the round the walk stopped in
  std::vector<int64_t> survivors;  // kSurvivors: sorted
};

}  // namespace

std::string_view to_string(Stage stage) {
  switch (stage) {
    case Stage::kPruning:
      return "Pruning";
    case Stage::kMab:
      return "MAB";
  }
  return "?";
}

std::string_view to_string(TrialType type) {
  switch (type) {
    case TrialType::kExploration:
      return "Exploration";
    case TrialType::kConcurrent:
      return "Concurrent";
    case TrialType::kMab:
      return "MAB";
  }
  return "?";
}

std::string_view to_string(TrialStatus status) {
  switch (status) {
    case TrialStatus::kDispatched:
      return "Dispatched";
    case TrialStatus::kSucceeded:
      return "Succeeded";
    case TrialStatus::kFailed:
      return "Failed";
  }
  return "?";
}

Result<void> validate(const JobSpec& spec) {
  // Field rules in Zeus's field order, then its model-level rules (pydantic runs those only when every field
  // passed), with joule's extra rules next to the field they concern.
  if (spec.batch_sizes.empty()) {
    return invalid("batch_sizes", "Batch Sizes = [] is empty");
  }
  if (spec.batch_sizes.size() > kMaxBatchSizes) {
    return invalid("batch_sizes", fmt::format("{} batch sizes given; a job explores at most {}",
                                              spec.batch_sizes.size(), kMaxBatchSizes));
  }
  std::set<int64_t> seen;
  for (const int64_t batch_size : spec.batch_sizes) {
    if (batch_size <= 0) {
      return invalid("batch_sizes",
                     fmt::format("batch size {} is not positive: batch sizes must be > 0", batch_size));
    }
    if (!seen.insert(batch_size).second) {
      return invalid("batch_sizes",
                     fmt::format("batch size {} is listed twice: batch sizes must be distinct", batch_size));
    }
  }
  if (spec.default_batch_size <= 0) {
    return invalid("default_batch_size", kNotGreaterThanZero);
  }
  if (!(spec.eta_knob >= 0 && spec.eta_knob <= 1)) {
    return invalid("eta_knob", "eta_knob should be in range [0,1]");
  }
  if (spec.beta_knob && !(*spec.beta_knob > 0 && std::isfinite(*spec.beta_knob))) {
    return invalid("beta_knob",
                   fmt::format("Invalid beta_knob({}). To disable early stop, set beta_knob = None to "
                               "disable or positive value.",
                               detail::python_float_repr(*spec.beta_knob)));
  }
  if (!std::isfinite(spec.target_metric)) {
    return invalid("target_metric", "must be a finite number");
  }
  if (spec.max_epochs <= 0) {
    return invalid("max_epochs", kNotGreaterThanZero);
  }
  if (spec.num_pruning_rounds < 0) {
    return invalid("num_pruning_rounds", kNotAtLeastZero);
  }
  if (spec.num_pruning_rounds == 0) {
    return invalid(
        "num_pruning_rounds",
        "must be at least 1: with 0 rounds no batch size is ever explored, so no MAB arm can be fitted "
        "(Zeus's server accepts 0 and then fails on the first prediction)");
  }
  if (spec.window_size < 0) {
    return invalid("window_size", kNotAtLeastZero);
  }
  if (!std::isfinite(spec.mab_prior_mean)) {
    return invalid("mab_prior_mean", "must be a finite number");
  }
  if (!(spec.mab_prior_precision >= 0 && std::isfinite(spec.mab_prior_precision))) {
    return invalid("mab_prior_precision", kNotAtLeastZero);
  }
  if (spec.mab_num_explorations < 0) {
    return invalid("mab_num_explorations", kNotAtLeastZero);
  }
  if (seen.count(spec.default_batch_size) == 0) {
    const std::vector<int64_t> sorted(seen.begin(), seen.end());
    return invalid("default_batch_size",
                   fmt::format("Default BS({}) not in batch_sizes({}).", spec.default_batch_size,
                               detail::python_int_list(sorted)));
  }
  if (spec.job_id && !spec.job_id->starts_with(spec.job_id_prefix)) {
    return invalid("job_id", fmt::format("Job_id({}) does not start with prefix({}).", *spec.job_id,
                                         spec.job_id_prefix));
  }
  return {};
}

Result<void> validate(const GpuConfig& gpu) {
  if (!(gpu.max_power > 0 && std::isfinite(gpu.max_power))) {
    return invalid("max_power", kNotGreaterThanZero);
  }
  if (gpu.max_power > kMaxPowerW) {
    return invalid("max_power", fmt::format("ensure this value is less than or equal to {:g}", kMaxPowerW));
  }
  if (gpu.number_of_gpus <= 0) {
    return invalid("number_of_gpus", kNotGreaterThanZero);
  }
  if (gpu.number_of_gpus > kMaxNumberOfGpus) {
    return invalid("number_of_gpus",
                   fmt::format("ensure this value is less than or equal to {}", kMaxNumberOfGpus));
  }
  if (gpu.gpu_model.empty()) {
    return invalid("gpu_model", "Invalid gpu_model(). Shouldn't be empty.");
  }
  if (gpu.gpu_model.size() > kMaxGpuModelLength) {
    return invalid("gpu_model",
                   fmt::format("ensure this value has at most {} characters", kMaxGpuModelLength));
  }
  return {};
}

double zeus_cost(double energy_j, double time_s, double eta_knob, double max_power_w) {
  // Same expression, same evaluation order as zeus.utils.metric.zeus_cost, so costs agree to the bit.
  return eta_knob * energy_j + (1 - eta_knob) * max_power_w * time_s;
}

Result<ArmState> fit_arm(int64_t batch_size, std::span<const double> rewards, double prior_mean,
                         double prior_precision) {
  if (rewards.empty()) {
    return fail(ErrorCode::kInvalidArgument, "No rewards to fit the arm of batch size {}.", batch_size);
  }
  ArmState arm;
  arm.batch_size = batch_size;
  arm.num_observations = static_cast<int64_t>(rewards.size());
  const double variance = numeric::variance(rewards);
  arm.reward_precision = variance == 0.0 ? kInfinity : 1.0 / variance;
  // Infinite reward precision (identical rewards, e.g. a single one) makes the posterior a point mass at the
  // mean, so sampling returns exactly the observed reward.
  if (arm.reward_precision == kInfinity) {
    arm.param_precision = kInfinity;
    arm.param_mean = numeric::mean(rewards);
  } else {
    arm.param_precision = prior_precision + static_cast<double>(rewards.size()) * arm.reward_precision;
    arm.param_mean = (prior_precision * prior_mean + arm.reward_precision * numeric::pairwise_sum(rewards)) /
                     arm.param_precision;
  }
  return arm;
}

std::string generate_job_id(std::string_view prefix, uint64_t entropy) {
  return fmt::format("{}-{:08x}", prefix, mix(entropy) >> 32);
}

JobState::JobState(JobSpec spec, GpuConfig gpu, const rng::Pcg64::State& rng_state)
    : spec_(std::move(spec)), gpu_(std::move(gpu)), rng_(rng_state) {}

Result<JobState> JobState::create(JobSpec spec, GpuConfig gpu) {
  return create(std::move(spec), std::move(gpu), random_device_entropy());
}

Result<JobState> JobState::create(JobSpec spec, GpuConfig gpu, uint64_t entropy) {
  std::sort(spec.batch_sizes.begin(), spec.batch_sizes.end());
  JOULE_TRY(validate(spec));
  JOULE_TRY(validate(gpu));
  if (!spec.job_id) {
    spec.job_id = generate_job_id(spec.job_id_prefix, entropy);
  }
  // Seeded: numpy's default_rng(mab_seed), as Zeus stores it at registration. Unseeded: seeded once from the
  // entropy and persisted like a seeded one (deliberately not Zeus's reseed-from-the-wall-clock-second).
  const uint64_t seed = spec.mab_seed ? *spec.mab_seed : mix(entropy ^ 0x5EEDULL);
  const rng::Pcg64::State rng_state = rng::Pcg64(seed).state();
  JobState job(std::move(spec), std::move(gpu), rng_state);
  job.min_cost_batch_size_ = job.spec_.default_batch_size;
  job.exp_default_batch_size_ = job.spec_.default_batch_size;
  return job;
}

Result<void> JobState::check_same_config(const JobSpec& spec, const GpuConfig& gpu) const {
  JobSpec sorted = spec;
  std::sort(sorted.batch_sizes.begin(), sorted.batch_sizes.end());
  if (!(sorted == spec_) || !(gpu == gpu_)) {
    return fail(ErrorCode::kState,
                "JobSpec doesn't match with existing jobSpec. Use a new job_id for different configuration");
  }
  return {};
}

double JobState::cost(double energy_j, double time_s) const {
  return zeus_cost(energy_j, time_s, spec_.eta_knob, gpu_.max_power);
}

bool JobState::operator==(const JobState& other) const {
  return spec_ == other.spec_ && gpu_ == other.gpu_ && stage_ == other.stage_ &&
         min_cost_ == other.min_cost_ && min_cost_batch_size_ == other.min_cost_batch_size_ &&
         exp_default_batch_size_ == other.exp_default_batch_size_ && trial_count_ == other.trial_count_ &&
         dispatched_count_ == other.dispatched_count_ && succeeded_count_ == other.succeeded_count_ &&
         failed_count_ == other.failed_count_ && explorations_ == other.explorations_ &&
         arms_ == other.arms_ && rng_state() == other.rng_state();
}

Result<std::optional<Trial>> MemoryTrialLog::find(int64_t trial_number) {
  if (trial_number < 1 || trial_number > static_cast<int64_t>(trials_.size())) {
    return std::optional<Trial>();
  }
  return std::optional<Trial>(trials_[static_cast<size_t>(trial_number - 1)]);
}

Result<std::vector<Trial>> MemoryTrialLog::succeeded(int64_t batch_size, size_t limit) {
  std::vector<Trial> found;
  for (auto it = trials_.rbegin(); it != trials_.rend() && (limit == 0 || found.size() < limit); ++it) {
    if (it->batch_size == batch_size && it->status == TrialStatus::kSucceeded) {
      found.push_back(*it);
    }
  }
  return found;
}

Result<void> MemoryTrialLog::save(const Trial& trial) {
  const auto count = static_cast<int64_t>(trials_.size());
  if (trial.trial_number == count + 1) {
    trials_.push_back(trial);
    return {};
  }
  if (trial.trial_number < 1 || trial.trial_number > count) {
    return fail(ErrorCode::kInternal, "trial {} is neither one of the {} trials nor the next one",
                trial.trial_number, count);
  }
  trials_[static_cast<size_t>(trial.trial_number - 1)] = trial;
  return {};
}

namespace {

// Zeus's pruning walk, recomputed from the history on every call. `explorations` holds, per batch size, its
// Exploration trials that did not fail, by trial number.
Result<WalkOutcome> pruning_walk(const JobSpec& spec,
                                 const std::map<int64_t, std::vector<const Trial*>>& explorations,
                                 const std::function<double(const Trial&)>& cost_of,
                                 int64_t min_cost_batch_size) {
  std::vector<int64_t> batch_sizes = spec.batch_sizes;
  int64_t round_default = spec.default_batch_size;
  for (int64_t round = 0; round < spec.num_pruning_rounds; ++round) {
    std::sort(batch_sizes.begin(), batch_sizes.end());
    const auto split = std::find(batch_sizes.begin(), batch_sizes.end(), round_default);
    if (split == batch_sizes.end()) {
      return fail(ErrorCode::kInternal, "pruning round {}: default batch size {} is not among {}", round + 1,
                  round_default, detail::python_int_list(batch_sizes));
    }
    // DOWN from the default (inclusive, descending), then UP (ascending).
    std::vector<int64_t> down(batch_sizes.begin(), split + 1);
    std::reverse(down.begin(), down.end());
    std::vector<int64_t> up(split + 1, batch_sizes.end());

    std::vector<int64_t> converged;
    std::optional<double> round_min_cost;
    int64_t round_min_batch_size = 0;
    for (const std::vector<int64_t>* direction : {&down, &up}) {
      for (const int64_t batch_size : *direction) {
        const auto found = explorations.find(batch_size);
        const auto index = static_cast<size_t>(round);
        if (found == explorations.end() || found->second.size() <= index) {
          return WalkOutcome{WalkOutcome::Kind::kExplore, batch_size, round_default, {}};
        }
        const Trial& exploration = *found->second[index];
        if (exploration.status == TrialStatus::kDispatched) {
          // Someone is running this round's exploration: keep the new worker busy with the best batch size.
          return WalkOutcome{WalkOutcome::Kind::kConcurrent, min_cost_batch_size, round_default, {}};
        }
        if (!exploration.converged.value_or(false)) {
          break;  // this direction is pruned from here on
        }
        converged.push_back(batch_size);
        const double cost = cost_of(exploration);
        // Strict < keeps the first minimum; the first-seen fallback only matters for non-finite costs.
        if (!round_min_cost || cost < *round_min_cost) {
          round_min_cost = cost;
          round_min_batch_size = batch_size;
        }
      }
    }
    if (converged.empty()) {
      return fail(ErrorCode::kState,
                  "No converged batch sizes has observed: no batch size converged in pruning round {} of {}. "
                  "Reconfigure batch_sizes and re-launch the job.",
                  round + 1, spec.num_pruning_rounds);
    }
    round_default = round_min_batch_size;
    batch_sizes = std::move(converged);
  }
  std::sort(batch_sizes.begin(), batch_sizes.end());
  return WalkOutcome{WalkOutcome::Kind::kSurvivors, 0, round_default, std::move(batch_sizes)};
}

// Zeus's GaussianTS.predict: explore an under-observed arm in a random order, else Thompson-sample.
int64_t mab_predict(const std::vector<ArmState>& arms, int64_t num_explorations, rng::Generator& rng) {
  // The permutation is drawn on every call, as Zeus does, so the stream matches even when nobody explores.
  // Zeus: rng.choice(arms, len(arms), replace=False).
  const auto num_arms = static_cast<int64_t>(arms.size());
  const std::vector<int64_t> order = rng.choice_without_replacement(num_arms, num_arms);
  for (const int64_t index : order) {
    const ArmState& arm = arms[static_cast<size_t>(index)];
    if (arm.num_observations < num_explorations) {
      return arm.batch_size;
    }
  }
  std::optional<double> best_sample;
  int64_t best_batch_size = arms.front().batch_size;
  for (const ArmState& arm : arms) {
    // sqrt(1/τ) rather than 1/sqrt(τ): numpy's expression, so the scale rounds the same way (0 for τ = ∞).
    const double sample = rng.normal(arm.param_mean, std::sqrt(1.0 / arm.param_precision));
    if (!best_sample || sample > *best_sample) {  // Python's max(): the first maximum wins
      best_sample = sample;
      best_batch_size = arm.batch_size;
    }
  }
  return best_batch_size;
}

}  // namespace

Result<TrialId> JobState::next_trial(TrialLog& log, int64_t now_unix_ns) {
  // Work on copies and commit at the end, so that a failure leaves the job as it was (Zeus rolls back).
  Stage stage = stage_;
  std::vector<ArmState> arms = arms_;
  rng::Generator rng = rng_;
  int64_t exp_default = exp_default_batch_size_;
  TrialType type = TrialType::kMab;
  int64_t batch_size = 0;

  if (stage == Stage::kPruning) {
    std::map<int64_t, std::vector<const Trial*>> explorations;
    for (const Trial& trial : explorations_) {
      explorations[trial.batch_size].push_back(&trial);
    }
    const auto cost_of = [this](const Trial& trial) { return cost(*trial.energy_j, *trial.time_s); };
    auto outcome = JOULE_TRY(pruning_walk(spec_, explorations, cost_of, min_cost_batch_size_));
    exp_default = outcome.round_default;
    if (outcome.kind == WalkOutcome::Kind::kExplore) {
      type = TrialType::kExploration;
      batch_size = outcome.batch_size;
    } else if (outcome.kind == WalkOutcome::Kind::kConcurrent) {
      type = TrialType::kConcurrent;
      batch_size = outcome.batch_size;
    } else {
      // Pruning is over: fit one arm per survivor on the rewards of its explorations, then switch to MAB.
      arms.clear();
      for (const int64_t survivor : outcome.survivors) {
        std::vector<double> rewards;
        for (const Trial* trial : explorations[survivor]) {
          if (!trial->energy_j || !trial->time_s) {
            return fail(ErrorCode::kInternal, "Trial {} has no energy or time set.", trial->trial_number);
          }
          rewards.push_back(-cost(*trial->energy_j, *trial->time_s));
        }
        auto arm = JOULE_TRY(fit_arm(survivor, rewards, spec_.mab_prior_mean, spec_.mab_prior_precision));
        arms.push_back(arm);
      }
      stage = Stage::kMab;
    }
  }
  if (stage == Stage::kMab) {
    if (arms.empty()) {
      return fail(ErrorCode::kInternal, "job {} is in the MAB stage but has no arms", job_id());
    }
    type = TrialType::kMab;
    batch_size = mab_predict(arms, spec_.mab_num_explorations, rng);
  }

  Trial trial;
  trial.trial_number = trial_count_ + 1;
  trial.batch_size = batch_size;
  trial.type = type;
  trial.status = TrialStatus::kDispatched;
  trial.start_unix_ns = now_unix_ns;
  JOULE_TRY(log.save(trial));
  ++trial_count_;
  ++dispatched_count_;
  if (type == TrialType::kExploration) {
    explorations_.push_back(trial);
  }
  stage_ = stage;
  arms_ = std::move(arms);
  rng_ = rng;
  exp_default_batch_size_ = exp_default;
  return TrialId{job_id(), batch_size, trial.trial_number};
}

Result<std::optional<Trial>> JobState::find_trial(TrialLog& log, std::string_view job_id_given,
                                                  int64_t batch_size, int64_t trial_number) const {
  if (job_id_given != job_id() || trial_number < 1 || trial_number > trial_count_) {
    return std::optional<Trial>();
  }
  auto found = log.find(trial_number);
  if (!found || !*found || (*found)->batch_size == batch_size) {
    return found;
  }
  return std::optional<Trial>();
}

Result<ReportResponse> JobState::report(TrialLog& log, const TrainingResult& result, int64_t now_unix_ns) {
  const auto unknown = [&] {
    return fail(ErrorCode::kNotFound, "Unknown trial {} time={} energy={} metric={} current_epoch={}",
                describe_trial(result.job_id, result.batch_size, result.trial_number),
                detail::python_float_repr(result.time_s), detail::python_float_repr(result.energy_j),
                detail::python_float_repr(result.metric), result.current_epoch);
  };
  auto found = find_trial(log, result.job_id, result.batch_size, result.trial_number);
  if (!found) {
    return tl::make_unexpected(found.error());
  }
  if (!*found) {
    return unknown();
  }
  if (!(std::isfinite(result.time_s) && result.time_s >= 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "time: {} s is not a valid cumulative training time (finite, >= 0)",
                detail::python_float_repr(result.time_s));
  }
  if (result.time_s > kMaxTrainingTimeS) {
    return fail(ErrorCode::kInvalidArgument,
                "time: ensure this value is less than or equal to {:g} (s, about 31.7 years)",
                kMaxTrainingTimeS);
  }
  if (!(std::isfinite(result.energy_j) && result.energy_j >= 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "energy: {} J is not a valid cumulative training energy (finite, >= 0)",
                detail::python_float_repr(result.energy_j));
  }
  if (result.energy_j > kMaxTrainingEnergyJ) {
    return fail(ErrorCode::kInvalidArgument,
                "energy: ensure this value is less than or equal to {:g} (J, 278 GWh)", kMaxTrainingEnergyJ);
  }
  if (!std::isfinite(result.metric)) {
    return fail(ErrorCode::kInvalidArgument, "metric: must be a finite number, got {}",
                detail::python_float_repr(result.metric));
  }
  if (result.current_epoch < 0) {
    return fail(ErrorCode::kInvalidArgument,
                "current_epoch: ensure this value is greater than or equal to 0");
  }
  Trial trial = **found;
  if (trial.status != TrialStatus::kDispatched) {
    // A duplicate or late report: the trial already has its outcome.
    if (!trial.converged) {
      return fail(ErrorCode::kState,
                  "Trial({}) already ended as Failed (its client ended it without a result), so it takes no "
                  "more reports.",
                  trial.trial_number);
    }
    return ReportResponse{true, *trial.converged,
                          fmt::format("Result for this trial({}) is already reported.", trial.trial_number)};
  }

  const double cost_upper_bound = spec_.beta_knob && min_cost_ ? *spec_.beta_knob * *min_cost_ : kInfinity;
  const double reported_cost = cost(result.energy_j, result.time_s);
  const bool within_cost_range = cost_upper_bound >= reported_cost;
  const bool converged = spec_.higher_is_better_metric ? spec_.target_metric <= result.metric
                                                       : spec_.target_metric >= result.metric;
  if (within_cost_range && result.current_epoch < spec_.max_epochs && !converged) {
    return ReportResponse{false, false, "Stop condition not met, keep training"};
  }

  std::string message;
  if (converged && within_cost_range) {
    message = "Train succeeded";
  } else if (!within_cost_range) {
    // Zeus's text without the line break and indentation its triple-quoted f-string carries.
    message = fmt::format(
        "Batch Size({}) exceeded the cost upper bound: current cost({}) > beta_knob({})*min_cost({})",
        result.batch_size, detail::python_float_repr(reported_cost),
        detail::python_float_repr(*spec_.beta_knob), detail::python_float_repr(*min_cost_));
  } else {
    message = fmt::format("Train failed to converge within max_epoch({})", spec_.max_epochs);
  }

  std::optional<ArmState> refitted;
  const auto arm = std::find_if(arms_.begin(), arms_.end(),
                                [&](const ArmState& a) { return a.batch_size == result.batch_size; });
  if (stage_ == Stage::kMab && arm != arms_.end()) {
    // Refit from scratch on the arm's recent results: Succeeded trials of this batch size of any type,
    // newest first, at most window_size of them with room made for the new one. The order (newest first,
    // or oldest first after making room) is Zeus's; it only matters for the last bits of the sums.
    const auto window = static_cast<size_t>(spec_.window_size);
    auto recent = JOULE_TRY(log.succeeded(result.batch_size, window));
    std::vector<const Trial*> history;
    history.reserve(recent.size());
    for (const Trial& past : recent) {
      history.push_back(&past);
    }
    if (window > 0 && history.size() > window) {
      history.resize(window);
    }
    if (window > 0 && history.size() >= window) {
      history.pop_back();
      std::reverse(history.begin(), history.end());
    }
    std::vector<double> rewards;
    rewards.reserve(history.size() + 1);
    for (const Trial* past : history) {
      rewards.push_back(-cost(*past->energy_j, *past->time_s));
    }
    rewards.push_back(-reported_cost);
    auto fitted =
        JOULE_TRY(fit_arm(result.batch_size, rewards, spec_.mab_prior_mean, spec_.mab_prior_precision));
    refitted = fitted;
  }

  trial.status = TrialStatus::kSucceeded;
  trial.end_unix_ns = std::max(now_unix_ns, trial.start_unix_ns);  // a trial never ends before it starts
  trial.time_s = result.time_s;
  trial.energy_j = result.energy_j;
  trial.converged = converged && within_cost_range;
  JOULE_TRY(log.save(trial));
  --dispatched_count_;
  ++succeeded_count_;
  if (trial.type == TrialType::kExploration) {
    for (Trial& exploration : explorations_) {
      if (exploration.trial_number == trial.trial_number) {
        exploration = trial;
      }
    }
  }
  if (refitted) {
    *arm = *refitted;
  }
  // Every result counts for min_cost, converged or not (Zeus's server behaviour, kept for comparability).
  if (!min_cost_ || *min_cost_ > reported_cost) {
    min_cost_ = reported_cost;
    min_cost_batch_size_ = result.batch_size;
  }
  return ReportResponse{true, *trial.converged, std::move(message)};
}

Result<void> JobState::end_trial(TrialLog& log, const TrialId& trial_id, int64_t now_unix_ns) {
  const auto unknown = [&] {
    return fail(ErrorCode::kNotFound, "Could not find the trial: {}",
                describe_trial(trial_id.job_id, trial_id.batch_size, trial_id.trial_number));
  };
  auto found = find_trial(log, trial_id.job_id, trial_id.batch_size, trial_id.trial_number);
  if (!found) {
    return tl::make_unexpected(found.error());
  }
  if (!*found) {
    return unknown();
  }
  Trial trial = **found;
  if (trial.status != TrialStatus::kDispatched) {
    return {};
  }
  trial.status = TrialStatus::kFailed;
  trial.end_unix_ns = std::max(now_unix_ns, trial.start_unix_ns);
  JOULE_TRY(log.save(trial));
  --dispatched_count_;
  ++failed_count_;
  std::erase_if(explorations_,
                [&](const Trial& exploration) { return exploration.trial_number == trial.trial_number; });
  return {};
}

// ---- BatchSizeJob: a JobState with its history in memory ----------------------------------------------

Result<BatchSizeJob> BatchSizeJob::create(JobSpec spec, GpuConfig gpu) {
  auto state = JOULE_TRY(JobState::create(std::move(spec), std::move(gpu)));
  return BatchSizeJob(std::move(state), MemoryTrialLog());
}

Result<BatchSizeJob> BatchSizeJob::create(JobSpec spec, GpuConfig gpu, uint64_t entropy) {
  auto state = JOULE_TRY(JobState::create(std::move(spec), std::move(gpu), entropy));
  return BatchSizeJob(std::move(state), MemoryTrialLog());
}

Result<TrialId> BatchSizeJob::next_trial(int64_t now_unix_ns) {
  return state_.next_trial(log_, now_unix_ns);
}

Result<TrialId> BatchSizeJob::next_trial(const Clock& clock) {
  return next_trial(wall_ns(clock));
}

Result<ReportResponse> BatchSizeJob::report(const TrainingResult& result, int64_t now_unix_ns) {
  return state_.report(log_, result, now_unix_ns);
}

Result<ReportResponse> BatchSizeJob::report(const TrainingResult& result, const Clock& clock) {
  return report(result, wall_ns(clock));
}

Result<void> BatchSizeJob::end_trial(const TrialId& trial, int64_t now_unix_ns) {
  return state_.end_trial(log_, trial, now_unix_ns);
}

Result<void> BatchSizeJob::end_trial(const TrialId& trial, const Clock& clock) {
  return end_trial(trial, wall_ns(clock));
}

bool BatchSizeJob::operator==(const BatchSizeJob& other) const {
  return state_ == other.state_ && trials() == other.trials();
}

}  // namespace joule::optimize::batch_size
