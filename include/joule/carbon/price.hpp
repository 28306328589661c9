// SPDX-License-Identifier: Apache-2.0
// joule/carbon/price.hpp — the electricity cost of a window: an hourly tariff ($/kWh by UTC hour of day)
// read from a file, applied to the hour buckets of a BucketedEnergyMonitor (Zeus's EnergyCostMonitor,
// with a local tariff file instead of OpenEI).
//
//   auto tariff = joule::carbon::HourlyTariff::read_file("tariff.csv");   // hour,price_usd_per_kwh
//   joule::carbon::PriceMonitor price(energy, *tariff);
//   price.begin_window("train"); … auto m = price.end_window("train");     // m.cost_usd
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/carbon/monitor.hpp"

namespace joule::carbon {

/// A price per kWh for each UTC hour of the day.
class HourlyTariff {
 public:
  /// Parses CSV with columns `hour,price_usd_per_kwh` (others ignored): 24 rows, hours 0…23 each once,
  /// prices finite and ≥ 0. @return kParse errors naming `source:line` (a missing or repeated hour, a bad
  /// number, a negative price).
  static Result<HourlyTariff> parse(std::string_view text, std::string source);
  static Result<HourlyTariff> read_file(const std::string& path);
  /// One price for every hour. @throws joule::Exception kInvalidArgument for a negative or non-finite price.
  static HourlyTariff flat(double price_usd_per_kwh);

  /// @return the price in force at `time_unix_s`, $/kWh.
  double price_at(int64_t time_unix_s) const;
  const std::array<double, 24>& prices_usd_per_kwh() const { return prices_; }
  /// @return the highest hourly price (the normaliser of a price-weighted CarbonCost).
  double max_price_usd_per_kwh() const;
  const std::string& source() const { return source_; }

 private:
  std::array<double, 24> prices_{};
  std::string source_;
};

/// The cost of one bucket.
struct BucketPrice {
  int64_t start_unix_s = 0;
  double energy_j = 0;
  double price_usd_per_kwh = 0;
  double cost_usd = 0;
};

struct PriceReport {
  std::string source;
  double energy_j = 0;
  double cost_usd = 0;
  std::vector<double> gpu_cost_usd;
  std::vector<BucketPrice> buckets;
};

/// @return the cost of a bucketed window: each bucket priced at the tariff's price of its start hour
/// (buckets longer than an hour are priced hour by hour, pro rata).
PriceReport price_of(const BucketedMeasurement& measurement, const HourlyTariff& tariff);

/// BucketedEnergyMonitor (hour buckets) + a tariff.
class PriceMonitor {
 public:
  /// `monitor` and `tariff` must outlive this object.
  PriceMonitor(measure::EnergyMonitor& monitor, const HourlyTariff& tariff, BucketedMonitorOptions options = {});
  void begin_window(std::string_view name) { buckets_.begin_window(name); }
  PriceReport end_window(std::string_view name) { return price_of(buckets_.end_window(name), tariff_); }
  void cancel_window(std::string_view name) { buckets_.cancel_window(name); }
  void checkpoint() { buckets_.checkpoint(); }

 private:
  BucketedEnergyMonitor buckets_;
  const HourlyTariff& tariff_;
};

}  // namespace joule::carbon
