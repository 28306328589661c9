// SPDX-License-Identifier: Apache-2.0
// The JSON forms of the carbon area's results (joule/carbon/json_forms.hpp): keys in order, values, types.
#include "joule/carbon/json_forms.hpp"

#include <gtest/gtest.h>

namespace joule::carbon {
namespace {

std::vector<std::string> carbon_json_keys(const nlohmann::ordered_json& json) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) {
    keys.push_back(key);
  }
  return keys;
}

TEST(CarbonJsonForms, PointAndCountry) {
  const auto point =
      to_json(IntensityPoint{.time_unix_s = 1700000000, .intensity_g_per_kwh = 412.5, .estimated = true});
  EXPECT_EQ(carbon_json_keys(point),
            (std::vector<std::string>{"time_unix_s", "time", "intensity_g_per_kwh", "estimated"}));
  EXPECT_TRUE(point["time_unix_s"].is_number_integer());
  EXPECT_EQ(point["time"], format_utc_time(1700000000));
  EXPECT_EQ(point["intensity_g_per_kwh"], 412.5);
  EXPECT_EQ(point["estimated"], true);
  EXPECT_EQ(to_json(std::vector<IntensityPoint>{{}, {}}).size(), 2U);

  const auto country =
      to_json(CountryIntensity{.iso3 = "DEU", .name = "Germany", .year = 2023, .intensity_g_per_kwh = 380});
  EXPECT_EQ(carbon_json_keys(country),
            (std::vector<std::string>{"iso3", "name", "year", "intensity_g_per_kwh"}));
  EXPECT_TRUE(country["year"].is_number_integer());
  EXPECT_TRUE(country["intensity_g_per_kwh"].is_number_float());
}

TEST(CarbonJsonForms, CarbonAndPriceReports) {
  CarbonReport report;
  report.source = "constant";
  report.energy_j = 3.6e6;
  report.carbon_g = 400;
  report.gpu_carbon_g = {300, 100};
  report.buckets.push_back({.start_unix_s = 3600,
                            .energy_j = 3.6e6,
                            .intensity_g_per_kwh = 400,
                            .estimated = false,
                            .carbon_g = 400});
  const auto carbon = to_json(report);
  EXPECT_EQ(
      carbon_json_keys(carbon),
      (std::vector<std::string>{"source", "energy_j", "carbon_g", "gpu_carbon_g", "cpu_carbon_g",
                                "dram_carbon_g", "estimated", "average_intensity_g_per_kwh", "buckets"}));
  EXPECT_EQ(carbon["gpu_carbon_g"], nlohmann::ordered_json({300.0, 100.0}));
  EXPECT_TRUE(carbon["cpu_carbon_g"].is_array());
  EXPECT_DOUBLE_EQ(carbon["average_intensity_g_per_kwh"].get<double>(), 400);
  EXPECT_EQ(
      carbon_json_keys(carbon["buckets"][0]),
      (std::vector<std::string>{"start_unix_s", "energy_j", "intensity_g_per_kwh", "estimated", "carbon_g"}));

  PriceReport price;
  price.source = "flat";
  price.cost_usd = 0.1;
  price.gpu_cost_usd = {0.1};
  price.buckets.push_back({.start_unix_s = 0, .energy_j = 3.6e6, .price_usd_per_kwh = 0.1, .cost_usd = 0.1});
  const auto priced = to_json(price);
  EXPECT_EQ(carbon_json_keys(priced),
            (std::vector<std::string>{"source", "energy_j", "cost_usd", "gpu_cost_usd", "buckets"}));
  EXPECT_EQ(carbon_json_keys(priced["buckets"][0]),
            (std::vector<std::string>{"start_unix_s", "energy_j", "price_usd_per_kwh", "cost_usd"}));
  EXPECT_EQ(priced["buckets"][0]["cost_usd"], 0.1);
}

}  // namespace
}  // namespace joule::carbon
