// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of `joule carbon` and the carbon flags of `joule measure`.
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

const std::string kTrace = JOULE_SOURCE_DIR "/data/carbon/synthetic_us_solar_14d.csv";

ProcessResult joule(std::vector<std::string> args) {
  args.insert(args.begin(), JOULE_BINARY);
  return run(args, {{"JOULE_SIM", Process::kUnset},
                    {"JOULE_ELECTRICITYMAPS_TOKEN", Process::kUnset},
                    {"JOULE_CARBON_PROVIDER", Process::kUnset}});
}

// Bad input: a non-zero exit and exactly one line on stderr that contains `expected`.
void expect_one_line_error(const ProcessResult& result, const std::string& expected) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST(CarbonCli, ReplayJsonIsDeterministicAndComplete) {
  const std::vector<std::string> args = {"carbon",     "replay",   "--trace", kTrace, "--gpu",    "v100",
                                         "--workload", "imagenet", "--eta",   "0.6",  "--format", "json"};
  const auto first = joule(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto second = joule(args);
  EXPECT_EQ(first.out, second.out);
  const auto json = nlohmann::json::parse(first.out);
  ASSERT_EQ(json["strategies"].size(), 3u);
  const char* names[] = {"max_power_limit", "zeus", "chase"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& s = json["strategies"][i];
    EXPECT_EQ(s["name"], names[i]);
    EXPECT_GT(s["carbon_g"].get<double>(), 0);
    EXPECT_GT(s["energy_j"].get<double>(), 0);
    EXPECT_GT(s["time_s"].get<double>(), 0);
  }
  EXPECT_EQ(json["gpu"], "Tesla V100-PCIE-32GB (simulated)");
  EXPECT_EQ(json["epochs"], 22);
  EXPECT_GT(json["savings"]["chase_vs_max_power_limit"]["carbon_saving_percent"].get<double>(), 0);
  EXPECT_FALSE(json["chase_decisions"].empty());
}

TEST(CarbonCli, ReplayTextCsvAndPlot) {
  TempDir dir;
  const std::string svg = dir.path() + "/replay.svg";
  const auto text = joule({"carbon", "replay", "--trace", kTrace, "--epochs", "2", "--plot", svg});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("chase vs max_power_limit: carbon"), std::string::npos) << text.out;
  std::ifstream in(svg);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_NE(content.str().find("Power limit chosen"), std::string::npos);
  // The two panels share one time axis: the same x tick labels at the same pixels in each (they once ran
  // 0–21.5 h and 0–23.5 h, so the same hour sat at different places).
  const std::string plot = content.str();
  const size_t second = plot.find("<svg", plot.find("<svg", plot.find("<svg") + 1) + 1);
  ASSERT_NE(second, std::string::npos);
  const auto x_ticks = [](const std::string& panel) {
    std::vector<std::string> ticks;
    const std::regex tick(R"re(<text x="([0-9.]+)"[^>]*text-anchor="middle"[^>]*>([0-9.]+)</text>)re");
    for (std::sregex_iterator it(panel.begin(), panel.end(), tick), end; it != end; ++it) {
      ticks.push_back((*it)[2].str() + " h at x=" + (*it)[1].str());
    }
    return ticks;
  };
  const auto first_ticks = x_ticks(plot.substr(0, second));
  EXPECT_FALSE(first_ticks.empty());
  EXPECT_EQ(first_ticks, x_ticks(plot.substr(second)));
  const auto csv = joule({"carbon", "replay", "--trace", kTrace, "--iterations", "5000", "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.substr(0, csv.out.find('\n')), "strategy,carbon_g,energy_j,time_s");
}

TEST(CarbonCli, ReplayBadInput) {
  expect_one_line_error(joule({"carbon", "replay"}),
                        "--trace is required (see 'joule carbon replay --help')");
  expect_one_line_error(joule({"carbon", "replay", "--trace", "/nonexistent.csv"}), "/nonexistent.csv");
  expect_one_line_error(joule({"carbon", "replay", "--trace", kTrace, "--eta", "2"}),
                        "--eta must be a finite number in [0, 1], got 2 (see 'joule carbon replay --help')");
  expect_one_line_error(joule({"carbon", "replay", "--trace", kTrace, "--forecaster", "oracle"}),
                        "unknown forecaster 'oracle'");
  expect_one_line_error(joule({"carbon", "replay", "--trace", kTrace, "--gpu", "h100"}), "h100");
  expect_one_line_error(joule({"carbon", "replay", "--trace", kTrace, "--epochs", "400"}),
                        "use a longer trace");
  expect_one_line_error(joule({"carbon", "replay", "--trace", kTrace, "--epochs", "1", "--iterations", "5"}),
                        "not both");
  TempDir dir;
  const std::string gap = dir.write("gap.csv",
                                    "timestamp,carbon_intensity_g_per_kwh\n2024-01-01T00:00:00Z,1\n"
                                    "2024-01-01T00:30:00Z,2\n2024-01-01T01:30:00Z,3\n");
  expect_one_line_error(joule({"carbon", "replay", "--trace", gap}),
                        "gap.csv:4: missing 2024-01-01T01:00:00Z");
}

TEST(CarbonCli, ForecastComparesWithNaive) {
  const auto text = joule({"carbon", "forecast", "--trace", kTrace});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* name : {"svr", "ridge", "last"}) {
    EXPECT_NE(text.out.find(name), std::string::npos) << name;
  }
  const auto json =
      joule({"carbon", "forecast", "--trace", kTrace, "--forecaster", "ridge", "--format", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto parsed = nlohmann::json::parse(json.out);
  ASSERT_EQ(parsed["forecasters"].size(), 2u);  // the model and the naive baseline
  EXPECT_EQ(parsed["forecasters"][1]["name"], "last");
  EXPECT_GT(parsed["forecasters"][0]["mape_percent"].get<double>(), 0);
  expect_one_line_error(joule({"carbon", "forecast", "--trace", kTrace, "--horizon", "0"}),
                        "--horizon must be a whole number > 0, got 0 (see 'joule carbon forecast --help')");
}

TEST(CarbonCli, IntensityFromATrace) {
  const auto at = joule({"carbon", "intensity", "--trace", kTrace, "--at", "2024-06-03T00:10:00Z", "--format",
                         "json", "--forecast-hours", "1"});
  ASSERT_EQ(at.exit_code, 0) << at.err;
  const auto json = nlohmann::json::parse(at.out);
  EXPECT_DOUBLE_EQ(json["latest"]["intensity_g_per_kwh"].get<double>(), 416.3);
  EXPECT_EQ(json["forecast"].size(), 3u);
  expect_one_line_error(joule({"carbon", "intensity", "--trace", kTrace, "--at", "2030-01-01T00:00:00Z"}),
                        "no carbon intensity for 2030-01-01T00:00:00Z");
  expect_one_line_error(joule({"carbon", "intensity", "--zone", "DE"}), "JOULE_ELECTRICITYMAPS_TOKEN");
}

// Without --trace or --zone: a country's yearly average (no API key), inferred from TZ, then the locale.
TEST(CarbonCli, IntensityDefaultsToTheCountrysYearlyAverage) {
  const auto inferred = run(
      {JOULE_BINARY, "carbon", "intensity", "--format", "json"},
      {{"TZ", "Europe/Berlin"}, {"JOULE_CARBON_PROVIDER", Process::kUnset}, {"JOULE_SIM", Process::kUnset}});
  ASSERT_EQ(inferred.exit_code, 0) << inferred.err;
  EXPECT_NE(inferred.err.find("joule: carbon intensity: "), std::string::npos) << inferred.err;
  EXPECT_NE(inferred.err.find(" gCO2eq/kWh, yearly average of Germany (DEU, "), std::string::npos)
      << inferred.err;
  EXPECT_NE(inferred.err.find("inferred from timezone Europe/Berlin; pass --country to choose"),
            std::string::npos)
      << inferred.err;
  const auto json = nlohmann::json::parse(inferred.out);
  EXPECT_NE(json["source"].get<std::string>().find("yearly average of Germany (DEU"), std::string::npos);
  const auto chosen = joule({"carbon", "intensity", "--country", "fr"});
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_NE(chosen.err.find("yearly average of France (FRA, "), std::string::npos) << chosen.err;
  EXPECT_NE(chosen.err.find("chosen with --country"), std::string::npos) << chosen.err;
  expect_one_line_error(joule({"carbon", "intensity", "--country", "DEX"}),
                        "unknown country code 'DEX': closest: DEU (Germany)");
  expect_one_line_error(joule({"carbon", "intensity", "--country", "DEU", "--zone", "DE"}),
                        "give one of --trace, --zone and --country");
  expect_one_line_error(
      run({JOULE_BINARY, "carbon", "intensity"},
          {{"TZ", "UTC"}, {"LC_ALL", Process::kUnset}, {"LANG", "C.UTF-8"}}),
      "cannot tell the country for the default carbon intensity: timezone UTC (TZ) names no "
      "country, LC_ALL unset, LANG=C.UTF-8 names no territory; pass --country CODE");
  const auto listed = joule({"carbon", "countries", "--format", "json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(nlohmann::json::parse(listed.out).size(), 213u);
}

TEST(CarbonCli, MeasureAddsCarbonAndCost) {
  TempDir dir;
  std::string tariff = "hour,price_usd_per_kwh\n";
  for (int h = 0; h < 24; ++h) {
    tariff += std::to_string(h) + ",0.2\n";
  }
  const std::string tariff_path = dir.write("tariff.csv", tariff);
  const std::string out = dir.path() + "/summary.json";
  const auto result = joule({"--sim", "v100", "measure", "--carbon-intensity", "400", "--tariff", tariff_path,
                             "--format", "json", "-o", out, "--", "sleep", "0.2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::ifstream in(out);
  const auto json = nlohmann::json::parse(in);
  const double energy_j = json["total_energy_j"].get<double>();
  // The carbon and price monitors open their own windows around the same command: equal up to timing.
  EXPECT_NEAR(json["carbon"]["carbon_g"].get<double>(), energy_j / 3.6e6 * 400,
              energy_j / 3.6e6 * 400 * 0.05);
  EXPECT_DOUBLE_EQ(json["carbon"]["average_intensity_g_per_kwh"].get<double>(), 400);
  EXPECT_NEAR(json["cost"]["cost_usd"].get<double>(), energy_j / 3.6e6 * 0.2, energy_j / 3.6e6 * 0.2 * 0.05);
  expect_one_line_error(
      joule({"--sim", "v100", "measure", "--carbon-intensity", "-1", "--", "true"}),
      "--carbon-intensity must be a finite number ≥ 0, got -1 (see 'joule measure --help')");
  expect_one_line_error(
      joule({"--sim", "v100", "measure", "--carbon-intensity", "1", "--zone", "DE", "--", "true"}),
      "give exactly one carbon source");
  expect_one_line_error(joule({"--sim", "v100", "measure", "--tariff", "/nonexistent/t.csv", "--", "true"}),
                        "/nonexistent/t.csv");
}

}  // namespace
}  // namespace joule::test
