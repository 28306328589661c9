// SPDX-License-Identifier: Apache-2.0
// joule/carbon/signal.hpp — the carbon intensity of the grid: a CarbonSignal interface (current value,
// history, forecast) and its providers: Electricity Maps v3, WattTime v3, the UK Carbon Intensity API, a
// replayed CSV trace on a (virtual) clock, and a constant.
//
// Every intensity is in gCO2e/kWh and every time is UTC, as Unix seconds (`_unix_s`). A provider never
// invents a value: HTTP failures, error bodies, malformed JSON and requested hours the data does not
// cover come back as errors that name the provider and what is missing.
//
//   auto signal = joule::carbon::make_carbon_signal({.provider = "electricitymaps", .zone = "DE"});
//   auto now = (*signal)->latest();           // Result<IntensityPoint>
//   auto day = (*signal)->history(t0, t0 + 86400);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"

namespace joule::carbon {

/// Pounds per megawatt-hour to grams per kilowatt-hour (WattTime's MOER unit): 453.592 g / 1000 kWh.
constexpr double kGramsPerKwhPerLbsPerMwh = 0.453592;

/// The UTC times joule accepts, [earliest, latest): 1678-01-01T00:00:00Z to 2262-01-01T00:00:00Z. Clocks
/// count int64 nanoseconds since 1970, which ends at 2262-04-11T23:47:16Z; a later time would wrap around
/// (issue 11: a trace row in 2300 printed as year 387409). The last hundred days are left as room for a
/// trace's last period and forecast horizons.
inline constexpr int64_t kEarliestUtcTimeUnixS = -9'214'560'000;
inline constexpr int64_t kLatestUtcTimeUnixS = 9'214'646'400;

/// @return the Unix time (s) of an ISO-8601 UTC date-time: `YYYY-MM-DDTHH:MM[:SS[.fff…]]` followed by `Z`,
/// `+HH:MM`, `-HH:MM`, `+HHMM` or nothing (then UTC); a space may replace the `T`. Fractions of a second are
/// dropped (floor). kParse error quoting the text (printable excerpt) otherwise, and kParse for a time
/// outside [kEarliestUtcTimeUnixS, kLatestUtcTimeUnixS).
Result<int64_t> parse_utc_time(std::string_view text);

/// @return `time_unix_s` as `YYYY-MM-DDTHH:MM:SSZ`.
std::string format_utc_time(int64_t time_unix_s);

/// @return `time_unix_s` rounded down to a multiple of `period_s` (> 0) since the Unix epoch (so hours
/// and half hours fall on UTC boundaries).
int64_t floor_to_period(int64_t time_unix_s, int64_t period_s);

/// One value of the signal: the intensity of the period that starts at `time_unix_s`.
struct IntensityPoint {
  int64_t time_unix_s = 0;         ///< start of the period, UTC
  double intensity_g_per_kwh = 0;  ///< gCO2e/kWh, ≥ 0
  bool estimated = false;          ///< the provider marked it estimated, forecast or filled in
};

/// A source of carbon intensity. Implementations that talk HTTP block the calling thread for the request;
/// a signal object is not thread-safe unless its documentation says so (use one per thread).
class CarbonSignal {
 public:
  virtual ~CarbonSignal() = default;

  /// @return e.g. "electricitymaps zone DE (lifecycle)", "trace data/carbon/synthetic_week.csv".
  virtual std::string describe() const = 0;
  /// @return how long one value holds, s (3600 for hourly providers, the trace's period, …).
  virtual int64_t period_s() const = 0;
  /// @return the freshest value.
  virtual Result<IntensityPoint> latest() = 0;
  /// @return the values of the periods that overlap [from_unix_s, to_unix_s), oldest first. A period the
  /// provider has no value for is absent (never a zero); callers that need a value for every period use
  /// intensity_for(), which fails for an uncovered one.
  virtual Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) = 0;
  /// @return the provider's forecast of the next `horizon_s` seconds, oldest first (all estimated).
  /// kNotSupported if the provider has no forecast.
  virtual Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) = 0;
};

/// @return the intensity of the window [start_unix_s, start_unix_s + length_s): the mean of the `points`
/// (each holding for `point_period_s`) that overlap it, weighted by overlap, or kNotFound "no carbon
/// intensity for <time> from <source>" if none does (never a silent zero). estimated if any value used is.
Result<IntensityPoint> intensity_for(const std::vector<IntensityPoint>& points, int64_t point_period_s,
                                     int64_t start_unix_s, int64_t length_s, std::string_view source);

/// A signal that always gives the same intensity (`--carbon-intensity G`, or a yearly average).
class ConstantSignal final : public CarbonSignal {
 public:
  /// @param clock gives the time of latest(); must outlive the signal.
  /// @throws joule::Exception (kInvalidArgument) for a negative or non-finite intensity.
  explicit ConstantSignal(double intensity_g_per_kwh, std::string label = "constant",
                          const Clock& clock = SteadyClock::instance());
  std::string describe() const override;
  int64_t period_s() const override { return 3600; }
  Result<IntensityPoint> latest() override;
  Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) override;
  Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) override;

 private:
  double intensity_g_per_kwh_;
  std::string label_;
  const Clock& clock_;
};

/// A carbon-intensity time series read from CSV: columns `timestamp,carbon_intensity_g_per_kwh` (others are
/// ignored), ISO-8601 UTC timestamps, strictly regular period (any length), non-negative finite values.
class CarbonTrace {
 public:
  /// Parses CSV text. @param source the name in error messages. @return kParse errors naming
  /// `source:line:column`: a missing column, a bad timestamp or number, a negative intensity, fewer than
  /// two rows, a timestamp out of order, a gap ("missing 2022-10-20T08:00:00Z: the period is 1800 s"), or a
  /// time (the last period's end included) outside what parse_utc_time() accepts.
  static Result<CarbonTrace> parse(std::string_view text, std::string source);
  /// Reads (bounded by read_limits::kCarbonTrace, 128 MiB) and parses a file; file errors name the path.
  static Result<CarbonTrace> read_file(const std::string& path);
  /// Builds a trace from points (regular, oldest first). @return kInvalidArgument as parse() would.
  static Result<CarbonTrace> from_points(std::vector<IntensityPoint> points, std::string source);

  const std::string& source() const { return source_; }
  const std::vector<IntensityPoint>& points() const { return points_; }
  int64_t period_s() const { return period_s_; }
  int64_t start_unix_s() const { return points_.front().time_unix_s; }
  /// @return the end of the last period (its start + period).
  int64_t end_unix_s() const { return points_.back().time_unix_s + period_s_; }
  /// @return the value in force at `time_unix_s`, or kOutOfRange naming the trace's span.
  Result<IntensityPoint> at(int64_t time_unix_s) const;
  /// @return the position of the period that contains `time_unix_s`, or kOutOfRange.
  Result<size_t> index_at(int64_t time_unix_s) const;
  /// @return the CSV text (header and one row per point), parseable by parse().
  std::string to_csv() const;
  /// @return the same values `seconds` later (earlier if negative; a whole number of days keeps the time of
  /// day): replays a past trace on a clock that starts now. kInvalidArgument if a time would leave what
  /// parse_utc_time() accepts.
  Result<CarbonTrace> shifted(int64_t seconds) const;

 private:
  std::string source_;
  std::vector<IntensityPoint> points_;
  int64_t period_s_ = 0;
};

/// Replays a CarbonTrace on a clock: "now" is clock.to_unix_ns(clock.now()), so on a VirtualClock started at
/// the trace's first timestamp the trace plays as simulated time advances. latest() is the value of the
/// period in force now; history() gives the trace's past (asking beyond its span is kOutOfRange);
/// forecast() gives the trace's own future values, i.e. a perfect forecast (useful as an oracle).
class TraceSignal final : public CarbonSignal {
 public:
  /// `clock` must outlive the signal.
  TraceSignal(CarbonTrace trace, const Clock& clock);
  std::string describe() const override;
  int64_t period_s() const override { return trace_.period_s(); }
  Result<IntensityPoint> latest() override;
  Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) override;
  Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) override;
  const CarbonTrace& trace() const { return trace_; }

 private:
  int64_t now_unix_s() const;
  CarbonTrace trace_;
  const Clock& clock_;
};

/// Electricity Maps API v3 (https://api.electricitymap.org/v3): `GET carbon-intensity/latest`, `history`
/// (last 24 h, hourly), `past-range` (older ranges, ≤ 10 days per call) and `forecast`; header
/// `auth-token`. Error bodies `{"error": "…"}` or `{"message": "…"}` are quoted in the error.
struct ElectricityMapsOptions {
  std::string base_url = "https://api.electricitymap.org/v3";  ///< env JOULE_ELECTRICITYMAPS_URL
  std::string token;                                           ///< env JOULE_ELECTRICITYMAPS_TOKEN; required
  std::string zone;                                            ///< e.g. "DE", "US-MIDW-MISO"; or lat/lon
  std::optional<double> latitude;
  std::optional<double> longitude;
  std::string emission_factor_type = "lifecycle";  ///< "lifecycle" or "direct"
  bool disable_estimations = false;                ///< true: estimated hours are missing instead of estimated
  double timeout_s = 30;
};

class ElectricityMapsSignal final : public CarbonSignal {
 public:
  /// @param clock gives "now" to pick `history` (last 24 h) or `past-range`; must outlive the signal.
  /// @throws joule::Exception kInvalidArgument for a missing token, zone and location, a bad base URL or
  /// emission factor type.
  explicit ElectricityMapsSignal(ElectricityMapsOptions options,
                                 const Clock& clock = SteadyClock::instance());
  std::string describe() const override;
  int64_t period_s() const override { return 3600; }
  Result<IntensityPoint> latest() override;
  Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) override;
  Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) override;

 private:
  std::string location_query() const;
  ElectricityMapsOptions options_;
  const Clock& clock_;
};

/// WattTime API v3 (https://api.watttime.org): `GET /login` with HTTP basic auth gives a bearer token
/// (or give one directly); `GET /v3/historical`, `/v3/forecast` (horizon_hours=0 for the freshest value).
/// Values in `lbs_co2_per_mwh` are converted to g/kWh (× 0.453592); other units are an error.
struct WattTimeOptions {
  std::string base_url = "https://api.watttime.org";  ///< env JOULE_WATTTIME_URL
  std::string username;                               ///< env JOULE_WATTTIME_USERNAME
  std::string password;                               ///< env JOULE_WATTTIME_PASSWORD
  std::string token;   ///< env JOULE_WATTTIME_TOKEN: a bearer token instead of username/password
  std::string region;  ///< e.g. "CAISO_NORTH"
  std::string signal_type = "co2_moer";  ///< "co2_moer" (marginal) or "co2_aoer" (average)
  double timeout_s = 30;
};

class WattTimeSignal final : public CarbonSignal {
 public:
  /// @throws joule::Exception kInvalidArgument without a region, or without credentials or token.
  explicit WattTimeSignal(WattTimeOptions options);
  std::string describe() const override;
  /// @return the data's period (meta.data_point_period_seconds of the last response; 300 before any).
  int64_t period_s() const override { return period_s_; }
  Result<IntensityPoint> latest() override;
  Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) override;
  Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) override;

 private:
  Result<std::string> bearer();
  Result<std::vector<IntensityPoint>> get_points(const std::string& path, bool estimated);
  WattTimeOptions options_;
  std::string session_token_;
  int64_t period_s_ = 300;
};

/// The UK Carbon Intensity API (National Grid ESO, https://api.carbonintensity.org.uk; free, no key,
/// half-hourly, GB national): `GET /intensity`, `/intensity/{from}/{to}`, `/intensity/{from}/fw48h`.
/// A slot's `actual` is used when present, else its `forecast` (marked estimated).
struct UkCarbonIntensityOptions {
  std::string base_url = "https://api.carbonintensity.org.uk";  ///< env JOULE_UK_CARBON_URL
  double timeout_s = 30;
};

class UkCarbonIntensitySignal final : public CarbonSignal {
 public:
  /// @param clock gives "now" for forecasts; must outlive the signal.
  explicit UkCarbonIntensitySignal(UkCarbonIntensityOptions options = {},
                                   const Clock& clock = SteadyClock::instance());
  std::string describe() const override;
  int64_t period_s() const override { return 1800; }
  Result<IntensityPoint> latest() override;
  Result<std::vector<IntensityPoint>> history(int64_t from_unix_s, int64_t to_unix_s) override;
  Result<std::vector<IntensityPoint>> forecast(int64_t horizon_s) override;

 private:
  UkCarbonIntensityOptions options_;
  const Clock& clock_;
};

/// @return the points of a response body saved from a provider's API: "electricitymaps" (latest, history,
/// past-range or forecast), "watttime" (historical or forecast; converted to g/kWh) or "uk" (/intensity…),
/// oldest first, with the same strict checks as the live providers (kParse naming the problem; an
/// Electricity Maps error body is kNotFound). Null values are left out, never zero.
Result<std::vector<IntensityPoint>> parse_provider_body(std::string_view provider, std::string_view body);

/// Which carbon signal to use; see make_carbon_signal().
struct CarbonSourceOptions {
  std::optional<double> intensity_g_per_kwh;  ///< a constant (--carbon-intensity)
  std::string trace_path;                     ///< a CSV trace (--carbon-trace), replayed on `clock`
  std::string zone;                           ///< a live provider's zone or region (--zone)
  /// a country's yearly average (--country, joule/carbon/country.hpp): an ISO 3166-1 code, or "auto" to
  /// infer the country from the timezone or the locale
  std::string country;
  /// "electricitymaps", "watttime" or "uk" (--carbon-provider; env JOULE_CARBON_PROVIDER; default
  /// electricitymaps). Base URLs and credentials come from the providers' JOULE_* variables.
  std::string provider;

  /// @return how many sources are given (intensity, trace, zone, country): make_carbon_signal() needs one.
  int sources_given() const {
    return (intensity_g_per_kwh ? 1 : 0) + (trace_path.empty() ? 0 : 1) + (zone.empty() ? 0 : 1) +
           (country.empty() ? 0 : 1);
  }
};

/// @return the signal the options select: exactly one of intensity, trace, zone and country must be given
/// (kInvalidArgument otherwise, naming the flags). A country gives a ConstantSignal of its yearly average
/// (choose_country()'s errors: an unknown code, a country that cannot be inferred). A trace replays on
/// `clock` (must outlive the signal); live providers use `clock` for "now". Errors of the providers'
/// constructors, an unknown provider (listing the known ones), a UK zone other than "GB", and trace files
/// that cannot be read come back as errors.
Result<std::unique_ptr<CarbonSignal>> make_carbon_signal(const CarbonSourceOptions& options,
                                                         const Clock& clock = SteadyClock::instance());

}  // namespace joule::carbon
