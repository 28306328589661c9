// SPDX-License-Identifier: Apache-2.0
// Deferrable work (joule/cluster/deferral.hpp): the cleanest hours before the deadline, within the watts
// left; earliest deadline first; a deadline that cannot be met is marked at risk, never dropped.
#include "joule/cluster/deferral.hpp"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::cluster {
namespace {

constexpr double kHourS = 3600;

std::vector<ForecastSlot> day(std::vector<double> intensities, double available_w = 10'000) {
  std::vector<ForecastSlot> slots;
  for (const double intensity : intensities) {
    slots.push_back({kHourS, intensity, available_w});
  }
  return slots;
}

TEST(Deferral, RunsInTheCleanestHoursBeforeTheDeadline) {
  const std::vector<DeferrableWork> work = {{"train", 2000, 2 * kHourS, 4 * kHourS}};
  const auto plan = plan_deferrable(work, day({500, 100, 400, 50, 20}));
  ASSERT_TRUE(plan) << plan.error().message();
  const DeferralDecision& job = plan->jobs[0];
  // The cleanest two hours before the 4-hour deadline: the second and the fourth (not the fifth, after it).
  EXPECT_EQ(job.run_s, (std::vector<double>{0, kHourS, 0, kHourS, 0}));
  EXPECT_FALSE(job.runs_now);
  EXPECT_FALSE(job.at_risk);
  EXPECT_DOUBLE_EQ(job.finish_s, 4 * kHourS);
  // 2 kW for an hour is 2 kWh: 200 g + 100 g, against 1000 g + 200 g as soon as possible.
  EXPECT_NEAR(job.carbon_g, 300, 1e-9);
  EXPECT_NEAR(plan->carbon_as_soon_as_possible_g, 1200, 1e-9);
}

TEST(Deferral, ATightDeadlineRunsNowAndTheEarliestDeadlineChoosesFirst) {
  const std::vector<DeferrableWork> work = {
      {"later", 6000, 1 * kHourS, 3 * kHourS},
      {"sooner", 6000, 1.5 * kHourS, 2 * kHourS},
  };
  // 10 kW to spare: the two 6 kW jobs cannot run together; a slot's spare watt-seconds are shared.
  const auto plan = plan_deferrable(work, day({300, 200, 100}));
  ASSERT_TRUE(plan) << plan.error().message();
  const DeferralDecision& sooner = plan->jobs[1];
  EXPECT_EQ(sooner.id, "sooner");
  EXPECT_EQ(sooner.run_s, (std::vector<double>{0.5 * kHourS, kHourS, 0}));
  EXPECT_TRUE(sooner.runs_now);
  const DeferralDecision& later = plan->jobs[0];
  EXPECT_EQ(later.run_s, (std::vector<double>{0, 0, kHourS}));
  EXPECT_FALSE(later.runs_now);
  EXPECT_FALSE(later.at_risk);
  EXPECT_LT(plan->carbon_g, plan->carbon_as_soon_as_possible_g);
}

TEST(Deferral, ADeadlineThatCannotBeMetIsAtRiskAndRunsAsSoonAsItCan) {
  // 3 hours of work, 2 hours to the deadline, and the first hour has no watts to spare.
  std::vector<ForecastSlot> forecast = day({100, 300, 200, 50});
  forecast[0].available_w = 0;
  const std::vector<DeferrableWork> work = {{"big", 1000, 3 * kHourS, 2 * kHourS}};
  const auto plan = plan_deferrable(work, forecast);
  ASSERT_TRUE(plan) << plan.error().message();
  const DeferralDecision& job = plan->jobs[0];
  EXPECT_TRUE(job.at_risk);
  EXPECT_EQ(job.run_s, (std::vector<double>{0, kHourS, kHourS, kHourS}));
  EXPECT_DOUBLE_EQ(job.finish_s, 4 * kHourS);
  // A job drawing more than a slot leaves never runs in it.
  const std::vector<DeferrableWork> huge = {{"huge", 20'000, kHourS, 4 * kHourS}};
  const auto none = plan_deferrable(huge, day({100, 200}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->jobs[0].at_risk);
  EXPECT_EQ(none->jobs[0].run_s, (std::vector<double>{0, 0}));
}

TEST(Deferral, RefusesBadInputSayingWhich) {
  const auto error_of = [](std::vector<DeferrableWork> work, std::vector<ForecastSlot> forecast) {
    const auto plan = plan_deferrable(work, forecast);
    return plan ? std::string() : plan.error().message();
  };
  const std::vector<ForecastSlot> forecast = day({100});
  EXPECT_EQ(error_of({{"a", 100, 60, -120}}, forecast),
            "job 'a': its deadline passed 120 s ago: give a later one, or run it as non-deferrable");
  EXPECT_EQ(error_of({{"a", 0, 60, 120}}, forecast),
            "job 'a': its power must be a positive number of watts, got 0");
  EXPECT_EQ(error_of({{"a", 100, -1, 120}}, forecast), "job 'a': its remaining time must be ≥ 0 s, got -1");
  EXPECT_EQ(error_of({{"a", 100, 60, NAN}}, forecast), "job 'a': its deadline is not a number");
  EXPECT_EQ(error_of({{"a", 100, 60, 120}}, {}), "the carbon forecast has no slot");
  EXPECT_EQ(error_of({{"a", 100, 60, 120}}, {{0, 100, 100}}),
            "forecast slot 0: length 0 s, intensity 100 g/kWh and available power 100 W must be positive, "
            "non-negative and non-negative");
}

}  // namespace
}  // namespace joule::cluster
