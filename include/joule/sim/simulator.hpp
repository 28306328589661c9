// SPDX-License-Identifier: Apache-2.0
// joule/sim/simulator.hpp — Zeus's trace-driven simulator (NSDI'23): recurrences of a training job, each
// made of tries (batch size from a BatchSizePolicy, power limit from a PowerLimitPolicy) whose time and
// energy come from the traces. With the legacy policies it reproduces the original simulator exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/sim/policies.hpp"
#include "joule/sim/trace.hpp"

namespace joule::sim {

struct SimulationOptions {
  double eta = 0.5;   ///< Zeus's η in [0, 1]: weight of energy against time in the cost
  double beta = 2.0;  ///< early-stop threshold: a try stops before its cost passes β × the best recurrence
                      ///< cost so far; must be > 1; +inf disables early stopping
  uint64_t seed = 1;  ///< seeds the training-run sampling (and the legacy policies' own generators)
  /// Recurrences to simulate; default 2 × (batch sizes) × (power limits) of the job, as the original.
  std::optional<int> recurrences;
  int max_tries = 20;  ///< tries per recurrence before giving up (the original's limit)
};

/// One try: a training run with one batch size and power limit, stopped when it reached the target, hit
/// max_epochs, or would have passed the early-stop cost bound.
struct Try {
  int recurrence = 0;  ///< 1-based
  int attempt = 0;     ///< 1-based within its recurrence
  int batch_size = 0;
  double power_limit_w = 0;
  double energy_j = 0;
  double time_s = 0;
  bool reached = false;
  double cost = 0;  ///< η·E + (1 − η)·max_power·T, J
};

/// Energy, time and cost summed over recurrences.
struct Totals {
  double energy_j = 0;
  double time_s = 0;
  double cost = 0;
};

/// A fixed configuration and what one recurrence costs with it on average over the trace's training runs
/// (runs that miss the target within max_epochs pay for max_epochs epochs).
struct FixedConfiguration {
  int batch_size = 0;
  double power_limit_w = 0;
  double energy_j = 0;  ///< mean per recurrence
  double time_s = 0;
  double cost = 0;
  double reach_rate = 0;  ///< share of training runs that reach the target
};

struct SimulationResult {
  Job job;
  int recurrences = 0;
  double max_power_w = 0;  ///< the cost's MaxPower: the largest power limit in the GPU's trace
  std::vector<Try> tries;
  Totals optimizer;                          ///< sum over every try
  FixedConfiguration baseline;               ///< b0 at the maximum power limit
  std::optional<FixedConfiguration> oracle;  ///< the cheapest configuration that always reaches the target
  std::vector<FixedConfiguration> configurations;  ///< every (batch size, power limit) of the job
};

/// One job submission of a group trace (Zeus's `alibaba_groups.csv`: a cluster trace's recurring jobs mapped
/// onto the six workloads).
struct GroupSubmission {
  std::string group;      ///< recurring-job group id
  double start_time = 0;  ///< submission time, s
  double end_time = 0;    ///< when the cluster trace's job ended, s
  std::string dataset;    ///< which workload the group runs
  double runtime_ratio =
      1;  ///< the cluster job's runtime relative to the workload's; scales reported E and T
};

/// @return the submissions of a group CSV (columns group, start_time, end_time, dataset, runtime_ratio),
/// grouped by group id (ids in first-appearance order). Errors name the file, line and column; an end
/// before its start or a ratio ≤ 0 is an error.
Result<std::vector<std::vector<GroupSubmission>>> load_groups(const std::string& path);
/// The same from CSV text.
Result<std::vector<std::vector<GroupSubmission>>> parse_groups(std::string_view csv_text,
                                                               const std::string& source);

/// @return zlib's Adler-32 of `text` (the original seeds each group's simulation with the group id's).
uint32_t adler32(std::string_view text);

/// Runs the trace-driven simulation of one job: `recurrences` times, the batch-size policy proposes a batch
/// size, the power-limit policy a limit (profiling all limits during the first epoch the first time a batch
/// size is used), and the traces give the try's energy, time and whether it reached the target.
class Simulator {
 public:
  /// @param trace the merged trace of one GPU.
  Simulator(Trace trace, std::unique_ptr<BatchSizePolicy> batch_size_policy,
            std::unique_ptr<PowerLimitPolicy> power_limit_policy, SimulationOptions options);

  /// Simulates `job` on fresh copies of the policies. Errors: kInvalidArgument for bad options (η, β,
  /// recurrences) or a job with no runs or a default batch size not in the trace; kState if the default
  /// batch size never reaches the target in its first try, or a recurrence runs out of tries.
  Result<SimulationResult> simulate(const Job& job) const;

  /// Simulates one group of concurrent recurrences of `job` (the original's simulate_one_alibaba_group):
  /// submissions in start order; a submission made while others run uses the best batch size so far
  /// (its power limit already known), otherwise the batch-size policy proposes one; finished jobs are
  /// observed in end order, and a job that missed the target is resubmitted right when it ended, for the
  /// same duration. The early-stop bound is β × the cheapest single job so far. Tries' energy and time are
  /// scaled by the submission's runtime ratio. Use a batch-size policy that tolerates unexpected
  /// observations (PruningGtsPolicy::Options::concurrency).
  Result<SimulationResult> simulate_group(const Job& job,
                                          const std::vector<GroupSubmission>& submissions) const;

  /// The configurations of `job` with their average cost per recurrence (no policies involved).
  Result<std::vector<FixedConfiguration>> configurations(const Job& job) const;

  const Trace& trace() const { return trace_; }
  const SimulationOptions& options() const { return options_; }

 private:
  struct Session;
  Result<std::unique_ptr<Session>> start(const Job& job) const;

  Trace trace_;
  std::unique_ptr<BatchSizePolicy> batch_size_policy_;
  std::unique_ptr<PowerLimitPolicy> power_limit_policy_;
  SimulationOptions options_;
};

/// @return a simulator with Zeus's legacy policies (pruning + Gaussian Thompson sampling seeded with
/// options.seed, and the JIT power-limit optimizer): the original NSDI'23 simulator.
Simulator zeus_simulator(Trace trace, SimulationOptions options);

/// @return the simulator of the original's run_alibaba.py: the legacy policies, the batch-size one
/// tolerating concurrent observations, seeded with options.seed (use adler32(group id) per group).
Simulator zeus_group_simulator(Trace trace, SimulationOptions options);

/// @return kInvalidArgument naming the option if η is outside [0, 1], β ≤ 1 (or NaN), recurrences < 1 or
/// max_tries < 1.
Result<void> validate(const SimulationOptions& options);

}  // namespace joule::sim
