// SPDX-License-Identifier: Apache-2.0
// The SM clock applier thread of a pipeline stage (FrequencyController's asynchronous mode).
#include "joule/plan/clock_applier.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

namespace joule::plan {

ClockApplier::ClockApplier(std::string gpu_label, LockFn lock)
    : gpu_label_(std::move(gpu_label)), lock_(std::move(lock)), thread_([this] { loop(); }) {}

ClockApplier::ClockApplier(device::SettingsGuard& guard, device::Gpu& gpu)
    : ClockApplier(gpu.label(),
                   [&guard, &gpu](uint32_t mhz) { return guard.lock_sm_clocks(gpu, mhz, mhz); }) {}

ClockApplier::~ClockApplier() {
  close();
}

Result<void> ClockApplier::take_error_locked() {
  if (error_) {
    Error error = std::move(*error_);
    error_.reset();
    return tl::unexpected(std::move(error));
  }
  return {};
}

Result<void> ClockApplier::request(uint32_t mhz, bool force) {
  std::lock_guard lock(mutex_);
  JOULE_TRY(take_error_locked());
  if (closed_) {
    return fail(ErrorCode::kState, "the clock applier of {} is closed", gpu_label_);
  }
  if (!force && stats_.requested_mhz == mhz) {
    return {};
  }
  stats_.requested_mhz = mhz;
  ++stats_.requests;
  ++requested_generation_;
  changed_.notify_all();
  return {};
}

Result<bool> ClockApplier::wait(std::optional<Nanos> timeout) {
  std::unique_lock lock(mutex_);
  auto done = [this] { return applied_generation_ == requested_generation_ || closed_; };
  if (timeout) {
    if (!changed_.wait_for(lock, std::max(Nanos::zero(), *timeout), done)) {
      return false;
    }
  } else {
    changed_.wait(lock, done);
  }
  JOULE_TRY(take_error_locked());
  return true;
}

void ClockApplier::close() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) {
      return;
    }
    closed_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool ClockApplier::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

ClockApplierStats ClockApplier::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void ClockApplier::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return closed_ || applied_generation_ != requested_generation_; });
    if (closed_) {
      return;
    }
    const uint32_t mhz = *stats_.requested_mhz;
    const uint64_t generation = requested_generation_;
    lock.unlock();  // the device call may take milliseconds: requests meanwhile only post
    const auto started = std::chrono::steady_clock::now();
    Result<void> locked = lock_(mhz);
    const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    lock.lock();
    if (locked) {
      stats_.applied_mhz = mhz;
      ++stats_.locks;
      stats_.lock_time_s += took_s;
      stats_.max_lock_time_s = std::max(stats_.max_lock_time_s, took_s);
    } else {
      error_ = locked.error().with_context(fmt::format("locking {} to {} MHz", gpu_label_, mhz));
      stats_.requested_mhz.reset();  // the next request, even of the same clock, tries again
    }
    applied_generation_ = generation;
    changed_.notify_all();
  }
}

}  // namespace joule::plan
