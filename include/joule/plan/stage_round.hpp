// SPDX-License-Identifier: Apache-2.0
// joule/plan/stage_round.hpp — what one rank of a pipeline-parallel job checks before it runs a pipeline
// frequency server's schedules (Zeus's pipeline-frequency protocol, as joule.PipelineFrequencyOptimizer
// speaks it): its place in the job's topology, and each round's `GET /schedule` body; without a server, the
// plan it follows instead.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/plan/local_plan.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/plan/planner.hpp"

namespace joule::plan {

/// A rank's place in a job of dp_degree × pp_degree × tp_degree = world_size ranks (Zeus's arguments).
struct StageTopology {
  int64_t rank = 0;     ///< global rank
  int64_t dp_rank = 0;  ///< data-parallel pipeline
  int64_t pp_rank = 0;  ///< pipeline stage
  int64_t tp_rank = 0;  ///< tensor-parallel rank within the stage
  int64_t dp_degree = 1;
  int64_t pp_degree = 1;
  int64_t tp_degree = 1;
  int64_t world_size = 1;
};

/// @return kInvalidArgument unless every degree is ≥ 1 ("pp_degree must be ≥ 1, got 0"), they multiply to
/// world_size ("world_size 6 is not dp_degree × pp_degree × tp_degree = 1 × 4 × 1"), and every rank is in
/// range ("pp_rank 4 is not in [0, 4)"), checked in that order.
Result<void> check_topology(const StageTopology& topology);

/// One round of a server's schedule for one rank: one iteration's ordered (instruction, MHz) (MHz
/// kKeepClockMhz = 0: leave the clock as it is), run for `iterations` iterations (none: until further
/// notice).
struct RoundSchedule {
  std::vector<std::pair<Instruction, uint32_t>> frequencies;
  int64_t round = 0;                  ///< joule extension: the server's round (0 if absent or not an integer)
  std::string phase = "planned";      ///< 'warmup', 'profiling' or 'planned' (any text the server sent)
  std::optional<int64_t> iterations;  ///< ≥ 1; none: run it until further notice
  nlohmann::json predicted;           ///< the plan's predicted figures (an object), or null

  /// Checks and reads a `GET /schedule` body for rank `rank`. `quoted` is the body's text as errors quote
  /// it (its first 300 bytes), so that they show what the sender sent.
  /// @return kInvalidArgument "<source>: <what> (got <quoted>)" when it is not an object with a
  /// 'frequencies' list, names another rank ("the schedule is for rank 2, not this rank 0"), an entry is not
  /// ['forward' or 'backward', integer MHz ≥ 0] ("frequencies[3] must be ['forward' or 'backward', MHz ≥
  /// 0]"), the list is empty ("the schedule has no instruction"), or 'iterations' is neither null nor an
  /// integer ≥ 1 ("'iterations' must be a positive integer or null").
  static Result<RoundSchedule> from_json(const nlohmann::json& body, int64_t rank, std::string_view source,
                                         std::string_view quoted);
  /// from_json() of a JSON text, which errors quote; text that does not parse is not an object.
  static Result<RoundSchedule> parse(std::string_view text, int64_t rank, std::string_view source);
};

/// One rank's measurements of a round, as its result body reports them (Zeus's ProfilingResult): per
/// iteration, its time and energy and those of each of its instructions, in the order they ran.
class RoundRecorder {
 public:
  /// Starts an iteration: forgets the instructions recorded since the last one began.
  void begin_iteration();
  /// Records one instruction of the iteration: its time, s, and energy, J.
  void record(Instruction instruction, double time_s, double energy_j);
  /// Adds the iteration (its time, s, and energy, J, and its instructions') to the round.
  void end_iteration(double iteration_time_s, double iteration_energy_j);
  /// @return the round's result body, {"rank", "iter_time": [s], "iter_energy": [J], "time_breakdown":
  /// {"forward": [[s per instruction] per iteration], "backward": …}, "energy_breakdown": …}, with joule's
  /// "round" and "thermally_steady" when given; and starts the next round empty.
  nlohmann::json take_result(int64_t rank, std::optional<int64_t> round,
                             std::optional<bool> thermally_steady);

 private:
  nlohmann::json round_ = nlohmann::json::object();
  std::array<std::vector<double>, 2> times_s_;  ///< this iteration's, forward then backward
  std::array<std::vector<double>, 2> energies_j_;
};

/// @return the profile at a path, or in `path_or_csv` itself if it holds a line break (CSV text). Errors:
/// Profile::read()'s or Profile::parse()'s.
Result<Profile> load_profile(const std::string& path_or_csv);

/// Where a stage runtime without a server takes its plan from.
struct StagePlanRequest {
  std::optional<std::string> profile;    ///< load_profile()'s argument: plan here (or evaluate a plan file)
  std::optional<std::string> plan_path;  ///< a plan file of `joule plan --plan-out`
  std::optional<int> stages;             ///< the job's pp_degree; none: the profile's, or the file's
  std::optional<int> microbatches;       ///< needed to plan from a profile; checked against a plan file
  std::string schedule = "1f1b";         ///< the pipeline schedule to plan for
  PlannerOptions options;                ///< p_blocking_w (W) also evaluates a plan file; unit_time_s
  std::optional<double> target_time_s;   ///< plan for this iteration time, s (a profile only)
  std::optional<double> slowdown;        ///< or for slowdown × the fastest time (a profile only)
};

/// @return the plan file's (read_plan_file(), evaluated with the profile if given), else plan_locally()'s
/// plan of the profile. kInvalidArgument with neither ("server_url=None needs profile= (plan here) or plan=
/// (a plan file)"), a target or slowdown with a plan file, a plan file of another number of stages ("p.json
/// plans 4 stages, but pp_degree is 2") or microbatches, or a profile without microbatches; and the errors
/// of load_profile(), read_plan_file() and plan_locally().
Result<LocalPlan> plan_stages(const StagePlanRequest& request);

}  // namespace joule::plan
