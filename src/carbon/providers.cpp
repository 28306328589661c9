// SPDX-License-Identifier: Apache-2.0
// The live carbon-intensity providers: Electricity Maps v3, WattTime v3 and the UK Carbon Intensity API.
// Each parses the documented JSON shapes strictly: a missing field, a null value or a negative intensity
// is an error naming the request, never a zero.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/signal.hpp"
#include "joule/core/clock.hpp"
#include "joule/core/json.hpp"
#include "joule/core/strings.hpp"
#include "joule/core/units.hpp"

#include "carbon/http.hpp"

namespace joule::carbon {

namespace {

using nlohmann::json;
detail::BaseUrl base_or_throw(std::string_view url, std::string_view provider) {
  return value_or_throw(detail::parse_base_url(url, provider));
}

// A non-negative finite intensity from `value` (a JSON number), or a kParse error naming where it was.
Result<double> intensity_value(const json& value, std::string_view provider, std::string_view what,
                               std::string_view field) {
  if (!value.is_number()) {
    return tl::make_unexpected(detail::shape_error(
        provider, what,
        fmt::format("'{}' is {}, expected a number", field, value.is_null() ? "null" : value.dump())));
  }
  const double number = value.get<double>();
  if (!(number >= 0) || !std::isfinite(number)) {
    return tl::make_unexpected(detail::shape_error(
        provider, what, fmt::format("'{}' is {}: a carbon intensity must be non-negative", field, number)));
  }
  return number;
}

Result<int64_t> time_value(const json& object, const char* field, std::string_view provider,
                           std::string_view what) {
  const auto it = object.find(field);
  if (it == object.end() || !it->is_string()) {
    return tl::make_unexpected(
        detail::shape_error(provider, what, fmt::format("a point has no '{}' time", field)));
  }
  auto time = parse_utc_time(it->get<std::string>());
  if (!time) {
    return tl::make_unexpected(
        detail::shape_error(provider, what, fmt::format("'{}': {}", field, time.error().message())));
  }
  return time;
}

const json* array_field(const json& body, std::initializer_list<const char*> names) {
  if (!body.is_object()) {
    return nullptr;
  }
  for (const char* name : names) {
    const auto it = body.find(name);
    if (it != body.end() && it->is_array()) {
      return &*it;
    }
  }
  return nullptr;
}

}  // namespace

// ---- Electricity Maps ----------------------------------------------------------------------------------

namespace {

constexpr std::string_view kElectricityMaps = "electricitymaps";

// One Electricity Maps point: {"carbonIntensity": 466, "datetime": "…", "isEstimated": true, …}. A null
// carbonIntensity (an hour without data when estimations are disabled) gives nullopt.
Result<std::optional<IntensityPoint>> em_point(const json& p, std::string_view what) {
  if (!p.is_object()) {
    return tl::make_unexpected(detail::shape_error(kElectricityMaps, what, "a point is not an object"));
  }
  const auto time = JOULE_TRY(time_value(p, "datetime", kElectricityMaps, what));
  const auto it = p.find("carbonIntensity");
  if (it == p.end()) {
    return tl::make_unexpected(
        detail::shape_error(kElectricityMaps, what,
                            fmt::format("the point at {} has no 'carbonIntensity'", format_utc_time(time))));
  }
  if (it->is_null()) {
    return std::optional<IntensityPoint>();
  }
  const auto value = JOULE_TRY(intensity_value(*it, kElectricityMaps, what, "carbonIntensity"));
  const auto estimated = p.find("isEstimated");
  return std::optional<IntensityPoint>(
      IntensityPoint{time, value, estimated != p.end() && estimated->is_boolean() && estimated->get<bool>()});
}

Result<std::vector<IntensityPoint>> em_points(const json& body, std::initializer_list<const char*> keys,
                                              std::string_view what, bool estimated) {
  const json* list = array_field(body, keys);
  if (list == nullptr) {
    return tl::make_unexpected(detail::shape_error(
        kElectricityMaps, what, fmt::format("the response has no '{}' list", *keys.begin())));
  }
  std::vector<IntensityPoint> points;
  for (const auto& p : *list) {
    auto point = em_point(p, what);
    if (!point) {
      return tl::make_unexpected(point.error());
    }
    if (*point) {
      (*point)->estimated = (*point)->estimated || estimated;
      points.push_back(**point);
    }
  }
  std::sort(points.begin(), points.end(),
            [](const IntensityPoint& a, const IntensityPoint& b) { return a.time_unix_s < b.time_unix_s; });
  return points;
}

}  // namespace

ElectricityMapsSignal::ElectricityMapsSignal(ElectricityMapsOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {
  if (options_.token.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "electricitymaps: no API token: set JOULE_ELECTRICITYMAPS_TOKEN (see docs/carbon.md)");
  }
  if (options_.zone.empty() && !(options_.latitude && options_.longitude)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "electricitymaps: give a zone (e.g. DE) or a latitude and longitude");
  }
  if (options_.emission_factor_type != "lifecycle" && options_.emission_factor_type != "direct") {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("electricitymaps: emission factor type '{}' is neither lifecycle nor direct",
                                options_.emission_factor_type));
  }
  base_or_throw(options_.base_url, kElectricityMaps);
}

std::string ElectricityMapsSignal::describe() const {
  const std::string where = options_.zone.empty()
                                ? fmt::format("location {},{}", *options_.latitude, *options_.longitude)
                                : fmt::format("zone {}", options_.zone);
  return fmt::format("electricitymaps {} ({})", where, options_.emission_factor_type);
}

std::string ElectricityMapsSignal::location_query() const {
  std::string query = options_.zone.empty()
                          ? fmt::format("lat={}&lon={}", *options_.latitude, *options_.longitude)
                          : fmt::format("zone={}", detail::url_encode(options_.zone));
  query += fmt::format("&emissionFactorType={}", options_.emission_factor_type);
  if (options_.disable_estimations) {
    query += "&disableEstimations=true";
  }
  return query;
}

namespace {

detail::HttpGet em_request(const ElectricityMapsOptions& options, std::string path) {
  detail::HttpGet request;
  request.path = std::move(path);
  request.headers.emplace_back("auth-token", options.token);
  request.timeout_s = options.timeout_s;
  return request;
}

// Adds a hint about the token to a refused request.
Error em_refused(Error error) {
  if (error.code() == ErrorCode::kPermissionDenied) {
    return Error(error.code(),
                 error.message() + " (check JOULE_ELECTRICITYMAPS_TOKEN and that your plan covers the zone)");
  }
  return error;
}

}  // namespace

Result<IntensityPoint> ElectricityMapsSignal::latest() {
  const auto base = base_or_throw(options_.base_url, kElectricityMaps);
  const std::string path = "/carbon-intensity/latest?" + location_query();
  const auto body = detail::get_json(base, em_request(options_, path), kElectricityMaps);
  if (!body) {
    return tl::make_unexpected(em_refused(body.error()));
  }
  const std::string what = base.path_prefix + path;
  if (body->is_object() && body->contains("error")) {
    return fail(ErrorCode::kNotFound, "{}: GET {}: {}", kElectricityMaps, what,
                parsed_error_body_message(*body));
  }
  auto point = em_point(*body, what);
  if (!point) {
    return tl::make_unexpected(point.error());
  }
  if (!*point) {
    return fail(ErrorCode::kNotFound, "{}: GET {}: no carbon intensity for the latest hour", kElectricityMaps,
                what);
  }
  return **point;
}

Result<std::vector<IntensityPoint>> ElectricityMapsSignal::history(int64_t from_unix_s, int64_t to_unix_s) {
  const auto base = base_or_throw(options_.base_url, kElectricityMaps);
  std::vector<IntensityPoint> all;
  if (to_unix_s <= from_unix_s) {
    return all;
  }
  // `history` covers the last 24 hours in one call; older ranges need `past-range`, ≤ 10 days per call.
  const int64_t now = unix_now_s(clock_);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (from_unix_s >= floor_to_period(now, kHourS) - 23 * kHourS) {
    ranges.emplace_back(0, 0);  // one `history` call
  } else {
    for (int64_t start = floor_to_period(from_unix_s, kHourS); start < to_unix_s; start += 10 * kDayS) {
      ranges.emplace_back(start, std::min(start + 10 * kDayS, to_unix_s));
    }
  }
  for (const auto& [start, end] : ranges) {
    const std::string path = start == 0 && end == 0
                                 ? "/carbon-intensity/history?" + location_query()
                                 : fmt::format("/carbon-intensity/past-range?{}&start={}&end={}",
                                               location_query(), detail::url_encode(format_utc_time(start)),
                                               detail::url_encode(format_utc_time(end)));
    const auto body = detail::get_json(base, em_request(options_, path), kElectricityMaps);
    if (!body) {
      return tl::make_unexpected(em_refused(body.error()));
    }
    auto points = JOULE_TRY(em_points(*body, {"history", "data"}, base.path_prefix + path, false));
    for (const auto& p : points) {
      if (p.time_unix_s + period_s() > from_unix_s && p.time_unix_s < to_unix_s) {
        all.push_back(p);
      }
    }
  }
  return all;
}

Result<std::vector<IntensityPoint>> ElectricityMapsSignal::forecast(int64_t horizon_s) {
  const auto base = base_or_throw(options_.base_url, kElectricityMaps);
  int horizon_h = 72;
  for (const int h : {6, 24, 48, 72}) {
    if (static_cast<int64_t>(h) * kHourS >= horizon_s) {
      horizon_h = h;
      break;
    }
  }
  const std::string path =
      fmt::format("/carbon-intensity/forecast?{}&horizonHours={}", location_query(), horizon_h);
  const auto body = detail::get_json(base, em_request(options_, path), kElectricityMaps);
  if (!body) {
    return tl::make_unexpected(em_refused(body.error()));
  }
  return em_points(*body, {"forecast"}, base.path_prefix + path, true);
}

// ---- WattTime ------------------------------------------------------------------------------------------

namespace {
constexpr std::string_view kWattTime = "watttime";
constexpr int64_t kWattTimeMaxRangeS = 32 * kDayS;
}  // namespace

WattTimeSignal::WattTimeSignal(WattTimeOptions options) : options_(std::move(options)) {
  if (options_.region.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "watttime: give a region (e.g. CAISO_NORTH)");
  }
  if (options_.token.empty() && (options_.username.empty() || options_.password.empty())) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "watttime: no credentials: set JOULE_WATTTIME_USERNAME and JOULE_WATTTIME_PASSWORD, or "
                    "JOULE_WATTTIME_TOKEN");
  }
  base_or_throw(options_.base_url, kWattTime);
}

std::string WattTimeSignal::describe() const {
  return fmt::format("watttime region {} ({})", options_.region, options_.signal_type);
}

Result<std::string> WattTimeSignal::bearer() {
  if (!options_.token.empty()) {
    return options_.token;
  }
  if (!session_token_.empty()) {
    return session_token_;
  }
  const auto base = base_or_throw(options_.base_url, kWattTime);
  detail::HttpGet request;
  request.path = "/login";
  request.basic_auth = std::make_pair(options_.username, options_.password);
  request.timeout_s = options_.timeout_s;
  const auto body = detail::get_json(base, request, kWattTime);
  if (!body) {
    if (body.error().code() == ErrorCode::kPermissionDenied) {
      return fail(ErrorCode::kPermissionDenied,
                  "{} (check JOULE_WATTTIME_USERNAME and JOULE_WATTTIME_PASSWORD)", body.error().message());
    }
    return tl::make_unexpected(body.error());
  }
  if (!body->is_object() || !body->contains("token") || !(*body)["token"].is_string()) {
    return tl::make_unexpected(
        detail::shape_error(kWattTime, base.path_prefix + "/login", "the response has no 'token'"));
  }
  session_token_ = (*body)["token"].get<std::string>();
  return session_token_;
}

namespace {

// WattTime's {"data": [{"point_time", "value"}…], "meta": {"units", "data_point_period_seconds"…}}.
Result<std::vector<IntensityPoint>> wt_points(const json& body, std::string_view what, bool estimated,
                                              int64_t& period_s) {
  const json* data = array_field(body, {"data"});
  if (data == nullptr) {
    return tl::make_unexpected(detail::shape_error(kWattTime, what, "the response has no 'data' list"));
  }
  double scale = 1;
  if (body.contains("meta") && body["meta"].is_object()) {
    const json& meta = body["meta"];
    const auto units_it = meta.find("units");
    const std::string units =
        units_it != meta.end() && units_it->is_string() ? units_it->get<std::string>() : std::string();
    if (units == "lbs_co2_per_mwh") {
      scale = kGramsPerKwhPerLbsPerMwh;
    } else if (units != "g_co2_per_kwh" && units != "gco2_per_kwh") {
      return tl::make_unexpected(detail::shape_error(
          kWattTime, what, fmt::format("unknown units '{}' (expected lbs_co2_per_mwh)", units)));
    }
    if (meta.contains("data_point_period_seconds") && meta["data_point_period_seconds"].is_number_integer() &&
        meta["data_point_period_seconds"].get<int64_t>() > 0) {
      period_s = meta["data_point_period_seconds"].get<int64_t>();
    }
  } else {
    return tl::make_unexpected(
        detail::shape_error(kWattTime, what, "the response has no 'meta' with the units"));
  }
  std::vector<IntensityPoint> points;
  for (const auto& p : *data) {
    if (!p.is_object()) {
      return tl::make_unexpected(detail::shape_error(kWattTime, what, "a point is not an object"));
    }
    const auto time = JOULE_TRY(time_value(p, "point_time", kWattTime, what));
    const auto it = p.find("value");
    if (it == p.end() || it->is_null()) {
      continue;  // a missing value: the period stays uncovered
    }
    const auto value = JOULE_TRY(intensity_value(*it, kWattTime, what, "value"));
    points.push_back({time, value * scale, estimated});
  }
  std::sort(points.begin(), points.end(),
            [](const IntensityPoint& a, const IntensityPoint& b) { return a.time_unix_s < b.time_unix_s; });
  return points;
}

}  // namespace

Result<std::vector<IntensityPoint>> WattTimeSignal::get_points(const std::string& path, bool estimated) {
  const auto base = base_or_throw(options_.base_url, kWattTime);
  const std::string what = base.path_prefix + path;
  Result<json> body = tl::make_unexpected(Error(ErrorCode::kInternal, "not sent"));
  // A session token expires (30 min): log in again once when it is refused.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto token = JOULE_TRY(bearer());
    detail::HttpGet request;
    request.path = path;
    request.bearer_token = token;
    request.timeout_s = options_.timeout_s;
    body = detail::get_json(base, request, kWattTime);
    if (body || body.error().code() != ErrorCode::kPermissionDenied || !options_.token.empty() ||
        attempt == 1) {
      break;
    }
    session_token_.clear();
  }
  if (!body) {
    if (body.error().code() == ErrorCode::kPermissionDenied) {
      return fail(ErrorCode::kPermissionDenied,
                  "{} (check the WattTime credentials and that your plan covers region {})",
                  body.error().message(), options_.region);
    }
    return tl::make_unexpected(body.error());
  }
  return wt_points(*body, what, estimated, period_s_);
}

Result<IntensityPoint> WattTimeSignal::latest() {
  const std::string path =
      fmt::format("/v3/forecast?region={}&signal_type={}&horizon_hours=0",
                  detail::url_encode(options_.region), detail::url_encode(options_.signal_type));
  auto points = JOULE_TRY(get_points(path, false));
  if (points.empty()) {
    return fail(ErrorCode::kNotFound, "{}: GET {}: no value for region {}", kWattTime, path, options_.region);
  }
  return points.front();
}

Result<std::vector<IntensityPoint>> WattTimeSignal::history(int64_t from_unix_s, int64_t to_unix_s) {
  std::vector<IntensityPoint> all;
  for (int64_t start = from_unix_s; start < to_unix_s; start += kWattTimeMaxRangeS) {
    const int64_t end = std::min(start + kWattTimeMaxRangeS, to_unix_s);
    const std::string path =
        fmt::format("/v3/historical?region={}&start={}&end={}&signal_type={}",
                    detail::url_encode(options_.region), detail::url_encode(format_utc_time(start)),
                    detail::url_encode(format_utc_time(end)), detail::url_encode(options_.signal_type));
    auto points = JOULE_TRY(get_points(path, false));
    all.insert(all.end(), points.begin(), points.end());
  }
  return all;
}

Result<std::vector<IntensityPoint>> WattTimeSignal::forecast(int64_t horizon_s) {
  const int64_t hours = std::clamp<int64_t>((horizon_s + kHourS - 1) / kHourS, 1, 72);
  const std::string path =
      fmt::format("/v3/forecast?region={}&signal_type={}&horizon_hours={}",
                  detail::url_encode(options_.region), detail::url_encode(options_.signal_type), hours);
  return get_points(path, true);
}

// ---- UK Carbon Intensity -------------------------------------------------------------------------------

namespace {

constexpr std::string_view kUk = "uk";
constexpr int64_t kUkMaxRangeS = 14 * kDayS;

// The API's own time format in paths: 2020-05-24T20:30Z.
std::string uk_time(int64_t time_unix_s) {
  std::string text = format_utc_time(time_unix_s);
  return text.substr(0, 16) + "Z";
}

// {"data": [{"from": "…", "to": "…", "intensity": {"forecast": 146, "actual": null, "index": "low"}}]}
Result<std::vector<IntensityPoint>> uk_points(const json& body, std::string_view what, bool forecast_only) {
  const json* data = array_field(body, {"data"});
  if (data == nullptr) {
    return tl::make_unexpected(detail::shape_error(kUk, what, "the response has no 'data' list"));
  }
  std::vector<IntensityPoint> points;
  for (const auto& slot : *data) {
    if (!slot.is_object()) {
      return tl::make_unexpected(detail::shape_error(kUk, what, "a slot is not an object"));
    }
    const auto time = JOULE_TRY(time_value(slot, "from", kUk, what));
    const auto intensity = slot.find("intensity");
    if (intensity == slot.end() || !intensity->is_object()) {
      return tl::make_unexpected(detail::shape_error(
          kUk, what, fmt::format("the slot at {} has no 'intensity'", format_utc_time(time))));
    }
    const json actual = intensity->value("actual", json());
    const json forecast = intensity->value("forecast", json());
    const bool use_actual = !forecast_only && !actual.is_null();
    const json& chosen = use_actual ? actual : forecast;
    if (chosen.is_null()) {
      continue;  // neither actual nor forecast: the slot stays uncovered
    }
    const auto value = JOULE_TRY(intensity_value(chosen, kUk, what, use_actual ? "actual" : "forecast"));
    points.push_back({time, value, !use_actual});
  }
  std::sort(points.begin(), points.end(),
            [](const IntensityPoint& a, const IntensityPoint& b) { return a.time_unix_s < b.time_unix_s; });
  return points;
}

}  // namespace

UkCarbonIntensitySignal::UkCarbonIntensitySignal(UkCarbonIntensityOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {
  base_or_throw(options_.base_url, kUk);
}

std::string UkCarbonIntensitySignal::describe() const {
  return "uk carbon intensity zone GB (national)";
}

Result<IntensityPoint> UkCarbonIntensitySignal::latest() {
  const auto base = base_or_throw(options_.base_url, kUk);
  detail::HttpGet request;
  request.path = "/intensity";
  request.timeout_s = options_.timeout_s;
  const auto body = JOULE_TRY(detail::get_json(base, request, kUk));
  auto points = JOULE_TRY(uk_points(body, base.path_prefix + request.path, false));
  if (points.empty()) {
    return fail(ErrorCode::kNotFound, "{}: GET {}: no carbon intensity for the current half hour", kUk,
                base.path_prefix + request.path);
  }
  return points.back();
}

Result<std::vector<IntensityPoint>> UkCarbonIntensitySignal::history(int64_t from_unix_s, int64_t to_unix_s) {
  const auto base = base_or_throw(options_.base_url, kUk);
  std::vector<IntensityPoint> all;
  for (int64_t start = floor_to_period(from_unix_s, period_s()); start < to_unix_s; start += kUkMaxRangeS) {
    const int64_t end = std::min(start + kUkMaxRangeS, to_unix_s);
    detail::HttpGet request;
    request.path = fmt::format("/intensity/{}/{}", uk_time(start), uk_time(end));
    request.timeout_s = options_.timeout_s;
    const auto body = JOULE_TRY(detail::get_json(base, request, kUk));
    auto points = JOULE_TRY(uk_points(body, base.path_prefix + request.path, false));
    for (const auto& p : points) {
      if (p.time_unix_s + period_s() > from_unix_s && p.time_unix_s < to_unix_s &&
          (all.empty() || p.time_unix_s > all.back().time_unix_s)) {
        all.push_back(p);
      }
    }
  }
  return all;
}

Result<std::vector<IntensityPoint>> UkCarbonIntensitySignal::forecast(int64_t horizon_s) {
  const auto base = base_or_throw(options_.base_url, kUk);
  const int64_t now = floor_to_period(unix_now_s(clock_), period_s());
  detail::HttpGet request;
  request.path = fmt::format("/intensity/{}/{}", uk_time(now), horizon_s <= kDayS ? "fw24h" : "fw48h");
  request.timeout_s = options_.timeout_s;
  const auto body = JOULE_TRY(detail::get_json(base, request, kUk));
  auto points = uk_points(body, base.path_prefix + request.path, true);
  if (!points) {
    return points;
  }
  std::erase_if(*points, [&](const IntensityPoint& p) { return p.time_unix_s > now + horizon_s; });
  return points;
}

// ---- saved response bodies -----------------------------------------------------------------------------

Result<std::vector<IntensityPoint>> parse_provider_body(std::string_view provider, std::string_view body) {
  const auto document = parse_json(body);
  const std::string what = fmt::format("<saved {} body>", provider);
  if (!document) {
    return fail(ErrorCode::kParse, "{}: {}: the body {}", provider, what,
                describe_json_error(document.error(), body));
  }
  const json& parsed = *document;
  if (provider == kElectricityMaps) {
    if (parsed.is_object() && parsed.contains("error")) {
      return fail(ErrorCode::kNotFound, "{}: {}: {}", provider, what, parsed_error_body_message(parsed));
    }
    if (array_field(parsed, {"history", "data", "forecast"}) != nullptr) {
      return em_points(parsed, {"history", "data", "forecast"}, what, false);
    }
    auto point = JOULE_TRY(em_point(parsed, what));
    return point ? std::vector<IntensityPoint>{*point} : std::vector<IntensityPoint>{};
  }
  if (provider == kWattTime) {
    int64_t period_s = 0;
    return wt_points(parsed, what, false, period_s);
  }
  if (provider == kUk) {
    return uk_points(parsed, what, false);
  }
  return fail(ErrorCode::kInvalidArgument,
              "unknown carbon provider '{}' (known: electricitymaps, watttime, uk)", provider);
}

}  // namespace joule::carbon
