// SPDX-License-Identifier: Apache-2.0
// joule/plan/clock_applier.hpp — locks a GPU's SM clock on a thread of its own, so that the thread that
// drives a pipeline stage only posts the clock it wants (a mutex, a number and a condition variable: no
// device call) on its critical path. The asynchronous mode of FrequencyController (runtime.hpp) and
// joule._joule.ClockApplier in Python.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/settings_guard.hpp"

namespace joule::plan {

/// What a ClockApplier did so far.
struct ClockApplierStats {
  uint64_t requests = 0;                ///< requests posted (a repeat of the clock last requested is not one)
  uint64_t locks = 0;                   ///< locks that succeeded (device calls; skipped requests are not)
  double lock_time_s = 0;               ///< device time of those locks, s
  double max_lock_time_s = 0;           ///< the longest of them, s
  std::optional<uint32_t> applied_mhz;  ///< the clock locked last, MHz; nullopt before the first lock
  std::optional<uint32_t> requested_mhz;  ///< the clock requested last, MHz; nullopt after a failed lock

  /// @return lock_time_s / locks, s (0 without locks).
  double mean_lock_time_s() const { return locks == 0 ? 0.0 : lock_time_s / static_cast<double>(locks); }
};

/// Locks the latest requested SM clock on its own thread. request() only posts a clock (the latest wins:
/// requests that arrive while a lock is under way collapse into one); wait() blocks until every request so
/// far has been applied. A failed lock is kept and returned by the next request() or wait(), once, with the
/// context "locking <GPU> to <MHz> MHz"; the next request, even of the same clock, tries again.
///
/// Thread-safe: every method may be called from any thread. The thread starts in the constructor and stops
/// in close() or the destructor (a lock under way finishes first; requests not yet applied are dropped).
class ClockApplier {
 public:
  /// Locks one SM clock, MHz: called on the applier's thread, without any of its locks held.
  using LockFn = std::function<Result<void>(uint32_t mhz)>;

  /// @param gpu_label names the GPU in the context of a failed lock's error.
  ClockApplier(std::string gpu_label, LockFn lock);
  /// Locks [mhz, mhz] on `gpu` through `guard` (so the lock is restored as the guard restores). Both must
  /// outlive the applier.
  ClockApplier(device::SettingsGuard& guard, device::Gpu& gpu);

  /// close().
  ~ClockApplier();
  ClockApplier(const ClockApplier&) = delete;
  ClockApplier& operator=(const ClockApplier&) = delete;
  ClockApplier(ClockApplier&&) = delete;
  ClockApplier& operator=(ClockApplier&&) = delete;

  /// Posts `mhz` (the latest request wins). Unless `force`, nothing happens if `mhz` is the clock requested
  /// last (force: after something else, such as a signal restore, undid the lock).
  /// @return first the error a previous lock left (the request is then not posted); kState if closed.
  Result<void> request(uint32_t mhz, bool force = false);

  /// Blocks until every request so far has been applied (at once if closed), at most `timeout` (nullopt: no
  /// limit). @return false on timeout; the error a previous lock left, once.
  Result<bool> wait(std::optional<Nanos> timeout = std::nullopt);

  /// Stops the thread: a lock under way finishes, requests not yet applied are dropped. Idempotent.
  void close();

  /// @return true once close() was called.
  bool closed() const;
  ClockApplierStats stats() const;

 private:
  Result<void> take_error_locked();
  void loop();

  std::string gpu_label_;
  LockFn lock_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t requested_generation_ = 0;
  uint64_t applied_generation_ = 0;
  bool closed_ = false;
  std::optional<Error> error_;
  ClockApplierStats stats_;
  std::thread thread_;  // last: starts once everything above is initialised
};

}  // namespace joule::plan
