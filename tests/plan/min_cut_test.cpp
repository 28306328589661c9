// SPDX-License-Identifier: Apache-2.0
#include "plan/min_cut.hpp"

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

}  // namespace
}  // namespace joule::plan::detail
