// SPDX-License-Identifier: Apache-2.0
// Hourly tariffs and the cost of bucketed windows.
#include "joule/carbon/price.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/units.hpp"

namespace joule::carbon {

Result<HourlyTariff> HourlyTariff::parse(std::string_view text, std::string source) {
  auto table = JOULE_TRY(csv::parse(text, source));
  const auto hour_column = table.column("hour");
  if (!hour_column) {
    return tl::make_unexpected(Error(ErrorCode::kParse, hour_column.error().message()));
  }
  const auto price_column = table.column("price_usd_per_kwh");
  if (!price_column) {
    return tl::make_unexpected(Error(ErrorCode::kParse, price_column.error().message()));
  }
  HourlyTariff tariff;
  tariff.source_ = source;
  std::array<bool, 24> seen{};
  for (size_t i = 0; i < table.row_count(); ++i) {
    const auto row = table.row(i);
    const auto hour = JOULE_TRY(row.integer(*hour_column));
    if (hour < 0 || hour > 23) {
      return tl::make_unexpected(
          row.error_at(*hour_column, fmt::format("hour must be 0 to 23 (UTC), got {}", hour)));
    }
    if (seen[static_cast<size_t>(hour)]) {
      return tl::make_unexpected(row.error_at(*hour_column, fmt::format("hour {} appears twice", hour)));
    }
    const auto price = JOULE_TRY(row.number(*price_column));
    if (!(price >= 0) || !std::isfinite(price)) {
      return tl::make_unexpected(
          row.error_at(*price_column, fmt::format("price must be finite and non-negative, got {}", price)));
    }
    seen[static_cast<size_t>(hour)] = true;
    tariff.prices_[static_cast<size_t>(hour)] = price;
  }
  for (size_t h = 0; h < seen.size(); ++h) {
    if (!seen[h]) {
      return fail(ErrorCode::kParse, "{}: no price for hour {} (a tariff needs hours 0 to 23, UTC)", source,
                  h);
    }
  }
  return tariff;
}

Result<HourlyTariff> HourlyTariff::read_file(const std::string& path) {
  const auto text = JOULE_TRY(read_text_file(path, read_limits::kTariff));
  return parse(text, path);
}

HourlyTariff HourlyTariff::flat(double price_usd_per_kwh) {
  if (!(price_usd_per_kwh >= 0) || !std::isfinite(price_usd_per_kwh)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("price must be finite and non-negative, got {} $/kWh", price_usd_per_kwh));
  }
  HourlyTariff tariff;
  tariff.prices_.fill(price_usd_per_kwh);
  tariff.source_ = fmt::format("flat {:g} $/kWh", price_usd_per_kwh);
  return tariff;
}

double HourlyTariff::price_at(int64_t time_unix_s) const {
  const int64_t in_day = ((time_unix_s % kDayS) + kDayS) % kDayS;
  return prices_[static_cast<size_t>(in_day / kHourS)];
}

double HourlyTariff::max_price_usd_per_kwh() const {
  return *std::max_element(prices_.begin(), prices_.end());
}

PriceReport price_of(const BucketedMeasurement& measurement, const HourlyTariff& tariff) {
  PriceReport report;
  report.source = tariff.source();
  for (const auto& bucket : measurement.buckets) {
    // The mean price over the bucket's hours (one hour for hour buckets).
    double price_sum = 0;
    int64_t covered = 0;
    for (int64_t t = bucket.start_unix_s; t < bucket.start_unix_s + measurement.bucket_s; t += kHourS) {
      const int64_t span = std::min(kHourS, bucket.start_unix_s + measurement.bucket_s - t);
      price_sum += tariff.price_at(t) * static_cast<double>(span);
      covered += span;
    }
    const double price = covered > 0 ? price_sum / static_cast<double>(covered) : 0.0;
    BucketPrice priced{bucket.start_unix_s, bucket.total_energy_j(), price, 0};
    priced.cost_usd = priced.energy_j / kJoulesPerKwh * price;
    if (report.gpu_cost_usd.size() < bucket.gpu_energy_j.size()) {
      report.gpu_cost_usd.resize(bucket.gpu_energy_j.size(), 0.0);
    }
    for (size_t i = 0; i < bucket.gpu_energy_j.size(); ++i) {
      report.gpu_cost_usd[i] += bucket.gpu_energy_j[i] / kJoulesPerKwh * price;
    }
    report.energy_j += priced.energy_j;
    report.cost_usd += priced.cost_usd;
    report.buckets.push_back(priced);
  }
  return report;
}

PriceMonitor::PriceMonitor(measure::EnergyMonitor& monitor, const HourlyTariff& tariff,
                           BucketedMonitorOptions options)
    : buckets_(monitor, options), tariff_(tariff) {}

}  // namespace joule::carbon
