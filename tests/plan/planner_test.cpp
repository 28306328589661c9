// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/planner.hpp"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "joule/core/csv.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

const std::string kDataDir = JOULE_PERSEUS_DATA_DIR;

struct ReferencePoint {
  double time_s;
  double energy_j;
};

std::vector<ReferencePoint> reference_frontier() {
  const auto table = csv::read_file(kDataDir + "/example_s4_m8_reference_frontier.csv");
  EXPECT_TRUE(table) << table.error().message();
  std::vector<ReferencePoint> points;
  const size_t time = *table->column("time_s");
  const size_t energy = *table->column("energy_j");
  for (size_t r = 0; r < table->row_count(); ++r) {
    points.push_back({*table->row(r).number(time), *table->row(r).number(energy)});
  }
  return points;
}

struct Example {
  Profile profile;
  PipelineDag dag;
};

Example example(int microbatches = 8, Schedule schedule = Schedule::k1F1B) {
  auto profile = Profile::read(kDataDir + "/example_s4_m8_profile.csv");
  EXPECT_TRUE(profile) << profile.error().message();
  auto dag = build_pipeline(4, microbatches, schedule);
  EXPECT_TRUE(dag) << dag.error().message();
  return {std::move(*profile), std::move(*dag)};
}

// The energy of the best point of `frontier` no slower than `time_s`, or +inf.
double best_energy_within(const Frontier<FrequencyPlan>& frontier, double time_s) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& point : frontier.points()) {
    if (point.time_s <= time_s) {
      best = std::min(best, point.energy_j);
    }
  }
  return best;
}

TEST(Planner, AtLeastAsGoodAsTheReferenceEverywhere) {
  const Example e = example();
  PlannerOptions options;
  options.unit_time_s = 1e-3;
  options.p_blocking_w = 75;
  const auto result = plan_frontier(e.dag, e.profile, options);
  ASSERT_TRUE(result) << result.error().message();
  const auto& frontier = result->frontier;
  ASSERT_FALSE(frontier.empty());
  EXPECT_NEAR(result->max_clock.time_s, 0.740, 1e-3);
  EXPECT_NEAR(result->max_clock.energy_j, 852.27, 0.01);
  const auto reference = reference_frontier();
  ASSERT_EQ(reference.size(), 336u);
  double worst_energy_ratio = 0;
  for (const ReferencePoint& point : reference) {
    // Some point no slower (within 0.2%) with no more energy (within 0.5%).
    const double ours = best_energy_within(frontier, point.time_s * 1.002);
    EXPECT_LE(ours, point.energy_j * 1.005)
        << "reference point " << point.time_s << " s, " << point.energy_j << " J";
    worst_energy_ratio = std::max(worst_energy_ratio, ours / point.energy_j);
  }
  // Both ends: the fastest point (0.740 s) and the all-slowest end.
  EXPECT_LE(frontier.fastest().time_s, 0.740 * 1.002);
  EXPECT_LE(frontier.fastest().energy_j, reference.back().energy_j * 1.005);
  EXPECT_LE(best_energy_within(frontier, reference.front().time_s * 1.002),
            reference.front().energy_j * 1.005);
  RecordProperty("worst_energy_ratio_vs_reference", fmt::format("{:.5f}", worst_energy_ratio));
  RecordProperty("points", static_cast<int>(frontier.size()));
  RecordProperty("iterations", static_cast<int>(result->iterations));
}

}  // namespace
}  // namespace joule::plan
