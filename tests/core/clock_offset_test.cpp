// SPDX-License-Identifier: Apache-2.0
// NTP's offset estimate (joule/core/clock_offset.hpp): the shortest round trip wins, the bound is half of it.
#include "joule/core/clock_offset.hpp"

#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

constexpr int64_t kEpochNs = 1'767'225'600'000'000'000;  // 2026-01-01 UTC

TEST(ClockOffset, TheShortestRoundTripGivesTheOffsetAndItsBound) {
  // The remote clock runs 2.5 ms ahead. Three probes: the middle one waited least (40 µs round trip).
  const std::vector<ClockProbe> probes = {
      {kEpochNs, kEpochNs + 2'500'000 + 300'000, kEpochNs + 900'000},                            // 900 µs
      {kEpochNs + 1'000'000, kEpochNs + 1'000'000 + 2'500'000 + 20'000, kEpochNs + 1'040'000},   // 40 µs
      {kEpochNs + 2'000'000, kEpochNs + 2'000'000 + 2'500'000 + 100'000, kEpochNs + 2'500'000},  // 500 µs
  };
  const auto offset = estimate_clock_offset(probes);
  ASSERT_TRUE(offset) << offset.error().message();
  EXPECT_NEAR(offset->offset_s, 2.5e-3, 1e-12);
  EXPECT_NEAR(offset->round_trip_s, 40e-6, 1e-12);
  EXPECT_NEAR(offset->uncertainty_s, 20e-6, 1e-12);
  EXPECT_EQ(offset->probes, 3u);
}

TEST(ClockOffset, ABehindClockAndAnAnswerReadAnywhereInTheRoundTripStayWithinTheBound) {
  // Remote 7 s behind; its clock was read at the very start of a 1 ms round trip: the estimate is off by
  // at most the bound.
  const std::vector<ClockProbe> probes = {{kEpochNs, kEpochNs - 7'000'000'000, kEpochNs + 1'000'000}};
  const auto offset = estimate_clock_offset(probes);
  ASSERT_TRUE(offset);
  EXPECT_NEAR(offset->offset_s, -7.0 - 0.5e-3, 1e-12);
  EXPECT_LE(std::abs(offset->offset_s - -7.0), offset->uncertainty_s + 1e-12);
  // A remote clock near 0 (a virtual clock) is far but in range: no overflow, exact to the nanosecond.
  const std::vector<ClockProbe> virtual_clock = {{kEpochNs, 1'000, kEpochNs + 2'000}};
  EXPECT_NEAR(estimate_clock_offset(virtual_clock)->offset_s,
              static_cast<double>(1'000 - kEpochNs - 1'000) * 1e-9, 1e-6);
}

TEST(ClockOffset, RefusesNoProbeAndALocalClockThatWentBack) {
  JOULE_EXPECT_ERROR(estimate_clock_offset({}), ErrorCode::kInvalidArgument,
                     "no clock probe to estimate an offset from");
  const std::vector<ClockProbe> backwards = {{kEpochNs, kEpochNs, kEpochNs + 10},
                                             {kEpochNs, kEpochNs, kEpochNs - 5}};
  JOULE_EXPECT_ERROR(estimate_clock_offset(backwards), ErrorCode::kInvalidArgument,
                     "clock probe 2 was answered 5 ns before it was sent: the local clock went back");
}

}  // namespace
}  // namespace joule
