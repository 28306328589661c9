// SPDX-License-Identifier: Apache-2.0
#include "joule/carbon/intensity_report.hpp"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/json_forms.hpp"
#include "joule/core/csv.hpp"

namespace joule::carbon {

namespace {

nlohmann::json points_json(const std::vector<IntensityPoint>& points) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : points) {
    list.push_back({{"time", format_utc_time(p.time_unix_s)},
                    {"intensity_g_per_kwh", p.intensity_g_per_kwh},
                    {"estimated", p.estimated}});
  }
  return list;
}

}  // namespace

Result<IntensityReading> read_intensity(CarbonSignal& signal, const Clock& clock, double history_s,
                                        double forecast_s) {
  IntensityReading reading;
  reading.latest = JOULE_TRY(signal.latest());
  const int64_t now_s = clock.to_unix_ns(clock.now()) / 1'000'000'000;
  if (history_s > 0) {
    reading.history = JOULE_TRY(signal.history(now_s - static_cast<int64_t>(history_s), now_s));
  }
  if (forecast_s > 0) {
    reading.forecast = JOULE_TRY(signal.forecast(static_cast<int64_t>(forecast_s)));
  }
  // After the reads: a provider's description may name what its answers said.
  reading.source = signal.describe();
  reading.period_s = signal.period_s();
  return reading;
}

std::string render_intensity_text(const IntensityReading& reading) {
  const IntensityPoint& latest = reading.latest;
  std::string out = fmt::format("{}: {:g} gCO2e/kWh at {}{}\n", reading.source, latest.intensity_g_per_kwh,
                                format_utc_time(latest.time_unix_s), latest.estimated ? " (estimated)" : "");
  for (const auto& [label, points] :
       {std::pair{"history", &reading.history}, std::pair{"forecast", &reading.forecast}}) {
    for (const auto& p : *points) {
      out += fmt::format("  {:<8} {} {:>8.1f}{}\n", label, format_utc_time(p.time_unix_s),
                         p.intensity_g_per_kwh, p.estimated ? " (estimated)" : "");
    }
  }
  return out;
}

std::string render_intensity_json(const IntensityReading& reading) {
  const nlohmann::json out = {{"source", reading.source},
                              {"period_s", reading.period_s},
                              {"latest", points_json({reading.latest})[0]},
                              {"history", points_json(reading.history)},
                              {"forecast", points_json(reading.forecast)}};
  return out.dump(2) + "\n";
}

std::string render_intensity_csv(const IntensityReading& reading) {
  std::string out = "kind,timestamp,carbon_intensity_g_per_kwh,estimated\n";
  const auto row = [&out](std::string_view kind, const IntensityPoint& p) {
    out += fmt::format("{},{},{:g},{}\n", kind, format_utc_time(p.time_unix_s), p.intensity_g_per_kwh,
                       p.estimated);
  };
  row("latest", reading.latest);
  for (const auto& p : reading.history) {
    row("history", p);
  }
  for (const auto& p : reading.forecast) {
    row("forecast", p);
  }
  return out;
}

std::string render_countries_text(const CountryTable& table) {
  std::string out = fmt::format("{:<5} {:<34} {:>5} {:>12}\n", "code", "country", "year", "gCO2e/kWh");
  for (const auto& c : table.countries()) {
    out += fmt::format("{:<5} {:<34} {:>5} {:>12.1f}\n", c.iso3, c.name, c.year, c.intensity_g_per_kwh);
  }
  out += fmt::format("{} countries; yearly averages from {} (see data/carbon/README.md)\n",
                     table.countries().size(), table.source());
  return out;
}

std::string render_countries_json(const CountryTable& table) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : table.countries()) {
    list.push_back(nlohmann::json(to_json(c)));
  }
  return list.dump(2) + "\n";
}

std::string render_countries_csv(const CountryTable& table) {
  std::string out = "iso3,country,year,carbon_intensity_g_per_kwh\n";
  for (const auto& c : table.countries()) {
    out += fmt::format("{},{},{},{:g}\n", c.iso3, csv::quote(c.name), c.year, c.intensity_g_per_kwh);
  }
  return out;
}

}  // namespace joule::carbon
