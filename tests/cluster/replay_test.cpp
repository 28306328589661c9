// SPDX-License-Identifier: Apache-2.0
// The cluster replay on a small cluster over a short horizon: determinism, conservation, the cap, deadlines
// and every bad input's message. The 1,000-GPU, 14-day figures are in bench/cluster_replay_bench.
#include "joule/cluster/replay.hpp"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::cluster {
namespace {

const std::string kCarbonTrace = std::string(JOULE_SOURCE_DIR) + "/data/carbon/synthetic_us_solar_14d.csv";

ReplayOptions small() {
  ReplayOptions options;
  options.gpus = 80;
  options.days = 2;
  options.cap_share = 0.7;
  options.deferrable_share = 0.3;
  options.seed = 3;
  options.carbon_trace_path = kCarbonTrace;
  return options;
}

const ReplayReport& small_report() {
  static const ReplayReport report = [] {
    auto result = run_cluster_replay(small());
    if (!result) {
      throw std::runtime_error(result.error().message());
    }
    return *result;
  }();
  return report;
}

const PolicyReport& policy(const ReplayReport& report, ReplayPolicy which) {
  for (const auto& p : report.policies) {
    if (p.policy == which) {
      return p;
    }
  }
  throw std::runtime_error("policy missing");
}

TEST(ClusterReplay, RunsEveryPolicyOnASmallCluster) {
  const ReplayReport& report = small_report();
  ASSERT_EQ(report.policies.size(), 5u);
  EXPECT_EQ(report.training_gpus + report.inference_gpus, 80);
  EXPECT_GT(report.inference_gpus, 0);
  EXPECT_GT(report.jobs, 0);
  EXPECT_EQ(report.periods, 2 * 288);
  EXPECT_NEAR(report.cap_w, 0.7 * report.max_power_w, 1e-6);
  EXPECT_DOUBLE_EQ(policy(report, ReplayPolicy::kUncapped).throughput_vs_uncapped, 1.0);
  for (const auto& p : report.policies) {
    EXPECT_GT(p.training_work_gpu_s, 0) << p.name;
    EXPECT_GE(p.slo_attainment, 0) << p.name;
    EXPECT_LE(p.slo_attainment, 1) << p.name;
    EXPECT_EQ(p.power_w.size(), static_cast<size_t>(report.periods)) << p.name;
  }
}

TEST(ClusterReplay, IsDeterministicForASeed) {
  auto again = run_cluster_replay(small());
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(to_json(*again), to_json(small_report()));
  ReplayOptions other = small();
  other.seed = 4;
  auto different = run_cluster_replay(other);
  ASSERT_TRUE(different) << different.error().message();
  EXPECT_NE(to_json(*different), to_json(small_report()));
}

TEST(ClusterReplay, PerPeriodEnergyAndCarbonSumToTheTotals) {
  const ReplayReport& report = small_report();
  const double period_s = report.options.control_period_s;
  for (const auto& p : report.policies) {
    double energy_j = 0;
    double carbon_g = 0;
    for (size_t k = 0; k < p.power_w.size(); ++k) {
      energy_j += p.power_w[k] * period_s;
      carbon_g += p.power_w[k] * period_s / 3.6e6 * report.intensity_g_per_kwh[k];
    }
    EXPECT_NEAR(energy_j, p.energy_j, 1e-9 * p.energy_j) << p.name;
    EXPECT_NEAR(carbon_g, p.carbon_g, 1e-9 * p.carbon_g) << p.name;
    EXPECT_NEAR(p.mean_power_w * report.options.days * 86400, p.energy_j, 1e-9 * p.energy_j) << p.name;
    EXPECT_LE(p.training_energy_j, p.energy_j) << p.name;
  }
}

TEST(ClusterReplay, TheAutopilotNeverExceedsTheCapWhenJobsKeepTheirLimits) {
  for (double cap_share : {0.55, 0.7, 0.85}) {
    ReplayOptions options = small();
    options.cap_share = cap_share;
    options.autopilot_follows_carbon = cap_share != 0.7;  // both ways of offering watts hold the cap
    options.policies = {ReplayPolicy::kUncapped, ReplayPolicy::kAutopilot};
    auto report = run_cluster_replay(options);
    ASSERT_TRUE(report) << report.error().message();
    const PolicyReport& autopilot = policy(*report, ReplayPolicy::kAutopilot);
    EXPECT_EQ(autopilot.periods_over_cap, 0) << cap_share;
    EXPECT_EQ(autopilot.energy_over_cap_j, 0) << cap_share;
    EXPECT_LE(autopilot.peak_power_w, report->cap_w * (1 + 1e-9)) << cap_share;
  }
  // The uniform cap holds it too (every limit at cap / N); the uncapped cluster does not at a low cap.
  ReplayOptions options = small();
  options.cap_share = 0.55;
  options.policies = {ReplayPolicy::kUncapped, ReplayPolicy::kUniformCap};
  auto report = run_cluster_replay(options);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_GT(policy(*report, ReplayPolicy::kUncapped).periods_over_cap, 0);
}

TEST(ClusterReplay, DeadlinesAreMetOrReported) {
  const ReplayReport& report = small_report();
  for (const auto& p : report.policies) {
    EXPECT_GT(p.deadlines_due, 0) << p.name;
    EXPECT_LE(p.deadlines_met, p.deadlines_due) << p.name;
    EXPECT_LE(p.deferrable_deadlines_met, p.deferrable_deadlines_due) << p.name;
    EXPECT_LE(p.deferrable_deadlines_due, p.deadlines_due) << p.name;
  }
  EXPECT_GT(policy(report, ReplayPolicy::kAutopilot).deferrable_deadlines_due, 0);
  EXPECT_GT(report.deferrable_work_share, 0.2);
  EXPECT_LE(report.deferrable_work_share, 0.3 + 1e-9);
}

TEST(ClusterReplay, NoDeferrableWorkWhenTheShareIsZero) {
  ReplayOptions options = small();
  options.deferrable_share = 0;
  options.policies = {ReplayPolicy::kAutopilot};
  auto report = run_cluster_replay(options);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->deferrable_work_share, 0);
  EXPECT_EQ(report->policies[0].deferrable_deadlines_due, 0);
  EXPECT_EQ(report->policies[0].throughput_vs_uncapped, 0);  // no uncapped run to compare with
}

TEST(ClusterReplay, RunsTheSmallestClusterAndAPartialDay) {
  ReplayOptions options = small();
  options.gpus = 1;
  options.days = 0.3;
  auto report = run_cluster_replay(options);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->training_gpus, 1);
  EXPECT_EQ(report->inference_gpus, 0);
  EXPECT_EQ(report->periods, 87);  // 0.3 day = 86.4 periods of 5 min: the last one is shorter
  for (const auto& p : report->policies) {
    double energy_j = 0;
    for (size_t k = 0; k < p.power_w.size(); ++k) {
      energy_j += p.power_w[k] * (k + 1 < p.power_w.size() ? 300.0 : 0.4 * 300.0);
    }
    EXPECT_NEAR(energy_j, p.energy_j, 1e-6 * p.energy_j) << p.name;
    EXPECT_EQ(p.slo_attainment, 1) << p.name;  // no service: nothing to miss
  }
}

TEST(ClusterReplay, FormsCarryEveryPolicy) {
  const ReplayReport& report = small_report();
  const std::string json = to_json(report);
  const std::string table = format_table(report);
  const std::string svg = replay_plot_svg(report);
  for (const char* name : {"uncapped", "uniform_cap", "zeus_per_job", "chase_per_job", "autopilot"}) {
    EXPECT_NE(json.find(name), std::string::npos) << name;
    EXPECT_NE(table.find(name), std::string::npos) << name;
    EXPECT_NE(svg.find(name), std::string::npos) << name;
  }
  EXPECT_NE(svg.find("<svg"), std::string::npos);
}

TEST(ClusterReplay, DeferrableCurveHasOnePointPerShare) {
  ReplayOptions options = small();
  options.days = 1;
  auto curve = deferrable_curve(options, {0.0, 0.3});
  ASSERT_TRUE(curve) << curve.error().message();
  ASSERT_EQ(curve->size(), 2u);
  EXPECT_EQ((*curve)[0].deferrable_share, 0);
  EXPECT_GT((*curve)[1].deferrable_share, 0);
  EXPECT_GT((*curve)[0].chase_carbon_g, 0);
}

void expect_refused(const ReplayOptions& options, const std::string& message) {
  auto report = run_cluster_replay(options);
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message().find(message), std::string::npos) << report.error().message();
}

TEST(ClusterReplay, RefusesBadInputWithAMessage) {
  ReplayOptions options = small();
  options.cap_share = 0;
  expect_refused(options,
                 "--cap-share must be above 0: the cap is a share of the GPUs' summed maximum power");
  options.cap_share = -0.5;
  expect_refused(options, "--cap-share must be above 0");
  options.cap_share = 1.2;
  expect_refused(options, "--cap-share of 1.2 puts the cap above the GPUs' summed maximum power");
  options = small();
  options.gpus = 0;
  expect_refused(options, "--gpus must be at least 1 (got 0)");
  options = small();
  options.days = 0;
  expect_refused(options, "--days must be above 0 and at most 366 (got 0)");
  options.days = -3;
  expect_refused(options, "--days must be above 0");
  options = small();
  options.deferrable_share = -0.1;
  expect_refused(options, "--deferrable-share must be a share of the training work in [0, 1] (got -0.1)");
  options.deferrable_share = 1.5;
  expect_refused(options, "--deferrable-share must be a share of the training work in [0, 1] (got 1.5)");
  options = small();
  options.carbon_trace_path = "/nonexistent/carbon.csv";
  expect_refused(options, "/nonexistent/carbon.csv");
  joule::test::TempDir dir;
  options.carbon_trace_path = dir.write("bad.csv", "timestamp,carbon_intensity_g_per_kwh\nyesterday,12\n");
  expect_refused(options, "bad.csv");
  options.carbon_trace_path = "";
  expect_refused(options, "a carbon trace is required");
  options = small();
  options.autopilot_eta = -0.5;
  expect_refused(options, "the autopilot's eta must be in [0, 1] (got -0.5)");
  options = small();
  options.deferrable_eta = 1.5;
  expect_refused(options, "the deferrable jobs' eta must be in [0, 1] (got 1.5)");
  EXPECT_FALSE(deferrable_curve(small(), {2.0}));
  EXPECT_FALSE(parse_replay_policy("fastest"));
  EXPECT_EQ(parse_replay_policy("autopilot").value(), ReplayPolicy::kAutopilot);
}

}  // namespace
}  // namespace joule::cluster
