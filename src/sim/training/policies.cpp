// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/policies.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/core/units.hpp"

namespace joule::sim {

namespace {

// Starts a pruning round from the explorer's current default and list.
Result<void> start_round(PruningGtsPolicy::Explorer& explorer) {
  const auto found =
      std::find(explorer.batch_sizes.begin(), explorer.batch_sizes.end(), explorer.default_batch_size);
  if (found == explorer.batch_sizes.end()) {
    return fail(ErrorCode::kInvalidArgument, "the default batch size {} is not among the batch sizes ({})",
                explorer.default_batch_size, fmt::join(explorer.batch_sizes, ", "));
  }
  explorer.position = static_cast<size_t>(found - explorer.batch_sizes.begin());
  explorer.going_up = false;
  explorer.good.clear();
  explorer.best_cost = kInfinity;
  explorer.best_batch_size = explorer.default_batch_size;
  return {};
}

Result<void> end_round(PruningGtsPolicy::Explorer& explorer) {
  explorer.default_batch_size = explorer.best_batch_size;
  explorer.batch_sizes = explorer.good;
  std::sort(explorer.batch_sizes.begin(), explorer.batch_sizes.end());
  if (explorer.batch_sizes.empty()) {
    return fail(ErrorCode::kState, "pruning left no batch size that reaches the target");
  }
  if (--explorer.rounds_left == 0) {
    explorer.done = true;
    return {};
  }
  return start_round(explorer);
}

// Moves to the next batch size in the walk: down from the default (inclusive), then up from above it.
Result<void> advance(PruningGtsPolicy::Explorer& explorer, bool reached) {
  const size_t default_position = static_cast<size_t>(
      std::find(explorer.batch_sizes.begin(), explorer.batch_sizes.end(), explorer.default_batch_size) -
      explorer.batch_sizes.begin());
  if (!explorer.going_up) {
    if (reached && explorer.position > 0) {
      --explorer.position;
      return {};
    }
    explorer.going_up = true;
    explorer.position = default_position + 1;
    if (explorer.position < explorer.batch_sizes.size()) {
      return {};
    }
    return end_round(explorer);
  }
  if (reached && explorer.position + 1 < explorer.batch_sizes.size()) {
    ++explorer.position;
    return {};
  }
  return end_round(explorer);
}

}  // namespace

std::string job_key(const Job& job) {
  return fmt::format("{}/{}/{}/{}/{}/{}", job.dataset, job.network, job.optimizer,
                     fmt::format("{}", job.target_metric), job.max_epochs, job.default_batch_size);
}

Result<PruningGtsPolicy::JobState*> PruningGtsPolicy::state_of(const Job& job) {
  const auto found = jobs_.find(job_key(job));
  if (found == jobs_.end()) {
    return fail(ErrorCode::kState, "job {} was not registered with the batch-size policy", job_key(job));
  }
  return &found->second;
}

Result<void> PruningGtsPolicy::register_job(const Job& job, const std::vector<int>& batch_sizes) {
  if (options_.pruning_rounds < 1) {
    return fail(ErrorCode::kInvalidArgument, "pruning rounds must be at least 1 (got {})",
                options_.pruning_rounds);
  }
  JobState state;
  state.explorer.batch_sizes = batch_sizes;
  std::sort(state.explorer.batch_sizes.begin(), state.explorer.batch_sizes.end());
  state.explorer.default_batch_size = job.default_batch_size;
  state.explorer.rounds_left = options_.pruning_rounds;
  if (auto started = start_round(state.explorer); !started) {
    return started;
  }
  jobs_[job_key(job)] = std::move(state);
  return {};
}

void PruningGtsPolicy::fit(JobState& state, Arm& arm) const {
  std::vector<double> rewards;
  for (const auto& [batch_size, reward] : state.history) {
    if (batch_size == arm.batch_size) {
      rewards.push_back(reward);
    }
  }
  if (options_.window_size > 0 && rewards.size() > static_cast<size_t>(options_.window_size)) {
    rewards.erase(rewards.begin(), rewards.end() - options_.window_size);
  }
  if (auto fitted = optimize::batch_size::fit_arm(arm.batch_size, rewards, options_.prior_mean,
                                                  options_.prior_precision)) {
    arm = *fitted;
  }
}

Result<int> PruningGtsPolicy::predict(const Job& job) {
  auto state = JOULE_TRY(state_of(job));
  JobState& s = *state;
  if (!s.explorer.done) {
    return s.explorer.batch_sizes[s.explorer.position];
  }
  if (s.arms.empty()) {
    // The bandit starts now, with a generator seeded now (as the original does).
    s.generator.emplace(options_.seed);
    for (const int batch_size : s.explorer.batch_sizes) {
      Arm arm;
      arm.batch_size = batch_size;
      arm.param_mean = options_.prior_mean;
      arm.param_precision = options_.prior_precision;
      fit(s, arm);
      s.arms.push_back(arm);
    }
  }
  // The permutation is drawn on every call, even when no arm needs exploring, to keep the stream aligned.
  const auto order = s.generator->choice_without_replacement(static_cast<int64_t>(s.arms.size()),
                                                             static_cast<int64_t>(s.arms.size()));
  for (const int64_t index : order) {
    const Arm& arm = s.arms[static_cast<size_t>(index)];
    if (arm.num_observations < options_.num_explorations) {
      return static_cast<int>(arm.batch_size);
    }
  }
  double best_sample = -kInfinity;
  int best_batch_size = static_cast<int>(s.arms.front().batch_size);
  for (const Arm& arm : s.arms) {
    const double stddev = std::isinf(arm.param_precision) ? 0.0 : std::sqrt(1.0 / arm.param_precision);
    const double sample = s.generator->normal(arm.param_mean, stddev);
    if (sample > best_sample) {
      best_sample = sample;
      best_batch_size = static_cast<int>(arm.batch_size);
    }
  }
  return best_batch_size;
}

Result<void> PruningGtsPolicy::observe(const Job& job, int batch_size, double cost, bool reached) {
  auto state = JOULE_TRY(state_of(job));
  JobState& s = *state;
  s.history.emplace_back(batch_size, -cost);
  if (!s.explorer.done) {
    const int expected = s.explorer.batch_sizes[s.explorer.position];
    if (batch_size != expected) {
      if (options_.concurrency) {
        return {};
      }
      return fail(ErrorCode::kState, "the pruning exploration expected batch size {}, got {}", expected,
                  batch_size);
    }
    if (reached) {
      s.explorer.good.push_back(batch_size);
      if (cost < s.explorer.best_cost) {
        s.explorer.best_cost = cost;
        s.explorer.best_batch_size = batch_size;
      }
    }
    return advance(s.explorer, reached);
  }
  for (Arm& arm : s.arms) {
    if (arm.batch_size == batch_size) {
      fit(s, arm);
    }
  }
  return {};
}

std::unique_ptr<BatchSizePolicy> PruningGtsPolicy::clone() const {
  return std::make_unique<PruningGtsPolicy>(*this);
}

std::optional<double> JitPowerLimitPolicy::predict(const Job& job, int batch_size) {
  const auto found = best_.find({job_key(job), batch_size});
  if (found == best_.end()) {
    return std::nullopt;
  }
  return found->second.first;
}

void JitPowerLimitPolicy::observe(const Job& job, int batch_size, double power_limit_w, double cost) {
  auto [entry, inserted] = best_.try_emplace({job_key(job), batch_size}, power_limit_w, cost);
  if (!inserted && cost < entry->second.second) {
    entry->second = {power_limit_w, cost};
  }
}

}  // namespace joule::sim
