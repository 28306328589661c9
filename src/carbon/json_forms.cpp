// SPDX-License-Identifier: Apache-2.0
#include "joule/carbon/json_forms.hpp"

namespace joule::carbon {

nlohmann::ordered_json to_json(const IntensityPoint& point) {
  return {{"time_unix_s", point.time_unix_s},
          {"time", format_utc_time(point.time_unix_s)},
          {"intensity_g_per_kwh", point.intensity_g_per_kwh},
          {"estimated", point.estimated}};
}

nlohmann::ordered_json to_json(const std::vector<IntensityPoint>& points) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& point : points) {
    list.push_back(to_json(point));
  }
  return list;
}

nlohmann::ordered_json to_json(const CountryIntensity& country) {
  return {{"iso3", country.iso3},
          {"name", country.name},
          {"year", country.year},
          {"intensity_g_per_kwh", country.intensity_g_per_kwh}};
}

nlohmann::ordered_json to_json(const CarbonReport& report) {
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const auto& bucket : report.buckets) {
    buckets.push_back({{"start_unix_s", bucket.start_unix_s},
                       {"energy_j", bucket.energy_j},
                       {"intensity_g_per_kwh", bucket.intensity_g_per_kwh},
                       {"estimated", bucket.estimated},
                       {"carbon_g", bucket.carbon_g}});
  }
  return {{"source", report.source},
          {"energy_j", report.energy_j},
          {"carbon_g", report.carbon_g},
          {"gpu_carbon_g", report.gpu_carbon_g},
          {"cpu_carbon_g", report.cpu_carbon_g},
          {"dram_carbon_g", report.dram_carbon_g},
          {"estimated", report.estimated},
          {"average_intensity_g_per_kwh", report.average_intensity_g_per_kwh()},
          {"buckets", buckets}};
}

nlohmann::ordered_json to_json(const PriceReport& report) {
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const auto& bucket : report.buckets) {
    buckets.push_back({{"start_unix_s", bucket.start_unix_s},
                       {"energy_j", bucket.energy_j},
                       {"price_usd_per_kwh", bucket.price_usd_per_kwh},
                       {"cost_usd", bucket.cost_usd}});
  }
  return {{"source", report.source},
          {"energy_j", report.energy_j},
          {"cost_usd", report.cost_usd},
          {"gpu_cost_usd", report.gpu_cost_usd},
          {"buckets", buckets}};
}

}  // namespace joule::carbon
