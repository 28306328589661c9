// SPDX-License-Identifier: Apache-2.0
#include "joule/core/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/core/error.hpp"

namespace joule::numeric {
namespace {

TEST(Numeric, PairwiseSumFollowsNumpysBlocking) {
  // 1e16 + 1 + … loses the ones when added left to right; numpy's 8 accumulators keep them.
  std::vector<double> values(16, 1.0);
  values[0] = 1e16;
  double sequential = 0;
  for (const double value : values) {
    sequential += value;
  }
  EXPECT_EQ(sequential, 1e16);
  // numpy: np.array([1e16] + [1.0] * 15).sum() == 1.0000000000000014e+16
  EXPECT_EQ(pairwise_sum(values), 1.0000000000000014e+16);
  EXPECT_EQ(pairwise_sum(std::vector<double>{}), 0.0);
  EXPECT_EQ(pairwise_sum(std::vector<double>{0.1, 0.2, 0.3}), (0.0 + 0.1 + 0.2) + 0.3);
  std::vector<double> many(1000);
  for (size_t i = 0; i < many.size(); ++i) {
    many[i] = 1.0 / static_cast<double>(i + 1);
  }
  EXPECT_NEAR(pairwise_sum(many), 7.485470860550345, 1e-12);
}

TEST(Numeric, NumpySumsArePairwise) {
  // Values where the summation order shows: numpy (1.24) gives these exact results.
  std::vector<double> values;
  for (int i = 0; i < 20; ++i) {
    values.push_back(i % 2 == 0 ? 1e16 : 1.0 + i);
  }
  // Eight accumulators: the small values are added to the large ones in blocks of eight.
  double sequential = 0;
  for (const double v : values) {
    sequential += v;
  }
  EXPECT_EQ(pairwise_sum(values), 1.0000000000000011e+17);
  EXPECT_NE(pairwise_sum(values), sequential);
  EXPECT_EQ(pairwise_sum(std::vector<double>{1.0, 2.0, 3.5}), 6.5);
  EXPECT_EQ(pairwise_sum(std::vector<double>{}), 0.0);
  EXPECT_EQ(variance(std::vector<double>{-10, -20}), 25.0);
  EXPECT_EQ(variance(std::vector<double>{-7}), 0.0);
}

TEST(Numeric, LargeArraysAreSummedInBuffersOf8192) {
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) {
    values.push_back(i % 97 == 0 ? 1e12 : 0.1 * i);
  }
  // numpy 1.24: np.array([1e12 if i % 97 == 0 else 0.1 * i for i in range(20000)]).sum()
  EXPECT_EQ(pairwise_sum(values), 207000019792186.3);
}

TEST(Numeric, MeanAndVariance) {
  const std::vector<double> values = {-3.0, -1.0};
  EXPECT_EQ(mean(values), -2.0);
  EXPECT_EQ(variance(values), 1.0);
  EXPECT_EQ(variance(std::vector<double>{5.0, 5.0, 5.0}), 0.0);
  std::vector<double> ramp(100);
  for (size_t i = 0; i < ramp.size(); ++i) {
    ramp[i] = static_cast<double>(i);
  }
  EXPECT_DOUBLE_EQ(variance(ramp), 833.25);
}

TEST(Numeric, CompensatedMean) {
  const std::vector<double> values = {1e16, 1.0, 1.0, -1e16};
  EXPECT_EQ(compensated_mean(values), 0.5);  // plain summation would give 0
  // As pandas' groupby mean: the compensated sum of three 0.1 is 0.30000000000000004, so the mean is not 0.1.
  EXPECT_EQ(compensated_mean(std::vector<double>{0.1, 0.1, 0.1}), 0.10000000000000002);
}

TEST(Numeric, PandasFloatParserIsNotCorrectlyRounded) {
  // pandas.read_csv gives 3852.18 for this trace value; a correctly rounded parser gives the next double up.
  EXPECT_EQ(*pandas_parse_double("3852.1800000000003"), 3852.18);
  EXPECT_NE(3852.18, 3852.1800000000003);
  EXPECT_EQ(*pandas_parse_double("250"), 250.0);
  EXPECT_EQ(*pandas_parse_double("-0.5"), -0.5);
  EXPECT_EQ(*pandas_parse_double("1e-1"), 0.1);
  EXPECT_EQ(*pandas_parse_double("12.5E2"), 1250.0);
  EXPECT_EQ(*pandas_parse_double(".25"), 0.25);
  for (const char* bad : {"", "nan", "inf", "1.2.3", "1e", "abc", "1,5", "--1"}) {
    EXPECT_FALSE(pandas_parse_double(bad)) << bad;
  }
}

TEST(Numeric, PythonFloorDivision) {
  EXPECT_EQ(python_floor_div(7.0, 2.0), 3.0);
  EXPECT_EQ(python_floor_div(-7.0, 2.0), -4.0);
  EXPECT_EQ(python_floor_div(6.0, 3.0), 2.0);
  EXPECT_EQ(python_floor_div(0.0, 3.0), 0.0);
  // 1 // 0.1 is 9.0 in Python (fmod(1, 0.1) ≈ 0.1), while floor(1 / 0.1) is 10.
  EXPECT_EQ(python_floor_div(1.0, 0.1), 9.0);
  EXPECT_EQ(std::floor(1.0 / 0.1), 10.0);
  EXPECT_TRUE(std::signbit(python_floor_div(-0.0, 3.0)));
}

TEST(IsotonicFit, PoolsFallingRunsIntoTheirWeightedMeans) {
  // Rising values are kept.
  EXPECT_EQ(isotonic_non_decreasing(std::vector<double>{1, 2, 2, 5}, std::vector<double>{1, 1, 1, 1}),
            (std::vector<double>{1, 2, 2, 5}));
  // A light outlier moves most: (0.136 · 32 + 0.029 · 500) / 532 for both.
  const auto fitted =
      isotonic_non_decreasing(std::vector<double>{0.03, 0.136, 0.029}, std::vector<double>{500, 32, 500});
  ASSERT_EQ(fitted.size(), 3U);
  EXPECT_DOUBLE_EQ(fitted[0], 0.03);
  EXPECT_DOUBLE_EQ(fitted[1], (0.136 * 32 + 0.029 * 500) / 532);
  EXPECT_DOUBLE_EQ(fitted[2], fitted[1]);
  // Merging goes backwards: 3, 2, 1 (equal weights) is one block at 2.
  EXPECT_EQ(isotonic_non_decreasing(std::vector<double>{3, 2, 1}, std::vector<double>{1, 1, 1}),
            (std::vector<double>{2, 2, 2}));
  EXPECT_TRUE(isotonic_non_decreasing(std::vector<double>{}, std::vector<double>{}).empty());
}

TEST(IsotonicFit, MatchesTheMinMaxFormulaOnRandomInputs) {
  // The isotonic regression is f[i] = max over j ≤ i of min over k ≥ i of the weighted mean of j..k (Barlow
  // et al. 1972): an O(n³) reference independent of pool-adjacent-violators.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(-5, 5);
  std::uniform_real_distribution<double> weight(0.1, 10);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 12;
    std::vector<double> values(n);
    std::vector<double> weights(n);
    for (size_t i = 0; i < n; ++i) {
      values[i] = value(rng);
      weights[i] = weight(rng);
    }
    const std::vector<double> fitted = isotonic_non_decreasing(values, weights);
    ASSERT_EQ(fitted.size(), n);
    for (size_t i = 0; i < n; ++i) {
      double best = -1e300;
      for (size_t j = 0; j <= i; ++j) {
        double least = 1e300;
        for (size_t k = i; k < n; ++k) {
          double sum = 0;
          double total = 0;
          for (size_t m = j; m <= k; ++m) {
            sum += values[m] * weights[m];
            total += weights[m];
          }
          least = std::min(least, sum / total);
        }
        best = std::max(best, least);
      }
      EXPECT_NEAR(fitted[i], best, 1e-9) << "round " << round << ", value " << i;
      if (i > 0) {
        EXPECT_LE(fitted[i - 1], fitted[i] + 1e-12);
      }
    }
  }
}

TEST(IsotonicFit, RefusesMismatchedOrInvalidInput) {
  const auto message_of = [](const std::vector<double>& values, const std::vector<double>& weights) {
    try {
      isotonic_non_decreasing(values, weights);
    } catch (const Exception& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of({1, 2}, {1}).find("2 values but 1 weights"), std::string::npos);
  EXPECT_NE(message_of({1, 2}, {1, 0}).find("value 1 is 2 with weight 0"), std::string::npos);
  EXPECT_NE(message_of({1, NAN}, {1, 1}).find("value 1 is nan"), std::string::npos);
  EXPECT_NE(message_of({1}, {INFINITY}).find("positive finite weights only"), std::string::npos);
}

TEST(NearestRankPercentile, CountsAsLatencySlosDo) {
  std::vector<double> values = {5, 1, 4, 2, 3};
  EXPECT_EQ(nearest_rank_percentile(values, 0.5), 3.0);   // ⌈2.5⌉ = 3rd smallest
  EXPECT_EQ(nearest_rank_percentile(values, 0.99), 5.0);  // ⌈4.95⌉ = 5th
  EXPECT_EQ(nearest_rank_percentile(values, 0.2), 1.0);   // ⌈1⌉ = 1st
  EXPECT_EQ(nearest_rank_percentile(values, 0.0), 1.0);
  std::vector<double> none;
  EXPECT_EQ(nearest_rank_percentile(none, 0.5), std::nullopt);
}

}  // namespace
}  // namespace joule::numeric
