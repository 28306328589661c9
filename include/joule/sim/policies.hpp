// SPDX-License-Identifier: Apache-2.0
// joule/sim/policies.hpp — the policies the trace-driven simulator asks for a batch size and a power limit.
// Plug in your own to compare them with Zeus's on the same traces.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/rng.hpp"
#include "joule/optimize/batch_size.hpp"
#include "joule/sim/trace.hpp"

namespace joule::sim {

/// Chooses the batch size of each try of a recurring job, learning from what earlier tries cost.
class BatchSizePolicy {
 public:
  virtual ~BatchSizePolicy() = default;
  /// A new job with the batch sizes it may use (sorted ascending) and its default job.default_batch_size.
  virtual Result<void> register_job(const Job& job, const std::vector<int>& batch_sizes) = 0;
  /// @return the batch size of the next try.
  virtual Result<int> predict(const Job& job) = 0;
  /// Reports what a try with `batch_size` cost (Zeus cost, J) and whether it reached the target.
  virtual Result<void> observe(const Job& job, int batch_size, double cost, bool reached) = 0;
  /// @return an independent copy in the same state (the simulator runs every job on a fresh copy).
  virtual std::unique_ptr<BatchSizePolicy> clone() const = 0;
  virtual std::string name() const = 0;
};

/// Chooses the power limit for a batch size; nullopt means "not profiled yet", and the simulator then
/// profiles every limit during the first epoch and reports each limit's cost per epoch through observe().
class PowerLimitPolicy {
 public:
  virtual ~PowerLimitPolicy() = default;
  virtual std::optional<double> predict(const Job& job, int batch_size) = 0;
  virtual void observe(const Job& job, int batch_size, double power_limit_w, double cost) = 0;
  virtual std::unique_ptr<PowerLimitPolicy> clone() const = 0;
  virtual std::string name() const = 0;
};

/// Zeus's legacy batch-size optimizer (PruningGTSBatchSizeOptimizer): rounds of pruning exploration (down
/// from the default batch size, then up; a batch size that fails to reach the target ends its direction;
/// the cheapest reached one becomes the next round's default), then Gaussian Thompson sampling over the
/// survivors, with a numpy-compatible generator seeded when the bandit starts.
class PruningGtsPolicy final : public BatchSizePolicy {
 public:
  struct Options {
    uint64_t seed = 1;
    int pruning_rounds = 2;
    double prior_mean = 0;
    double prior_precision = 0;
    int num_explorations = 2;  ///< arms with fewer observations are explored before sampling
    int window_size = 0;       ///< rewards per arm used in fits; 0 = all (the paper's data-drift window)
    bool concurrency = false;  ///< tolerate observations of batch sizes the exploration did not ask for
  };
  PruningGtsPolicy() : PruningGtsPolicy(Options{}) {}
  explicit PruningGtsPolicy(Options options) : options_(options) {}

  Result<void> register_job(const Job& job, const std::vector<int>& batch_sizes) override;
  Result<int> predict(const Job& job) override;
  Result<void> observe(const Job& job, int batch_size, double cost, bool reached) override;
  std::unique_ptr<BatchSizePolicy> clone() const override;
  std::string name() const override { return "pruning-gts"; }

  /// Pruning exploration as a state machine: which batch size it expects next, and the survivors.
  struct Explorer {
    std::vector<int> batch_sizes;  // this round's list, ascending
    int default_batch_size = 0;
    int rounds_left = 0;
    bool going_up = false;
    size_t position = 0;  // index into batch_sizes of the expected batch size
    std::vector<int> good;
    double best_cost = 0;
    int best_batch_size = 0;
    bool done = false;
  };

  /// One arm of the bandit: a Gaussian posterior over the reward (−cost), fitted as Zeus's server does.
  using Arm = optimize::batch_size::ArmState;

 private:
  struct JobState {
    Explorer explorer;
    std::vector<std::pair<int, double>> history;  // (batch size, reward = −cost), oldest first
    std::vector<Arm> arms;                        // empty until the bandit starts
    std::optional<rng::Generator> generator;
  };
  Result<JobState*> state_of(const Job& job);
  void fit(JobState& state, Arm& arm) const;

  Options options_;
  std::map<std::string, JobState> jobs_;
};

/// Zeus's legacy JIT power-limit optimizer: per (job, batch size), the limit with the lowest observed cost
/// (ties keep the first observed).
class JitPowerLimitPolicy final : public PowerLimitPolicy {
 public:
  std::optional<double> predict(const Job& job, int batch_size) override;
  void observe(const Job& job, int batch_size, double power_limit_w, double cost) override;
  std::unique_ptr<PowerLimitPolicy> clone() const override {
    return std::make_unique<JitPowerLimitPolicy>(*this);
  }
  std::string name() const override { return "jit"; }

 private:
  std::map<std::pair<std::string, int>, std::pair<double, double>> best_;  // → (power limit W, cost)
};

/// @return a key identifying the job (its workload and target), for policies' per-job state.
std::string job_key(const Job& job);

}  // namespace joule::sim
