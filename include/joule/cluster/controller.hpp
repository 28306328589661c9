// SPDX-License-Identifier: Apache-2.0
// joule/cluster/controller.hpp — the cluster autopilot's state machine: jobs register with their GPUs and
// frontiers, the cap and the carbon forecast change, nodes go silent, and each replan() returns every GPU's
// power limit (docs/cluster.md, "The controller").
//
// The controller holds no clock, thread, store or connection: the caller passes the time (`now_s`, seconds
// on any clock of its own, the same for every call) and enforces the decision (through the node daemons).
// Each replan() reuses the library's two planners:
//
//   1. Nodes not heard from for longer than ControllerOptions::node_timeout_s are *silent*: their GPUs are
//      counted at their job's highest frontier limit, and that reserve is taken off the cap.
//   2. Deferrable training jobs are planned over the carbon forecast by plan_deferrable(), with the watts the
//      cap leaves once the silent reserve and every job that cannot wait (at its SLO floor or lowest limit)
//      are taken off. A job whose plan has running time now, or that is at risk of missing its deadline,
//      runs; the others wait, their GPUs paused at the job's lowest limit. Without a forecast every job runs.
//   3. The cap less the silent reserve and the paused GPUs is shared by allocate() among the jobs that run:
//      inference SLO floors first, then the watts where the frontiers say they buy the most throughput.
//
// A limit is a guarantee, so Σ limits (running, paused and silent GPUs) ≤ cap whenever replan() succeeds
// (unless ControllerOptions::degrade_slos had to place inference jobs below their floors, which the decision
// says). On an error nothing changes: the previous decision stands.
//
//   joule::cluster::Controller controller({.node_timeout_s = 30});
//   controller.set_cap(800'000);
//   controller.add_job({.id = "pretrain", .gpus = {{"n1", 0}, {"n1", 1}}, .frontier = {{300, 1.3}, {700,
//   1}}},
//                      now_s);
//   auto decision = controller.replan(now_s);  // decision->limits: one per GPU
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/cluster/allocator.hpp"
#include "joule/cluster/deferral.hpp"
#include "joule/core/error.hpp"

namespace joule::cluster {

/// One GPU of the cluster: a node's name and the GPU's index on it.
struct GpuRef {
  std::string node;  ///< the node's name (not empty)
  int index = 0;     ///< the GPU's index on the node (≥ 0)
  bool operator==(const GpuRef&) const = default;
  /// By node, then index (the order of ClusterDecision::limits).
  bool operator<(const GpuRef& other) const {
    return node != other.node ? node < other.node : index < other.index;
  }
};

/// @return "node:index", e.g. "n1:0".
std::string to_string(const GpuRef& gpu);

/// A job as it registers with the controller.
struct JobSpec {
  std::string id;                     ///< unique among the registered jobs (not empty)
  JobKind kind = JobKind::kTraining;  ///< inference jobs get their SLO floor before training gets a watt more
  std::vector<GpuRef> gpus;           ///< the GPUs it runs on, all at one limit (at least one; no repeats)
  double priority = 1;                ///< weight of its lost throughput (> 0)
  std::vector<FrontierPoint> frontier;  ///< per-GPU limit (W) → time of one unit of its work (s)
  std::optional<double> slo_floor_w;    ///< inference: the lowest per-GPU limit that holds its SLO, W
  /// Training work that may wait for cleaner hours, within `deadline_s`.
  bool deferrable = false;
  double deadline_s = 0;   ///< deferrable: latest finish, s on the caller's clock (absolute)
  double remaining_s = 0;  ///< deferrable: running time it still needs at full speed, s (≥ 0)
};

/// How the controller behaves where the cap is short or nodes stop answering.
struct ControllerOptions {
  /// A node not heard from for longer than this (s) is silent: its GPUs are counted at their maximum.
  double node_timeout_s = 30;
  /// When the cap (less the silent reserve and paused GPUs) is below the inference jobs' SLO floors: false
  /// refuses the re-plan with allocate()'s message; true places inference jobs below their floors and says
  /// so (ClusterDecision::degraded, each JobDecision's reason).
  bool degrade_slos = false;
  /// Passed to allocate() (AllocateOptions::exact_work_limit).
  size_t exact_work_limit = AllocateOptions{}.exact_work_limit;
  /// The version of the first decision (a new leader continues from the last version it knows of).
  uint64_t first_version = 1;
};

/// One GPU's setting.
struct GpuLimit {
  GpuRef gpu;
  std::string job_id;
  double power_limit_w = 0;  ///< W: the job's allocated limit; its lowest if paused; its highest if silent
  bool paused = false;       ///< a deferred job's GPU: it should not run the job's work now
  bool silent = false;       ///< on a silent node: the limit is what the controller counts, not a setting
};

/// One job's part of a decision.
struct JobDecision {
  std::string id;
  JobKind kind = JobKind::kTraining;
  double power_limit_w = 0;    ///< per GPU on a live node, W (0 when every GPU of the job is silent)
  double throughput_loss = 0;  ///< 1 − t(max)/t(limit) while it runs; 1 while paused
  bool paused = false;         ///< deferred: waits for cleaner hours
  bool at_risk = false;        ///< deferrable and its deadline cannot be met in cleaner hours: it runs now
  std::string reason;          ///< one line: why this limit ("at its SLO floor (450 W)", "deferred: …")
};

/// What replan() decided.
struct ClusterDecision {
  uint64_t version = 0;   ///< increases with every successful replan()
  double now_s = 0;       ///< the time it was made for, s on the caller's clock
  double cap_w = 0;       ///< the cluster's cap, W
  double reserved_w = 0;  ///< the silent nodes' GPUs at their maximum, W
  double paused_w = 0;    ///< the paused GPUs at their lowest limits, W
  /// Σ limits of every GPU on a live node, running or paused, W; allocated_w + reserved_w ≤ cap_w unless
  /// `degraded`.
  double allocated_w = 0;
  Allocation allocation;                      ///< allocate()'s result for the jobs that run now (live GPUs)
  std::vector<GpuLimit> limits;               ///< one per registered GPU, ordered by GPU
  std::vector<JobDecision> jobs;              ///< one per registered job, in registration order
  std::vector<std::string> silent_nodes;      ///< every known node silent now (with jobs or not), sorted
  std::vector<std::string> deferred_running;  ///< deferrable jobs that run now (at risk or not)
  std::vector<std::string> deferred_waiting;  ///< deferrable jobs paused for cleaner hours
  std::vector<std::string> at_risk;           ///< deferrable jobs whose deadline is at risk (they run)
  std::optional<DeferralPlan> deferral;       ///< plan_deferrable()'s plan, when there was a forecast
  std::optional<std::string> degraded;        ///< why SLO floors were not held (degrade_slos)
};

/// The cluster autopilot's state: jobs, cap, forecast and nodes; re-plans on demand. Not thread-safe: one
/// caller (the leader) drives it.
class Controller {
 public:
  /// Throws joule::Exception (kInvalidArgument) for a node timeout that is not a positive number.
  explicit Controller(ControllerOptions options = {});

  /// Registers a job at `now_s`; nodes it names that were never heard from count as heard from at `now_s`.
  /// Errors (kInvalidArgument), each naming the job: an empty or registered id ("job 'a' is already
  /// registered"); no GPU, a GPU listed twice, an empty node name or a negative index; a GPU another job
  /// holds
  /// ("job 'b' names GPU n1:0, which job 'a' holds"); the frontier, priority or SLO floor allocate() refuses
  /// (not monotone, in mW or kW, …: its message); a deferrable job that is not training, whose deadline has
  /// passed ("job 'a': its deadline passed 120 s ago: …") or whose remaining time is negative.
  Result<void> add_job(JobSpec spec, double now_s);

  /// Unregisters a job (it ended): its GPUs and watts go back. Error: kNotFound ("no job 'x' is registered").
  Result<void> remove_job(std::string_view id);

  /// A deferrable job's running time still needed at full speed, s (≥ 0). Errors: kNotFound for an unknown
  /// job; kInvalidArgument for a job that is not deferrable or a negative or non-finite time.
  Result<void> update_progress(std::string_view id, double remaining_s);

  /// The cluster's power cap, W (> 0, finite; kInvalidArgument otherwise). A cap below what the jobs need
  /// is accepted here and refused by replan() (see ControllerOptions::degrade_slos).
  Result<void> set_cap(double cap_w);

  /// The carbon forecast: consecutive slots from `start_s` (s on the caller's clock); each slot's
  /// `available_w` is ignored (the controller fills it in). Before `start_s` the first slot's intensity
  /// holds; once the last slot ends, there is no forecast. Errors (kInvalidArgument): no slot, a start that
  /// is not finite, a slot whose length is not positive or whose intensity is negative or not a number.
  Result<void> set_forecast(std::vector<ForecastSlot> slots, double start_s);

  /// Drops the forecast: every deferrable job runs.
  void clear_forecast();

  /// The node answered at `now_s` (its silence, if any, ends). Error (kInvalidArgument): an empty name.
  Result<void> heard_from(std::string_view node, double now_s);

  /// Every GPU's limit at `now_s` (see the file comment). Errors: kState when no cap was set; kOutOfRange
  /// when the cap, less the silent reserve and the paused GPUs, is below the running jobs' floors or lowest
  /// limits (allocate()'s message, prefixed by what was taken off the cap when anything was), or when the
  /// reserve and the paused GPUs alone leave nothing ("the cap of 600 W is 700 W short of the silent nodes'
  /// reserve (700 W: n2), …"). Throws joule::Exception (kInvalidArgument) for a `now_s` that is not finite (a
  /// clock bug).
  Result<ClusterDecision> replan(double now_s);

  size_t job_count() const { return jobs_.size(); }
  std::optional<double> cap_w() const { return cap_w_; }
  /// The version the next successful replan() returns.
  uint64_t next_version() const { return next_version_; }

 private:
  struct Job {
    JobSpec spec;
    double lowest_w = 0;      // the frontier's lowest limit
    double highest_w = 0;     // its highest (a silent GPU's count)
    double floor_w = 0;       // the lowest limit at or above the SLO floor (inference), else lowest_w
    double full_speed_w = 0;  // the lowest limit at which it is fastest
  };

  ControllerOptions options_;
  std::vector<Job> jobs_;                                    // registration order
  std::map<GpuRef, std::string> holders_;                    // GPU → job id
  std::map<std::string, double, std::less<>> last_heard_s_;  // node → when it was last heard from
  std::optional<double> cap_w_;
  std::vector<ForecastSlot> forecast_;
  double forecast_start_s_ = 0;
  uint64_t next_version_ = 1;
};

}  // namespace joule::cluster
