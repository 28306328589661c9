// SPDX-License-Identifier: Apache-2.0
// joule/optimize/batch_size.hpp — the batch-size optimizer of Zeus's current server (pruning exploration,
// then Gaussian Thompson sampling) as a pure library: one job's complete decision logic and state, no I/O.
//
// A service (HTTP + database) keeps one JobState per job id and the job's trials one record each (a
// TrialLog), serialises every call on a job, and stores what changed after each call; BatchSizeJob is the
// same with the history in memory. The JSON names of JobSpec, GpuConfig, TrialId, TrainingResult and
// ReportResponse are Zeus's, so that the service can be wire-compatible with Zeus's REST API.
// docs/batch_size.md describes the algorithm, the state format and the decisions on Zeus's quirks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/core/rng.hpp"

namespace joule::optimize::batch_size {

/// joule's bounds on values Zeus leaves open, so that every stored number stays finite and every state small.
inline constexpr size_t kMaxJobIdLength = 400;     ///< Zeus's Job.job_id is a varchar(400)
inline constexpr size_t kMaxBatchSizes = 1024;     ///< batch sizes per job (the state keeps a few per size)
inline constexpr size_t kMaxGpuModelLength = 256;  ///< characters of gpu_model
inline constexpr double kMaxPowerW = 1e9;          ///< max_power: 1 GW, a million GPUs at 1 kW
inline constexpr int64_t kMaxNumberOfGpus = 10'000'000;
inline constexpr double kMaxTrainingTimeS = 1e9;     ///< a report's time: about 31.7 years
inline constexpr double kMaxTrainingEnergyJ = 1e15;  ///< a report's energy: 278 GWh

/// What the user asks for (Zeus's `JobSpec`; JSON field names and defaults are Zeus's).
struct JobSpec {
  std::optional<std::string> job_id;      ///< if set, must start with job_id_prefix; unset: generated
  std::string job_id_prefix;              ///< required
  std::vector<int64_t> batch_sizes;       ///< non-empty, positive, distinct; from_json() sorts them
  int64_t default_batch_size = 0;         ///< > 0, one of batch_sizes; the first batch size explored
  double eta_knob = 0.5;                  ///< in [0, 1]: weight of energy in the cost
  std::optional<double> beta_knob = 2.0;  ///< > 0: stop a run whose cost exceeds β·min_cost; unset: never
  double target_metric = 0.50;            ///< the validation metric that counts as converged
  bool higher_is_better_metric = true;    ///< converged when metric ≥ target (else when metric ≤ target)
  int64_t max_epochs = 100;               ///< > 0: a run stops unconverged after this many epochs
  int64_t num_pruning_rounds = 2;         ///< ≥ 1 (Zeus accepts 0 but then fails on the first prediction)
  int64_t window_size = 0;                ///< ≥ 0: MAB fits an arm on its last N results; 0: all of them
  double mab_prior_mean = 0.0;            ///< prior mean of an arm's expected reward (reward = −cost)
  double mab_prior_precision = 0.0;       ///< ≥ 0: prior precision; 0 = uninformative
  int64_t mab_num_explorations = 2;       ///< ≥ 0: arms with fewer observations are pulled before sampling
  std::optional<uint64_t> mab_seed;       ///< set: MAB draws equal numpy's `default_rng(mab_seed)` stream

  bool operator==(const JobSpec&) const = default;

  /// @return the spec as Zeus's JSON object (unset optionals are null).
  nlohmann::json to_json() const;
  /// Parses Zeus's JSON `JobSpec` (unknown keys are ignored, as pydantic does; missing keys take the
  /// defaults above; job_id_prefix, batch_sizes and default_batch_size are required), sorts batch_sizes and
  /// validates. @return kInvalidArgument "<field>: <problem>" for a wrong type or a broken rule.
  static Result<JobSpec> from_json(const nlohmann::json& json);
};

/// The GPUs a job runs on (Zeus's `GpuConfig`). max_power converts time into the energy unit of the cost.
struct GpuConfig {
  double max_power = 0;        ///< W, > 0: the client sends max power limit of GPU 0 × number of GPUs
  int64_t number_of_gpus = 0;  ///< > 0
  std::string gpu_model;       ///< non-empty, e.g. "NVIDIA A40"

  bool operator==(const GpuConfig&) const = default;

  nlohmann::json to_json() const;
  /// Parses the GpuConfig fields of a JSON object (other keys are ignored, so the body of Zeus's `POST /jobs`
  /// can be given to both JobSpec::from_json() and this) and validates them. @return kInvalidArgument.
  static Result<GpuConfig> from_json(const nlohmann::json& json);
};

/// Checks Zeus's rules plus joule's stricter ones (see docs/batch_size.md). Messages are Zeus's where Zeus
/// has one, prefixed by the field name, e.g. "eta_knob: eta_knob should be in range [0,1]".
/// @return kInvalidArgument naming the first broken rule.
Result<void> validate(const JobSpec& spec);
/// @return kInvalidArgument naming the first broken rule of `gpu`.
Result<void> validate(const GpuConfig& gpu);

/// A trial: one training run with one batch size (Zeus's `TrialId`, returned by "next batch size").
struct TrialId {
  std::string job_id;
  int64_t batch_size = 0;
  int64_t trial_number = 0;  ///< per job, from 1

  bool operator==(const TrialId&) const = default;
  nlohmann::json to_json() const;
  /// @return kInvalidArgument for missing fields or wrong types.
  static Result<TrialId> from_json(const nlohmann::json& json);
  /// @return Zeus's pydantic repr of the id, as its "not found" messages embed it:
  /// "job_id='j' batch_size=8 trial_number=1" (the job id quoted as Python's repr() of a str).
  std::string describe() const;
};

/// What the client reports after every epoch (Zeus's `TrainingResult`). Time and energy are cumulative over
/// the trial.
struct TrainingResult {
  std::string job_id;
  int64_t batch_size = 0;
  int64_t trial_number = 0;
  double time_s = 0;          ///< JSON "time": seconds of training so far (≥ 0)
  double energy_j = 0;        ///< JSON "energy": joules of training so far (≥ 0)
  double metric = 0;          ///< the validation metric after current_epoch
  int64_t current_epoch = 0;  ///< epochs done so far

  bool operator==(const TrainingResult&) const = default;
  nlohmann::json to_json() const;
  /// @return kInvalidArgument for missing fields or wrong types.
  static Result<TrainingResult> from_json(const nlohmann::json& json);
};

/// The answer to a report (Zeus's `ReportResponse`).
struct ReportResponse {
  bool stop_train = false;  ///< the client stops training now
  bool converged = false;   ///< the trial reached the target metric within the cost bound
  std::string message;      ///< why (Zeus's messages)

  bool operator==(const ReportResponse&) const = default;
  nlohmann::json to_json() const;
  static Result<ReportResponse> from_json(const nlohmann::json& json);
};

/// Which algorithm decides the next batch size.
enum class Stage {
  kPruning,  ///< "Pruning": exploring batch sizes round by round
  kMab,      ///< "MAB": Gaussian Thompson sampling over the surviving batch sizes
};

/// Why a trial was handed out.
enum class TrialType {
  kExploration,  ///< "Exploration": the pruning walk's next batch size
  kConcurrent,   ///< "Concurrent": the pruning walk waits for a running exploration; best batch size so far
  kMab,          ///< "MAB": chosen by Thompson sampling
};

/// Where a trial is in its life.
enum class TrialStatus {
  kDispatched,  ///< "Dispatched": handed out, no final report yet
  kSucceeded,   ///< "Succeeded": training ended (converged or not) and the result is recorded
  kFailed,  ///< "Failed": ended without a result (client crashed or raised); pruning retries its batch size
};

/// @return Zeus's names: "Pruning", "MAB"; "Exploration", "Concurrent", "MAB"; "Dispatched", "Succeeded",
/// "Failed".
std::string_view to_string(Stage stage);
std::string_view to_string(TrialType type);
std::string_view to_string(TrialStatus status);

/// One trial of the job (a row of Zeus's `Trial` table). time_s, energy_j and converged are set exactly
/// when the status is Succeeded; end_unix_ns exactly when it is not Dispatched.
struct Trial {
  int64_t trial_number = 0;
  int64_t batch_size = 0;
  TrialType type = TrialType::kExploration;
  TrialStatus status = TrialStatus::kDispatched;
  int64_t start_unix_ns = 0;           ///< when it was handed out, ns since the Unix epoch
  std::optional<int64_t> end_unix_ns;  ///< when it ended
  std::optional<double> time_s;        ///< total training time of the trial
  std::optional<double> energy_j;      ///< total training energy of the trial
  std::optional<bool> converged;       ///< reached the target within the cost bound

  bool operator==(const Trial&) const = default;

  /// @return the trial as one object of the state format's "trials" (docs/batch_size.md).
  nlohmann::json to_json() const;
  /// Parses and checks one trial object (statuses and results consistent; `batch_sizes`, sorted, are the
  /// job's). @return kParse naming the field under `where`, e.g. "trials[2].status: …".
  static Result<Trial> from_json(const nlohmann::json& json, const std::vector<int64_t>& batch_sizes,
                                 std::string_view where);
};

/// Where a job's trials live. A job's decisions read only a few of its trials at a time (the one reported,
/// the last window_size results of one batch size), so its history need not be in memory: BatchSizeJob keeps
/// it in a vector (MemoryTrialLog), the service in its database, a record per trial.
class TrialLog {
 public:
  virtual ~TrialLog() = default;
  /// @return trial `trial_number`, or nullopt if the log has none.
  virtual Result<std::optional<Trial>> find(int64_t trial_number) = 0;
  /// @return the Succeeded trials of `batch_size`, highest trial number first, at most `limit` (0: all).
  virtual Result<std::vector<Trial>> succeeded(int64_t batch_size, size_t limit) = 0;
  /// Records a new trial (numbered one past the last) or the new state of an existing one.
  virtual Result<void> save(const Trial& trial) = 0;
};

/// A TrialLog in memory: trial i+1 at index i.
class MemoryTrialLog final : public TrialLog {
 public:
  MemoryTrialLog() = default;
  explicit MemoryTrialLog(std::vector<Trial> trials) : trials_(std::move(trials)) {}
  Result<std::optional<Trial>> find(int64_t trial_number) override;
  Result<std::vector<Trial>> succeeded(int64_t batch_size, size_t limit) override;
  Result<void> save(const Trial& trial) override;
  const std::vector<Trial>& trials() const { return trials_; }

 private:
  std::vector<Trial> trials_;
};

/// The Gaussian Thompson-sampling state of one arm (batch size): the posterior N(param_mean,
/// 1/param_precision) of its expected reward (reward = −cost), and the reward precision learned from the
/// rewards' variance. Precisions may be +∞ (all rewards equal: sampling returns param_mean exactly).
struct ArmState {
  int64_t batch_size = 0;
  double param_mean = 0;
  double param_precision = 0;
  double reward_precision = 0;
  int64_t num_observations = 0;

  bool operator==(const ArmState&) const = default;
};

/// Fits an arm from scratch on `rewards` (non-empty) as Zeus's server does, with numpy's arithmetic (pairwise
/// sums): v = population variance; ρ = +∞ if v = 0 else 1/v; if ρ = +∞: τ = +∞, μ = mean; else
/// τ = τ0 + n·ρ, μ = (τ0·μ0 + ρ·ΣR)/τ. @return kInvalidArgument if rewards is empty.
Result<ArmState> fit_arm(int64_t batch_size, std::span<const double> rewards, double prior_mean,
                         double prior_precision);

/// Zeus's cost (B.1): eta·energy + (1 − eta)·max_power·time, in J.
double zeus_cost(double energy_j, double time_s, double eta_knob, double max_power_w);

/// @return "<prefix>-<8 lower-case hex digits>" derived from `entropy` (Zeus's generated-id format). The
/// service checks the id is unused and draws again if not.
std::string generate_job_id(std::string_view prefix, uint64_t entropy);

/// One job of the batch-size optimizer without its trial history: its configuration, stage, best cost, bandit
/// arms, generator, the counts of its trials and the Exploration trials the pruning walk reads (at most
/// num_pruning_rounds per batch size). Its size does not grow with the job's history; the trials live in a
/// TrialLog given to each call.
///
/// Mirrors Zeus's server call for call: next_trial() is `GET /jobs/batch_size`, report() is `POST /report`,
/// end_trial() is `PATCH /trials`. Every call either succeeds or leaves the state (and the log) unchanged.
/// Not thread-safe: the service serialises calls on one job (Zeus holds a lock per job id).
///
/// Randomness: with mab_seed set, the MAB draws come from numpy's `default_rng(mab_seed)` stream, continued
/// across calls through the state, so decisions equal Zeus's server's for the same history. Without a seed
/// the generator is seeded once at create() from the given entropy (std::random_device by default) and its
/// state persists likewise (Zeus instead reseeds from the wall-clock second on every draw).
class JobState {
 public:
  /// The version of to_json()'s format this build writes and reads.
  static constexpr int kStateVersion = 1;

  /// Registers a new job (Zeus's `POST /jobs` for an unknown id): validates, sorts batch_sizes, generates
  /// a job id if none is given, starts in Pruning with min_cost unset and min_cost/exploration default batch
  /// size = default_batch_size. Entropy for the id and the unseeded generator comes from std::random_device.
  /// @return validate()'s errors.
  static Result<JobState> create(JobSpec spec, GpuConfig gpu);
  /// As create(spec, gpu), with the entropy given (tests, reproducible simulations).
  static Result<JobState> create(JobSpec spec, GpuConfig gpu, uint64_t entropy);

  /// Zeus's re-registration check: the same job id may be registered again only with the identical
  /// configuration. @return kState "JobSpec doesn't match with existing jobSpec. Use a new job_id for
  /// different configuration" if `spec` (batch sizes compared sorted) or `gpu` differ from this job's.
  Result<void> check_same_config(const JobSpec& spec, const GpuConfig& gpu) const;

  /// Hands out the next trial (Zeus's predict) and records it in `log`. Pruning: the walk over the
  /// explorations decides an Exploration trial, a Concurrent trial with min_cost_batch_size while the
  /// expected exploration is still running, or, after the last round, the switch to MAB (arms fitted on the
  /// survivors' explorations) and a MAB trial. MAB: explore an arm with < mab_num_explorations observations
  /// (in a random order), else sample each arm's posterior and take the first maximum.
  /// @return kState if a pruning round ended with no converged batch size (every later call fails too); the
  /// log's errors.
  Result<TrialId> next_trial(TrialLog& log, int64_t now_unix_ns);

  /// Records one epoch's cumulative result (Zeus's report) and decides whether training goes on: it stops
  /// when the metric reached the target, the cost exceeds beta_knob·min_cost (checked after the epoch), or
  /// current_epoch reached max_epochs. A stopped trial becomes Succeeded (converged or not), updates
  /// min_cost if its cost is lower (converged or not, as Zeus does), and in the MAB stage refits its arm on
  /// the log's last window_size results of its batch size. A report for a trial that already has a result
  /// gets stop_train with the stored converged.
  /// @return kNotFound for an unknown (job id, batch size, trial number); kInvalidArgument naming the field
  /// for a negative, non-finite or too large (kMaxTrainingTimeS, kMaxTrainingEnergyJ) time or energy, a
  /// non-finite metric or a negative current_epoch; kState for a report on a Failed trial; the log's errors.
  Result<ReportResponse> report(TrialLog& log, const TrainingResult& result, int64_t now_unix_ns);

  /// Ends a trial (Zeus's `PATCH /trials`, sent by the client's exit hook): a trial still Dispatched becomes
  /// Failed (so pruning retries its batch size); otherwise nothing changes. @return kNotFound for an unknown
  /// trial; the log's errors.
  Result<void> end_trial(TrialLog& log, const TrialId& trial, int64_t now_unix_ns);

  const std::string& job_id() const { return *spec_.job_id; }
  /// The validated spec, batch sizes sorted, job_id set.
  const JobSpec& spec() const { return spec_; }
  const GpuConfig& gpu() const { return gpu_; }
  Stage stage() const { return stage_; }
  /// The lowest cost of any Succeeded trial so far (J); unset before the first one.
  std::optional<double> min_cost() const { return min_cost_; }
  /// The batch size of min_cost (default_batch_size before); Concurrent trials use it.
  int64_t min_cost_batch_size() const { return min_cost_batch_size_; }
  /// The default batch size of the pruning round the walk is in (informational; Zeus stores but never
  /// updates it).
  int64_t exp_default_batch_size() const { return exp_default_batch_size_; }
  /// Trials handed out so far (the last trial number), and how many of them are in each status.
  int64_t trial_count() const { return trial_count_; }
  int64_t dispatched_count() const { return dispatched_count_; }
  int64_t succeeded_count() const { return succeeded_count_; }
  int64_t failed_count() const { return failed_count_; }
  /// The Exploration trials that did not fail, by trial number (what the pruning walk reads).
  const std::vector<Trial>& explorations() const { return explorations_; }
  /// The MAB arms, by batch size; empty in the Pruning stage.
  const std::vector<ArmState>& arms() const { return arms_; }
  /// The MAB generator's state (numpy's PCG64 state).
  rng::Pcg64::State rng_state() const { return rng_.bit_generator().state(); }
  /// @return zeus_cost() with this job's eta_knob and max_power.
  double cost(double energy_j, double time_s) const;

  /// @return the state without trials (docs/batch_size.md, "Job state format"): format/version, spec, gpu,
  /// stage, min_cost, min_cost_batch_size, exp_default_batch_size, counts, explorations, arms, rng. Doubles
  /// are written so that they parse back to the same bits; non-finite ones as "inf", "-inf", "nan"; 128-bit
  /// generator words as decimal strings.
  nlohmann::json to_json() const;
  /// Restores a state from to_json()'s output, checking every field and the consistency between them.
  /// @return kParse naming the offending field.
  static Result<JobState> from_json(const nlohmann::json& state);

  bool operator==(const JobState& other) const;

 private:
  friend class BatchSizeJob;
  JobState(JobSpec spec, GpuConfig gpu, const rng::Pcg64::State& rng_state);
  /// @return the trial (job id, batch size, number) names, nullopt if there is none (an unknown trial).
  Result<std::optional<Trial>> find_trial(TrialLog& log, std::string_view job_id_given, int64_t batch_size,
                                          int64_t trial_number) const;

  JobSpec spec_;
  GpuConfig gpu_;
  Stage stage_ = Stage::kPruning;
  std::optional<double> min_cost_;
  int64_t min_cost_batch_size_ = 0;
  int64_t exp_default_batch_size_ = 0;
  int64_t trial_count_ = 0;
  int64_t dispatched_count_ = 0;
  int64_t succeeded_count_ = 0;
  int64_t failed_count_ = 0;
  std::vector<Trial> explorations_;
  std::vector<ArmState> arms_;
  rng::Generator rng_;
};

/// One job of the batch-size optimizer with its whole history in memory: a JobState and a MemoryTrialLog,
/// serialised together (tests, simulations, a job small enough to keep whole).
class BatchSizeJob {
 public:
  /// The version of to_json()'s format this build writes and reads.
  static constexpr int kStateVersion = 1;

  /// JobState::create(); the job starts with no trials.
  static Result<BatchSizeJob> create(JobSpec spec, GpuConfig gpu);
  static Result<BatchSizeJob> create(JobSpec spec, GpuConfig gpu, uint64_t entropy);
  /// Adopts a state and its complete history (e.g. to convert the service's stored form).
  /// @return kParse if the trials do not match the state's counts and explorations.
  static Result<BatchSizeJob> assemble(JobState state, std::vector<Trial> trials);

  Result<void> check_same_config(const JobSpec& spec, const GpuConfig& gpu) const {
    return state_.check_same_config(spec, gpu);
  }

  /// JobState::next_trial() on this job's own log.
  Result<TrialId> next_trial(int64_t now_unix_ns);
  /// next_trial() at `clock`'s wall-clock time.
  Result<TrialId> next_trial(const Clock& clock);
  /// JobState::report() on this job's own log.
  Result<ReportResponse> report(const TrainingResult& result, int64_t now_unix_ns);
  Result<ReportResponse> report(const TrainingResult& result, const Clock& clock);
  /// JobState::end_trial() on this job's own log.
  Result<void> end_trial(const TrialId& trial, int64_t now_unix_ns);
  Result<void> end_trial(const TrialId& trial, const Clock& clock);

  const JobState& state() const { return state_; }
  const std::string& job_id() const { return state_.job_id(); }
  const JobSpec& spec() const { return state_.spec(); }
  const GpuConfig& gpu() const { return state_.gpu(); }
  Stage stage() const { return state_.stage(); }
  std::optional<double> min_cost() const { return state_.min_cost(); }
  int64_t min_cost_batch_size() const { return state_.min_cost_batch_size(); }
  int64_t exp_default_batch_size() const { return state_.exp_default_batch_size(); }
  /// All trials, by trial number (trial i+1 at index i).
  const std::vector<Trial>& trials() const { return log_.trials(); }
  const std::vector<ArmState>& arms() const { return state_.arms(); }
  rng::Pcg64::State rng_state() const { return state_.rng_state(); }
  double cost(double energy_j, double time_s) const { return state_.cost(energy_j, time_s); }

  /// @return the complete state with every trial (docs/batch_size.md, "State format"): format/version, spec,
  /// gpu, stage, min_cost, min_cost_batch_size, exp_default_batch_size, trials, arms, rng.
  nlohmann::json to_json() const;
  /// Restores a job from to_json()'s output, checking every field and the consistency between them.
  /// @return kParse naming the offending field (e.g. "trials[2].status: …") for malformed state.
  static Result<BatchSizeJob> from_json(const nlohmann::json& state);

  bool operator==(const BatchSizeJob& other) const;

 private:
  BatchSizeJob(JobState state, MemoryTrialLog log) : state_(std::move(state)), log_(std::move(log)) {}

  JobState state_;
  MemoryTrialLog log_;
};

}  // namespace joule::optimize::batch_size
