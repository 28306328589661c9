// SPDX-License-Identifier: Apache-2.0
// joule/plan/stage_device.hpp — one stage of a pipeline as a simulated GPU on its own virtual clock: its
// forwards and backwards take the profile's time and energy at the SM clock actually locked on it. What a
// distributed training loop (one process per stage) runs its computations on when there is no GPU.
//
//   auto device = StageDevice::create(profile, /*stage=*/1, /*p_blocking_w=*/75).value();
//   device->gpu().lock_sm_clocks(1200, 1200);            // as on any Gpu (or through a SettingsGuard)
//   StageRun run = device->run(Instruction::kForward, /*not_before_s=*/input_arrival_s).value();
//   // run.start_s = max(now, input_arrival_s); run.end_s = start + profiled time at 1200 MHz
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// When one computation ran on a stage device, s on the device's virtual clock.
struct StageRun {
  double start_s = 0;
  double end_s = 0;
};

/// One pipeline stage as a simulated GPU (a real device::sim::SimulatedGpu: energy counter, supported
/// clocks, clock locks, power and power limits work as for every Gpu) with its own VirtualClock.
///
/// The GPU's model is pipeline_gpu_model(profile, p_blocking_w): idle, it draws p_blocking_w (the power of
/// a GPU blocked on a neighbour, as plan::evaluate() charges it); running a computation it draws the
/// profile's energy / time at its locked clock (the fastest profiled clock not above the lock; the
/// highest when unlocked) for the profile's time × slowdown(). So the energy counter's increase over a
/// computation is the profile's energy at that clock × slowdown, and over an idle stretch p_blocking_w ×
/// its length (up to the counter's 1 mJ resolution).
///
/// Time is kept exactly in seconds (double) and the virtual clock is moved to it rounded to the
/// nanosecond, so rounding never accumulates. Times start at 0.
///
/// **Thread-safety**: run(), idle_until(), now_s() and the slowdown may be called from any thread (one
/// mutex). The GPU may be locked from another thread (e.g. a clock applier): a computation is charged at
/// the clock locked when run() begins it, so a caller that wants a lock applied to the next computation
/// waits for the lock to land first. A lock landing in the middle of run() (a race the caller should
/// avoid) changes the power for the remainder but not the duration.
class StageDevice {
 public:
  /// @param profile the pipeline's profile; @param stage which of its stages this device runs, 0-based;
  /// @param p_blocking_w idle (blocked) power, W; @param slowdown see set_slowdown().
  /// @return kInvalidArgument for a stage outside [0, profile.stage_count()), a negative or non-finite
  /// p_blocking_w, or a bad slowdown.
  static Result<std::unique_ptr<StageDevice>> create(const Profile& profile, int stage, double p_blocking_w,
                                                     double slowdown = 1.0);

  ~StageDevice();
  StageDevice(const StageDevice&) = delete;
  StageDevice& operator=(const StageDevice&) = delete;
  StageDevice(StageDevice&&) = delete;
  StageDevice& operator=(StageDevice&&) = delete;

  /// Runs one computation: idles (drawing p_blocking_w) until `not_before_s` if that is later than now,
  /// then computes at the locked clock for the profiled time × slowdown, then goes idle.
  /// @return its start and end, s. kInvalidArgument if `not_before_s` is not finite.
  Result<StageRun> run(Instruction instruction, double not_before_s);

  /// Idles (drawing p_blocking_w) until `time_s`; nothing if that is not later than now.
  /// kInvalidArgument if `time_s` is not finite.
  Result<void> idle_until(double time_s);

  /// @return the device's virtual time, s.
  double now_s() const;

  /// A throttled or straggling GPU: every computation begun from now on takes `slowdown` × its profiled
  /// time at the same power (so also `slowdown` × its energy). kInvalidArgument unless finite and in
  /// [0.01, 100]. Default 1.
  Result<void> set_slowdown(double slowdown);
  double slowdown() const;

  int stage() const { return stage_; }
  double p_blocking_w() const { return p_blocking_w_; }
  /// @return the GPU (index = stage). Lives as long as the device.
  device::sim::SimulatedGpu& gpu() const { return *gpu_; }
  VirtualClock& clock() const { return *clock_; }
  const device::sim::GpuModel& model() const { return *model_; }

 private:
  StageDevice(const Profile& profile, int stage, double p_blocking_w, double slowdown);
  void advance_to_locked(double time_s);

  int stage_;
  double p_blocking_w_;
  // Destruction in reverse: the GPU goes before the workloads, clock and model it references.
  std::unique_ptr<device::sim::GpuModel> model_;
  std::shared_ptr<VirtualClock> clock_;
  std::shared_ptr<const device::sim::Workload> forward_;
  std::shared_ptr<const device::sim::Workload> backward_;
  std::unique_ptr<device::sim::SimulatedGpu> gpu_;
  mutable std::mutex mutex_;
  double now_s_ = 0;
  double slowdown_ = 1.0;
};

/// Test seam: at process exit, writes the settings log of `device`'s GPU to `path`, one "setting value_min
/// value" line per setting. Exit hooks run last-registered first, so a call before the first
/// device::SettingsGuard exists writes after the guard's exit restore (what a test of that restore reads).
/// kInternal if the exit hook cannot be registered.
Result<void> write_settings_log_at_exit(std::shared_ptr<StageDevice> device, std::string path);

}  // namespace joule::plan
