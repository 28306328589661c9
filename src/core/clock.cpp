// SPDX-License-Identifier: Apache-2.0
#include "joule/core/clock.hpp"

#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "joule/core/error.hpp"

namespace joule {

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int64_t system_ns() {
  return std::chrono::duration_cast<Nanos>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

SteadyClock::SteadyClock() : unix_minus_steady_ns_(system_ns() - steady_ns()) {}

Nanos SteadyClock::now() const {
  return Nanos(steady_ns());
}

void SteadyClock::sleep_for(Nanos duration) {
  if (duration.count() > 0) {
    std::this_thread::sleep_for(duration);
  }
}

int64_t SteadyClock::to_unix_ns(Nanos time) const {
  return time.count() + unix_minus_steady_ns_;
}

SteadyClock& SteadyClock::instance() {
  static SteadyClock clock;
  return clock;
}

void VirtualClock::advance(Nanos duration) {
  if (duration.count() < 0) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("a virtual clock cannot go back in time (advance by {} ns)", duration.count()));
  }
  now_ns_.fetch_add(duration.count(), std::memory_order_acq_rel);
}

std::string format_iso8601_utc(int64_t unix_ns) {
  constexpr int64_t kNsPerS = 1'000'000'000;
  int64_t seconds = unix_ns / kNsPerS;
  int64_t remainder_ns = unix_ns % kNsPerS;
  if (remainder_ns < 0) {
    remainder_ns += kNsPerS;
    --seconds;
  }
  const auto time = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&time, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, remainder_ns / 1'000'000);
}

int64_t unix_now_s(const Clock& clock) {
  const int64_t ns = clock.to_unix_ns(clock.now());
  return ns >= 0 ? ns / 1'000'000'000 : -((-ns + 999'999'999) / 1'000'000'000);
}

}  // namespace joule
