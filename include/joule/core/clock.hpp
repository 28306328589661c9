// SPDX-License-Identifier: Apache-2.0
// joule/core/clock.hpp — time sources: the steady clock, and a virtual clock for tests and simulation.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "joule/core/units.hpp"

namespace joule {

/// A monotonic time source. Every measurement in joule reads time through a Clock, so that the same code
/// runs on real time and on simulated (virtual) time. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  /// @return the time since this clock's epoch, in nanoseconds. Never decreases.
  virtual Nanos now() const = 0;

  /// Waits `duration` on this clock: sleeps on a real clock, advances time on a virtual one.
  virtual void sleep_for(Nanos duration) = 0;

  /// @return true if time only moves when the program advances it (simulation).
  virtual bool is_virtual() const = 0;

  /// @return the UTC wall-clock time, in ns since the Unix epoch, that corresponds to `time` on this clock.
  /// A virtual clock starts at a fixed wall time given at construction.
  virtual int64_t to_unix_ns(Nanos time) const = 0;
};

/// std::chrono::steady_clock. Its epoch is arbitrary (boot time on Linux).
class SteadyClock final : public Clock {
 public:
  SteadyClock();

  Nanos now() const override;
  void sleep_for(Nanos duration) override;
  bool is_virtual() const override { return false; }
  int64_t to_unix_ns(Nanos time) const override;

  /// @return a process-wide instance.
  static SteadyClock& instance();

 private:
  int64_t unix_minus_steady_ns_;  // system_clock − steady_clock, sampled once at construction
};

/// Time that moves only when advanced: sleep_for() and advance() move it forward. Starts at 0 ns.
class VirtualClock final : public Clock {
 public:
  /// @param start_unix_ns the wall-clock time (ns since the Unix epoch) that virtual time 0 stands for.
  explicit VirtualClock(int64_t start_unix_ns = 0) : start_unix_ns_(start_unix_ns) {}

  Nanos now() const override { return Nanos(now_ns_.load(std::memory_order_acquire)); }
  void sleep_for(Nanos duration) override { advance(duration); }
  bool is_virtual() const override { return true; }
  int64_t to_unix_ns(Nanos time) const override { return start_unix_ns_ + time.count(); }

  /// Moves time forward by `duration`. @throws joule::Exception (kInvalidArgument) if duration < 0.
  void advance(Nanos duration);

 private:
  std::atomic<int64_t> now_ns_{0};
  int64_t start_unix_ns_;
};

/// @return `unix_ns` formatted as ISO-8601 UTC with milliseconds, e.g. "2026-11-21T23:53:12.123Z".
std::string format_iso8601_utc(int64_t unix_ns);

/// @return `clock`'s current time in whole seconds since the Unix epoch, rounded down (also before 1970).
int64_t unix_now_s(const Clock& clock);

}  // namespace joule
