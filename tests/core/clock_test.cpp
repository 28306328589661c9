// SPDX-License-Identifier: Apache-2.0
#include "joule/core/clock.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

TEST(VirtualClock, MovesOnlyWhenAdvanced) {
  VirtualClock clock(1'000'000'000);
  EXPECT_TRUE(clock.is_virtual());
  EXPECT_EQ(clock.now(), Nanos(0));
  clock.advance(Nanos(1500));
  clock.sleep_for(from_seconds(2.0));
  EXPECT_EQ(clock.now(), Nanos(2'000'001'500));
  EXPECT_EQ(clock.to_unix_ns(clock.now()), 3'000'001'500);
}

TEST(VirtualClock, RefusesToGoBack) {
  VirtualClock clock;
  JOULE_EXPECT_THROW_MESSAGE(clock.advance(Nanos(-1)), ErrorCode::kInvalidArgument,
                             "a virtual clock cannot go back in time (advance by -1 ns)");
}

TEST(SteadyClock, IsMonotonicAndMapsToWallTime) {
  SteadyClock& clock = SteadyClock::instance();
  EXPECT_FALSE(clock.is_virtual());
  const Nanos a = clock.now();
  clock.sleep_for(Nanos(1'000'000));
  const Nanos b = clock.now();
  EXPECT_GE(b - a, Nanos(1'000'000));
  const int64_t wall =
      std::chrono::duration_cast<Nanos>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LT(std::llabs(clock.to_unix_ns(clock.now()) - wall), 1'000'000'000);
}

TEST(Iso8601, FormatsUtcWithMilliseconds) {
  EXPECT_EQ(format_iso8601_utc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_iso8601_utc(1'795'305'192'123'456'789), "2026-11-21T23:53:12.123Z");
  EXPECT_EQ(format_iso8601_utc(-1), "1969-12-31T23:59:59.999Z");
}

TEST(Units, Conversions) {
  EXPECT_DOUBLE_EQ(mw_to_w(250'000), 250.0);
  EXPECT_DOUBLE_EQ(mj_to_j(1500), 1.5);
  EXPECT_DOUBLE_EQ(energy_mj(200'000, from_seconds(0.5)), 100'000);
  EXPECT_EQ(round_w_to_mw(212.4996), 212'500);
  EXPECT_EQ(from_seconds(1.25), Nanos(1'250'000'000));
  EXPECT_DOUBLE_EQ(to_seconds(Nanos(2'500'000'000)), 2.5);
}

}  // namespace
}  // namespace joule
