// SPDX-License-Identifier: Apache-2.0
// joule/carbon/country.hpp — the yearly average carbon intensity of a country's electricity: the default
// when no live provider (and no API key) is configured. The table (data/carbon/country_intensity.csv,
// compiled into the library like the simulator's traces, so it works from any directory and after
// `cmake --install`) is looked up by ISO 3166-1 code; the country can be inferred from the timezone or the
// locale, and the result says how it was chosen.
//
//   auto table = joule::carbon::CountryTable::builtin();
//   auto choice = joule::carbon::choose_country(table, "", joule::carbon::LocaleSources::from_process());
//   // choice->describe(): "carbon intensity: 381 gCO2eq/kWh, yearly average of Germany (DEU, 2023),
//   //                      inferred from timezone Europe/Berlin; pass --country to choose"
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::carbon {

/// One row of the table.
struct CountryIntensity {
  std::string iso3;                ///< ISO 3166-1 alpha-3, upper case ("DEU")
  std::string name;                ///< "Germany"
  int year = 0;                    ///< the year the figure is for
  double intensity_g_per_kwh = 0;  ///< lifecycle gCO2e/kWh of the country's generation, ≥ 0
};

/// The yearly average intensity per country.
class CountryTable {
 public:
  /// Parses CSV with columns `iso3,country,year,carbon_intensity_g_per_kwh` (others ignored). @return
  /// kParse errors naming `source:line:column` (a missing column, a code that is not three letters, a
  /// repeated code, a bad year or a negative or non-finite intensity) or for a table without rows.
  static Result<CountryTable> parse(std::string_view text, std::string source);
  /// Reads and parses a file (file errors name the path).
  static Result<CountryTable> read_file(const std::string& path);
  /// @return the table shipped with joule (data/carbon/country_intensity.csv, compiled in).
  static const CountryTable& builtin();

  /// @return the country with ISO 3166-1 code `code`: alpha-3 ("DEU") or alpha-2 ("DE"), case-insensitive,
  /// surrounding spaces ignored. kNotFound "unknown country code 'XYZ': closest: … (`joule carbon
  /// countries` lists them)" otherwise; kInvalidArgument for an empty code.
  Result<CountryIntensity> find(std::string_view code) const;
  /// @return the rows, sorted by code.
  const std::vector<CountryIntensity>& countries() const { return countries_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<CountryIntensity> countries_;
  std::string source_;
};

/// @return the alpha-3 code of an ISO 3166-1 alpha-2 code ("de" → "DEU"), case-insensitive, or nullopt
/// for a code joule's built-in map does not know (it covers the countries of the built-in table).
std::optional<std::string> alpha2_to_alpha3(std::string_view alpha2);

/// Where the country is inferred from. from_process() reads the environment and the system's files; tests
/// give their own values and paths.
struct LocaleSources {
  std::optional<std::string> tz;                          ///< $TZ ("Europe/Berlin", ":Europe/Berlin")
  std::string localtime_path = "/etc/localtime";          ///< a link into the zoneinfo tree
  std::string timezone_file = "/etc/timezone";            ///< Debian: the zone name, one line
  std::string zone_tab = "/usr/share/zoneinfo/zone.tab";  ///< tzdata: country code per zone
  std::optional<std::string> lc_all;                      ///< $LC_ALL ("de_DE.UTF-8")
  std::optional<std::string> lang;                        ///< $LANG
  /// @return the process's TZ, LC_ALL and LANG, and the default paths.
  static LocaleSources from_process();
};

/// How a country was found.
struct CountryGuess {
  std::string iso3;
  std::string how;  ///< "timezone Europe/Berlin", "locale LANG=de_DE.UTF-8"
};

/// @return the country of the timezone (TZ, else the target of the localtime link, else the timezone file;
/// the zone's country from zone.tab, else from a small built-in map of common zones), else of the locale
/// (LC_ALL, else LANG: the territory of `ll_CC[.charset][@modifier]`). A zone without a country (UTC,
/// Etc/…) or an unknown one falls through to the locale. kNotFound saying what was looked at and
/// "pass --country CODE (`joule carbon countries` lists them)" if neither tells.
Result<CountryGuess> infer_country(const LocaleSources& sources);

/// A country's yearly average, and how it was chosen.
struct CountryChoice {
  CountryIntensity country;
  std::string how;  ///< "chosen with --country", "inferred from timezone Europe/Berlin", …
  /// @return "carbon intensity: 381 gCO2eq/kWh, yearly average of Germany (DEU, 2023), <how>; pass
  /// --country to choose" (the last part only when inferred).
  std::string describe() const;
};

/// @return `code`'s row if `code` is not empty (how: "chosen with --country"); otherwise, and for "auto" (any
/// case), the inferred country's row (how: "inferred from …"). Errors: find()'s, infer_country()'s, and
/// kNotFound if the inferred country is not in the table (naming it and the flag).
Result<CountryChoice> choose_country(const CountryTable& table, std::string_view code,
                                     const LocaleSources& sources);

}  // namespace joule::carbon
