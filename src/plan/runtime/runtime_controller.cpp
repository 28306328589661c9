// SPDX-License-Identifier: Apache-2.0
// The per-stage SM clock controller of a pipeline frequency plan.
#include <array>
#include <iterator>
#include <optional>
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

namespace {

// @return "'forward' of microbatch 3", or "'forward'" for a loop that names instructions only.
std::string describe_call(Instruction instruction, std::optional<int> microbatch) {
  if (!microbatch) {
    return fmt::format("'{}'", to_string(instruction));
  }
  return fmt::format("'{}' of microbatch {}", to_string(instruction), *microbatch);
}

// Checked up front: finding out mid-iteration would leave the iteration half run at the wrong clocks.
Result<void> check_frequencies(const device::Gpu& gpu, const std::set<uint32_t>& supported_mhz,
                               const StageSchedule& schedule) {
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
  return {};
}

}  // namespace

StageSchedule schedule_from_instructions(const std::vector<std::pair<Instruction, uint32_t>>& entries) {
  StageSchedule schedule;
  schedule.reserve(entries.size());
  std::array<int, 2> begun{};  // per instruction, how many came before
  for (const auto& [instruction, frequency_mhz] : entries) {
    int& count = begun[instruction == Instruction::kForward ? 0 : 1];
    schedule.push_back({instruction, count++, frequency_mhz});
  }
  return schedule;
}

Result<FrequencyController> FrequencyController::create(device::Gpu& gpu, StageSchedule schedule,
                                                        bool restore_on_signals) {
  FrequencyControllerOptions options;
  options.restore_on_signals = restore_on_signals;
  return create(gpu, std::move(schedule), std::move(options));
}

Result<FrequencyController> FrequencyController::create(device::Gpu& gpu, StageSchedule schedule,
                                                        FrequencyControllerOptions options) {
  auto supported = JOULE_TRY(gpu.supported_sm_clocks_mhz());
  const std::set<uint32_t> supported_mhz(supported.begin(), supported.end());
  JOULE_TRY(check_frequencies(gpu, supported_mhz, schedule));
  return FrequencyController(gpu, std::move(schedule), {supported_mhz.begin(), supported_mhz.end()},
                             std::move(options));
}

FrequencyController::FrequencyController(device::Gpu& gpu, StageSchedule schedule,
                                         std::vector<uint32_t> supported_mhz,
                                         FrequencyControllerOptions options)
    : gpu_(&gpu),
      schedule_(std::move(schedule)),
      supported_mhz_(std::move(supported_mhz)),
      options_(std::move(options)),
      guard_(std::make_unique<device::SettingsGuard>(device::SettingsGuardOptions{
          .owner = options_.owner, .restore_on_signals = options_.restore_on_signals})) {
  if (options_.asynchronous) {
    applier_ = std::make_unique<ClockApplier>(*guard_, gpu);
  }
}

FrequencyController::FrequencyController(FrequencyController&& other) noexcept
    : gpu_(std::exchange(other.gpu_, nullptr)),
      schedule_(std::move(other.schedule_)),
      supported_mhz_(std::move(other.supported_mhz_)),
      options_(std::move(other.options_)),
      position_(other.position_),
      current_mhz_(other.current_mhz_),
      lock_count_(other.lock_count_),
      relock_(other.relock_),
      closed_(other.closed_.load()),
      guard_(std::move(other.guard_)),
      applier_(std::move(other.applier_)) {}

// The applier stops first (declared last), then the guard resets the lock (and logs a failure: a destructor
// cannot report one).
FrequencyController::~FrequencyController() = default;

std::string FrequencyController::who() const {
  return options_.label.empty() ? gpu_->label() : options_.label;
}

Result<void> FrequencyController::begin(Instruction instruction, int microbatch) {
  return begin_checked(instruction, microbatch);
}

Result<void> FrequencyController::begin(Instruction instruction) {
  return begin_checked(instruction, std::nullopt);
}

Result<void> FrequencyController::begin_checked(Instruction instruction, std::optional<int> microbatch) {
  if (closed_) {
    return fail(ErrorCode::kState, "{}: the frequency controller is closed", who());
  }
  if (position_ >= schedule_.size()) {
    return fail(ErrorCode::kState,
                "{}: the training loop is out of step with its frequency schedule: got {} after all {} "
                "instructions of the iteration ({} was not called)",
                who(), describe_call(instruction, microbatch), schedule_.size(), options_.end_call);
  }
  const PlannedComputation& planned = schedule_[position_];
  if (planned.instruction != instruction || (microbatch && planned.microbatch != *microbatch)) {
    const std::optional<int> expected_microbatch =
        microbatch ? std::optional(planned.microbatch) : std::nullopt;
    return fail(
        ErrorCode::kState,
        "{}: the training loop is out of step with its frequency schedule: instruction {} of {} should "
        "be {}, got {}",
        who(), position_ + 1, schedule_.size(), describe_call(planned.instruction, expected_microbatch),
        describe_call(instruction, microbatch));
  }
  JOULE_TRY(apply(planned.frequency_mhz));
  ++position_;
  return {};
}

Result<void> FrequencyController::prepare_next() {
  if (closed_) {
    return fail(ErrorCode::kState, "{}: the frequency controller is closed", who());
  }
  if (position_ >= schedule_.size()) {
    return {};
  }
  return apply(schedule_[position_].frequency_mhz);
}

Result<void> FrequencyController::apply(uint32_t frequency_mhz) {
  if (guard_->consume_signal_restore()) {
    relock_ = true;  // a signal reset the lock and the process lives on: lock again
  }
  if (frequency_mhz == kKeepClockMhz) {
    return {};
  }
  if (applier_) {
    JOULE_TRY(applier_->request(frequency_mhz, relock_));  // not posted: the next request still relocks
    relock_ = false;
    return {};
  }
  if (std::exchange(relock_, false)) {
    current_mhz_.reset();
  }
  if (current_mhz_ != frequency_mhz) {
    JOULE_TRY(guard_->lock_sm_clocks(*gpu_, frequency_mhz, frequency_mhz));
    current_mhz_ = frequency_mhz;
    ++lock_count_;
  }
  return {};
}

Result<void> FrequencyController::check_iteration_complete() const {
  if (position_ != schedule_.size()) {
    const PlannedComputation& next = schedule_[position_];
    return fail(
        ErrorCode::kState,
        "{}: the iteration ended after {} of {} instructions of its frequency schedule; the next would "
        "have been {}",
        who(), position_, schedule_.size(), describe_call(next.instruction, next.microbatch));
  }
  return {};
}

Result<void> FrequencyController::end_iteration() {
  Result<void> complete = check_iteration_complete();
  position_ = 0;
  return complete;
}

Result<void> FrequencyController::set_schedule(StageSchedule schedule) {
  const std::set<uint32_t> supported_mhz(supported_mhz_.begin(), supported_mhz_.end());
  JOULE_TRY(check_frequencies(*gpu_, supported_mhz, schedule));
  schedule_ = std::move(schedule);
  position_ = 0;
  return {};
}

Result<bool> FrequencyController::wait_applied(std::optional<Nanos> timeout) {
  if (!applier_) {
    return true;
  }
  return applier_->wait(timeout);
}

Result<void> FrequencyController::reset_clocks() {
  if (!guard_) {
    return {};  // moved from: the lock, if any, is the new owner's
  }
  // Asynchronous: a lock landing after the reset would leave the GPU locked, so the posted ones land first.
  Result<bool> landed = applier_ ? applier_->wait() : Result<bool>(true);
  JOULE_TRY(guard_->restore());
  current_mhz_.reset();
  relock_ = true;
  if (!landed) {
    return tl::unexpected(landed.error());
  }
  return {};
}

Result<void> FrequencyController::close() {
  if (!guard_ || closed_.exchange(true)) {
    return {};
  }
  if (applier_) {
    applier_->close();
  }
  return guard_->restore();
}

std::optional<uint32_t> FrequencyController::locked_clock_mhz() const {
  if (applier_) {
    return relock_ ? std::nullopt : applier_->stats().applied_mhz;
  }
  return current_mhz_;
}

size_t FrequencyController::lock_count() const {
  return applier_ ? static_cast<size_t>(applier_->stats().locks) : lock_count_;
}

ClockApplierStats FrequencyController::stats() const {
  if (applier_) {
    return applier_->stats();
  }
  ClockApplierStats stats;
  stats.requests = lock_count_;
  stats.locks = lock_count_;
  stats.applied_mhz = current_mhz_;
  stats.requested_mhz = current_mhz_;
  return stats;
}

}  // namespace joule::plan
