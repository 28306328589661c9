// SPDX-License-Identifier: Apache-2.0
// joule/plan/runtime.hpp — running a pipeline frequency plan: a per-stage controller that locks the GPU's SM
// clock before every computation (Zeus' pipeline-frequency-optimizer client, Perseus §3), itself or through a
// clock applier thread, and an executor that runs whole iterations of a pipeline DAG on simulated GPUs and
// measures them.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/settings_guard.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/plan/clock_applier.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// A planned frequency of 0 means "leave the SM clock as it is" (as in Zeus' schedules).
inline constexpr uint32_t kKeepClockMhz = 0;

/// One computation of a stage as its frequency plan runs it.
struct PlannedComputation {
  Instruction instruction = Instruction::kForward;
  int microbatch = 0;
  uint32_t frequency_mhz = 0;  ///< SM clock to lock before it starts, MHz; kKeepClockMhz: no change
};

/// One stage's planned computations for one iteration, in execution order.
using StageSchedule = std::vector<PlannedComputation>;

/// @return "forward of microbatch 3" (the wording of the controller's unsupported-clock message).
std::string describe(Instruction instruction, int microbatch);

/// @return per stage, its computations in the DAG's execution order with their planned frequencies.
/// kInvalidArgument if the plan's size differs from the DAG's number of computations.
Result<std::vector<StageSchedule>> stage_schedules(const PipelineDag& dag, const FrequencyPlan& plan);

/// @return a stage's schedule given as (instruction, MHz) in execution order (Zeus' wire form, which has no
/// microbatches): the k-th forward, and the k-th backward, is microbatch k, as in every schedule joule
/// builds.
StageSchedule schedule_from_instructions(const std::vector<std::pair<Instruction, uint32_t>>& entries);

/// How a FrequencyController locks clocks and names itself.
struct FrequencyControllerOptions {
  /// Also reset the lock on SIGINT/SIGTERM/SIGHUP (false for simulated GPUs).
  bool restore_on_signals = true;
  /// Lock on a thread of the controller's own (a ClockApplier) instead of in begin(): begin() and
  /// prepare_next() only post the clock, so the stage's thread makes no device call; wait_applied() blocks
  /// until the posted clocks are locked, and a failed lock is returned by the next call.
  bool asynchronous = false;
  /// Names the controller in its out-of-step errors ("rank 3 (stage 3)"); empty: the GPU's label.
  std::string label;
  /// The call that ends an iteration, as the caller's users know it (named when it was missed).
  std::string end_call = "end_iteration()";
  /// The owner the controller's SettingsGuard logs.
  std::string owner = "frequency controller";
};

/// Locks one GPU's SM clock to the planned frequency before each of its stage's computations.
///
/// The training loop calls begin() before every forward and backward and end_iteration() after the
/// iteration. The controller checks every call against the plan, so a loop that has drifted out of step
/// with its plan gets an error instead of silently running computations at the wrong clocks. It calls the
/// device only when the frequency changes (clock locks are not free). It locks through a
/// device::SettingsGuard, so the clock lock is reset on destruction if it ever locked one, at normal
/// process exit and (unless created with restore_on_signals = false) on SIGINT/SIGTERM/SIGHUP: a GPU is
/// never left locked. If the process lives on after such a signal, the next begin() locks again.
///
/// Synchronous (the default), begin() locks the clock itself. Asynchronous
/// (FrequencyControllerOptions::asynchronous), a ClockApplier thread locks it: begin() posts the clock, and
/// prepare_next(), called when a computation ends, posts the next one's early so that the lock usually
/// lands while the stage waits for its input.
///
/// Not thread-safe: use one controller per GPU from the thread that drives that GPU's computations (only
/// wait_applied(), stats() and close() may be called from another thread; close() then makes that thread's
/// next call fail).
class FrequencyController {
 public:
  /// Checks every planned frequency against the GPU's supported SM clocks. Does not touch the clock yet.
  /// @return kOutOfRange naming the first unsupported frequency, its computation and the nearest supported
  /// clocks; the device's error (code and message unchanged) if it cannot list its clocks.
  /// @param restore_on_signals also reset the lock on SIGINT/SIGTERM/SIGHUP (false for simulated GPUs).
  static Result<FrequencyController> create(device::Gpu& gpu, StageSchedule schedule,
                                            bool restore_on_signals = true);
  /// As above, with every option.
  static Result<FrequencyController> create(device::Gpu& gpu, StageSchedule schedule,
                                            FrequencyControllerOptions options);

  /// Stops the applier thread (asynchronous) and resets the GPU's SM clock lock if this controller locked
  /// it; a failure is logged, not thrown.
  ~FrequencyController();
  FrequencyController(FrequencyController&& other) noexcept;
  FrequencyController& operator=(FrequencyController&&) = delete;
  FrequencyController(const FrequencyController&) = delete;
  FrequencyController& operator=(const FrequencyController&) = delete;

  /// Announces the next computation and locks (asynchronous: posts) the SM clock to its planned frequency
  /// (only if that differs from the clock this controller last set). Errors, after which the plan does not
  /// advance: kState if `instruction`/`microbatch` is not the next planned computation or the plan is used
  /// up (the message names what was expected and what was got), or if the controller is closed; the
  /// device's error, code and message unchanged, if locking fails (e.g. kPermissionDenied; asynchronous:
  /// the error of an earlier lock, with the context "locking <GPU> to <MHz> MHz").
  Result<void> begin(Instruction instruction, int microbatch);
  /// As above for a loop that knows only the instruction (Zeus' hooks): the microbatch is not checked, and
  /// the messages name instructions only.
  Result<void> begin(Instruction instruction);

  /// Locks (asynchronous: posts) the clock of the next planned computation now, without advancing the plan;
  /// nothing once every computation of the iteration has begun. Errors as begin()'s device errors.
  Result<void> prepare_next();

  /// Ends the iteration and rewinds the plan for the next one. The clock stays locked (the next iteration
  /// usually starts where this one ended). kState if not every planned computation was begun; the plan is
  /// rewound anyway so that the next iteration starts in step.
  Result<void> end_iteration();

  /// kState, with end_iteration()'s message, if not every planned computation of the iteration has begun;
  /// changes nothing (for a loop that carries on with the iteration after the error).
  Result<void> check_iteration_complete() const;

  /// Replaces the plan (the next round of a schedule) and rewinds it; the clock stays as it is. kOutOfRange
  /// as create() for a frequency the GPU does not support (the plan is then unchanged).
  Result<void> set_schedule(StageSchedule schedule);

  /// Asynchronous: blocks until every clock posted so far is locked, at most `timeout` (nullopt: no limit);
  /// false on timeout; the error of a failed lock, once. Synchronous: true at once.
  Result<bool> wait_applied(std::optional<Nanos> timeout = std::nullopt);

  /// Removes the SM clock lock now if this controller set one (the next begin() locks again).
  /// Asynchronous, waits for the posted clocks first. @return the device's error if the reset fails.
  Result<void> reset_clocks();

  /// Stops the applier thread (posted clocks not yet locked are dropped) and removes the clock lock; later
  /// calls of begin() and prepare_next() fail with kState. Idempotent. @return the reset's error.
  Result<void> close();

  device::Gpu& gpu() const { return *gpu_; }
  const StageSchedule& schedule() const { return schedule_; }
  bool asynchronous() const { return applier_ != nullptr; }
  /// @return how many computations of the current iteration have begun.
  size_t position() const { return position_; }
  /// @return the SM clock this controller locked last, MHz, or nullopt if unknown (none set, or reset).
  std::optional<uint32_t> locked_clock_mhz() const;
  /// @return how many SM clock locks this controller made (device calls), over its lifetime.
  size_t lock_count() const;
  /// @return the locks so far (synchronous: requests = locks, no device times).
  ClockApplierStats stats() const;

 private:
  FrequencyController(device::Gpu& gpu, StageSchedule schedule, std::vector<uint32_t> supported_mhz,
                      FrequencyControllerOptions options);
  Result<void> begin_checked(Instruction instruction, std::optional<int> microbatch);
  Result<void> apply(uint32_t frequency_mhz);
  std::string who() const;

  device::Gpu* gpu_;  // null once moved from
  StageSchedule schedule_;
  std::vector<uint32_t> supported_mhz_;  // sorted
  FrequencyControllerOptions options_;
  size_t position_ = 0;
  std::optional<uint32_t> current_mhz_;  // synchronous only
  size_t lock_count_ = 0;                // synchronous only
  bool relock_ = false;                  // asynchronous: the lock was reset, post the next clock again
  std::atomic<bool> closed_ = false;     // atomic: close() may run while another thread calls begin()
  std::unique_ptr<device::SettingsGuard> guard_;  // every lock goes through it; null once moved from
  std::unique_ptr<ClockApplier> applier_;         // asynchronous only; declared after guard_: stops first
};

/// @return a simulated GPU model for pipeline stages running `profile`: its SM clocks span the profile's
/// lowest to highest frequency in steps that hit every profiled frequency, its idle power is
/// `p_blocking_w` (the simulator's idle state stands for "blocked on a neighbour"), and it has an energy
/// counter. Its power limits span [p_blocking_w, the highest computation power] and do not affect the
/// profile-driven workloads.
device::sim::GpuModel pipeline_gpu_model(const Profile& profile, double p_blocking_w);

/// What one executed iteration measured, next to what the model predicts for it.
struct IterationMeasurement {
  double time_s = 0;  ///< measured: the monitor's window over the iteration (virtual clock, 1 ns resolution)
  double energy_j = 0;  ///< measured: Σ stage_energy_j (energy counters, 1 mJ resolution per GPU)
  std::vector<double> stage_energy_j;        ///< measured per stage GPU by the energy monitor, J
  std::vector<double> stage_exact_energy_j;  ///< per stage, the simulator's exact energy integral, J
  PlanCost predicted;                        ///< evaluate(dag, profile, plan, p_blocking_w)
  /// Per stage, Σ computation energy + p_blocking_w × (time − Σ computation time), J.
  std::vector<double> predicted_stage_energy_j;
  Timeline timeline;  ///< when each computation (by node id) started and ended, s from the iteration's start
  std::vector<size_t> clock_locks;  ///< per stage, SM clock locks made during this iteration
};

/// Runs iterations of a pipeline on simulated GPUs (one per stage) that share a virtual clock, with a
/// frequency plan applied by one FrequencyController per stage, and measures them with an EnergyMonitor.
///
/// Event-driven: a computation starts when its stage's GPU is free and its dependencies have ended; it
/// lasts the profile's time at the SM clock the GPU is actually locked to, and the GPU draws the profile's
/// energy/time at that clock meanwhile; a GPU that waits (on a neighbour, or done early) draws the blocking
/// power. The virtual clock advances from event to event, so the measured time and energy are the model's
/// (evaluate()) up to the clock's 1 ns and the counters' 1 mJ resolution.
///
/// Owns its GPU model, clock, GPUs and monitor. Not thread-safe.
class PipelineExecutor {
 public:
  /// kInvalidArgument if the DAG has no stage, the profile has fewer stages than the DAG, or p_blocking_w
  /// is negative or not finite.
  static Result<PipelineExecutor> create(PipelineDag dag, Profile profile, double p_blocking_w);

  PipelineExecutor(PipelineExecutor&&) noexcept;
  PipelineExecutor& operator=(PipelineExecutor&&) = delete;  // members reference each other
  ~PipelineExecutor();

  /// Runs one iteration with `plan` (node id → MHz). The stages' controllers are kept while the plan stays
  /// the same, so a repeated plan locks clocks only where they change; a new plan resets the clocks first.
  /// Errors: evaluate()'s (plan size, a frequency the profile lacks); the controllers' (kOutOfRange for a
  /// frequency the GPUs do not support); kInvalidArgument if the DAG cannot run to its end (a cycle or
  /// inconsistent stage order).
  Result<IterationMeasurement> run_iteration(const FrequencyPlan& plan);

  const PipelineDag& dag() const { return dag_; }
  const Profile& profile() const { return profile_; }
  double p_blocking_w() const { return p_blocking_w_; }
  const device::sim::GpuModel& gpu_model() const { return *model_; }
  VirtualClock& clock() const { return *clock_; }
  /// @return the stage GPUs, stage 0 first.
  std::vector<device::sim::SimulatedGpu*> gpus() const;

 private:
  PipelineExecutor(PipelineDag dag, Profile profile, double p_blocking_w);
  Result<void> use_plan(const FrequencyPlan& plan);

  PipelineDag dag_;
  Profile profile_;
  double p_blocking_w_;
  // Declaration order is destruction order reversed: controllers reset clocks on live GPUs, and the model
  // the GPUs reference outlives them.
  std::unique_ptr<device::sim::GpuModel> model_;
  std::shared_ptr<VirtualClock> clock_;
  // Per stage, the workloads of its forward and backward (indexed by Instruction).
  std::vector<std::array<std::shared_ptr<const device::sim::Workload>, 2>> workloads_;
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus_;
  std::unique_ptr<measure::EnergyMonitor> monitor_;
  std::optional<FrequencyPlan> plan_;
  std::vector<FrequencyController> controllers_;
};

/// Convenience: builds a PipelineExecutor and runs one iteration. Errors as create() and run_iteration().
Result<IterationMeasurement> run_iteration(const PipelineDag& dag, const Profile& profile,
                                           const FrequencyPlan& plan, double p_blocking_w);

}  // namespace joule::plan
