// SPDX-License-Identifier: Apache-2.0
// One pipeline stage as a simulated GPU on its own virtual clock.
#include "joule/plan/stage_device.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <utility>
#include <vector>

#include "joule/plan/runtime.hpp"

#include "plan/runtime/computation_workload.hpp"

namespace joule::plan {

namespace {

Result<void> check_slowdown(double slowdown) {
  if (!std::isfinite(slowdown) || slowdown < 0.01 || slowdown > 100) {
    return fail(ErrorCode::kInvalidArgument, "the slowdown must be a finite factor in [0.01, 100], got {}",
                slowdown);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<StageDevice>> StageDevice::create(const Profile& profile, int stage,
                                                         double p_blocking_w, double slowdown) {
  if (stage < 0 || stage >= profile.stage_count()) {
    return fail(ErrorCode::kInvalidArgument, "stage {} is not in the profile, which has stages 0 to {}",
                stage, profile.stage_count() - 1);
  }
  if (!std::isfinite(p_blocking_w) || p_blocking_w < 0) {
    return fail(ErrorCode::kInvalidArgument, "the blocking power must be finite and non-negative, got {} W",
                p_blocking_w);
  }
  JOULE_TRY(check_slowdown(slowdown));
  return std::unique_ptr<StageDevice>(new StageDevice(profile, stage, p_blocking_w, slowdown));
}

StageDevice::StageDevice(const Profile& profile, int stage, double p_blocking_w, double slowdown)
    : stage_(stage),
      p_blocking_w_(p_blocking_w),
      model_(std::make_unique<device::sim::GpuModel>(pipeline_gpu_model(profile, p_blocking_w))),
      clock_(std::make_shared<VirtualClock>()),
      forward_(std::make_shared<ComputationWorkload>(stage, Instruction::kForward,
                                                     profile.options(stage, Instruction::kForward))),
      backward_(std::make_shared<ComputationWorkload>(stage, Instruction::kBackward,
                                                      profile.options(stage, Instruction::kBackward))),
      gpu_(std::make_unique<device::sim::SimulatedGpu>(*model_, forward_, clock_, stage)),
      slowdown_(slowdown) {
  gpu_->set_busy(false);  // blocked until its first computation
}

StageDevice::~StageDevice() = default;

void StageDevice::advance_to_locked(double time_s) {
  if (time_s <= now_s_) {
    return;
  }
  now_s_ = time_s;
  const Nanos target = from_seconds(time_s);
  if (const Nanos now = clock_->now(); target > now) {
    clock_->advance(target - now);
  }
}

Result<StageRun> StageDevice::run(Instruction instruction, double not_before_s) {
  if (!std::isfinite(not_before_s)) {
    return fail(ErrorCode::kInvalidArgument, "not_before_s must be finite, got {}", not_before_s);
  }
  std::lock_guard lock(mutex_);
  advance_to_locked(not_before_s);  // idle (blocked) meanwhile
  const double start_s = now_s_;
  gpu_->set_workload(instruction == Instruction::kForward ? forward_ : backward_);
  gpu_->set_busy(true);
  // The duration is what the device does at the clock locked now, not what a plan said.
  const double duration_s = gpu_->operating_point().iteration_time_s * slowdown_;
  advance_to_locked(start_s + duration_s);
  gpu_->set_busy(false);
  return StageRun{start_s, now_s_};
}

Result<void> StageDevice::idle_until(double time_s) {
  if (!std::isfinite(time_s)) {
    return fail(ErrorCode::kInvalidArgument, "the idle end must be finite, got {} s", time_s);
  }
  std::lock_guard lock(mutex_);
  advance_to_locked(time_s);
  return {};
}

double StageDevice::now_s() const {
  std::lock_guard lock(mutex_);
  return now_s_;
}

Result<void> StageDevice::set_slowdown(double slowdown) {
  JOULE_TRY(check_slowdown(slowdown));
  std::lock_guard lock(mutex_);
  slowdown_ = slowdown;
  return {};
}

double StageDevice::slowdown() const {
  std::lock_guard lock(mutex_);
  return slowdown_;
}

namespace {

// The devices whose settings are written at exit. Leaked on purpose: alive in the exit hook.
struct SettingsLogsAtExit {
  std::mutex mutex;
  std::vector<std::pair<std::shared_ptr<StageDevice>, std::string>> devices;
};

SettingsLogsAtExit& settings_logs_at_exit() {
  static auto* logs = new SettingsLogsAtExit;
  return *logs;
}

void write_settings_logs_now() {
  SettingsLogsAtExit& logs = settings_logs_at_exit();
  std::lock_guard lock(logs.mutex);
  for (const auto& [device, path] : logs.devices) {
    std::ofstream out(path, std::ios::trunc);
    for (const auto& record : device->gpu().settings_log()) {
      out << record.setting << ' ' << record.value_min << ' ' << record.value << '\n';
    }
  }
}

}  // namespace

Result<void> write_settings_log_at_exit(std::shared_ptr<StageDevice> device, std::string path) {
  SettingsLogsAtExit& logs = settings_logs_at_exit();
  std::lock_guard lock(logs.mutex);
  static const bool registered = std::atexit(write_settings_logs_now) == 0;
  if (!registered) {
    return fail(ErrorCode::kInternal, "cannot register an exit hook");
  }
  logs.devices.emplace_back(std::move(device), std::move(path));
  return {};
}

}  // namespace joule::plan
