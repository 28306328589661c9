// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/request_energy.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::measure {
namespace {

TEST(RequestEnergyLedger, SplitsByTokensAndKeepsLatency) {
  RequestEnergyLedger ledger;
  ASSERT_TRUE(ledger.add_request("a", 0.0));
  ASSERT_TRUE(ledger.add_request("b", 0.5));
  // Iteration 1: a prefills 300 tokens and emits its first token.
  const IterationWork first[] = {{"a", 300, 0, true}};
  ASSERT_TRUE(ledger.record_iteration(1.0, 1.1, 30.0, first));
  // Iteration 2: a decodes one token while b prefills 99 tokens (first token): 1 : 99.
  const IterationWork second[] = {{"a", 0, 1, false}, {"b", 99, 0, true}};
  ASSERT_TRUE(ledger.record_iteration(1.1, 1.2, 10.0, second));
  // Iteration 3: both decode.
  const IterationWork third[] = {{"a", 0, 1, false}, {"b", 0, 1, false}};
  ASSERT_TRUE(ledger.record_iteration(1.2, 1.25, 4.0, third));
  ASSERT_TRUE(ledger.record_idle(2.5));

  const RequestEnergy a = ledger.finish_request("a").value();
  EXPECT_DOUBLE_EQ(a.prefill_energy_j, 30.0);
  EXPECT_DOUBLE_EQ(a.decode_energy_j, 0.1 + 2.0);
  EXPECT_DOUBLE_EQ(a.energy_j, 32.1);
  EXPECT_EQ(a.prompt_tokens, 300);
  EXPECT_EQ(a.output_tokens, 3);
  EXPECT_DOUBLE_EQ(*a.ttft_s(), 1.1);
  EXPECT_DOUBLE_EQ(*a.tpot_s(), (1.25 - 1.1) / 2);
  EXPECT_DOUBLE_EQ(a.energy_per_output_token_j(), 32.1 / 3);

  const RequestEnergy b = ledger.finish_request("b").value();
  EXPECT_DOUBLE_EQ(b.prefill_energy_j, 9.9);
  EXPECT_DOUBLE_EQ(b.decode_energy_j, 2.0);
  EXPECT_DOUBLE_EQ(*b.ttft_s(), 1.2 - 0.5);
  EXPECT_NEAR(*b.tpot_s(), 0.05, 1e-12);

  const LedgerTotals& totals = ledger.totals();
  EXPECT_DOUBLE_EQ(totals.energy_j, 46.5);
  EXPECT_DOUBLE_EQ(totals.idle_energy_j, 2.5);
  EXPECT_NEAR(totals.attributed_energy_j, 44.0, 1e-12);
  EXPECT_EQ(totals.iterations, 3);
  EXPECT_EQ(totals.prefill_tokens, 399);
  EXPECT_EQ(totals.decode_tokens, 3);
  EXPECT_EQ(ledger.active_requests(), 0u);
}

TEST(RequestEnergyLedger, WorkAndEqualRules) {
  RequestEnergyLedger by_work(AttributionRule::kWork);
  ASSERT_TRUE(by_work.add_request("a", 0));
  ASSERT_TRUE(by_work.add_request("b", 0));
  const IterationWork work[] = {{"a", 10, 0, true, 3.0}, {"b", 0, 1, false, 1.0}};
  ASSERT_TRUE(by_work.record_iteration(0, 1, 8.0, work));
  EXPECT_DOUBLE_EQ(by_work.find("a")->energy_j, 6.0);
  EXPECT_DOUBLE_EQ(by_work.find("b")->decode_energy_j, 2.0);

  RequestEnergyLedger equal(AttributionRule::kEqual);
  ASSERT_TRUE(equal.add_request("a", 0));
  ASSERT_TRUE(equal.add_request("b", 0));
  ASSERT_TRUE(equal.record_iteration(0, 1, 8.0, work));
  EXPECT_DOUBLE_EQ(equal.find("a")->energy_j, 4.0);
  EXPECT_DOUBLE_EQ(equal.find("b")->energy_j, 4.0);

  EXPECT_EQ(parse_attribution_rule("work").value(), AttributionRule::kWork);
  JOULE_EXPECT_ERROR(parse_attribution_rule("flops"), ErrorCode::kInvalidArgument,
                     "unknown attribution rule 'flops': expected tokens, work or equal");
}

TEST(RequestEnergyLedger, IterationWithoutRequestsIsIdle) {
  RequestEnergyLedger ledger;
  ASSERT_TRUE(ledger.record_iteration(0, 1, 5.0, {}));
  EXPECT_DOUBLE_EQ(ledger.totals().idle_energy_j, 5.0);
  EXPECT_DOUBLE_EQ(ledger.totals().attributed_energy_j, 0.0);
}

TEST(RequestEnergyLedger, BadInputRecordsNothing) {
  RequestEnergyLedger ledger;
  ASSERT_TRUE(ledger.add_request("a", 0));
  JOULE_EXPECT_ERROR(ledger.add_request("a", 1), ErrorCode::kState,
                     "request 'a' is already tracked (finish it first)");
  JOULE_EXPECT_ERROR(ledger.add_request("", 1), ErrorCode::kInvalidArgument,
                     "a request id must not be empty");
  JOULE_EXPECT_ERROR(ledger.add_request("n", std::nan("")), ErrorCode::kInvalidArgument,
                     "request 'n': arrival_s must be finite, got nan");
  const IterationWork good[] = {{"a", 1, 0, true}};
  JOULE_EXPECT_ERROR(
      ledger.record_iteration(2, 1, 1.0, good), ErrorCode::kInvalidArgument,
      "iteration not recorded: start_s and end_s must be finite with end_s >= start_s, got [2, 1]");
  JOULE_EXPECT_ERROR(ledger.record_iteration(0, 1, -1.0, good), ErrorCode::kInvalidArgument,
                     "iteration not recorded: energy_j must be finite and >= 0, got -1");
  const IterationWork unknown[] = {{"a", 1, 0, true}, {"zz", 0, 1, false}};
  JOULE_EXPECT_ERROR(ledger.record_iteration(0, 1, 1.0, unknown), ErrorCode::kNotFound,
                     "iteration not recorded: request 'zz' was never added (add_request first)");
  const IterationWork twice[] = {{"a", 1, 0, true}, {"a", 0, 1, false}};
  JOULE_EXPECT_ERROR(ledger.record_iteration(0, 1, 1.0, twice), ErrorCode::kInvalidArgument,
                     "iteration not recorded: request 'a' is listed twice");
  const IterationWork negative[] = {{"a", -1, 0, false}};
  JOULE_EXPECT_ERROR(
      ledger.record_iteration(0, 1, 1.0, negative), ErrorCode::kInvalidArgument,
      "iteration not recorded: request 'a': token counts must be >= 0, got prefill -1 decode 0");
  const IterationWork nothing[] = {{"a", 0, 0, false}};
  JOULE_EXPECT_ERROR(
      ledger.record_iteration(0, 1, 1.0, nothing), ErrorCode::kInvalidArgument,
      "iteration not recorded: request 'a' processed no token (leave it out of the iteration)");
  EXPECT_EQ(ledger.totals().iterations, 0);
  EXPECT_DOUBLE_EQ(ledger.find("a")->energy_j, 0.0);
  JOULE_EXPECT_ERROR(ledger.record_idle(-2), ErrorCode::kInvalidArgument,
                     "idle energy_j must be finite and >= 0, got -2");
  JOULE_EXPECT_ERROR(ledger.finish_request("b"), ErrorCode::kNotFound, "request 'b' is not tracked");
}

}  // namespace
}  // namespace joule::measure

namespace joule::measure {
namespace {

TEST(AttributeEnergyOverTime, SplitsEachIntervalAmongTheRequestsInFlight) {
  // Four 1-s intervals; a in flight over [0, 2], b over [1, 3]; nothing over [3, 4].
  const EnergyInterval intervals[] = {{0, 1, 10}, {1, 2, 20}, {2, 3, 30}, {3, 4, 40}};
  const FlightInterval requests[] = {{0, 2}, {1, 3}};
  const TimelineAttribution result = attribute_energy_over_time(intervals, requests).value();
  ASSERT_EQ(result.request_energy_j.size(), 2u);
  EXPECT_DOUBLE_EQ(result.request_energy_j[0], 10 + 20.0 / 2);
  EXPECT_DOUBLE_EQ(result.request_energy_j[1], 20.0 / 2 + 30);
  EXPECT_DOUBLE_EQ(result.energy_j, 100);
  EXPECT_DOUBLE_EQ(result.idle_energy_j, 40);
  EXPECT_DOUBLE_EQ(result.attributed_energy_j, 60);
}

TEST(AttributeEnergyOverTime, PartialOverlapGetsThePartOfTheInterval) {
  // One 1-s interval of 8 J: a over [0.25, 0.75] alone, so half the energy is a's and half idle; b over
  // [0.5, 0.75] shares a's last quarter.
  const EnergyInterval intervals[] = {{0, 1, 8}};
  const FlightInterval requests[] = {{0.25, 0.75}, {0.5, 0.75}, {0.6, 0.6}};
  const TimelineAttribution result = attribute_energy_over_time(intervals, requests).value();
  EXPECT_DOUBLE_EQ(result.request_energy_j[0], 2 + 1);
  EXPECT_DOUBLE_EQ(result.request_energy_j[1], 1);
  EXPECT_DOUBLE_EQ(result.request_energy_j[2], 0);  // no duration, nothing
  EXPECT_DOUBLE_EQ(result.idle_energy_j, 4);
  EXPECT_DOUBLE_EQ(result.attributed_energy_j + result.idle_energy_j, result.energy_j);
}

TEST(AttributeEnergyOverTime, TimeOutsideTheIntervalsCostsNothing) {
  // A gap [1, 2] with no measurement, and requests reaching before and after the measured span.
  const EnergyInterval intervals[] = {{0, 1, 6}, {2, 3, 6}};
  const FlightInterval requests[] = {{-5, 0.5}, {0.5, 2.5}, {2.5, 10}, {20, 30}};
  const TimelineAttribution result = attribute_energy_over_time(intervals, requests).value();
  EXPECT_DOUBLE_EQ(result.request_energy_j[0], 3);
  EXPECT_DOUBLE_EQ(result.request_energy_j[1], 3 + 3);
  EXPECT_DOUBLE_EQ(result.request_energy_j[2], 3);
  EXPECT_DOUBLE_EQ(result.request_energy_j[3], 0);
  EXPECT_DOUBLE_EQ(result.idle_energy_j, 0);
  EXPECT_DOUBLE_EQ(result.attributed_energy_j, 12);
}

TEST(AttributeEnergyOverTime, SharesAddUpOnAManyRequestTimeline) {
  // 100-ms intervals of varying energy over 60 s and 500 overlapping requests: the shares add up to the
  // energy minus idle, whatever the overlap.
  std::vector<EnergyInterval> intervals;
  for (int i = 0; i < 600; ++i)
    intervals.push_back({i * 0.1, (i + 1) * 0.1, 20.0 + (i * 37 % 11)});
  std::vector<FlightInterval> requests;
  uint64_t state = 7;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  for (int r = 0; r < 500; ++r) {
    const double start = next() * 50;
    requests.push_back({start, start + next() * 5});
  }
  const TimelineAttribution result = attribute_energy_over_time(intervals, requests).value();
  double sum = 0;
  for (const double energy : result.request_energy_j) {
    EXPECT_GE(energy, 0);
    sum += energy;
  }
  EXPECT_NEAR(sum, result.attributed_energy_j, 1e-9 * result.energy_j);
  EXPECT_NEAR(result.attributed_energy_j + result.idle_energy_j, result.energy_j, 1e-9 * result.energy_j);
  EXPECT_GT(result.idle_energy_j, 0);  // the last 5 s at least
}

TEST(AttributeEnergyOverTime, EmptyInputs) {
  const FlightInterval requests[] = {{0, 1}};
  const TimelineAttribution none = attribute_energy_over_time({}, requests).value();
  EXPECT_EQ(none.request_energy_j, std::vector<double>{0.0});
  const EnergyInterval intervals[] = {{0, 1, 5}};
  const TimelineAttribution idle = attribute_energy_over_time(intervals, {}).value();
  EXPECT_DOUBLE_EQ(idle.idle_energy_j, 5);
  EXPECT_DOUBLE_EQ(idle.attributed_energy_j, 0);
}

TEST(AttributeEnergyOverTime, RefusesBadInput) {
  const FlightInterval ok_requests[] = {{0, 1}};
  const EnergyInterval ok_intervals[] = {{0, 1, 1}};
  const auto message = [](const Result<TimelineAttribution>& result) {
    EXPECT_FALSE(result);
    return result ? std::string() : result.error().message();
  };
  const EnergyInterval overlapping[] = {{0, 1, 1}, {0.5, 2, 1}};
  EXPECT_EQ(
      message(attribute_energy_over_time(overlapping, ok_requests)),
      "energy interval 1: starts at 0.5 s, before the previous one ends (1 s): intervals must be sorted "
      "and not overlap");
  const EnergyInterval negative[] = {{0, 1, -1}};
  EXPECT_EQ(message(attribute_energy_over_time(negative, ok_requests)),
            "energy interval 0: negative energy -1 J");
  const EnergyInterval backwards[] = {{1, 0, 1}};
  EXPECT_EQ(message(attribute_energy_over_time(backwards, ok_requests)),
            "energy interval 0: ends at 0 s, before it starts at 1 s");
  const EnergyInterval instant[] = {{1, 1, 1}};
  EXPECT_EQ(message(attribute_energy_over_time(instant, ok_requests)), "energy interval 0: 1 J over no time");
  const EnergyInterval not_finite[] = {{0, 1, std::nan("")}};
  EXPECT_EQ(message(attribute_energy_over_time(not_finite, ok_requests)),
            "energy interval 0: times and energy must be finite");
  const FlightInterval backwards_request[] = {{0, 1}, {2, 1}};
  EXPECT_EQ(message(attribute_energy_over_time(ok_intervals, backwards_request)),
            "request 1: ends at 1 s, before it starts at 2 s");
  const FlightInterval infinite_request[] = {{0, INFINITY}};
  EXPECT_EQ(message(attribute_energy_over_time(ok_intervals, infinite_request)),
            "request 0: times must be finite");
}

}  // namespace
}  // namespace joule::measure
