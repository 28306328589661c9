// SPDX-License-Identifier: Apache-2.0
// The report of a measured command (carbon/run_report.hpp) and of a carbon signal's reading and the country
// table (carbon/intensity_report.hpp).
#include "joule/carbon/run_report.hpp"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/intensity_report.hpp"

#include "test_util.hpp"

namespace joule::carbon {
namespace {

// One run of `true` measured on one GPU (2 J in 0.5 s) with carbon and cost.
CommandRun report_run(double energy_j = 2) {
  CommandRun run;
  run.command = {"true"};
  run.started_unix_s = 1'717'200'000;
  run.wall_time_s = 0.5;
  run.devices = {{"gpu", 0, "Test GPU", energy_j, energy_j / 0.5, 5.0, measure::EnergySource::kCounter, ""}};
  CarbonReport carbon;
  carbon.source = "constant";
  carbon.energy_j = energy_j;
  carbon.carbon_g = 0.25;
  carbon.gpu_carbon_g = {0.25};
  run.carbon = carbon;
  PriceReport price;
  price.source = "tariff";
  price.cost_usd = 0.5;
  price.gpu_cost_usd = {0.5};
  run.price = price;
  return run;
}

TEST(RunReport, OneRunInThreeForms) {
  const CommandRun run = report_run();
  EXPECT_DOUBLE_EQ(run.total_energy_j(), 2);
  const std::string text = render_run_text(run);
  EXPECT_NE(text.find("joule measure: true"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU 0 Test GPU"), std::string::npos) << text;
  EXPECT_NE(text.find("2.000 J"), std::string::npos) << text;
  EXPECT_NE(text.find("0.250 g  CO2e"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(render_run_json(run));
  EXPECT_EQ(json["devices"][0]["source"], "counter");
  EXPECT_EQ(json["carbon"]["carbon_g"], 0.25);
  EXPECT_EQ(json["cost"]["cost_usd"], 0.5);
  EXPECT_TRUE(json["signal"].is_null());
  EXPECT_EQ(
      render_run_csv(run),
      "command,exit_code,wall_time_s,kind,index,name,energy_j,average_power_w,peak_power_w,source,carbon_g,"
      "cost_usd\n"
      "true,0,0.5,gpu,0,Test GPU,2,4,5,counter,0.25,0.5\n");
}

TEST(RunReport, ANotMeasurableFigureIsNeverANumber) {
  CommandRun run = report_run(std::numeric_limits<double>::quiet_NaN());
  run.devices[0].not_measurable = "not measurable: reset";
  run.carbon = fail(ErrorCode::kNotFound, "no intensity");
  run.price.reset();
  const std::string text = render_run_text(run);
  EXPECT_NE(text.find("not measurable"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU 0 Test GPU: not measurable: reset"), std::string::npos) << text;
  EXPECT_NE(text.find("unavailable: no intensity"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(render_run_json(run));
  EXPECT_TRUE(json["devices"][0]["energy_j"].is_null());
  EXPECT_EQ(json["devices"][0]["error"], "not measurable: reset");
  EXPECT_EQ(json["carbon"]["error"], "no intensity");
  EXPECT_NE(render_run_csv(run).find("true,0,0.5,gpu,0,Test GPU,,,5,counter,\n"), std::string::npos);
}

TEST(RunReport, RepeatedRunsReportMeanAndSpread) {
  std::vector<CommandRun> runs = {report_run(1), report_run(3)};
  const RepeatStatistics stats = statistics_of(runs);
  EXPECT_DOUBLE_EQ(stats.total_energy_j.mean, 2);
  EXPECT_DOUBLE_EQ(stats.total_energy_j.stddev, std::sqrt(2.0));
  ASSERT_EQ(stats.energy_j.size(), 1U);
  EXPECT_DOUBLE_EQ(stats.average_power_w[0].mean, 4);
  const std::string text = render_repeat_text(runs, 3);
  EXPECT_NE(text.find("(2 runs of 3)"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(render_repeat_json(runs, 3));
  EXPECT_EQ(json["repeat"], 3);
  EXPECT_EQ(json["completed_runs"], 2);
  EXPECT_EQ(json["runs"].size(), 2U);
  const std::string csv = render_repeat_csv(runs);
  EXPECT_EQ(csv.substr(0, 12), "run,command,");
  EXPECT_NE(csv.find("\n2,true,"), std::string::npos) << csv;
}

TEST(RunReport, HistoryRowsHaveFixedColumns) {
  CommandRun run = report_run();
  run.carbon.reset();
  run.price.reset();
  const std::string rows = history_rows({run}, true);
  EXPECT_EQ(
      rows,
      "timestamp,run,command,exit_code,wall_time_s,kind,index,name,energy_j,average_power_w,peak_power_w,"
      "source,carbon_g,cost_usd\n"
      "2024-06-01T00:00:00Z,1,true,0,0.5,gpu,0,Test GPU,2,4,5,counter,,\n");
  EXPECT_EQ(history_header().size(), 14U);
  EXPECT_EQ(history_rows({run}, false).find("timestamp"), std::string::npos);
}

TEST(IntensityReport, LatestHistoryAndForecastOfATrace) {
  const CarbonTrace trace = value_or_throw(CarbonTrace::parse(
      "timestamp,carbon_intensity_g_per_kwh\n2024-06-01T00:00Z,100\n2024-06-01T01:00Z,200\n"
      "2024-06-01T02:00Z,300\n2024-06-01T03:00Z,400\n",
      "t.csv"));
  VirtualClock clock(int64_t{1'717'207'200} * 1'000'000'000);  // 02:00
  TraceSignal signal(trace, clock);
  const IntensityReading reading = value_or_throw(read_intensity(signal, clock, 3600, 3600));
  EXPECT_EQ(reading.latest.intensity_g_per_kwh, 300);
  EXPECT_EQ(reading.period_s, 3600);
  EXPECT_FALSE(reading.history.empty());
  EXPECT_FALSE(reading.forecast.empty());
  const std::string csv = render_intensity_csv(reading);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "kind,timestamp,carbon_intensity_g_per_kwh,estimated");
  EXPECT_NE(csv.find("latest,2024-06-01T02:00:00Z,300,false"), std::string::npos) << csv;
  const auto json = nlohmann::json::parse(render_intensity_json(reading));
  EXPECT_EQ(json["latest"]["intensity_g_per_kwh"], 300);
  const std::string text = render_intensity_text(reading);
  EXPECT_NE(text.find(": 300 gCO2e/kWh at 2024-06-01T02:00:00Z"), std::string::npos) << text;
  EXPECT_NE(text.find("  history  "), std::string::npos) << text;
  const IntensityReading now_only = value_or_throw(read_intensity(signal, clock, 0, 0));
  EXPECT_TRUE(now_only.history.empty());
  EXPECT_TRUE(now_only.forecast.empty());
}

TEST(IntensityReport, CountryTableInThreeForms) {
  const CountryTable table = value_or_throw(CountryTable::parse(
      "iso3,country,year,carbon_intensity_g_per_kwh\nDEU,Germany,2022,380.5\nKOR,\"Korea, Rep.\",2022,436\n",
      "c.csv"));
  EXPECT_EQ(
      render_countries_csv(table),
      "iso3,country,year,carbon_intensity_g_per_kwh\nDEU,Germany,2022,380.5\nKOR,\"Korea, Rep.\",2022,436\n");
  EXPECT_EQ(nlohmann::json::parse(render_countries_json(table)).size(), 2U);
  const std::string text = render_countries_text(table);
  EXPECT_NE(text.find("2 countries; yearly averages from c.csv"), std::string::npos) << text;
}

}  // namespace
}  // namespace joule::carbon
