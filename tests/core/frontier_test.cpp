// SPDX-License-Identifier: Apache-2.0
#include "joule/core/frontier.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

using Indices = std::vector<size_t>;
using joule::test::kInf;
using joule::test::kNan;

// The definition, checked pair by pair: i is kept unless some j dominates it, or j equals it and comes first.
Indices brute_force_pareto(const std::vector<double>& times_s, const std::vector<double>& energies_j) {
  Indices kept;
  for (size_t i = 0; i < times_s.size(); ++i) {
    bool dropped = false;
    for (size_t j = 0; j < times_s.size() && !dropped; ++j) {
      const bool no_worse = times_s[j] <= times_s[i] && energies_j[j] <= energies_j[i];
      const bool better = times_s[j] < times_s[i] || energies_j[j] < energies_j[i];
      dropped = no_worse && (better || j < i);
    }
    if (!dropped) {
      kept.push_back(i);
    }
  }
  std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return times_s[a] < times_s[b]; });
  return kept;
}

TEST(Pareto, DropsDominatedPoints) {
  // (2, 9) is dominated by (1, 8); (3, 5) by (3, 4); (5, 4) by (3, 4).
  EXPECT_EQ(pareto_indices({1, 2, 3, 3, 5, 6}, {8, 9, 5, 4, 4, 1}), (Indices{0, 3, 5}));
}

TEST(Pareto, SortsByTime) {
  EXPECT_EQ(pareto_indices({3, 1, 2}, {1, 3, 2}), (Indices{1, 2, 0}));
}

TEST(Pareto, KeepsTheFirstOfDuplicates) {
  EXPECT_EQ(pareto_indices({2, 1, 2, 1}, {1, 2, 1, 2}), (Indices{1, 0}));
  EXPECT_EQ(pareto_indices({5, 5, 5}, {7, 7, 7}), (Indices{0}));
}

TEST(Pareto, SinglePointAndEmpty) {
  EXPECT_EQ(pareto_indices({4}, {2}), (Indices{0}));
  EXPECT_EQ(pareto_indices({}, {}), Indices{});
}

TEST(Pareto, AllPointsOnTheFrontier) {
  EXPECT_EQ(pareto_indices({1, 2, 3, 4}, {40, 30, 20, 10}), (Indices{0, 1, 2, 3}));
}

TEST(Pareto, TiesInTimeKeepTheLowerEnergy) {
  EXPECT_EQ(pareto_indices({1, 1, 2}, {9, 5, 3}), (Indices{1, 2}));
}

TEST(Pareto, TiesInEnergyKeepTheFaster) {
  EXPECT_EQ(pareto_indices({3, 1, 2}, {5, 5, 5}), (Indices{1}));
  EXPECT_EQ(pareto_indices({1, 2, 3}, {9, 5, 5}), (Indices{0, 1}));
}

TEST(Pareto, ZeroIsValid) {
  EXPECT_EQ(pareto_indices({0, 1}, {1, 0}), (Indices{0, 1}));
}

TEST(Pareto, RejectsBadInput) {
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1, 2}, {1}), ErrorCode::kInvalidArgument,
                             "2 times but 1 energies: every point needs both");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1, -1}, {1, 1}), ErrorCode::kInvalidArgument,
                             "point 1 has time -1 s: times must be finite and non-negative");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1, 2, kNan}, {1, 1, 1}), ErrorCode::kInvalidArgument,
                             "point 2 has time nan s: times must be finite and non-negative");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({kInf}, {1}), ErrorCode::kInvalidArgument,
                             "point 0 has time inf s: times must be finite and non-negative");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1}, {-0.5}), ErrorCode::kInvalidArgument,
                             "point 0 has energy -0.5 J: energies must be finite and non-negative");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1, 1}, {1, kNan}), ErrorCode::kInvalidArgument,
                             "point 1 has energy nan J: energies must be finite and non-negative");
  JOULE_EXPECT_THROW_MESSAGE(pareto_indices({1}, {-kInf}), ErrorCode::kInvalidArgument,
                             "point 0 has energy -inf J: energies must be finite and non-negative");
}

TEST(Pareto, MatchesBruteForceOnRandomInputs) {
  std::mt19937 rng(20240607);
  for (int round = 0; round < 500; ++round) {
    const size_t count = std::uniform_int_distribution<size_t>(0, 40)(rng);
    // Small integer grids make ties in time, in energy and in both common.
    const int grid = std::uniform_int_distribution<int>(1, 12)(rng);
    std::uniform_int_distribution<int> value(0, grid);
    std::vector<double> times_s(count);
    std::vector<double> energies_j(count);
    for (size_t i = 0; i < count; ++i) {
      times_s[i] = value(rng) * 0.25;
      energies_j[i] = value(rng) * 10.0;
    }
    ASSERT_EQ(pareto_indices(times_s, energies_j), brute_force_pareto(times_s, energies_j))
        << "round " << round;
  }
}

struct PowerAndBatch {
  int power_limit_w = 0;
  int batch_size = 0;
};

TEST(Frontier, KeepsKnobsWithTheirPoints) {
  const auto frontier = Frontier<PowerAndBatch>::from_points({
      {{300, 64}, 1.0, 300.0},
      {{250, 64}, 1.1, 260.0},
      {{200, 64}, 1.4, 270.0},  // dominated by 250 W
      {{150, 32}, 2.0, 200.0},
      {{250, 32}, 1.1, 260.0},  // a duplicate of the 250 W/64 point: the first is kept
  });
  ASSERT_EQ(frontier.size(), 3u);
  EXPECT_FALSE(frontier.empty());
  EXPECT_EQ(frontier.points()[0].knob.power_limit_w, 300);
  EXPECT_EQ(frontier.points()[1].knob.power_limit_w, 250);
  EXPECT_EQ(frontier.points()[1].knob.batch_size, 64);
  EXPECT_EQ(frontier.points()[2].knob.power_limit_w, 150);
  EXPECT_EQ(frontier.fastest().knob.power_limit_w, 300);
  EXPECT_EQ(frontier.least_energy().knob.batch_size, 32);
  EXPECT_DOUBLE_EQ(frontier.least_energy().energy_j, 200.0);
}

TEST(Frontier, EmptyFrontierHasNoEnds) {
  const Frontier<int> frontier;
  EXPECT_TRUE(frontier.empty());
  JOULE_EXPECT_THROW_MESSAGE(frontier.fastest(), ErrorCode::kState, "the frontier is empty");
  JOULE_EXPECT_THROW_MESSAGE(frontier.least_energy(), ErrorCode::kState, "the frontier is empty");
  JOULE_EXPECT_ERROR(select(frontier, MinTime{}), ErrorCode::kState,
                     "MinTime: there is no point to select from");
}

TEST(Frontier, RejectsBadPoints) {
  JOULE_EXPECT_THROW_MESSAGE((Frontier<int>::from_points({{1, 1.0, 2.0}, {2, 1.0, -2.0}})),
                             ErrorCode::kInvalidArgument,
                             "point 1 has energy -2 J: energies must be finite and non-negative");
}

TEST(Frontier, SelectUsesThePoints) {
  const auto frontier = Frontier<int>::from_points({{300, 1.0, 300.0}, {250, 1.1, 260.0}, {150, 2.0, 200.0}});
  EXPECT_EQ(frontier.points()[*select(frontier, MinEnergy{})].knob, 150);
  EXPECT_EQ(frontier.points()[*select(frontier, Deadline{1.5})].knob, 250);
}

TEST(Policy, Describe) {
  EXPECT_EQ(describe(ZeusCost{0.5, 250}), "ZeusCost(eta=0.5, max_power=250 W)");
  EXPECT_EQ(describe(Deadline{1.2}), "Deadline(1.2 s)");
  EXPECT_EQ(describe(MaxSlowdown{1.1}), "MaxSlowdown(1.1x)");
  EXPECT_EQ(describe(MinEnergy{}), "MinEnergy");
  EXPECT_EQ(describe(MinTime{}), "MinTime");
}

TEST(Policy, ValidParameters) {
  for (const Policy& policy : std::vector<Policy>{ZeusCost{0, 1}, ZeusCost{1, 1e-3}, Deadline{0}, Deadline{5},
                                                  MaxSlowdown{1}, MaxSlowdown{3}, MinEnergy{}, MinTime{}}) {
    EXPECT_TRUE(validate(policy)) << describe(policy);
  }
}

TEST(Policy, InvalidParameters) {
  const auto code = ErrorCode::kInvalidArgument;
  JOULE_EXPECT_ERROR(validate(ZeusCost{-0.1, 250}), code, "ZeusCost eta must be in [0, 1], got -0.1");
  JOULE_EXPECT_ERROR(validate(ZeusCost{1.5, 250}), code, "ZeusCost eta must be in [0, 1], got 1.5");
  JOULE_EXPECT_ERROR(validate(ZeusCost{kNan, 250}), code, "ZeusCost eta must be in [0, 1], got nan");
  JOULE_EXPECT_ERROR(validate(ZeusCost{0.5, 0}), code,
                     "ZeusCost max_power_w must be positive and finite, got 0 W");
  JOULE_EXPECT_ERROR(validate(ZeusCost{0.5, -250}), code,
                     "ZeusCost max_power_w must be positive and finite, got -250 W");
  JOULE_EXPECT_ERROR(validate(ZeusCost{0.5, kInf}), code,
                     "ZeusCost max_power_w must be positive and finite, got inf W");
  JOULE_EXPECT_ERROR(validate(ZeusCost{0.5, kNan}), code,
                     "ZeusCost max_power_w must be positive and finite, got nan W");
  JOULE_EXPECT_ERROR(validate(Deadline{-1}), code,
                     "Deadline time_s must be finite and non-negative, got -1 s");
  JOULE_EXPECT_ERROR(validate(Deadline{kInf}), code,
                     "Deadline time_s must be finite and non-negative, got inf s");
  JOULE_EXPECT_ERROR(validate(Deadline{kNan}), code,
                     "Deadline time_s must be finite and non-negative, got nan s");
  JOULE_EXPECT_ERROR(validate(MaxSlowdown{0.9}), code,
                     "MaxSlowdown factor must be finite and at least 1, got 0.9");
  JOULE_EXPECT_ERROR(validate(MaxSlowdown{kInf}), code,
                     "MaxSlowdown factor must be finite and at least 1, got inf");
  JOULE_EXPECT_ERROR(validate(MaxSlowdown{kNan}), code,
                     "MaxSlowdown factor must be finite and at least 1, got nan");
}

// A frontier of a power-limit sweep: 300, 250, 200, 150 W.
const std::vector<double> kTimes = {1.0, 1.1, 1.3, 1.8};
const std::vector<double> kEnergies = {300.0, 250.0, 220.0, 210.0};

TEST(Policy, ZeusCost) {
  // eta = 1: energy only; eta = 0: time only.
  EXPECT_EQ(*select_index(kTimes, kEnergies, ZeusCost{1, 300}), 3u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, ZeusCost{0, 300}), 0u);
  // eta = 0.5, 300 W: costs 300, 290, 305, 375.
  EXPECT_EQ(*select_index(kTimes, kEnergies, ZeusCost{0.5, 300}), 1u);
}

TEST(Policy, ZeusCostTiesGoToTheFasterPoint) {
  // Costs 0.5·3 + 0.5·1 = 2 and 0.5·1 + 0.5·3 = 2.
  EXPECT_EQ(*select_index({1, 3}, {3, 1}, ZeusCost{0.5, 1}), 0u);
  EXPECT_EQ(*select_index({3, 1}, {1, 3}, ZeusCost{0.5, 1}), 1u);
}

TEST(Policy, Deadline) {
  EXPECT_EQ(*select_index(kTimes, kEnergies, Deadline{1.0}), 0u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, Deadline{1.2}), 1u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, Deadline{1.3}), 2u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, Deadline{100}), 3u);
}

TEST(Policy, InfeasibleDeadline) {
  JOULE_EXPECT_ERROR(select_index(kTimes, kEnergies, Deadline{0.9}), ErrorCode::kNotFound,
                     "no point meets the deadline of 0.9 s: the fastest takes 1 s");
  JOULE_EXPECT_ERROR(select_index(kTimes, kEnergies, Deadline{0}), ErrorCode::kNotFound,
                     "no point meets the deadline of 0 s: the fastest takes 1 s");
}

TEST(Policy, MaxSlowdown) {
  EXPECT_EQ(*select_index(kTimes, kEnergies, MaxSlowdown{1}), 0u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, MaxSlowdown{1.1}), 1u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, MaxSlowdown{1.5}), 2u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, MaxSlowdown{2}), 3u);
  // A zero-time fastest point bounds everything to zero time.
  EXPECT_EQ(*select_index({0, 1}, {5, 1}, MaxSlowdown{10}), 0u);
}

TEST(Policy, EndsAreComputedNotAssumed) {
  EXPECT_EQ(*select_index(kTimes, kEnergies, MinEnergy{}), 3u);
  EXPECT_EQ(*select_index(kTimes, kEnergies, MinTime{}), 0u);
  // Unsorted input, with ties: the faster of equal energies, the cheaper of equal times.
  const std::vector<double> times_s = {2, 1, 3, 1, 2};
  const std::vector<double> energies_j = {5, 9, 5, 8, 5};
  EXPECT_EQ(*select_index(times_s, energies_j, MinEnergy{}), 0u);
  EXPECT_EQ(*select_index(times_s, energies_j, MinTime{}), 3u);
  EXPECT_EQ(*select_index(times_s, energies_j, MaxSlowdown{2}), 0u);
}

TEST(Policy, SingleAndEmptyInput) {
  for (const Policy& policy :
       std::vector<Policy>{ZeusCost{0.3, 100}, Deadline{2}, MaxSlowdown{1}, MinEnergy{}, MinTime{}}) {
    EXPECT_EQ(*select_index({2}, {7}, policy), 0u) << describe(policy);
  }
  JOULE_EXPECT_ERROR(select_index({}, {}, Deadline{2}), ErrorCode::kState,
                     "Deadline(2 s): there is no point to select from");
}

TEST(Policy, SelectReportsInvalidInput) {
  JOULE_EXPECT_ERROR(select_index(kTimes, kEnergies, MaxSlowdown{0.5}), ErrorCode::kInvalidArgument,
                     "MaxSlowdown factor must be finite and at least 1, got 0.5");
  // Parameters are checked before the points, so an empty list with a bad policy names the policy.
  JOULE_EXPECT_ERROR(select_index({}, {}, ZeusCost{2, 1}), ErrorCode::kInvalidArgument,
                     "ZeusCost eta must be in [0, 1], got 2");
  JOULE_EXPECT_ERROR(select_index({1, 2}, {1}, MinTime{}), ErrorCode::kInvalidArgument,
                     "2 times but 1 energies: every point needs both");
  JOULE_EXPECT_ERROR(select_index({1, kNan}, {1, 1}, MinTime{}), ErrorCode::kInvalidArgument,
                     "point 1 has time nan s: times must be finite and non-negative");
}

}  // namespace
}  // namespace joule

namespace joule {
namespace {

TEST(CarbonCost, DescribeAndValidate) {
  EXPECT_EQ(describe(CarbonCost{0.25, 412, 750, 300}),
            "CarbonCost(eta=0.25, intensity=412 g/kWh, max_intensity=750 g/kWh, max_power=300 W)");
  EXPECT_TRUE(validate(CarbonCost{0, 0, 1, 1}));
  EXPECT_TRUE(validate(CarbonCost{1, 900, 750, 250}));  // above the maximum: clamped, not an error
  const auto code = ErrorCode::kInvalidArgument;
  JOULE_EXPECT_ERROR(validate(CarbonCost{1.5, 400, 750, 300}), code,
                     "CarbonCost eta must be in [0, 1], got 1.5");
  JOULE_EXPECT_ERROR(validate(CarbonCost{0.5, -1, 750, 300}), code,
                     "CarbonCost intensity must be finite and non-negative, got -1 g/kWh");
  JOULE_EXPECT_ERROR(validate(CarbonCost{0.5, kNan, 750, 300}), code,
                     "CarbonCost intensity must be finite and non-negative, got nan g/kWh");
  JOULE_EXPECT_ERROR(validate(CarbonCost{0.5, 400, 0, 300}), code,
                     "CarbonCost max_intensity must be positive and finite, got 0 g/kWh");
  JOULE_EXPECT_ERROR(validate(CarbonCost{0.5, 400, 750, 0}), code,
                     "CarbonCost max_power_w must be positive and finite, got 0 W");
}

TEST(CarbonCost, EffectiveEtaMatchesChase) {
  // chase.md §4.1's table: eta = 0.25, MAX_CI = 750.
  EXPECT_NEAR((CarbonCost{0.25, 100, 750, 300}.effective_eta()), 0.043, 5e-4);
  EXPECT_NEAR((CarbonCost{0.25, 400, 750, 300}.effective_eta()), 0.151, 5e-4);
  EXPECT_NEAR((CarbonCost{0.25, 750, 750, 300}.effective_eta()), 0.25, 1e-12);
  // Clamped at the maximum.
  EXPECT_NEAR((CarbonCost{0.25, 900, 750, 300}.effective_eta()), 0.25, 1e-12);
  EXPECT_EQ((CarbonCost{0.25, 0, 750, 300}.effective_eta()), 0);
}

TEST(CarbonCost, PicksAsZeusCostWithTheEffectiveEta) {
  // A dirty grid moves the choice towards less energy; a clean one towards speed.
  const std::vector<double> times = {1.0, 1.1, 1.3, 1.8};
  const std::vector<double> energies = {300.0, 250.0, 220.0, 210.0};
  for (const double intensity : {0.0, 50.0, 200.0, 400.0, 600.0, 750.0, 1000.0}) {
    const CarbonCost carbon{0.6, intensity, 750, 300};
    EXPECT_EQ(*select_index(times, energies, carbon),
              *select_index(times, energies, ZeusCost{carbon.effective_eta(), 300}))
        << intensity;
  }
  EXPECT_EQ(*select_index(times, energies, CarbonCost{0.6, 0, 750, 300}), 0u);
  EXPECT_EQ(*select_index(times, energies, CarbonCost{0.9, 750, 750, 300}), 2u);
  // The same cost as Chase's formula, up to the factor MAX_CI (power / throughput = energy per sample).
  const CarbonCost carbon{0.25, 420, 750, 300};
  const double chase = (0.25 * 250.0 * 420 + 0.75 * 300 * 750) * 1.1 / 750;
  EXPECT_NEAR(carbon.cost(250.0 * 1.1, 1.1), chase, 1e-9);
}

}  // namespace
}  // namespace joule
