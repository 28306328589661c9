// SPDX-License-Identifier: Apache-2.0
// The per-stage SM clock controller of a pipeline frequency plan.
#include <iterator>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/plan/runtime.hpp"

namespace joule::plan {

namespace {

// @return "1395 and 1410 MHz" / "1410 MHz": the supported clocks just below and above `wanted_mhz`.
std::string nearest_clocks(const std::set<uint32_t>& supported_mhz, uint32_t wanted_mhz) {
  std::vector<uint32_t> nearest;
  const auto above = supported_mhz.upper_bound(wanted_mhz);
  if (above != supported_mhz.begin()) {
    nearest.push_back(*std::prev(above));
  }
  if (above != supported_mhz.end()) {
    nearest.push_back(*above);
  }
  return fmt::format("{} MHz", fmt::join(nearest, " and "));
}

}  // namespace

std::string describe(Instruction instruction, int microbatch) {
  return fmt::format("{} of microbatch {}", to_string(instruction), microbatch);
}

Result<std::vector<StageSchedule>> stage_schedules(const PipelineDag& dag, const FrequencyPlan& plan) {
  if (plan.size() != dag.computations.size()) {
    return fail(ErrorCode::kInvalidArgument,
                "the frequency plan has {} entries but the pipeline has {} computations", plan.size(),
                dag.computations.size());
  }
  std::vector<StageSchedule> schedules;
  schedules.reserve(dag.stage_order.size());
  for (const auto& order : dag.stage_order) {
    StageSchedule& schedule = schedules.emplace_back();
    schedule.reserve(order.size());
    for (const int node : order) {
      const auto id = static_cast<size_t>(node);
      if (node < 0 || id >= dag.computations.size()) {
        return fail(ErrorCode::kInvalidArgument,
                    "the pipeline's stage order names node {}, which does not exist", node);
      }
      const Computation& computation = dag.computations[id];
      schedule.push_back({computation.instruction, computation.microbatch, plan[id]});
    }
  }
  return schedules;
}

Result<FrequencyController> FrequencyController::create(device::Gpu& gpu, StageSchedule schedule,
                                                        bool restore_on_signals) {
  auto supported = JOULE_TRY(gpu.supported_sm_clocks_mhz());
  const std::set<uint32_t> supported_mhz(supported.begin(), supported.end());
  // Checked up front: finding out mid-iteration would leave the iteration half run at the wrong clocks.
  for (size_t i = 0; i < schedule.size(); ++i) {
    const PlannedComputation& planned = schedule[i];
    if (planned.frequency_mhz == kKeepClockMhz || supported_mhz.count(planned.frequency_mhz) != 0) {
      continue;
    }
    if (supported_mhz.empty()) {
      return fail(ErrorCode::kOutOfRange,
                  "{} reports no supported SM clocks, so it cannot run the planned {} MHz", gpu.label(),
                  planned.frequency_mhz);
    }
    return fail(
        ErrorCode::kOutOfRange,
        "{} does not support the SM clock {} MHz planned for computation {} ({}); nearest supported: {}",
        gpu.label(), planned.frequency_mhz, i + 1, describe(planned.instruction, planned.microbatch),
        nearest_clocks(supported_mhz, planned.frequency_mhz));
  }
  return FrequencyController(gpu, std::move(schedule), restore_on_signals);
}

FrequencyController::FrequencyController(device::Gpu& gpu, StageSchedule schedule, bool restore_on_signals)
    : gpu_(&gpu),
      schedule_(std::move(schedule)),
      guard_(std::make_unique<device::SettingsGuard>(device::SettingsGuardOptions{
          .owner = "frequency controller", .restore_on_signals = restore_on_signals})) {}

FrequencyController::FrequencyController(FrequencyController&& other) noexcept
    : gpu_(std::exchange(other.gpu_, nullptr)),
      schedule_(std::move(other.schedule_)),
      position_(other.position_),
      current_mhz_(other.current_mhz_),
      lock_count_(other.lock_count_),
      guard_(std::move(other.guard_)) {}

// The guard resets the lock (and logs a failure: a destructor cannot report one).
FrequencyController::~FrequencyController() = default;

Result<void> FrequencyController::begin(Instruction instruction, int microbatch) {
  if (position_ >= schedule_.size()) {
    return fail(ErrorCode::kState,
                "{}: the training loop is out of step with its frequency plan: got {} after all {} planned "
                "computations of the iteration (end_iteration() was not called)",
                gpu_->label(), describe(instruction, microbatch), schedule_.size());
  }
  const PlannedComputation& planned = schedule_[position_];
  if (planned.instruction != instruction || planned.microbatch != microbatch) {
    return fail(
        ErrorCode::kState,
        "{}: the training loop is out of step with its frequency plan: computation {} of {} should be "
        "{}, got {}",
        gpu_->label(), position_ + 1, schedule_.size(), describe(planned.instruction, planned.microbatch),
        describe(instruction, microbatch));
  }
  if (guard_->consume_signal_restore()) {
    current_mhz_.reset();  // a signal reset the lock and the process lives on: lock again
  }
  if (planned.frequency_mhz != kKeepClockMhz && current_mhz_ != planned.frequency_mhz) {
    JOULE_TRY(guard_->lock_sm_clocks(*gpu_, planned.frequency_mhz, planned.frequency_mhz));
    current_mhz_ = planned.frequency_mhz;
    ++lock_count_;
  }
  ++position_;
  return {};
}

Result<void> FrequencyController::end_iteration() {
  const size_t done = position_;
  position_ = 0;
  if (done != schedule_.size()) {
    const PlannedComputation& next = schedule_[done];
    return fail(ErrorCode::kState,
                "{}: the iteration ended after {} of {} planned computations; the next would have been {}",
                gpu_->label(), done, schedule_.size(), describe(next.instruction, next.microbatch));
  }
  return {};
}

Result<void> FrequencyController::reset_clocks() {
  if (!guard_) {
    return {};  // moved from: the lock, if any, is the new owner's
  }
  if (auto reset = guard_->restore(); !reset) {
    return reset;
  }
  current_mhz_.reset();
  return {};
}

}  // namespace joule::plan
