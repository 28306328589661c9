// SPDX-License-Identifier: Apache-2.0
// measure::attribute_energy_by_work() and split_by_work(): energy over time shared by prefill and decode
// work (docs/inference.md, `joule infer bench --attribution work`).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "joule/measure/request_energy.hpp"

namespace joule::measure {
namespace {

double sum(const std::vector<double>& values) {
  double total = 0;
  for (const double value : values) {
    total += value;
  }
  return total;
}

TEST(SplitByWork, SharesByWeightedTokensAndNothingWithoutWork) {
  const TokenWork work[] = {{100, 0}, {0, 5}, {0, 0}};
  double shares[3];
  EXPECT_DOUBLE_EQ(split_by_work(21, work, {1, 4}, shares), 21);
  EXPECT_DOUBLE_EQ(shares[0], 21 * 100.0 / 120);  // 100 prompt tokens against 5 decoded ones at 4 each
  EXPECT_DOUBLE_EQ(shares[1], 21 * 20.0 / 120);
  EXPECT_EQ(shares[2], 0);
  const TokenWork idle[] = {{0, 0}};
  double none[1];
  EXPECT_EQ(split_by_work(7, idle, {}, none), 0);
  EXPECT_EQ(none[0], 0);
  double wrong[2];
  EXPECT_THROW(split_by_work(1, idle, {}, wrong), std::invalid_argument);
}

TEST(AttributeEnergyByWork, DecodeTokensAtTheirArrivalsAndPrefillSpreadToTheFirstToken) {
  // Two 1-s intervals of 10 J and 20 J. a: sent at 0, first token at 1 (100 prompt tokens spread over
  // [0, 1]), tokens arriving at 1.5 (3 of them); b: sent at 0, 10 prompt tokens over [0, 1], 1 token at 1.5.
  const EnergyInterval intervals[] = {{0, 1, 10}, {1, 2, 20}};
  const TokenArrival a_tokens[] = {{1.5, 3}};
  const TokenArrival b_tokens[] = {{1.5, 1}};
  const RequestWork requests[] = {{0, 2, 100, 1.0, 3, a_tokens}, {0, 2, 10, 1.0, 1, b_tokens}};
  const TimelineAttribution result = attribute_energy_by_work(intervals, requests).value();
  // Interval 0: prefill only, 100 : 10. Interval 1: decode only, 3 : 1.
  EXPECT_DOUBLE_EQ(result.request_energy_j[0], 10 * 100.0 / 110 + 20 * 3.0 / 4);
  EXPECT_DOUBLE_EQ(result.request_energy_j[1], 10 * 10.0 / 110 + 20 * 1.0 / 4);
  EXPECT_DOUBLE_EQ(result.idle_energy_j, 0);
  EXPECT_NEAR(result.attributed_energy_j, 30, 1e-12);
}

TEST(AttributeEnergyByWork, ALongPromptPaysMoreThanAShortOneInTheSameInterval) {
  // Both in flight over the whole interval; the equal rule would give each 5 J.
  const EnergyInterval intervals[] = {{0, 1, 10}};
  const RequestWork requests[] = {{0, 1, 2000, 0.9, 1, {}}, {0, 1, 10, 0.9, 1, {}}};
  const TimelineAttribution by_work = attribute_energy_by_work(intervals, requests).value();
  EXPECT_GT(by_work.request_energy_j[0], 100 * by_work.request_energy_j[1]);
  EXPECT_NEAR(by_work.request_energy_j[0] + by_work.request_energy_j[1], 10, 1e-12);
}

TEST(AttributeEnergyByWork, WeightsChangeTheProportions) {
  const EnergyInterval intervals[] = {{0, 1, 12}};
  const TokenArrival decoded[] = {{0.5, 1}};
  const RequestWork requests[] = {{0, 1, 10, 0.0, 0, {}}, {0, 1, 0, 0.5, 1, decoded}};
  // a's 10 prompt tokens are processed at once (first token at its start): an instant of work at 0.
  const TimelineAttribution ones = attribute_energy_by_work(intervals, requests).value();
  EXPECT_DOUBLE_EQ(ones.request_energy_j[0], 12 * 10.0 / 11);
  const TimelineAttribution weighted = attribute_energy_by_work(intervals, requests, {1, 10}).value();
  EXPECT_DOUBLE_EQ(weighted.request_energy_j[0], 6);
  EXPECT_DOUBLE_EQ(weighted.request_energy_j[1], 6);
}

TEST(AttributeEnergyByWork, IntervalsWithoutWorkAreSharedEquallyAndIdleIsCharged) {
  // [0, 1]: a queued, no work: the equal rule gives it all. [1, 2]: a decodes 2 tokens while b is in flight
  // doing nothing: a gets all. [2, 3]: nobody in flight: idle. [3, 4]: b in flight half of it, no work:
  // b gets half, half idle.
  const EnergyInterval intervals[] = {{0, 1, 4}, {1, 2, 8}, {2, 3, 16}, {3, 4, 32}};
  const TokenArrival a_tokens[] = {{1.5, 2}};
  const RequestWork requests[] = {
      {0, 2, 0, 1.5, 2, a_tokens}, {1, 2, 0, std::nullopt, 0, {}}, {3.5, 4, 0, std::nullopt, 0, {}}};
  const TimelineAttribution result = attribute_energy_by_work(intervals, requests).value();
  EXPECT_DOUBLE_EQ(result.request_energy_j[0], 4 + 8);
  EXPECT_DOUBLE_EQ(result.request_energy_j[1], 0);
  EXPECT_DOUBLE_EQ(result.request_energy_j[2], 16);
  EXPECT_DOUBLE_EQ(result.idle_energy_j, 16 + 16);
  // In an interval with work, the part of it with nobody in flight is idle too.
  const EnergyInterval one[] = {{0, 1, 10}};
  const TokenArrival at_half[] = {{0.5, 1}};
  const RequestWork half[] = {{0.5, 1, 0, 0.5, 1, at_half}};
  const TimelineAttribution part = attribute_energy_by_work(one, half).value();
  EXPECT_DOUBLE_EQ(part.request_energy_j[0], 5);
  EXPECT_DOUBLE_EQ(part.idle_energy_j, 5);
}

TEST(AttributeEnergyByWork, SharesAndIdleAddUpToTheTotalOnAManyRequestTimeline) {
  std::mt19937_64 random(26);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<EnergyInterval> intervals;
  for (int i = 0; i < 600; ++i) {
    intervals.push_back({i * 0.1, (i + 1) * 0.1, 5 + 100 * unit(random)});
  }
  std::vector<std::vector<TokenArrival>> arrivals(400);
  std::vector<RequestWork> requests;
  for (size_t r = 0; r < arrivals.size(); ++r) {
    const double start_s = 58 * unit(random);
    const double first_s = start_s + 0.5 * unit(random);
    const double end_s = first_s + 2 * unit(random);
    for (double t = first_s; t <= end_s; t += 0.02 + 0.1 * unit(random)) {
      arrivals[r].push_back({t, 1 + std::floor(3 * unit(random))});
    }
    const bool streamed = r % 3 != 0;
    requests.push_back(
        {start_s, end_s, std::floor(2000 * unit(random)),
         streamed ? std::optional<double>(first_s) : std::nullopt, 50,
         streamed ? std::span<const TokenArrival>(arrivals[r]) : std::span<const TokenArrival>()});
  }
  const TimelineAttribution result = attribute_energy_by_work(intervals, requests, {1, 6.5}).value();
  const double total_j = result.energy_j;
  EXPECT_NEAR(sum(result.request_energy_j) + result.idle_energy_j, total_j, 1e-9 * total_j);
  EXPECT_NEAR(result.attributed_energy_j, sum(result.request_energy_j), 1e-9 * total_j);
  for (const double share : result.request_energy_j) {
    EXPECT_GE(share, 0);
  }
}

TEST(AttributeEnergyByWork, RefusesBadInput) {
  const EnergyInterval intervals[] = {{0, 1, 1}};
  const auto refused = [&](const RequestWork& request, const WorkWeights& weights = {}) {
    const RequestWork requests[] = {request};
    const auto result = attribute_energy_by_work(intervals, requests, weights);
    EXPECT_FALSE(result);
    return result ? std::string() : result.error().message();
  };
  EXPECT_EQ(refused({0, 1, -1, std::nullopt, 0, {}}),
            "request 0: token counts must be finite and >= 0, got prefill -1 decode 0");
  EXPECT_EQ(refused({0, 1, 0, 2.0, 0, {}}), "request 0: first token at 2 s, outside its flight [0, 1] s");
  const TokenArrival late[] = {{3, 1}};
  EXPECT_EQ(refused({0, 1, 0, 0.5, 0, late}),
            "request 0: 1 tokens arriving at 3 s: the count must be finite and >= 0, the time within its "
            "flight [0, 1] s");
  EXPECT_EQ(refused({1, 0, 0, std::nullopt, 0, {}}), "request 0: ends at 0 s, before it starts at 1 s");
  EXPECT_EQ(refused({0, 1, 0, std::nullopt, 0, {}}, {0, 0}),
            "work weights must be finite numbers >= 0, not both 0; got 0 per prefill token and 0 per decode "
            "token");
  const EnergyInterval overlapping[] = {{0, 1, 1}, {0.5, 2, 1}};
  EXPECT_FALSE(attribute_energy_by_work(overlapping, {}));
}

}  // namespace
}  // namespace joule::measure
