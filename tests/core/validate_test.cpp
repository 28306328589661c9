// SPDX-License-Identifier: Apache-2.0
#include "joule/core/validate.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

using joule::test::kInf;
using joule::test::kNan;

std::string refusal(double value, const NumberRule& rule, std::string_view name = "--x") {
  const auto checked = check_number(value, rule, name);
  EXPECT_FALSE(checked.has_value()) << value;
  if (checked) {
    return {};
  }
  EXPECT_EQ(checked.error().code(), ErrorCode::kInvalidArgument);
  return checked.error().message();
}

TEST(Validate, NaNAndInfinityAreRefusedUnlessInfinityMeansNoLimit) {
  EXPECT_EQ(refusal(kNan, NumberRule::any_finite()), "--x must be a finite number, got nan");
  EXPECT_EQ(refusal(kInf, NumberRule::any_finite()), "--x must be a finite number, got inf");
  EXPECT_EQ(refusal(-kInf, NumberRule::positive()), "--x must be a finite number > 0, got -inf");
  NumberRule beta{.min = 1, .min_exclusive = true, .allow_infinity = true};
  EXPECT_EQ(*check_number(kInf, beta, "beta"), kInf);
  EXPECT_EQ(refusal(kNan, beta, "beta"), "beta must be a finite number > 1 (or inf), got nan");
  EXPECT_EQ(refusal(1, beta, "beta"), "beta must be a finite number > 1 (or inf), got 1");
}

TEST(Validate, RangesAreInclusiveUnlessSaidOtherwise) {
  EXPECT_EQ(*check_number(0, NumberRule::non_negative(), "--x"), 0);
  EXPECT_EQ(refusal(-2, NumberRule::non_negative(), "--forecast-hours"),
            "--forecast-hours must be a finite number ≥ 0, got -2");
  EXPECT_EQ(refusal(0, NumberRule::positive(), "--duration-s"),
            "--duration-s must be a finite number > 0, got 0");
  EXPECT_EQ(*check_number(1, NumberRule::between(0, 1), "eta"), 1);
  EXPECT_EQ(refusal(3, NumberRule::between(0, 1), "eta"), "eta must be a finite number in [0, 1], got 3");
  EXPECT_EQ(refusal(0, NumberRule{.min = 0, .max = 60, .min_exclusive = true}, "--lease-s"),
            "--lease-s must be a finite number in (0, 60], got 0");
  EXPECT_EQ(refusal(61, NumberRule{.max = 60}, "--y"), "--y must be a finite number ≤ 60, got 61");
}

TEST(Validate, WholeNumbersAndUnnamedFields) {
  const NumberRule count{.min = 1, .integer = true};
  EXPECT_EQ(*check_number(3, count, "--stages"), 3);
  EXPECT_EQ(refusal(1.5, count, "--stages"), "--stages must be a whole number ≥ 1, got 1.5");
  EXPECT_EQ(refusal(0, count, ""), "must be a whole number ≥ 1, got 0");
  EXPECT_EQ(describe(NumberRule::between(0.5, 2)), "a finite number in [0.5, 2]");
  EXPECT_EQ(describe(NumberRule::any_finite()), "a finite number");
}

TEST(Validate, RoundsWattsToMilliwattsAfterTheRule) {
  EXPECT_EQ(*round_w_to_mw(150, quantity::power_w(), "power_limit_w"), 150'000u);
  EXPECT_EQ(*round_w_to_mw(0.0004, NumberRule::non_negative(), "x"), 0u);
  EXPECT_EQ(*round_w_to_mw(0.0005, NumberRule::non_negative(), "x"), 1u);
  EXPECT_EQ(*round_w_to_mw(4294967.295, NumberRule::non_negative(), "x"), 4'294'967'295u);
  EXPECT_EQ(round_w_to_mw(-1, NumberRule::non_negative(), "power_limit_w").error().message(),
            "power_limit_w must be a finite number ≥ 0, got -1");
  EXPECT_EQ(round_w_to_mw(0, NumberRule::positive(), "power_limit_candidates_w(min_w=...)").error().message(),
            "power_limit_candidates_w(min_w=...) must be a finite number > 0, got 0");
  EXPECT_EQ(round_w_to_mw(75000, quantity::power_w(), "power_limit_w").error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(round_w_to_mw(5e6, NumberRule::non_negative(), "x").error().message(),
            "x must be in [0, 4294967.295] W (a device takes a uint32 of mW), got 5e+06");
  EXPECT_EQ(round_w_to_mw(-1, NumberRule::any_finite(), "").error().message(),
            "must be in [0, 4294967.295] W (a device takes a uint32 of mW), got -1");
  EXPECT_FALSE(
      round_w_to_mw(std::numeric_limits<double>::infinity(), NumberRule{.allow_infinity = true}, "x"));
}

}  // namespace
}  // namespace joule
