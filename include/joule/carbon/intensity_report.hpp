// SPDX-License-Identifier: Apache-2.0
// joule/carbon/intensity_report.hpp — one reading of a carbon signal (its latest point, and optionally its
// history and forecast) and the country table, as text, JSON or CSV: what `joule carbon intensity` and
// `joule carbon countries` print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "joule/carbon/country.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"

namespace joule::carbon {

/// A signal's intensity now, and around now.
struct IntensityReading {
  std::string source;  ///< the signal's describe()
  int64_t period_s = 0;
  IntensityPoint latest;
  std::vector<IntensityPoint> history;   ///< the last history_s, oldest first (empty if not asked for)
  std::vector<IntensityPoint> forecast;  ///< the next forecast_s (empty if not asked for)
};

/// Reads `signal`: its latest point, its history over the `history_s` before `clock`'s now (none if 0) and
/// its forecast over `forecast_s` (none if 0). Errors: the signal's.
Result<IntensityReading> read_intensity(CarbonSignal& signal, const Clock& clock, double history_s,
                                        double forecast_s);

/// "SOURCE: N gCO2e/kWh at TIME", then the history and the forecast, one line per point.
std::string render_intensity_text(const IntensityReading& reading);
/// {source, period_s, latest, history, forecast} (2-space indent, final newline).
std::string render_intensity_json(const IntensityReading& reading);
/// kind,timestamp,carbon_intensity_g_per_kwh,estimated: the latest, then the history and the forecast.
std::string render_intensity_csv(const IntensityReading& reading);

/// The country table as text (a line per country and the table's source), JSON or CSV.
std::string render_countries_text(const CountryTable& table);
std::string render_countries_json(const CountryTable& table);
std::string render_countries_csv(const CountryTable& table);

}  // namespace joule::carbon
