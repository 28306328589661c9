// SPDX-License-Identifier: Apache-2.0
// joule/carbon/json_forms.hpp — the JSON form of the carbon area's results (a signal's point, a country's
// yearly average, a window's carbon and price): the one form the Python binding hands out as dicts. Keys
// keep the order written here; units are in the key names (gCO2e, g/kWh, J, $, UTC Unix seconds).
#pragma once

#include <nlohmann/json.hpp>

#include "joule/carbon/country.hpp"
#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"
#include "joule/carbon/signal.hpp"

namespace joule::carbon {

/// @return {"time_unix_s", "time" (format_utc_time), "intensity_g_per_kwh", "estimated"}.
nlohmann::ordered_json to_json(const IntensityPoint& point);

/// @return [to_json(point), …] in the given order.
nlohmann::ordered_json to_json(const std::vector<IntensityPoint>& points);

/// @return {"iso3", "name", "year", "intensity_g_per_kwh"}.
nlohmann::ordered_json to_json(const CountryIntensity& country);

/// @return {"source", "energy_j", "carbon_g", "gpu_carbon_g", "cpu_carbon_g", "dram_carbon_g" (lists per
/// device), "estimated", "average_intensity_g_per_kwh", "buckets": [{"start_unix_s", "energy_j",
/// "intensity_g_per_kwh", "estimated", "carbon_g"}, …]}.
nlohmann::ordered_json to_json(const CarbonReport& report);

/// @return {"source", "energy_j", "cost_usd", "gpu_cost_usd" (list per GPU), "buckets": [{"start_unix_s",
/// "energy_j", "price_usd_per_kwh", "cost_usd"}, …]}.
nlohmann::ordered_json to_json(const PriceReport& report);

}  // namespace joule::carbon
