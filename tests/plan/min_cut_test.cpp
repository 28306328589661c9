// SPDX-License-Identifier: Apache-2.0
#include "plan/solver/min_cut.hpp"

#include <gtest/gtest.h>

namespace joule::plan::detail {
namespace {

using Status = CutResult::Status;

TEST(MinCut, PlainMinimumCut) {
  // s=0 → 1 (3), s → 2 (2), 1 → 3 (1), 2 → 3 (5), 1 → 2 (4); t = 3. Min cut {0,1,2} | {3}: 1 + 5 = 6? or
  // {0} | {1,2,3}: 3 + 2 = 5. The minimum is 5.
  const std::vector<CutArc> arcs = {{0, 1, 0, 3}, {0, 2, 0, 2}, {1, 3, 0, 1}, {2, 3, 0, 5}, {1, 2, 0, 4}};
  const CutResult cut = min_cut_with_lower_bounds(4, 0, 3, arcs);
  ASSERT_EQ(cut.status, Status::kOk);
  EXPECT_EQ(cut.value, 5);
  EXPECT_EQ(cut.source_side, (std::vector<char>{1, 0, 0, 0}));
}

TEST(MinCut, LowerBoundsOnBackwardArcsReduceTheCut) {
  // Two paths s → a → t and s → b → t joined by b → a with lower bound 2. Cutting {s, b} | {a, t} crosses
  // s → a (4) and b → t (4) forward and a ... no backward arc; cutting {s, a} | {b, t} crosses s → b (4),
  // a → t (4) forward and b → a backward, which gives back its lower bound: 4 + 4 − 2 = 6.
  const std::vector<CutArc> arcs = {{0, 1, 0, 4}, {0, 2, 0, 4}, {1, 3, 0, 4}, {2, 3, 0, 4}, {2, 1, 2, 10}};
  const CutResult cut = min_cut_with_lower_bounds(4, 0, 3, arcs);
  ASSERT_EQ(cut.status, Status::kOk);
  EXPECT_EQ(cut.value, 6);
  EXPECT_EQ(cut.source_side, (std::vector<char>{1, 1, 0, 0}));
}

TEST(MinCut, UnboundedAndInfeasible) {
  const std::vector<CutArc> unbounded = {{0, 1, 0, kInfiniteCapacity}, {1, 2, 0, kInfiniteCapacity}};
  EXPECT_EQ(min_cut_with_lower_bounds(3, 0, 2, unbounded).status, Status::kUnbounded);
  // A lower bound of 5 through an arc that can carry at most 3 after it.
  const std::vector<CutArc> infeasible = {{0, 1, 5, 10}, {1, 2, 0, 3}};
  EXPECT_EQ(min_cut_with_lower_bounds(3, 0, 2, infeasible).status, Status::kInfeasible);
}

// The cut is the smallest source side of all minimum cuts, whatever flow the solver starts from: a maximum
// flow, an unbalanced guess, or guesses outside the bounds.
TEST(MinCut, TheSameCutFromAnyStartingFlow) {
  std::vector<CutArc> arcs = {{0, 1, 0, 4}, {0, 2, 0, 4}, {1, 3, 0, 4}, {2, 3, 0, 4}, {2, 1, 2, 10}};
  const CutResult cold = min_cut_with_lower_bounds(4, 0, 3, arcs);
  ASSERT_EQ(cold.status, CutResult::Status::kOk);
  ASSERT_EQ(cold.flow.size(), arcs.size());
  for (const MaxFlowAlgorithm algorithm : {MaxFlowAlgorithm::kDinic, MaxFlowAlgorithm::kBoostPushRelabel}) {
    for (const std::vector<int64_t>& start :
         {cold.flow, std::vector<int64_t>{3, 0, 0, 7, 1}, std::vector<int64_t>{-5, 100, 2, 2, 0}}) {
      for (size_t i = 0; i < arcs.size(); ++i) {
        arcs[i].flow = start[i];
      }
      const CutResult warm = min_cut_with_lower_bounds(4, 0, 3, arcs, algorithm);
      ASSERT_EQ(warm.status, CutResult::Status::kOk);
      EXPECT_EQ(warm.source_side, cold.source_side);
      EXPECT_EQ(warm.value, cold.value);
      // What it returns is a maximum flow within the bounds: it carries the cut's value out of the source.
      int64_t out_of_source = 0;
      for (size_t i = 0; i < arcs.size(); ++i) {
        EXPECT_GE(warm.flow[i], arcs[i].lower);
        EXPECT_LE(warm.flow[i], arcs[i].upper);
        out_of_source += arcs[i].from == 0 ? warm.flow[i] : 0;
      }
      EXPECT_EQ(out_of_source, cold.value);
    }
  }
}

}  // namespace
}  // namespace joule::plan::detail
