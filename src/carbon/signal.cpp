// SPDX-License-Identifier: Apache-2.0
// CarbonSignal basics: UTC time text, the constant signal, CSV traces and their replay, and the factory.
#include "joule/carbon/signal.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include <fmt/format.h>

#include "joule/carbon/country.hpp"
#include "joule/core/clock.hpp"
#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/strings.hpp"
#include "joule/core/units.hpp"
#include "joule/core/validate.hpp"

namespace joule::carbon {

namespace {

// Reads exactly `digits` decimal digits at text[pos], advancing pos.
std::optional<int> read_digits(std::string_view text, size_t& pos, size_t digits) {
  if (pos + digits > text.size()) {
    return std::nullopt;
  }
  int value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  pos += digits;
  return value;
}

bool expect_char(std::string_view text, size_t& pos, char wanted) {
  if (pos < text.size() && text[pos] == wanted) {
    ++pos;
    return true;
  }
  return false;
}

}  // namespace

Result<int64_t> parse_utc_time(std::string_view text) {
  const std::string_view trimmed = trim(text);
  const auto bad = [&] {
    return fail(
        ErrorCode::kParse,
        "'{}' is not an ISO-8601 UTC time (expected e.g. 2024-09-24T03:00:00Z or 2024-09-24T03:00+00:00)",
        printable_excerpt(text));
  };
  size_t pos = 0;
  std::tm tm{};
  const auto year = read_digits(trimmed, pos, 4);
  if (!year || !expect_char(trimmed, pos, '-')) {
    return bad();
  }
  const auto month = read_digits(trimmed, pos, 2);
  if (!month || !expect_char(trimmed, pos, '-')) {
    return bad();
  }
  const auto day = read_digits(trimmed, pos, 2);
  if (!day ||
      !(expect_char(trimmed, pos, 'T') || expect_char(trimmed, pos, ' ') || expect_char(trimmed, pos, 't'))) {
    return bad();
  }
  const auto hour = read_digits(trimmed, pos, 2);
  if (!hour || !expect_char(trimmed, pos, ':')) {
    return bad();
  }
  const auto minute = read_digits(trimmed, pos, 2);
  if (!minute) {
    return bad();
  }
  int second = 0;
  if (expect_char(trimmed, pos, ':')) {
    const auto s = read_digits(trimmed, pos, 2);
    if (!s) {
      return bad();
    }
    second = *s;
    if (expect_char(trimmed, pos, '.') || expect_char(trimmed, pos, ',')) {
      const size_t digits_start = pos;
      while (pos < trimmed.size() && std::isdigit(static_cast<unsigned char>(trimmed[pos])) != 0) {
        ++pos;
      }
      if (pos == digits_start) {
        return bad();
      }
    }
  }
  int offset_s = 0;
  if (pos < trimmed.size()) {
    const char sign = trimmed[pos];
    if ((sign == 'Z' || sign == 'z') && pos + 1 == trimmed.size()) {
      ++pos;
    } else if (sign == '+' || sign == '-') {
      ++pos;
      const auto offset_h = read_digits(trimmed, pos, 2);
      expect_char(trimmed, pos, ':');
      const auto offset_m = read_digits(trimmed, pos, 2);
      if (!offset_h || !offset_m || pos != trimmed.size() || *offset_h > 23 || *offset_m > 59) {
        return bad();
      }
      offset_s = (sign == '+' ? 1 : -1) * (*offset_h * 3600 + *offset_m * 60);
    } else {
      return bad();
    }
  }
  if (*month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 || *minute > 59 || second > 60) {
    return bad();
  }
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *minute;
  tm.tm_sec = second;
  const time_t seconds = timegm(&tm);
  // timegm normalises 31 April to 1 May: a day that does not exist in its month is an error.
  if (tm.tm_mday != *day) {
    return bad();
  }
  const int64_t time_unix_s = static_cast<int64_t>(seconds) - offset_s;
  if (time_unix_s < kEarliestUtcTimeUnixS || time_unix_s >= kLatestUtcTimeUnixS) {
    return fail(ErrorCode::kParse,
                "'{}' is outside the times joule's clocks hold (from {} to before {}: nanoseconds since 1970 "
                "in 64 bits)",
                printable_excerpt(text), format_utc_time(kEarliestUtcTimeUnixS),
                format_utc_time(kLatestUtcTimeUnixS));
  }
  return time_unix_s;
}

std::string format_utc_time(int64_t time_unix_s) {
  const auto seconds = static_cast<time_t>(time_unix_s);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

int64_t floor_to_period(int64_t time_unix_s, int64_t period_s) {
  const int64_t remainder = time_unix_s % period_s;
  return remainder < 0 ? time_unix_s - remainder - period_s : time_unix_s - remainder;
}

Result<IntensityPoint> intensity_for(const std::vector<IntensityPoint>& points, int64_t point_period_s,
                                     int64_t start_unix_s, int64_t length_s, std::string_view source) {
  // Weighted by how much of the window each value covers, so that 5-minute values average into an hour
  // and an hourly value covers both halves of it.
  double weighted = 0;
  int64_t covered_s = 0;
  bool estimated = false;
  for (const auto& point : points) {
    const int64_t begin = std::max(point.time_unix_s, start_unix_s);
    const int64_t end = std::min(point.time_unix_s + point_period_s, start_unix_s + length_s);
    if (end > begin) {
      weighted += point.intensity_g_per_kwh * static_cast<double>(end - begin);
      covered_s += end - begin;
      estimated = estimated || point.estimated;
    }
  }
  if (covered_s == 0) {
    return fail(ErrorCode::kNotFound, "no carbon intensity for {} from {}", format_utc_time(start_unix_s),
                source);
  }
  return IntensityPoint{start_unix_s, weighted / static_cast<double>(covered_s), estimated};
}

// ---- ConstantSignal ------------------------------------------------------------------------------------

ConstantSignal::ConstantSignal(double intensity_g_per_kwh, std::string label, const Clock& clock)
    : intensity_g_per_kwh_(intensity_g_per_kwh), label_(std::move(label)), clock_(clock) {
  if (!(intensity_g_per_kwh >= 0) || !std::isfinite(intensity_g_per_kwh)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("carbon intensity must be finite and non-negative, got {} g/kWh", intensity_g_per_kwh));
  }
}

std::string ConstantSignal::describe() const {
  return fmt::format("{} {:g} g/kWh", label_, intensity_g_per_kwh_);
}

Result<IntensityPoint> ConstantSignal::latest() {
  return IntensityPoint{floor_to_period(unix_now_s(clock_), period_s()), intensity_g_per_kwh_, false};
}

Result<std::vector<IntensityPoint>> ConstantSignal::history(int64_t from_unix_s, int64_t to_unix_s) {
  std::vector<IntensityPoint> points;
  for (int64_t t = floor_to_period(from_unix_s, period_s()); t < to_unix_s; t += period_s()) {
    points.push_back({t, intensity_g_per_kwh_, false});
  }
  return points;
}

Result<std::vector<IntensityPoint>> ConstantSignal::forecast(int64_t horizon_s) {
  const int64_t now = floor_to_period(unix_now_s(clock_), period_s());
  std::vector<IntensityPoint> points;
  for (int64_t t = now; t <= now + horizon_s; t += period_s()) {
    points.push_back({t, intensity_g_per_kwh_, true});
  }
  return points;
}

// ---- CarbonTrace ---------------------------------------------------------------------------------------

namespace {

Result<void> check_regular(const std::vector<IntensityPoint>& points, const std::string& source,
                           const std::vector<size_t>& lines, int64_t& period_s) {
  const auto where = [&](size_t i) {
    return lines.empty() ? fmt::format("{}: point {}", source, i) : fmt::format("{}:{}", source, lines[i]);
  };
  if (points.size() < 2) {
    return fail(ErrorCode::kParse, "{}: a carbon trace needs at least two rows to have a period, got {}",
                source, points.size());
  }
  // Points that parse_utc_time() did not make (from_points()) get the same bounds, before any difference
  // is taken; with the last period's end checked below, every time inside the trace fits a clock.
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].time_unix_s < kEarliestUtcTimeUnixS || points[i].time_unix_s >= kLatestUtcTimeUnixS) {
      return fail(ErrorCode::kParse,
                  "{}: the time {} (Unix) is outside the times joule's clocks hold (from {} to before {})",
                  where(i), points[i].time_unix_s, format_utc_time(kEarliestUtcTimeUnixS),
                  format_utc_time(kLatestUtcTimeUnixS));
    }
  }
  period_s = points[1].time_unix_s - points[0].time_unix_s;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (!(p.intensity_g_per_kwh >= 0) || !std::isfinite(p.intensity_g_per_kwh)) {
      return fail(ErrorCode::kParse, "{}: carbon intensity {} g/kWh at {}: must be finite and non-negative",
                  where(i), p.intensity_g_per_kwh, format_utc_time(p.time_unix_s));
    }
    if (i == 0) {
      continue;
    }
    const int64_t step = p.time_unix_s - points[i - 1].time_unix_s;
    if (step <= 0) {
      return fail(ErrorCode::kParse, "{}: {} does not come after {}: timestamps must increase", where(i),
                  format_utc_time(p.time_unix_s), format_utc_time(points[i - 1].time_unix_s));
    }
    if (step != period_s) {
      if (step > period_s && step % period_s == 0) {
        return fail(ErrorCode::kParse, "{}: missing {}: the trace's period is {} s but the next row is {}",
                    where(i), format_utc_time(points[i - 1].time_unix_s + period_s), period_s,
                    format_utc_time(p.time_unix_s));
      }
      return fail(ErrorCode::kParse, "{}: {} is {} s after the previous row; the trace's period is {} s",
                  where(i), format_utc_time(p.time_unix_s), step, period_s);
    }
  }
  // Both terms are within the bounds, so the sum cannot overflow.
  if (points.back().time_unix_s + period_s > kLatestUtcTimeUnixS) {
    return fail(ErrorCode::kParse,
                "{}: the trace's last period ({} s from {}) ends after {}, the last time joule's clocks hold",
                where(points.size() - 1), period_s, format_utc_time(points.back().time_unix_s),
                format_utc_time(kLatestUtcTimeUnixS));
  }
  return {};
}

}  // namespace

Result<CarbonTrace> CarbonTrace::parse(std::string_view text, std::string source) {
  auto table = JOULE_TRY(csv::parse(text, source));
  const auto time_column = table.column("timestamp");
  if (!time_column) {
    return tl::make_unexpected(Error(ErrorCode::kParse, time_column.error().message()));
  }
  const auto value_column = table.column("carbon_intensity_g_per_kwh");
  if (!value_column) {
    return tl::make_unexpected(Error(ErrorCode::kParse, value_column.error().message()));
  }
  std::vector<IntensityPoint> points;
  std::vector<size_t> lines;
  points.reserve(table.row_count());
  for (size_t i = 0; i < table.row_count(); ++i) {
    const auto row = table.row(i);
    const auto time = parse_utc_time(row.text(*time_column));
    if (!time) {
      return tl::make_unexpected(row.error_at(*time_column, time.error().message()));
    }
    const auto value = JOULE_TRY(row.number(*value_column));
    if (!(value >= 0) || !std::isfinite(value)) {
      return tl::make_unexpected(row.error_at(
          *value_column, fmt::format("carbon intensity must be finite and non-negative, got {}", value)));
    }
    points.push_back({*time, value, false});
    lines.push_back(row.line());
  }
  CarbonTrace trace;
  JOULE_TRY(check_regular(points, source, lines, trace.period_s_));
  trace.source_ = std::move(source);
  trace.points_ = std::move(points);
  return trace;
}

Result<CarbonTrace> CarbonTrace::read_file(const std::string& path) {
  const auto text = JOULE_TRY(read_text_file(path, read_limits::kCarbonTrace));
  return parse(text, path);
}

Result<CarbonTrace> CarbonTrace::from_points(std::vector<IntensityPoint> points, std::string source) {
  CarbonTrace trace;
  if (auto ok = check_regular(points, source, {}, trace.period_s_); !ok) {
    return tl::make_unexpected(Error(ErrorCode::kInvalidArgument, ok.error().message()));
  }
  trace.source_ = std::move(source);
  trace.points_ = std::move(points);
  return trace;
}

Result<CarbonTrace> CarbonTrace::shifted(int64_t seconds) const {
  std::vector<IntensityPoint> points = points_;
  for (auto& point : points) {
    if (__builtin_add_overflow(point.time_unix_s, seconds, &point.time_unix_s)) {
      return fail(ErrorCode::kInvalidArgument, "{} shifted by {} s leaves the times joule accepts", source_,
                  seconds);
    }
  }
  return from_points(std::move(points), source_);
}

Result<size_t> CarbonTrace::index_at(int64_t time_unix_s) const {
  if (time_unix_s < start_unix_s() || time_unix_s >= end_unix_s()) {
    return fail(ErrorCode::kOutOfRange, "{} covers {} to {}; no carbon intensity for {}", source_,
                format_utc_time(start_unix_s()), format_utc_time(end_unix_s()), format_utc_time(time_unix_s));
  }
  return static_cast<size_t>((time_unix_s - start_unix_s()) / period_s_);
}

Result<IntensityPoint> CarbonTrace::at(int64_t time_unix_s) const {
  const auto index = JOULE_TRY(index_at(time_unix_s));
  return points_[index];
}

std::string CarbonTrace::to_csv() const {
  std::ostringstream out;
  out << "timestamp,carbon_intensity_g_per_kwh\n";
  for (const auto& p : points_) {
    out << format_utc_time(p.time_unix_s) << ',' << fmt::format("{:g}", p.intensity_g_per_kwh) << '\n';
  }
  return out.str();
}

// ---- TraceSignal ---------------------------------------------------------------------------------------

TraceSignal::TraceSignal(CarbonTrace trace, const Clock& clock) : trace_(std::move(trace)), clock_(clock) {}

std::string TraceSignal::describe() const {
  return fmt::format("trace {}", trace_.source());
}

int64_t TraceSignal::now_unix_s() const {
  return unix_now_s(clock_);
}

Result<IntensityPoint> TraceSignal::latest() {
  return trace_.at(now_unix_s());
}

Result<std::vector<IntensityPoint>> TraceSignal::history(int64_t from_unix_s, int64_t to_unix_s) {
  if (to_unix_s <= from_unix_s) {
    return std::vector<IntensityPoint>{};
  }
  // The periods that start in [from, to) must all be in the trace (the one in force at `from` too).
  const int64_t first =
      floor_to_period(from_unix_s - trace_.start_unix_s(), trace_.period_s()) + trace_.start_unix_s();
  if (first < trace_.start_unix_s() || to_unix_s > trace_.end_unix_s()) {
    return fail(ErrorCode::kOutOfRange, "{} covers {} to {}; asked for {} to {}", trace_.source(),
                format_utc_time(trace_.start_unix_s()), format_utc_time(trace_.end_unix_s()),
                format_utc_time(from_unix_s), format_utc_time(to_unix_s));
  }
  std::vector<IntensityPoint> points;
  for (const auto& p : trace_.points()) {
    if (p.time_unix_s + trace_.period_s() > from_unix_s && p.time_unix_s < to_unix_s) {
      points.push_back(p);
    }
  }
  return points;
}

Result<std::vector<IntensityPoint>> TraceSignal::forecast(int64_t horizon_s) {
  const int64_t now = now_unix_s();
  auto points = history(now, now + horizon_s + 1);
  if (!points) {
    return points;
  }
  for (auto& p : *points) {
    p.estimated = true;
  }
  return points;
}

// ---- the factory ---------------------------------------------------------------------------------------

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

}  // namespace

Result<std::unique_ptr<CarbonSignal>> make_carbon_signal(const CarbonSourceOptions& options,
                                                         const Clock& clock) {
  const int given = options.sources_given();
  if (given != 1) {
    return fail(ErrorCode::kInvalidArgument,
                "give exactly one carbon source: --carbon-intensity G_PER_KWH, --carbon-trace FILE, --zone Z "
                "or --country CODE (got {})",
                given);
  }
  try {
    if (!options.country.empty()) {
      const auto choice =
          JOULE_TRY(choose_country(CountryTable::builtin(), options.country, LocaleSources::from_process()));
      return std::unique_ptr<CarbonSignal>(
          std::make_unique<ConstantSignal>(choice.country.intensity_g_per_kwh,
                                           fmt::format("yearly average of {} ({}, {})", choice.country.name,
                                                       choice.country.iso3, choice.country.year),
                                           clock));
    }
    if (options.intensity_g_per_kwh) {
      // The rule of --carbon-intensity: 380000 is 380 g/kWh in g/MWh, not a grid. (A negative or non-finite
      // value is ConstantSignal's to refuse, in its words.)
      if (std::isfinite(*options.intensity_g_per_kwh) && *options.intensity_g_per_kwh >= 0) {
        JOULE_TRY(check_number(*options.intensity_g_per_kwh, quantity::carbon_intensity_g_per_kwh(),
                               "carbon intensity"));
      }
      return std::unique_ptr<CarbonSignal>(
          std::make_unique<ConstantSignal>(*options.intensity_g_per_kwh, "constant", clock));
    }
    if (!options.trace_path.empty()) {
      auto trace = JOULE_TRY(CarbonTrace::read_file(options.trace_path));
      return std::unique_ptr<CarbonSignal>(std::make_unique<TraceSignal>(std::move(trace), clock));
    }
    const std::string provider = to_lower(
        options.provider.empty() ? env_or("JOULE_CARBON_PROVIDER", "electricitymaps") : options.provider);
    if (provider == "electricitymaps") {
      ElectricityMapsOptions em;
      em.base_url = env_or("JOULE_ELECTRICITYMAPS_URL", em.base_url);
      em.token = env_or("JOULE_ELECTRICITYMAPS_TOKEN", "");
      em.zone = options.zone;
      return std::unique_ptr<CarbonSignal>(std::make_unique<ElectricityMapsSignal>(em, clock));
    }
    if (provider == "watttime") {
      WattTimeOptions wt;
      wt.base_url = env_or("JOULE_WATTTIME_URL", wt.base_url);
      wt.username = env_or("JOULE_WATTTIME_USERNAME", "");
      wt.password = env_or("JOULE_WATTTIME_PASSWORD", "");
      wt.token = env_or("JOULE_WATTTIME_TOKEN", "");
      wt.region = options.zone;
      return std::unique_ptr<CarbonSignal>(std::make_unique<WattTimeSignal>(wt));
    }
    if (provider == "uk") {
      if (to_lower(options.zone) != "gb") {
        return fail(ErrorCode::kInvalidArgument,
                    "uk: unknown zone '{}': the UK Carbon Intensity API covers zone GB (national)",
                    options.zone);
      }
      UkCarbonIntensityOptions uk;
      uk.base_url = env_or("JOULE_UK_CARBON_URL", uk.base_url);
      return std::unique_ptr<CarbonSignal>(std::make_unique<UkCarbonIntensitySignal>(uk, clock));
    }
    return fail(ErrorCode::kInvalidArgument,
                "unknown carbon provider '{}' (known: electricitymaps, watttime, uk)", provider);
  } catch (const Exception& error) {
    return tl::make_unexpected(error.error());
  }
}

}  // namespace joule::carbon
