// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/request_energy.hpp"

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
