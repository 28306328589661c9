// SPDX-License-Identifier: Apache-2.0
// joule/plan/live.hpp — Perseus inside a running training job: the scheduler behind Zeus's pipeline
// frequency optimizer protocol. It hands every rank one iteration's (instruction, SM clock) list per round,
// first warming up at the highest clock until every rank's GPU is thermally steady, then sweeping each
// stage's instructions across clocks to measure the profile, then running the plan the planner computes
// from it, and follows data-parallel stragglers (the pace T' of the slowest pipeline).
//
// The scheduler is a value: no I/O, no locking, no clock. Its state is split by how it grows, so that a
// service can keep a job of thousands of ranks in a database and touch a small part of it per request:
// - LiveState: what every request reads and changes (phase, round, counters, the clocks, the straggler
//   state). Bounded whatever the job's size: a few kilobytes plus one character per pipeline.
// - one LiveRankPosition per registered rank and one LiveReport per rank and round: the caller keeps them
//   (`joule serve` as store items) and hands the state what a call needs.
// - LiveData: the sweep's samples, the profile and the plans, read and written only when a round completes,
//   a plan is applied, or a planned schedule is served.
// Planning is not done inside these calls: a state that needs a plan says so (phase kPlanning, planning())
// and the caller plans (on a worker, outside any transaction) and applies the result (apply_plan()).
// LiveScheduler keeps all of it in memory and plans synchronously: the whole scheduler in one value, for
// one process and for tests.
#pragma once

#include <array>
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
#include "joule/probe/card.hpp"

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

/// Where a registered rank sits in the job: what the scheduler needs of it after registration.
struct LiveRankPosition {
  int rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int tp_rank = 0;
  bool operator==(const LiveRankPosition&) const = default;
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
  /// joule extension: the round this result is for (LiveSchedule::round). A result for another round (a
  /// duplicate, or one delayed past its round) is refused; nullopt (Zeus's clients) counts as the current.
  std::optional<int64_t> round;
};

/// A checked result and where its rank sits: what the caller keeps until the round completes.
struct LiveReport {
  LiveRankPosition rank;
  int64_t round = 0;
  LiveResult result;

  std::string dump() const;  ///< JSON text
  /// Parses what dump() wrote. kParse naming what is wrong.
  static Result<LiveReport> parse(std::string_view text);
};

enum class LivePhase {
  kRegistering,  ///< waiting for every rank to register
  kWarmup,       ///< rounds at the highest common clock until every GPU is thermally steady
  kProfiling,    ///< sweeping clocks from the highest down
  kPlanning,     ///< every rank reported (or registered with a given profile): waiting for a plan
  kPlanned,      ///< running the plan (and following stragglers)
  kFailed,       ///< planning failed: every computation runs at the highest clock (failure() says why)
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
  bool operator==(const LivePrediction&) const = default;
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
  /// The planner's time unit; 0 picks it from the slowest profiled iteration (see LiveLimits).
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
  /// With a frontier card (LiveState::use_card()): the clocks profiled before the fit (at least; more when
  /// the last profiling round has room for them), the lowest of them as a fraction of the highest, and the
  /// largest held-out check error accepted (CardProfileOptions in card_profile.hpp says why 3, 0.4 and 5%).
  int card_probe_clocks = 3;
  double card_lowest_probe_ratio = 0.4;
  double card_max_residual = 0.05;
};

/// @return kInvalidArgument naming the option that is out of range.
Result<void> validate(const LiveOptions& options);

/// The bounds that keep one job's state, messages and planning finite. They sit far above real jobs: a
/// value past them is a mistake or an attack, refused with the field named when the job or rank registers.
struct LiveLimits {
  /// SM clocks one rank may list: GPUs offer a few hundred at most (an A100 81, an H100 about 130).
  int max_frequencies_per_rank = 512;
  /// Ranks of one job.
  int max_world_size = 65'536;
  /// Computations of one iteration of one pipeline (2 × stages × microbatches): what the DAG, the plans and
  /// a rank's schedule grow with.
  int64_t max_computations = int64_t{1} << 16;
  /// The largest LiveData (samples, profile, two plans) a job may need, bytes of its JSON text; a job whose
  /// worst case (every stage at max_frequencies_per_rank clocks) exceeds it is refused at registration.
  size_t max_data_bytes = size_t{16} << 20;
  /// Planning work: (computations of an iteration) × (time units the planner walks). The automatic unit
  /// time keeps the walk within both this and 20,000 units, and plans of a job are refused beyond it.
  /// 2^25 plans a 16 × 192 (GPT-3) pipeline in 5,461 units of its slowest iteration; the frontier the
  /// planner keeps is at most 4 bytes × this (128 MiB).
  double max_planning_work = double(int64_t{1} << 25);
  /// Also the planner's own bound on its walk (PlannerOptions::max_planning_units).
  double max_planning_units = 200'000;
};

/// @return kInvalidArgument naming the limit that is out of range.
Result<void> validate(const LiveLimits& limits);

/// One (stage, instruction, clock) of the sweep: sums over the computations measured there.
struct LiveSample {
  double time_s = 0;
  double energy_j = 0;
  int64_t count = 0;
  bool operator==(const LiveSample&) const = default;
};

/// What grows with the profile: the sweep's samples, the measured (or given) profile and the plans the
/// pipelines run. The caller stores it beside the state (LiveState::data_version() says when it changed).
struct LiveData {
  /// [stage][instruction (forward, backward)][clock index into LiveState::frequencies_mhz()]
  std::vector<std::array<std::vector<LiveSample>, 2>> samples;
  std::optional<std::string> profile_csv;  ///< canonical CSV (profile_codec.hpp), once measured or given
  FrequencyPlan fastest_plan;              ///< once planned: per computation, MHz
  FrequencyPlan slowed_plan;               ///< in straggler mode: what the non-straggling pipelines run
  std::optional<std::string> card_json;    ///< the frontier card the job starts from (use_card()), as JSON
  int64_t version = 0;                     ///< LiveState::data_version() when written

  std::string dump() const;  ///< JSON text
  /// Parses what dump() wrote. kParse naming what is wrong.
  static Result<LiveData> parse(std::string_view text);
  bool operator==(const LiveData&) const = default;
};

/// What the planner made of a measured profile: its frontier and what the scheduler picks from it.
struct LivePlan {
  PipelineDag dag;
  Profile profile;
  double p_blocking_w = 0;  ///< per stage, W
  Frontier<FrequencyPlan> frontier;
  PlanCost max_clock;
  double planning_time_s = 0;

  /// @return about how many bytes it holds in memory (for caches bounded by size).
  size_t memory_bytes() const;
};

/// What a job needs planned (LiveState::planning()).
struct LivePlanRequest {
  std::string profile_csv;
  int stages = 0;
  int microbatches = 0;
  Schedule schedule = Schedule::k1F1B;
  double p_blocking_w = 0;
  double unit_time_s = 0;
  double max_planning_units = 0;
  double max_planning_work = 0;  ///< computations × units at most (0: no bound of its own)
  int64_t sequence = 0;  ///< identifies the request: apply_plan() takes only the plan of the current one
};

/// Builds the DAG, parses the profile and plans its whole frontier (bounded by request.max_planning_units and
/// max_planning_work, checked before any planning). Errors: the planner's; kInvalidArgument naming the bound.
Result<std::shared_ptr<const LivePlan>> plan_live(const LivePlanRequest& request);

/// Plans a request, possibly from a cache: what LiveScheduler calls when a plan is needed.
using LivePlanProvider = std::function<Result<std::shared_ptr<const LivePlan>>(const LivePlanRequest&)>;

/// The bounded part of one job's state (see the file comment). Every call checks its input and leaves the
/// state unchanged on error; errors name the field (e.g. "rank: rank 3 is already registered") so that a
/// server can point at it.
class LiveState {
 public:
  /// Errors (kInvalidArgument "<field>: <problem>"): a degree < 1, world_size ≠ pp × dp × tp or above
  /// limits.max_world_size, fewer than 1 microbatch, more than limits.max_computations computations, a job
  /// whose data could exceed limits.max_data_bytes, invalid options or limits.
  static Result<LiveState> create(LiveJobInfo info, LiveOptions options, LiveLimits limits = {});

  /// Starts from a measured profile (canonical CSV, stored into `data`) instead of profiling: the job asks
  /// to be planned as soon as every rank is registered, and ranks must support the profile's clocks.
  /// kInvalidArgument if the profile does not parse, has fewer stages than pp_degree or more clocks than a
  /// rank may list. Only before the first rank registers (kState).
  Result<void> use_profile(const std::string& profile_csv, LiveData& data);

  /// Starts from a frontier card of the stage GPUs (joule/probe/card.hpp; `source` names it in logs): the
  /// sweep profiles only options.card_probe_clocks clocks (card_probe_indices()), fits every stage's forward
  /// and backward to the card's SM-clock curves and plans on the measured + predicted profile; where a fit's
  /// residual exceeds options.card_max_residual the sweep goes on over the remaining clocks as without a
  /// card (card_summary() says which path and why). The card is stored into `data`. Errors: kState after the
  /// first rank registered; kInvalidArgument with a given profile (nothing to profile) or a card without SM
  /// clock frontiers (KnobPrior::from_card()'s message).
  /// A residual over the threshold: "the card does not describe stage(s) …", with every computation's
  /// held-out and fit errors, in card_summary().
  Result<void> use_card(const probe::Card& card, const std::string& source, LiveData& data);

  /// Checks a rank's registration: its ranks within their degrees, its clocks (1 to
  /// limits.max_frequencies_per_rank, none twice, none zero), the given profile's clocks among them, and
  /// at least one clock shared with the ranks registered so far. The caller checks that the rank and its
  /// position are not taken (already_registered(), position_taken()). Errors: kInvalidArgument naming the
  /// field, kOutOfRange for clocks the job cannot use ("available_frequencies: ..."), kState once every
  /// rank is registered.
  Result<LiveRankPosition> check_registration(const LiveRankInfo& rank) const;
  /// Adds a rank check_registration() accepted (and the caller found free). Registering the last rank starts
  /// the warm-up, or with a given profile the planning (phase kPlanning, `data` gets its sample tables).
  void add_rank(const LiveRankInfo& rank, LiveData& data);
  /// @return the index of a rank's (dp, pp, tp) position, 0 to world_size − 1: what makes it unique.
  int position_index(const LiveRankPosition& rank) const;
  /// @return the same for a rank as it registers; nullopt if its ranks are outside the degrees.
  std::optional<int> position_index(const LiveRankInfo& rank) const;
  /// The refusals of a rank or position already taken (kState / kInvalidArgument).
  static Error already_registered(int rank);
  static Error position_taken(const LiveRankPosition& rank, int holder);
  /// The refusal of a second result of one round (kState).
  Error already_reported(int rank) const;
  /// The refusal of a rank that is not part of the job (kNotFound).
  Error not_a_rank(int rank) const;
  /// The answer while ranks are missing (kState), listing `missing` (the first ones suffice).
  Error registration_pending(const std::vector<int>& missing) const;

  /// @return whether schedules are served now (every rank registered, no plan awaited).
  bool serving() const;
  /// @return the schedule `rank` runs in the current round (`data` holds the plans once planned). Errors:
  /// kState while ranks are missing or a plan is awaited (the message says which; wait and ask again).
  Result<LiveSchedule> schedule(const LiveRankPosition& rank, const LiveData& data) const;

  /// Checks a result of registered `rank`, which has not reported this round yet: its round number if
  /// it gives one (kState: "rank 3 reported round 4, but the job is at round 5"), then lengths against the
  /// round's schedule and every value (finite, ≥ 0, a time > 0; a computation within a day and 1e9 J, an
  /// iteration the same; naming the rank and field). kState while the job does not take results.
  Result<void> check_result(const LiveResult& result, const LiveRankPosition& rank) const;
  /// Counts a result check_result() accepted (the caller keeps it as a LiveReport). @return true if the
  /// round now has every rank's result: then call complete_round() with all of them.
  bool count_report();
  /// Observes the completed round from its reports (one per rank): profile samples, the sweep, stragglers;
  /// then starts the next round, or asks for a plan (phase kPlanning). A round whose reports cannot be
  /// used is run again (rerun_reason() says why, the round number moves on). kInvalidArgument if `reports`
  /// is not one report per rank of this round.
  Result<void> complete_round(const std::vector<LiveReport>& reports, LiveData& data);
  /// @return why the last completed round is run again; empty if it was not.
  const std::string& rerun_reason() const { return rerun_reason_; }

  /// @return what to plan in phase kPlanning, nullopt otherwise.
  std::optional<LivePlanRequest> planning(const LiveData& data) const;
  /// Applies the plan of planning request `sequence`: every pipeline gets the fastest plan (or, in straggler
  /// mode, the least energy at T'), and the next round starts. kState if the job no longer waits for that
  /// request; kInvalidArgument for a plan of another shape; select_for_target()'s errors.
  Result<void> apply_plan(const LivePlan& plan, int64_t sequence, LiveData& data);
  /// Planning request `sequence` failed: the job runs every computation at the highest clock from now on
  /// (phase kFailed) and failure() says why. Ignored if the job no longer waits for that request.
  void fail_planning(int64_t sequence, std::string why);
  /// @return why planning failed (phase kFailed), else empty.
  const std::string& failure() const { return failure_; }

  const LiveJobInfo& info() const { return info_; }
  const LiveOptions& options() const { return options_; }
  const LiveLimits& limits() const { return limits_; }
  LivePhase phase() const { return phase_; }
  int64_t round() const { return round_; }
  int registered() const { return registered_; }
  /// @return the results counted this round.
  int reported() const { return reported_; }
  /// @return the clocks the sweep profiles (those every rank supports), descending; while ranks register,
  /// those the registered ones share.
  const std::vector<uint32_t>& frequencies_mhz() const { return frequencies_mhz_; }
  /// @return how many of frequencies_mhz() have been (or are being) profiled.
  size_t profiled_frequencies() const { return sweep_next_; }
  /// @return the measured blocking power per stage, W (or the default) once planned.
  double p_blocking_w() const { return p_blocking_w_; }
  /// @return the straggler pace T' every non-straggling pipeline is planned for, s; nullopt: none.
  std::optional<double> straggler_time_s() const { return straggler_time_s_; }
  /// @return per data-parallel pipeline, whether it runs the straggler's pace (true) or the fastest plan.
  const std::vector<bool>& slowed_pipelines() const { return slowed_; }
  /// @return the prediction of the fastest plan once planned.
  const std::optional<LivePrediction>& fastest_prediction() const { return fastest_; }
  /// @return the prediction of what slowed pipelines run, in straggler mode.
  const std::optional<LivePrediction>& slowed_prediction() const { return slowed_prediction_; }
  /// @return iterations the job ran in profiling (warm-up included) before planning; 0 until planned.
  int64_t profiling_iterations() const { return profiling_iterations_; }
  /// @return the warm-up rounds completed so far.
  int64_t warmup_rounds() const { return warmup_rounds_; }
  /// @return ranks that reported thermally_steady = false in the last completed warm-up round, ascending,
  /// at most 32 of them (unsteady_count() says how many there were).
  const std::vector<int>& unsteady_ranks() const { return unsteady_ranks_; }
  int unsteady_count() const { return unsteady_count_; }
  /// @return true if profiling started after max_warmup_rounds with some rank still not steady.
  bool warmup_gave_up() const { return warmup_gave_up_; }
  /// @return a number that changes whenever LiveData changes: store the data with it, cache by it.
  int64_t data_version() const { return data_version_; }
  /// @return whether the job starts from a card (use_card()), its name, the sweep positions of the clocks
  /// it profiles first (indices into frequencies_mhz(), once every rank registered), whether the card
  /// failed its check and the sweep went on (fallback), and the log line of the decision ("" until made).
  bool card_given() const { return card_given_; }
  const std::string& card_source() const { return card_source_; }
  const std::vector<size_t>& card_clocks() const { return card_clocks_; }
  bool card_fallback() const { return card_fallback_; }
  const std::string& card_summary() const { return card_summary_; }
  /// @return whether the job was given a profile (use_profile()).
  bool profile_given() const { return profile_given_; }
  /// @return an upper bound of the JSON text of one rank's result in this job (the largest round), bytes:
  /// what a server's body limit for results must allow.
  size_t max_result_bytes() const;

  /// Records when the job last changed (the caller's clock, ns since the Unix epoch): what idle expiry
  /// reads. The scheduler itself has no clock.
  void touch(int64_t unix_ns) { touched_unix_ns_ = unix_ns; }
  int64_t touched_unix_ns() const { return touched_unix_ns_; }
  /// Records who plans the current request and since when, so that other processes sharing the state leave
  /// it to them (until the claim is stale). Cleared when the plan is applied or fails.
  void claim_planning(std::string owner, int64_t unix_ns) {
    planner_ = std::move(owner);
    planner_since_unix_ns_ = unix_ns;
  }
  const std::string& planner() const { return planner_; }
  int64_t planner_since_unix_ns() const { return planner_since_unix_ns_; }

  /// @return kParse naming what does not match if `data` is not this state's (its version, its samples'
  /// stages and clocks, its plans' length): a store's two documents out of step.
  Result<void> check_data(const LiveData& data) const;

  /// Serialises the state (JSON text, bounded as the class comment says).
  std::string dump() const;
  /// Parses what dump() wrote. kParse naming what is wrong.
  static Result<LiveState> parse(std::string_view text);

 private:
  LiveState() = default;
  std::vector<std::pair<std::string, uint32_t>> profiling_list(const PipelineDag& dag, int pp_rank) const;
  size_t profiling_slot(int microbatch) const;
  int iterations_of_round() const;
  Result<void> observe(const std::vector<LiveReport>& reports, LiveData& data);
  void observe_profile(const std::vector<LiveReport>& reports, LiveData& data);
  bool sweep_finished(const LiveData& data) const;
  Result<void> request_plan(const std::string& profile_csv, LiveData& data);
  void observe_stragglers(const std::vector<LiveReport>& reports);
  void next_round();
  void start_sweep_round();
  /// The clock index (into frequencies_mhz_) that sweep position `position` profiles: the card's clocks
  /// first, then the others from the highest down; without a card the position itself.
  size_t sweep_clock(size_t position) const;
  /// How many sweep positions the sweep has: the card's clocks until the card failed its check, else all.
  size_t sweep_length() const;
  /// Per clock index, whether it has been (or is being) profiled.
  std::vector<bool> swept_clocks() const;
  Result<void> observe_card(LiveData& data);
  Result<void> plan_measured(LiveData& data);
  Result<void> plan_profile(const Profile& profile, LiveData& data);

  LiveJobInfo info_;
  LiveOptions options_;
  LiveLimits limits_;
  LivePhase phase_ = LivePhase::kRegistering;
  int64_t round_ = 0;
  int registered_ = 0;
  int reported_ = 0;
  std::vector<uint32_t> frequencies_mhz_;  // shared by the ranks registered so far; descending once all are
  bool profile_given_ = false;
  bool card_given_ = false;
  bool card_fallback_ = false;         // the card failed its check: the sweep goes on as without a card
  std::vector<uint32_t> profile_mhz_;  // the given profile's clocks: every rank must support them
  std::string card_source_;
  std::vector<size_t> card_clocks_;  // ascending indices into frequencies_mhz_, once every rank registered
  std::string card_summary_;
  size_t sweep_next_ = 0;         // frequencies [0, sweep_next_) profiled or being profiled
  size_t round_frequencies_ = 0;  // how many the current profiling round sweeps, from sweep_next_ − it
  double idle_energy_j_ = 0;      // Σ over ranks and iterations of energy outside computations
  double idle_time_s_ = 0;
  double busy_time_s_ = 0;
  double p_blocking_w_ = 0;
  double unit_time_s_ = 0;
  int64_t profiling_iterations_ = 0;
  int64_t warmup_rounds_ = 0;
  std::vector<int> unsteady_ranks_;  // of the last completed warm-up round (the first 32)
  int unsteady_count_ = 0;
  bool warmup_gave_up_ = false;
  // Planned: the predictions and own times of the fastest plan and of the slowed one (straggler mode).
  std::optional<LivePrediction> fastest_;
  std::optional<LivePrediction> slowed_prediction_;
  std::vector<bool> slowed_;
  std::optional<double> straggler_time_s_;
  int enter_streak_ = 0;
  int exit_streak_ = 0;
  int retarget_streak_ = 0;
  int64_t planning_sequence_ = 0;
  bool planning_after_round_ = false;  // the awaited plan starts the next round (not the first)
  std::string failure_;
  std::string rerun_reason_;
  int64_t data_version_ = 0;
  int64_t touched_unix_ns_ = 0;
  std::string planner_;
  int64_t planner_since_unix_ns_ = 0;

  friend class LiveScheduler;
  friend struct LiveStateCodec;
  friend struct LiveSchedulerCodec;
};

/// The whole scheduler of one job in memory: LiveState with its ranks, this round's reports and its data,
/// planning synchronously through a LivePlanProvider. For a single process (and the tests); `joule serve`
/// keeps the same parts in its store instead.
class LiveScheduler {
 public:
  /// LiveState::create()'s errors.
  static Result<LiveScheduler> create(LiveJobInfo info, LiveOptions options, LiveLimits limits = {});
  /// LiveState::use_profile().
  Result<void> use_profile(const std::string& profile_csv);
  /// LiveState::use_card().
  Result<void> use_card(const probe::Card& card, const std::string& source);

  /// Registers a rank. Errors: LiveState::check_registration()'s, already_registered(), position_taken().
  /// Registering the last rank of a job with a given profile plans it through `provider`; if that fails,
  /// the job runs at the highest clock (phase kFailed, failure() says why).
  Result<void> register_rank(const LiveRankInfo& rank, const LivePlanProvider& provider);
  /// @return the ranks not registered yet, ascending.
  std::vector<int> missing_ranks() const;
  bool all_registered() const { return state_.phase() != LivePhase::kRegistering; }

  /// @return the schedule `rank` runs in the current round. kNotFound for a rank that is not registered;
  /// kState while ranks are missing (naming them).
  Result<LiveSchedule> schedule(int rank) const;
  /// @return whether `rank` already reported the current round (it then waits for the next round).
  bool has_reported(int rank) const;
  /// Takes a rank's report of the current round. When it is the last one, the round is observed and, if a
  /// plan is needed, planned through `provider` (if that fails, see LiveState::fail_planning()).
  /// @return true if this report completed the round. Errors, state unchanged: kNotFound (unregistered
  /// rank), kState (ranks missing; already reported this round; another round's result),
  /// LiveState::check_result()'s.
  Result<bool> report(const LiveResult& result, const LivePlanProvider& provider);

  const LiveState& state() const { return state_; }
  const LiveData& data() const { return data_; }
  /// @return the registered ranks' positions, by rank.
  std::vector<LiveRankPosition> ranks() const;
  /// @return this round's reports so far, by rank.
  std::vector<LiveReport> reports() const;
  const LiveJobInfo& info() const { return state_.info(); }
  const LiveOptions& options() const { return state_.options(); }
  LivePhase phase() const { return state_.phase(); }
  int64_t round() const { return state_.round(); }
  const std::vector<uint32_t>& frequencies_mhz() const { return state_.frequencies_mhz(); }
  size_t profiled_frequencies() const { return state_.profiled_frequencies(); }
  /// @return the measured (or given) profile (canonical CSV) once planned.
  const std::optional<std::string>& profile_csv() const { return data_.profile_csv; }
  double p_blocking_w() const { return state_.p_blocking_w(); }
  std::optional<double> straggler_time_s() const { return state_.straggler_time_s(); }
  const std::vector<bool>& slowed_pipelines() const { return state_.slowed_pipelines(); }
  int64_t profiling_iterations() const { return state_.profiling_iterations(); }
  int64_t warmup_rounds() const { return state_.warmup_rounds(); }
  const std::vector<int>& unsteady_ranks() const { return state_.unsteady_ranks(); }
  bool warmup_gave_up() const { return state_.warmup_gave_up(); }
  const std::string& failure() const { return state_.failure(); }

  /// Serialises everything (JSON text).
  std::string dump() const;
  /// Parses what dump() wrote. kParse naming what is wrong.
  static Result<LiveScheduler> parse(std::string_view text);

 private:
  LiveScheduler() = default;
  void plan_now(const LivePlanProvider& provider);

  LiveState state_;
  LiveData data_;
  std::map<int, LiveRankPosition> ranks_;  // by rank
  std::map<int, int> positions_;           // position index → rank
  std::map<int, LiveReport> reports_;      // this round's, by rank

  friend struct LiveSchedulerCodec;
};

}  // namespace joule::plan
