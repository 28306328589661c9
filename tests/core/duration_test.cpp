// SPDX-License-Identifier: Apache-2.0
#include "joule/core/duration.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

// Issue 23: `power --duration-s 1e10` stopped at once (1e19 ns wrapped to a deadline in the past) and
// `devices --check --duration-s 1e10` failed a healthy GPU. Every duration is now bounded by one rule.
TEST(Duration, OverOneHundredYearsIsRefusedWithTheFlagNamed) {
  JOULE_EXPECT_ERROR(seconds_to_nanos(1e10, "--duration-s", duration_rule()), ErrorCode::kInvalidArgument,
                     "--duration-s must be at most 3.15576e+09, got 1e+10: 100 years is the longest duration "
                     "joule takes");
  JOULE_EXPECT_ERROR(
      seconds_to_nanos(-1e10, "start_s"), ErrorCode::kInvalidArgument,
      "start_s must be at least -3.15576e+09, got -1e+10: 100 years is the longest duration joule "
      "takes");
  JOULE_EXPECT_ERROR(seconds_to_nanos(std::numeric_limits<double>::infinity(), "end_s"),
                     ErrorCode::kInvalidArgument, "end_s must be a finite number, got inf");
  JOULE_EXPECT_ERROR(seconds_to_nanos(std::numeric_limits<double>::quiet_NaN(), "timeout_s", duration_rule()),
                     ErrorCode::kInvalidArgument, "timeout_s must be a finite number > 0, got nan");
  JOULE_EXPECT_ERROR(seconds_to_nanos(0, "--duration-s", duration_rule()), ErrorCode::kInvalidArgument,
                     "--duration-s must be a finite number > 0, got 0");
  JOULE_EXPECT_ERROR(
      check_number(1e9, duration_rule(true, 3600), "--history-hours"), ErrorCode::kInvalidArgument,
      "--history-hours must be at most 876600, got 1e+09: 100 years is the longest duration joule "
      "takes");
}

TEST(Duration, TheLimitItselfConvertsWithoutOverflow) {
  EXPECT_EQ(*seconds_to_nanos(1.5, "x"), Nanos(1'500'000'000));
  EXPECT_EQ(*seconds_to_nanos(0, "x", duration_rule(true)), Nanos(0));
  const Nanos most = *seconds_to_nanos(kMaxDurationS, "x", duration_rule());
  EXPECT_EQ(most.count(), 3'155'760'000'000'000'000);
  EXPECT_GT((Nanos(std::numeric_limits<int64_t>::max()) - most).count(), 6'000'000'000'000'000'000);
}

// from_seconds() is the last guard for values no rule checked: it clamps instead of wrapping.
TEST(Duration, FromSecondsClampsInsteadOfWrapping) {
  EXPECT_EQ(from_seconds(1e10), from_seconds(kMaxDurationS));
  EXPECT_EQ(from_seconds(-std::numeric_limits<double>::infinity()), -from_seconds(kMaxDurationS));
  EXPECT_EQ(from_seconds(std::numeric_limits<double>::quiet_NaN()), Nanos(0));
  EXPECT_EQ(from_seconds(0.25), Nanos(250'000'000));
}

TEST(Duration, NumberRuleHintsNameTheLikelySlip) {
  const NumberRule watts{.min = 0,
                         .plausible_min = 1,
                         .plausible_max = 2000,
                         .too_low_hint = "is it in kW?",
                         .too_high_hint = "is it in mW?"};
  JOULE_EXPECT_ERROR(check_number(75000, watts, "--p-blocking-w"), ErrorCode::kInvalidArgument,
                     "--p-blocking-w must be at most 2000, got 75000: is it in mW?");
  JOULE_EXPECT_ERROR(check_number(0.07, watts, "--p-blocking-w"), ErrorCode::kInvalidArgument,
                     "--p-blocking-w must be at least 1, got 0.07: is it in kW?");
  // The domain comes first, in its own words.
  JOULE_EXPECT_ERROR(check_number(-1, watts, "--p-blocking-w"), ErrorCode::kInvalidArgument,
                     "--p-blocking-w must be a finite number ≥ 0, got -1");
  JOULE_EXPECT_ERROR(check_number(std::nan(""), watts, "w"), ErrorCode::kInvalidArgument,
                     "w must be a finite number ≥ 0, got nan");
  EXPECT_EQ(*check_number(1500, watts, "w"), 1500);
}

}  // namespace
}  // namespace joule
