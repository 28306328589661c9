// SPDX-License-Identifier: Apache-2.0
// joule/plan/pipeline.hpp — pipeline-parallel training as data: per-computation profiles, the iteration's
// computation DAG (1F1B or GPipe), frequency plans and their time and energy (Perseus, SOSP'24).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::plan {

/// What a computation does.
enum class Instruction { kForward, kBackward };

/// @return "forward" or "backward".
std::string_view to_string(Instruction instruction);
/// @return the instruction named `text` ("forward" or "backward"), or kParse listing both.
Result<Instruction> parse_instruction(std::string_view text);

/// One way to run a computation: at an SM clock, it takes `time_s` and uses `energy_j`.
/// Plausibility bounds of one computation's time and energy, far above real ones (a microbatch's forward or
/// backward takes milliseconds to seconds and joules to kilojoules): a value past them is a unit mistake or
/// garbage, and would otherwise make the planner's tables and walk enormous (1e300 s once took 55 s and
/// 10 GB). Profiles and the live scheduler's measurements are held to them.
inline constexpr double kMaxProfileTimeS = 86'400;  ///< one day
inline constexpr double kMaxProfileEnergyJ = 1e9;   ///< 278 kWh

struct ProfileOption {
  uint32_t frequency_mhz = 0;
  double time_s = 0;    ///< > 0
  double energy_j = 0;  ///< > 0
};

/// Measured time and energy of one microbatch's forward and backward on every stage at every SM clock. All
/// microbatches of a stage share its profile.
class Profile {
 public:
  /// Parses CSV with columns `stage,instruction,frequency_mhz,time_s,energy_j` (or Perseus's and lowtime's
  /// `frequency,time,energy`; profile_columns() in profile_codec.hpp). Every (stage, instruction)
  /// of stages 0 … S−1 must have the same set of frequencies. Errors (kParse, naming the source, line and
  /// field, quoting the input as printable text): a malformed or non-positive value, a time over a day
  /// (86400 s) or an energy over 1e9 J (no microbatch comes near: a unit mistake or garbage), an unknown
  /// instruction, a duplicate (stage, instruction, frequency) row, a (stage, instruction, frequency) missing
  /// while other rows have that frequency, more than 1024 different frequencies, a stage missing between 0
  /// and the largest stage, an empty profile.
  static Result<Profile> parse(std::string_view csv_text, const std::string& source);
  /// Reads (bounded by read_limits::kPipelineProfile, 16 MiB) and parses a file (errors as parse(), plus
  /// read_text_file()'s naming the path).
  static Result<Profile> read(const std::string& path);
  /// Builds a profile from options (tests, synthetic profiles); same validation as parse().
  /// @param options options[stage][0 = forward, 1 = backward].
  /// Errors are kInvalidArgument and name the stage, instruction and frequency (there are no lines).
  static Result<Profile> from_options(std::vector<std::array<std::vector<ProfileOption>, 2>> options);

  int stage_count() const { return static_cast<int>(options_.size()); }
  /// @return the options of (stage, instruction), fastest clock first (frequency descending); their i-th
  /// entry runs at frequencies_mhz()[i]. @throws joule::Exception (kOutOfRange) for a stage outside [0, S).
  const std::vector<ProfileOption>& options(int stage, Instruction instruction) const;
  /// @return every frequency, descending (the same for every stage and instruction).
  const std::vector<uint32_t>& frequencies_mhz() const { return frequencies_mhz_; }

 private:
  std::vector<std::array<std::vector<ProfileOption>, 2>> options_;
  std::vector<uint32_t> frequencies_mhz_;
};

/// The pipeline schedule (the order of computations on each stage).
enum class Schedule {
  k1F1B,   ///< synchronous 1F1B (PipeDream-flush, DeepSpeed): warm-up forwards, then one forward one backward
  kGPipe,  ///< all forwards, then all backwards (last microbatch first)
};

/// @return "1f1b" or "gpipe". @see parse_schedule
std::string_view to_string(Schedule schedule);
Result<Schedule> parse_schedule(std::string_view text);

/// One computation of an iteration: the forward or backward of one microbatch on one stage.
struct Computation {
  int stage = 0;
  Instruction instruction = Instruction::kForward;
  int microbatch = 0;

  friend bool operator==(const Computation&, const Computation&) = default;
};

/// @return e.g. "stage 2 forward of microbatch 3" (for messages).
std::string to_string(const Computation& computation);
/// @return e.g. "F3" or "B3" (instruction initial and microbatch; for timelines).
std::string short_label(const Computation& computation);

/// The computations of one iteration and their dependencies (activity on node). Node ids index
/// `computations`. Edges: consecutive computations of a stage (one GPU runs one at a time), F(s,m) →
/// F(s+1,m), and B(s+1,m) → B(s,m). Communication takes no time in this model.
struct PipelineDag {
  int stages = 0;
  int microbatches = 0;
  Schedule schedule = Schedule::k1F1B;
  std::vector<Computation> computations;
  std::vector<std::vector<int>> stage_order;  ///< per stage, node ids in execution order
  std::vector<std::pair<int, int>> edges;     ///< (from, to), from before to
  /// Derived from `edges` by build_pipeline() (or index_dag() after editing a DAG by hand) so that
  /// evaluation does not rebuild them on every call: node ids in a topological order, and every node's
  /// direct predecessors as `predecessors[predecessor_offsets[v] .. predecessor_offsets[v + 1])`.
  /// Functions that find them missing or stale (sizes not matching) compute them afresh for that call.
  std::vector<int> topological_order;
  std::vector<int> predecessor_offsets;
  std::vector<int> predecessors;
  /// @return the id of (stage, instruction, microbatch) in build_pipeline()'s layout:
  /// `stage·2M + (0 forward | M backward) + microbatch`. @throws joule::Exception (kOutOfRange) for a
  /// stage or microbatch outside the DAG.
  int node(int stage, Instruction instruction, int microbatch) const;
};

/// Builds the DAG of `stages` × `microbatches`. kInvalidArgument if either is < 1, or if
/// 2·stages·microbatches exceeds 2^26 computations (no real pipeline comes close; the limit keeps node ids
/// and edge counts in int).
Result<PipelineDag> build_pipeline(int stages, int microbatches, Schedule schedule);

/// Recomputes `topological_order`, `predecessor_offsets` and `predecessors` from `edges`.
/// kInvalidArgument if an edge names a node outside `computations` or the edges form a cycle (the message
/// names a computation on it).
Result<void> index_dag(PipelineDag& dag);

/// A frequency for every computation (indexed by node id), MHz.
using FrequencyPlan = std::vector<uint32_t>;

/// Time and energy of one iteration under a plan.
struct PlanCost {
  double time_s = 0;    ///< the critical path: longest chain of computation times
  double energy_j = 0;  ///< Σ computation energy + p_blocking_w × (stages × time − Σ computation time)
};

/// When each computation runs (as soon as its dependencies allow), for timelines and the executor.
struct Timeline {
  std::vector<double> start_s;
  std::vector<double> end_s;
  double time_s = 0;
};

/// @return the ASAP timeline of the DAG with these computation times (indexed by node id).
/// @throws joule::Exception (kInvalidArgument) if `times_s` does not have one entry per computation or the
/// DAG's edges form a cycle.
Timeline schedule_times(const PipelineDag& dag, const std::vector<double>& times_s);

/// @return the option of `profile` for a computation at a frequency; kNotFound naming the computation and
/// the frequency if the profile has no such frequency.
Result<ProfileOption> option_at(const Profile& profile, const Computation& computation,
                                uint32_t frequency_mhz);

/// @return the time and energy of one iteration with `plan`, evaluated on the profile (Perseus §1.5).
/// kInvalidArgument if the plan's size is not the DAG's or the profile has fewer stages; kNotFound for a
/// frequency the profile lacks. Also kInvalidArgument for a negative or non-finite `p_blocking_w`.
/// Cost: O(nodes · log frequencies + edges) with no allocation when the DAG's index (topological_order,
/// predecessors) is present; safe to call from several threads at once.
Result<PlanCost> evaluate(const PipelineDag& dag, const Profile& profile, const FrequencyPlan& plan,
                          double p_blocking_w);

/// Checks what every pipeline computation needs: a profile with at least the DAG's stages, and a finite,
/// non-negative blocking power. @return kInvalidArgument such as "the profile has 2 stages but the pipeline
/// has 3" or "the blocking power must be finite and non-negative, got -1 W".
Result<void> check_inputs(const PipelineDag& dag, const Profile& profile, double p_blocking_w);

/// @return the plan that runs every computation at `frequency_mhz`.
FrequencyPlan uniform_plan(const PipelineDag& dag, uint32_t frequency_mhz);

}  // namespace joule::plan
