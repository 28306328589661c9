// SPDX-License-Identifier: Apache-2.0
// joule/plan/live.hpp — Perseus inside a running training job: the scheduler behind Zeus's pipeline
// frequency optimizer protocol. It hands every rank one iteration's (instruction, SM clock) list per round,
// first warming up at the highest clock until every rank's GPU is thermally steady, then sweeping each
// stage's instructions across clocks to measure the profile, then running the plan the planner computes
// from it, and follows data-parallel stragglers (the pace T' of the slowest pipeline).
//
// The scheduler is a value: no I/O, no locking, no clock. `joule serve` keeps one per job in its store
// (dump()/parse()) and calls it under the job's lock; the planner work it needs comes through a
// LivePlanProvider so that the server can cache frontiers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// A training job as rank 0 registers it (Zeus's JobInfo, plus the microbatch count joule needs to lay
/// out an iteration).
struct LiveJobInfo {
  std::string job_id;        ///< set by the server
  int pp_degree = 1;         ///< pipeline stages
  int dp_degree = 1;         ///< data-parallel pipelines
  int tp_degree = 1;         ///< tensor-parallel ranks per stage
  int world_size = 1;        ///< pp × dp × tp
  std::string job_metadata;  ///< free text, appended to the job id
  int num_microbatches = 0;  ///< per iteration and pipeline
  Schedule schedule = Schedule::k1F1B;
};

/// One rank as it registers (Zeus's RankInfo).
struct LiveRankInfo {
  int rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int tp_rank = 0;
  std::vector<uint32_t> available_frequencies_mhz;  ///< the GPU's supported SM clocks, MHz
};

/// What one rank measured over the iterations of one round (Zeus's ProfilingResult). Per instruction name,
/// one list per iteration with the time (s) or energy (J) of each of that instruction's computations, in
/// the order the rank ran them.
struct LiveResult {
  int rank = 0;
  std::vector<double> iter_time_s;    ///< per iteration: this rank's own time, before data-parallel sync
  std::vector<double> iter_energy_j;  ///< per iteration: this GPU's energy over the same window
  std::map<std::string, std::vector<std::vector<double>>> time_breakdown_s;
  std::map<std::string, std::vector<std::vector<double>>> energy_breakdown_j;
  /// joule extension, read in kWarmup only: whether the rank's GPU is thermally steady
  /// (measure::SteadyStateDetector::ready()). nullopt (Zeus's clients never send it) counts as steady.
  std::optional<bool> thermally_steady;
};

enum class LivePhase {
  kRegistering,  ///< waiting for every rank to register
  kWarmup,       ///< rounds at the highest common clock until every GPU is thermally steady
  kProfiling,    ///< sweeping clocks from the highest down
  kPlanned,      ///< running the plan (and following stragglers)
};
std::string_view to_string(LivePhase phase);

/// Predicted time and energy of one iteration of one data-parallel pipeline under its schedule.
struct LivePrediction {
  double iteration_time_s = 0;    ///< the iteration's pace: the plan's time, or the straggler's T'
  double compute_time_s = 0;      ///< when the plan's last computation ends (≤ iteration_time_s)
  double iteration_energy_j = 0;  ///< all its stages, blocking included, until iteration_time_s
  double max_clock_time_s = 0;    ///< the same pipeline with every computation at the highest clock
  double max_clock_energy_j = 0;
  double p_blocking_w = 0;  ///< the blocking power per stage used for the prediction
};

/// One rank's schedule for one round (Zeus's FrequencySchedule plus joule's fields).
struct LiveSchedule {
  int rank = 0;
  std::vector<std::pair<std::string, uint32_t>> frequencies;  ///< one iteration: (instruction name, MHz)
  int64_t round = 0;
  LivePhase phase = LivePhase::kWarmup;
  int iterations = 1;                       ///< iterations to run it before reporting a LiveResult
  std::optional<LivePrediction> predicted;  ///< in kPlanned
};

/// Knobs of the live scheduler.
struct LiveOptions {
  /// Computations measured per (stage, instruction, clock) in profiling, per data-parallel pipeline.
  /// 2: one sample would do on the simulator, but real kernels vary a few % run to run and the energy
  /// counter of a real GPU updates every ~100 ms, so two halve the error at the same sweep length in
  /// clocks per iteration (M / samples clocks per iteration).
  int profile_samples = 2;
  /// The sweep stops below the clock where every stage's forward and backward energy has risen this much
  /// above its minimum for profile_patience profiled clocks in a row: lower clocks are slower and cost more
  /// energy, so no plan would use them (Perseus profiles "until energy starts to increase").
  double profile_stop_energy_rise = 0.02;
  int profile_patience = 3;
  /// Iterations per round once planned: each round ends with one report per rank (a barrier).
  int planned_round_iterations = 2;
  /// Blocking power per GPU when the profile cannot measure it (ranks that never wait), W.
  double default_p_blocking_w = 70;
  /// The planner's time unit; 0 picks the slowest profiled iteration / 20,000.
  double unit_time_s = 0;
  /// Straggler detection (hysteresis): a pipeline whose pace is this much slower than the plan's fastest
  /// time starts straggler mode, after straggler_confirm_rounds rounds in a row.
  double straggler_enter = 0.05;
  /// Straggler mode ends when the slowest pace is within this of the fastest time, confirmed the same way.
  double straggler_exit = 0.02;
  /// In straggler mode, the target T' moves only when the measured pace differs from it by more than this.
  double straggler_retarget = 0.03;
  int straggler_confirm_rounds = 2;
  /// The most warm-up rounds (one iteration each): warm-up lasts while some rank reports
  /// thermally_steady = false, up to this many rounds; then profiling starts anyway. A safety net for a
  /// client that never settles: the client's own detector gives up after its max_wait_s (180 s by
  /// default), which at 50 ms iterations is 3600 of them. 1: one round, whatever the ranks report.
  int max_warmup_rounds = 3600;
};

/// @return kInvalidArgument naming the option that is out of range.
Result<void> validate(const LiveOptions& options);

/// What the planner made of a measured profile: its frontier and what the scheduler picks from it.
struct LivePlan {
  PipelineDag dag;
  Profile profile;
  double p_blocking_w = 0;  ///< per stage, W
  Frontier<FrequencyPlan> frontier;
  PlanCost max_clock;
  double planning_time_s = 0;
};

/// Plans `profile_csv` (a canonical profile, profile_codec.hpp) for a `stages` × `microbatches` pipeline
/// with blocking power `p_blocking_w` per stage and planner unit `unit_time_s`. The server caches the
/// result per job and profile; plan_live() below is the uncached default.
using LivePlanProvider = std::function<Result<std::shared_ptr<const LivePlan>>(
    const std::string& profile_csv, int stages, int microbatches, Schedule schedule, double p_blocking_w,
    double unit_time_s)>;

/// Builds the DAG, parses the profile and plans its whole frontier. Errors: the planner's.
Result<std::shared_ptr<const LivePlan>> plan_live(const std::string& profile_csv, int stages,
                                                  int microbatches, Schedule schedule, double p_blocking_w,
                                                  double unit_time_s);

/// The scheduler of one job. Every call checks its input and leaves the state unchanged on error; errors
/// name the field (e.g. "rank: rank 3 is already registered") so that the server can point at it.
class LiveScheduler {
 public:
  /// Errors (kInvalidArgument "<field>: <problem>"): a degree < 1, world_size ≠ pp × dp × tp, fewer than 1
  /// microbatch, more than 2^16 computations, invalid options.
  static Result<LiveScheduler> create(LiveJobInfo info, LiveOptions options);

  /// Starts from a measured profile (canonical CSV) instead of profiling: the job is planned as soon as
  /// every rank is registered. kInvalidArgument if the profile does not parse or has fewer stages than
  /// pp_degree.
  Result<void> use_profile(const std::string& profile_csv);

  /// Registers a rank. Errors: kState ("rank: rank 3 is already registered"); kInvalidArgument for
  /// a rank ≥ world_size, a dp/pp/tp rank ≥ its degree, a (dp, pp, tp) position taken by another rank,
  /// no, duplicate or non-positive frequencies ("available_frequencies[2]: ..."); kOutOfRange once the
  /// last rank registers if the ranks share no clock, or if a given profile needs a clock some rank's GPU
  /// does not support (naming the rank and the clock). Registering the last rank starts the warm-up (or,
  /// with a profile, plans through `provider`).
  Result<void> register_rank(const LiveRankInfo& rank, const LivePlanProvider& provider);

  /// @return the ranks not registered yet, ascending.
  std::vector<int> missing_ranks() const;
  bool all_registered() const { return phase_ != LivePhase::kRegistering; }

  /// @return the schedule `rank` runs in the current round. kNotFound for a rank that is not registered;
  /// kState while ranks are missing (naming them).
  Result<LiveSchedule> schedule(int rank) const;

  /// @return whether `rank` already reported the current round (it then waits for the next round).
  bool has_reported(int rank) const;

  /// Takes a rank's report of the current round. When it is the last one, the round is observed (profile
  /// samples, the sweep, planning through `provider`, stragglers) and the next round begins.
  /// @return true if this report completed the round. Errors, state unchanged: kNotFound (unregistered
  /// rank), kState (ranks missing; already reported this round), kInvalidArgument "<field>: <problem>" for
  /// lists whose lengths do not match the round's iterations and instructions, an instruction the schedule
  /// does not have ("time_breakdown.jump: unknown instruction ..."), non-finite or negative values; the
  /// provider's errors (planning).
  Result<bool> report(const LiveResult& result, const LivePlanProvider& provider);

  const LiveJobInfo& info() const { return info_; }
  const LiveOptions& options() const { return options_; }
  LivePhase phase() const { return phase_; }
  int64_t round() const { return round_; }
  /// @return the clocks the sweep profiles (those every rank supports), descending; empty before all
  /// ranks registered.
  const std::vector<uint32_t>& frequencies_mhz() const { return frequencies_mhz_; }
  /// @return how many of frequencies_mhz() have been (or are being) profiled.
  size_t profiled_frequencies() const { return sweep_next_; }
  /// @return the measured profile (canonical CSV) once planned.
  const std::optional<std::string>& profile_csv() const { return profile_csv_; }
  /// @return the measured blocking power per stage, W (or the default) once planned.
  double p_blocking_w() const { return p_blocking_w_; }
  /// @return the straggler pace T' every non-straggling pipeline is planned for, s; nullopt: none.
  std::optional<double> straggler_time_s() const { return straggler_time_s_; }
  /// @return per data-parallel pipeline, whether it runs the straggler's pace (true) or the fastest plan.
  const std::vector<bool>& slowed_pipelines() const { return slowed_; }
  /// @return iterations the job ran in profiling (warm-up included) before planning; 0 until planned.
  int64_t profiling_iterations() const { return profiling_iterations_; }
  /// @return the warm-up rounds completed so far.
  int64_t warmup_rounds() const { return warmup_rounds_; }
  /// @return the ranks that reported thermally_steady = false in the last completed warm-up round,
  /// ascending (empty once all were steady).
  const std::vector<int>& unsteady_ranks() const { return unsteady_ranks_; }
  /// @return true if profiling started after max_warmup_rounds with some rank still not steady.
  bool warmup_gave_up() const { return warmup_gave_up_; }

  /// Serialises the whole state (JSON text).
  std::string dump() const;
  /// Parses what dump() wrote. kParse naming what is wrong.
  static Result<LiveScheduler> parse(std::string_view text);

 private:
  struct Sample {
    double time_s = 0;
    double energy_j = 0;
    int64_t count = 0;
  };
  struct Assignment {  // what one data-parallel pipeline runs once planned
    FrequencyPlan plan;
    double plan_time_s = 0;  // the plan's own critical path (≤ predicted.iteration_time_s)
    LivePrediction predicted;
  };

  LiveScheduler() = default;
  const LiveRankInfo* find_rank(int rank) const;
  std::vector<std::pair<std::string, uint32_t>> profiling_list(const PipelineDag& dag, int pp_rank) const;
  size_t profiling_slot(int microbatch) const;
  Result<void> check_result(const LiveResult& result, const LiveSchedule& schedule) const;
  Result<void> observe_round(const LivePlanProvider& provider);
  void observe_profile();
  bool sweep_finished() const;
  Result<void> plan_from(const std::string& profile_csv, const LivePlanProvider& provider);
  Result<void> assign(const LivePlan& plan);
  void observe_stragglers();
  int iterations_of_round() const;

  LiveJobInfo info_;
  LiveOptions options_;
  LivePhase phase_ = LivePhase::kRegistering;
  int64_t round_ = 0;
  std::vector<LiveRankInfo> ranks_;  // by rank, registered ones only
  std::vector<uint32_t> frequencies_mhz_;
  size_t sweep_next_ = 0;         // frequencies [0, sweep_next_) profiled or being profiled
  size_t round_frequencies_ = 0;  // how many the current profiling round sweeps, from sweep_next_ − it
  // samples_[pp][instruction][frequency index]
  std::vector<std::array<std::vector<Sample>, 2>> samples_;
  double idle_energy_j_ = 0;  // Σ over ranks and iterations of energy outside computations
  double idle_time_s_ = 0;
  double busy_time_s_ = 0;
  std::optional<std::string> given_profile_csv_;  // use_profile()
  std::optional<std::string> profile_csv_;
  double p_blocking_w_ = 0;
  double unit_time_s_ = 0;
  int64_t profiling_iterations_ = 0;
  int64_t warmup_rounds_ = 0;
  std::vector<int> unsteady_ranks_;  // of the last completed warm-up round
  bool warmup_gave_up_ = false;
  // Planned: per pipeline, its assignment; the fastest plan's prediction.
  std::vector<Assignment> assignments_;
  std::optional<Assignment> fastest_;
  std::vector<bool> slowed_;
  std::optional<double> straggler_time_s_;
  int enter_streak_ = 0;
  int exit_streak_ = 0;
  int retarget_streak_ = 0;
  std::map<int, LiveResult> pending_;  // this round's reports by rank
};

}  // namespace joule::plan
