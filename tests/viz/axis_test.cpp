// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/axis.hpp"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::viz {
namespace {

using Values = std::vector<double>;

// Tick values are computed as k·m / 10^n, so they should equal the decimal literals exactly or within an ulp.
void expect_values(const Values& actual, const Values& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], std::abs(expected[i]) * 1e-15) << "tick " << i;
  }
}

std::vector<std::string> labels(const Ticks& ticks) {
  std::vector<std::string> out;
  for (const double value : ticks.values) {
    out.push_back(format_tick(value, ticks.step));
  }
  return out;
}

// The step is 1, 2 or 5 times a power of ten.
bool is_nice(double step) {
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  return std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9;
}

TEST(PlotTicks, UnitRange) {
  const Ticks ticks = nice_ticks(0, 1);
  EXPECT_DOUBLE_EQ(ticks.step, 0.2);
  EXPECT_EQ(ticks.min, 0);
  EXPECT_EQ(ticks.max, 1);
  expect_values(ticks.values, {0, 0.2, 0.4, 0.6, 0.8, 1.0});
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
}

TEST(PlotTicks, WidensToTheStep) {
  const Ticks ticks = nice_ticks(1.0, 1.95);
  EXPECT_DOUBLE_EQ(ticks.step, 0.2);
  EXPECT_DOUBLE_EQ(ticks.min, 1.0);
  EXPECT_DOUBLE_EQ(ticks.max, 2.0);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"1.0", "1.2", "1.4", "1.6", "1.8", "2.0"}));
}

TEST(PlotTicks, Integers) {
  const Ticks ticks = nice_ticks(3, 97);
  EXPECT_EQ(ticks.step, 20);
  EXPECT_EQ(ticks.min, 0);
  EXPECT_EQ(ticks.max, 100);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"0", "20", "40", "60", "80", "100"}));
  EXPECT_EQ(nice_ticks(0, 10, 10).step, 1);
  EXPECT_EQ(nice_ticks(0, 10, 5).step, 2);
  EXPECT_EQ(nice_ticks(0, 10, 2).step, 5);
  EXPECT_EQ(nice_ticks(0, 10, 1).step, 10);
}

TEST(PlotTicks, ExactMultiplesAreNotWidened) {
  // 0.3 / 0.1 is 2.9999999999999996 in doubles; the range must still start at 0.3.
  const Ticks ticks = nice_ticks(0.3, 0.9);
  EXPECT_DOUBLE_EQ(ticks.step, 0.1);
  EXPECT_DOUBLE_EQ(ticks.min, 0.3);
  EXPECT_DOUBLE_EQ(ticks.max, 0.9);
  EXPECT_EQ(ticks.values.size(), 7u);
}

TEST(PlotTicks, Negative) {
  const Ticks ticks = nice_ticks(-7.3, -2.1);
  EXPECT_EQ(ticks.step, 1);
  EXPECT_EQ(ticks.min, -8);
  EXPECT_EQ(ticks.max, -2);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"-8", "-7", "-6", "-5", "-4", "-3", "-2"}));
}

TEST(PlotTicks, AcrossZero) {
  const Ticks ticks = nice_ticks(-0.35, 0.6);
  EXPECT_DOUBLE_EQ(ticks.step, 0.2);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"-0.4", "-0.2", "0.0", "0.2", "0.4", "0.6"}));
  EXPECT_FALSE(std::signbit(ticks.values[2]));  // an exact, positive zero
}

TEST(PlotTicks, SingleValue) {
  // Widened to [4.5, 5.5], then outwards to multiples of the step.
  const Ticks ticks = nice_ticks(5, 5);
  EXPECT_DOUBLE_EQ(ticks.step, 0.2);
  EXPECT_DOUBLE_EQ(ticks.min, 4.4);
  EXPECT_DOUBLE_EQ(ticks.max, 5.6);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"4.4", "4.6", "4.8", "5.0", "5.2", "5.4", "5.6"}));
}

TEST(PlotTicks, ZeroSpanAtZero) {
  const Ticks ticks = nice_ticks(0, 0);
  EXPECT_EQ(ticks.min, -1);
  EXPECT_EQ(ticks.max, 1);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"-1.0", "-0.5", "0.0", "0.5", "1.0"}));
}

TEST(PlotTicks, NegativeSingleValue) {
  const Ticks ticks = nice_ticks(-250, -250);
  EXPECT_EQ(ticks.step, 10);
  EXPECT_EQ(ticks.min, -280);
  EXPECT_EQ(ticks.max, -220);
  EXPECT_EQ(labels(ticks).front(), "-280");
}

TEST(PlotTicks, HugeMagnitudes) {
  const Ticks ticks = nice_ticks(1.2e12, 3.1e12);
  EXPECT_DOUBLE_EQ(ticks.step, 5e11);
  EXPECT_EQ(labels(ticks),
            (std::vector<std::string>{"1.0e12", "1.5e12", "2.0e12", "2.5e12", "3.0e12", "3.5e12"}));
  const Ticks big = nice_ticks(0, 8e6);
  EXPECT_DOUBLE_EQ(big.step, 2e6);
  EXPECT_EQ(labels(big), (std::vector<std::string>{"0", "2e6", "4e6", "6e6", "8e6"}));
  // Just below the switch: plain numbers.
  EXPECT_EQ(labels(nice_ticks(0, 2.5e6)),
            (std::vector<std::string>{"0", "500000", "1000000", "1500000", "2000000", "2500000"}));
}

TEST(PlotTicks, SmallMagnitudes) {
  const Ticks ticks = nice_ticks(1.1e-9, 4.8e-9);
  EXPECT_DOUBLE_EQ(ticks.step, 1e-9);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"1e-9", "2e-9", "3e-9", "4e-9", "5e-9"}));
  const Ticks milli = nice_ticks(0.0012, 0.0049);
  EXPECT_DOUBLE_EQ(milli.step, 0.001);
  EXPECT_EQ(labels(milli), (std::vector<std::string>{"0.001", "0.002", "0.003", "0.004", "0.005"}));
  const Ticks micro = nice_ticks(1.25e-5, 1.75e-5);
  EXPECT_EQ(labels(micro),
            (std::vector<std::string>{"1.2e-5", "1.3e-5", "1.4e-5", "1.5e-5", "1.6e-5", "1.7e-5", "1.8e-5"}));
}

TEST(PlotTicks, NarrowRangeFarFromZero) {
  // The span is far below the magnitude: labels need many digits but must still differ.
  const Ticks ticks = nice_ticks(1000000.1, 1000000.4);
  EXPECT_DOUBLE_EQ(ticks.step, 0.05);
  EXPECT_EQ(labels(ticks).front(), "1000000.10");
  EXPECT_EQ(labels(ticks).back(), "1000000.40");
  // Closer than doubles can tell apart at this magnitude: treated as a single value.
  const Ticks same = nice_ticks(1e15, 1e15 + 0.125);
  EXPECT_LT(same.min, 1e15);
  EXPECT_GT(same.max, 1e15);
  EXPECT_GE(same.values.size(), 2u);
}

TEST(PlotTicks, TicksWithinKeepsTheRange) {
  const Ticks ticks = ticks_within(0.95, 2.05);
  EXPECT_EQ(ticks.min, 0.95);
  EXPECT_EQ(ticks.max, 2.05);
  EXPECT_DOUBLE_EQ(ticks.step, 0.2);
  EXPECT_EQ(labels(ticks), (std::vector<std::string>{"1.0", "1.2", "1.4", "1.6", "1.8", "2.0"}));
  // No multiple of the step inside: no ticks, but the range stands.
  // At most one interval inside [1.01, 1.09]: 0.02 would give 1.02…1.08, so 0.05 with the single tick 1.05.
  const Ticks one = ticks_within(1.01, 1.09, 1);
  EXPECT_DOUBLE_EQ(one.step, 0.05);
  expect_values(one.values, {1.05});
  EXPECT_EQ(one.min, 1.01);
}

TEST(PlotTicks, InvalidRanges) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  JOULE_EXPECT_THROW_MESSAGE(nice_ticks(2, 1), ErrorCode::kInvalidArgument,
                             "an axis range needs finite ends with min <= max, got [2, 1]");
  JOULE_EXPECT_THROW_MESSAGE(nice_ticks(nan, 1), ErrorCode::kInvalidArgument,
                             "an axis range needs finite ends with min <= max, got [nan, 1]");
  JOULE_EXPECT_THROW_MESSAGE(ticks_within(0, inf), ErrorCode::kInvalidArgument,
                             "an axis range needs finite ends with min <= max, got [0, inf]");
  JOULE_EXPECT_THROW_MESSAGE(nice_ticks(0, 1, 0), ErrorCode::kInvalidArgument,
                             "an axis needs at least 1 tick interval, got 0");
}

TEST(PlotTicks, PropertiesOnRandomRanges) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(-1, 1);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::uniform_int_distribution<int> intervals(1, 10);
  for (int round = 0; round < 2000; ++round) {
    const double scale = std::pow(10.0, exponent(rng));
    double min = unit(rng) * scale;
    double max =
        min + std::abs(unit(rng)) * scale * std::pow(10.0, -std::uniform_int_distribution<int>(0, 6)(rng));
    const int max_intervals = intervals(rng);
    const Ticks ticks = nice_ticks(min, max, max_intervals);
    SCOPED_TRACE(testing::Message() << "round " << round << ": [" << min << ", " << max << "] / "
                                    << max_intervals);
    ASSERT_TRUE(is_nice(ticks.step)) << ticks.step;
    EXPECT_LE(ticks.min, min);
    EXPECT_GE(ticks.max, max);
    ASSERT_GE(ticks.values.size(), 2u);
    // A range across zero needs two intervals, whatever the limit.
    const int allowed = min < 0 && max > 0 ? std::max(max_intervals, 2) : max_intervals;
    EXPECT_LE(ticks.values.size(), static_cast<size_t>(allowed) + 1);
    // Far from zero, tick values carry the rounding of their magnitude.
    const double tolerance = ticks.step * 1e-6 + std::max(std::abs(min), std::abs(max)) * 1e-15;
    EXPECT_NEAR(ticks.values.front(), ticks.min, tolerance);
    EXPECT_NEAR(ticks.values.back(), ticks.max, tolerance);
    const auto texts = labels(ticks);
    for (size_t i = 1; i < ticks.values.size(); ++i) {
      EXPECT_NEAR(ticks.values[i] - ticks.values[i - 1], ticks.step, tolerance);
      EXPECT_NE(texts[i], texts[i - 1]) << "neighbouring labels must differ";
    }
    for (const std::string& text : texts) {
      EXPECT_FALSE(text[0] == '-' && text.find_first_of("123456789") == std::string::npos)
          << "no negative zero: " << text;
    }
    const Ticks within = ticks_within(min, max, max_intervals);
    ASSERT_TRUE(is_nice(within.step)) << within.step;
    EXPECT_LE(within.step, ticks.step);
    EXPECT_LE(within.values.size(), static_cast<size_t>(max_intervals) + 1);
    EXPECT_LE(within.min, min);
    EXPECT_GE(within.max, max);
    for (const double value : within.values) {
      EXPECT_GE(value, min - tolerance);
      EXPECT_LE(value, max + tolerance);
    }
  }
}

TEST(PlotFormat, TickLabels) {
  EXPECT_EQ(format_tick(1.5, 0.5), "1.5");
  EXPECT_EQ(format_tick(1, 0.5), "1.0");
  EXPECT_EQ(format_tick(0, 0.5), "0.0");
  EXPECT_EQ(format_tick(-1e-17, 0.1), "0.0");
  EXPECT_EQ(format_tick(140, 20), "140");
  EXPECT_EQ(format_tick(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(format_tick(0.05, 0.01), "0.05");
  EXPECT_EQ(format_tick(1.5e9, 5e8), "1.5e9");
  EXPECT_EQ(format_tick(-3e6, 1e6), "-3e6");
  EXPECT_EQ(format_tick(0, 1e6), "0");
  EXPECT_EQ(format_tick(2e-5, 1e-5), "2e-5");
  EXPECT_EQ(format_tick(1.25e-5, 5e-7), "1.25e-5");
  EXPECT_EQ(format_tick(9.96e-5, 1e-6),
            "1.00e-4");  // the mantissa rounds up to 10: carried into the exponent
  EXPECT_EQ(format_tick(7, std::numeric_limits<double>::quiet_NaN()), "7");
}

TEST(PlotFormat, SignificantDigits) {
  EXPECT_EQ(format_significant(1234.56), "1235");
  EXPECT_EQ(format_significant(0.0123456), "0.01235");
  EXPECT_EQ(format_significant(1.5), "1.5");
  EXPECT_EQ(format_significant(-2.5), "-2.5");
  EXPECT_EQ(format_significant(0), "0");
  EXPECT_EQ(format_significant(9999.7), "10000");
  EXPECT_EQ(format_significant(1234567), "1235000");
  EXPECT_EQ(format_significant(1234567, 7), "1234567");
  EXPECT_EQ(format_significant(12345678), "1.235e7");
  EXPECT_EQ(format_significant(1.5e9), "1.5e9");
  EXPECT_EQ(format_significant(2.5e-6), "2.5e-6");
  EXPECT_EQ(format_significant(0.00099999), "0.001");  // rounds up into the plain range
  EXPECT_EQ(format_significant(0.00099949), "9.995e-4");
  EXPECT_EQ(format_significant(123.456, 2), "120");
  EXPECT_EQ(format_significant(123.456, 0), "100");  // clamped to 1 digit
  EXPECT_EQ(format_significant(std::numeric_limits<double>::infinity()), "inf");
}

}  // namespace
}  // namespace joule::viz
