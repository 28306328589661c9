// SPDX-License-Identifier: Apache-2.0
// The forms of a serving replay's result (joule/sim/serving_report.hpp) on a hand-made comparison: the JSON
// names the knob's unit, savings are against the first strategy, and the text/CSV keep their columns.
#include "joule/sim/serving_report.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace joule::sim {
namespace {

ServingComparison two_strategies_under_power_limits() {
  ServingComparison result;
  ServingReplay top;
  top.summary.name = "max_clock";
  top.summary.energy_j = 2000;
  top.summary.j_per_token = 2;
  top.summary.slo_attainment = 1;
  top.summary.mean_clock_mhz = 1980;
  top.summary.knob_kind = optimize::KnobKind::kPowerLimitW;
  top.summary.mean_knob_value = 700;
  ServingReplay joule = top;
  joule.summary.name = "joule";
  joule.summary.energy_j = 1500;
  joule.summary.mean_knob_value = 450;
  ServedRequest request;
  request.arrival_s = 1;
  request.first_token_s = 1.5;
  request.finish_s = 3.5;
  request.prompt_tokens = 10;
  request.output_tokens = 5;
  request.energy_j = 10;
  request.prefill_energy_j = 4;
  request.decode_energy_j = 6;
  joule.requests.push_back(request);
  result.strategies = {top, joule};
  result.best_fixed = optimize::Knob::power_limit_w(400);
  return result;
}

TEST(ServingReport, JsonNamesTheKnobsUnitAndSavingsAreAgainstTheFirstStrategy) {
  const ServingComparison result = two_strategies_under_power_limits();
  const LlmCostModel cost(*find_llm_gpu("h100").value(), *find_llm_model("llama-3-8b").value(), 1);
  const ServingReportContext context{
      .trace = "t.csv", .rate_scale = 2, .cost = cost, .slo = {1, 0.1}, .requests = 1, .duration_s = 1};
  const auto json = nlohmann::json::parse(render_serving_json(result, context));
  EXPECT_EQ(json["knob"], "power_limit_w");
  EXPECT_EQ(json["best_fixed_power_limit_w"], 400);
  EXPECT_FALSE(json.contains("best_fixed_sm_clock_mhz"));
  EXPECT_EQ(json["rate_scale"], 2);
  EXPECT_EQ(json["strategies"][1]["mean_chosen_power_limit_w"], 450);
  EXPECT_DOUBLE_EQ(json["strategies"][1]["energy_saved_vs_max_clock"].get<double>(), 0.25);
  EXPECT_EQ(render_serving_csv(result).substr(0, 5), "name,");
  const std::string text = render_serving_text(result, context);
  EXPECT_NE(text.find("1 requests over 1 s (t.csv, rate × 2)"), std::string::npos) << text;
  EXPECT_NE(text.find("best fixed power limit in hindsight: 400 W"), std::string::npos) << text;
  EXPECT_EQ(render_requests_csv(result.strategies[1]),
            "request,arrival_s,prompt_tokens,output_tokens,ttft_s,tpot_s,energy_j,prefill_energy_j,"
            "decode_energy_j,j_per_output_token\n"
            "0,1.000,10,5,0.500000,0.500000,10.000000,4.000000,6.000000,2.000000\n");
}

TEST(ServingReport, PlotBucketsAreRoundAndRateScalingDividesArrivals) {
  EXPECT_EQ(plot_bucket_s(60), 1);
  EXPECT_EQ(plot_bucket_s(240 * 3.2), 4);
  EXPECT_EQ(plot_bucket_s(240 * 12), 15);
  ServingTrace trace;
  trace.requests = {{10, 1, 1}, {20, 1, 1}};
  scale_arrival_rate(trace, 4);
  EXPECT_EQ(trace.requests[0].arrival_s, 2.5);
  EXPECT_EQ(trace.requests[1].arrival_s, 5);
}

}  // namespace
}  // namespace joule::sim
