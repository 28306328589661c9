// SPDX-License-Identifier: Apache-2.0
// Energy bucketed per device per UTC hour (or any period), and the carbon of a window.
#include "joule/carbon/monitor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/core/units.hpp"

namespace joule::carbon {

namespace {

std::atomic<uint64_t> next_monitor_id{0};

int64_t floor_div(int64_t value, int64_t divisor) {
  const int64_t quotient = value / divisor;
  return (value % divisor != 0 && (value < 0) != (divisor < 0)) ? quotient - 1 : quotient;
}

void add_scaled(std::vector<double>& into, const std::vector<measure::DeviceEnergy>& energies,
                double fraction) {
  if (into.size() < energies.size()) {
    into.resize(energies.size(), 0.0);
  }
  for (size_t i = 0; i < energies.size(); ++i) {
    into[i] += energies[i].energy_j * fraction;
  }
}

double sum(const std::vector<double>& values) {
  double total = 0;
  for (const double v : values) {
    total += v;
  }
  return total;
}

}  // namespace

double BucketEnergy::total_energy_j() const {
  return sum(gpu_energy_j) + sum(cpu_energy_j) + sum(dram_energy_j);
}

double CarbonReport::average_intensity_g_per_kwh() const {
  return energy_j > 0 ? carbon_g / (energy_j / kJoulesPerKwh) : 0.0;
}

// ---- BucketedEnergyMonitor -------------------------------------------------------------------------------

BucketedEnergyMonitor::BucketedEnergyMonitor(measure::EnergyMonitor& monitor, BucketedMonitorOptions options)
    : monitor_(monitor), options_(options), id_(next_monitor_id.fetch_add(1)) {
  if (options_.bucket_s <= 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("the bucket length must be positive, got {} s", options_.bucket_s));
  }
  if (options_.background_checkpoints && !monitor_.clock().is_virtual()) {
    thread_ = std::thread([this] { run_thread(); });
  }
}

BucketedEnergyMonitor::~BucketedEnergyMonitor() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  const std::lock_guard lock(mutex_);
  if (segment_open_ && monitor_.is_open(fmt::format("__joule_bucket{}", id_))) {
    monitor_.cancel_window(fmt::format("__joule_bucket{}", id_));
  }
  for (const auto& [name, window] : windows_) {
    if (monitor_.is_open(whole_name(name))) {
      monitor_.cancel_window(whole_name(name));
    }
  }
}

std::string BucketedEnergyMonitor::whole_name(std::string_view name) const {
  return fmt::format("__joule_bucket{}_window_{}", id_, name);
}

void BucketedEnergyMonitor::checkpoint_locked() {
  const std::string segment_name = fmt::format("__joule_bucket{}", id_);
  const Clock& clock = monitor_.clock();
  if (segment_open_) {
    const measure::Measurement segment = monitor_.end_window(segment_name, false);
    segment_open_ = false;
    const int64_t begin_ns = clock.to_unix_ns(segment_start_);
    const int64_t end_ns = begin_ns + static_cast<int64_t>(segment.time_s * 1e9);
    const int64_t bucket_ns = options_.bucket_s * 1'000'000'000;
    // Split the segment's energy over the buckets it spans, in proportion to time (exact when the power
    // was constant over the segment).
    std::vector<std::pair<int64_t, double>> shares;  // bucket start (s), fraction
    if (end_ns <= begin_ns) {
      shares.emplace_back(floor_div(begin_ns, bucket_ns) * options_.bucket_s, 1.0);
    } else {
      for (int64_t b = floor_div(begin_ns, bucket_ns); b * bucket_ns < end_ns; ++b) {
        const int64_t from = std::max(begin_ns, b * bucket_ns);
        const int64_t to = std::min(end_ns, (b + 1) * bucket_ns);
        if (to > from) {
          shares.emplace_back(b * options_.bucket_s,
                              static_cast<double>(to - from) / static_cast<double>(end_ns - begin_ns));
        }
      }
    }
    for (auto& [name, window] : windows_) {
      for (const auto& [start_s, fraction] : shares) {
        BucketEnergy& bucket = window.buckets[start_s];
        bucket.start_unix_s = start_s;
        add_scaled(bucket.gpu_energy_j, segment.gpu_energy, fraction);
        add_scaled(bucket.cpu_energy_j, segment.cpu_energy, fraction);
        add_scaled(bucket.dram_energy_j, segment.dram_energy, fraction);
      }
    }
  }
  if (!windows_.empty()) {
    segment_start_ = clock.now();
    monitor_.begin_window(segment_name, false);
    segment_open_ = true;
  }
}

void BucketedEnergyMonitor::checkpoint() {
  const std::lock_guard lock(mutex_);
  checkpoint_locked();
}

void BucketedEnergyMonitor::begin_window(std::string_view name) {
  const std::lock_guard lock(mutex_);
  if (windows_.find(name) != windows_.end()) {
    throw Exception(ErrorCode::kState, fmt::format("a carbon window called '{}' is already open", name));
  }
  monitor_.begin_window(whole_name(name));
  checkpoint_locked();
  Window window;
  const int64_t now_ns = monitor_.clock().to_unix_ns(monitor_.clock().now());
  window.start_unix_s = floor_div(now_ns, 1'000'000'000);
  windows_.emplace(std::string(name), std::move(window));
  if (!segment_open_) {
    checkpoint_locked();
  }
}

BucketedMeasurement BucketedEnergyMonitor::end_window(std::string_view name) {
  const std::lock_guard lock(mutex_);
  const auto it = windows_.find(name);
  if (it == windows_.end()) {
    throw Exception(ErrorCode::kNotFound, fmt::format("no carbon window called '{}' is open", name));
  }
  checkpoint_locked();
  BucketedMeasurement result;
  result.measurement = monitor_.end_window(whole_name(name));
  result.measurement.name = std::string(name);
  result.start_unix_s = it->second.start_unix_s;
  const int64_t now_ns = monitor_.clock().to_unix_ns(monitor_.clock().now());
  result.end_unix_s = floor_div(now_ns, 1'000'000'000);
  result.bucket_s = options_.bucket_s;
  for (auto& [start_s, bucket] : it->second.buckets) {
    result.buckets.push_back(std::move(bucket));
  }
  windows_.erase(it);
  if (windows_.empty() && segment_open_) {
    monitor_.cancel_window(fmt::format("__joule_bucket{}", id_));
    segment_open_ = false;
  }
  return result;
}

void BucketedEnergyMonitor::cancel_window(std::string_view name) {
  const std::lock_guard lock(mutex_);
  const auto it = windows_.find(name);
  if (it == windows_.end()) {
    throw Exception(ErrorCode::kNotFound, fmt::format("no carbon window called '{}' is open", name));
  }
  checkpoint_locked();
  monitor_.cancel_window(whole_name(name));
  windows_.erase(it);
  if (windows_.empty() && segment_open_) {
    monitor_.cancel_window(fmt::format("__joule_bucket{}", id_));
    segment_open_ = false;
  }
}

void BucketedEnergyMonitor::run_thread() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    // Sleep until just after the next bucket boundary in UTC, then checkpoint.
    const auto now = std::chrono::system_clock::now();
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    const int64_t next_s = (floor_div(now_s, options_.bucket_s) + 1) * options_.bucket_s;
    const auto deadline = std::chrono::system_clock::time_point(std::chrono::seconds(next_s));
    wake_.wait_until(lock, deadline, [this] { return stop_; });
    if (stop_) {
      break;
    }
    try {
      checkpoint_locked();
    } catch (const Exception& error) {
      log().warn("carbon monitor: checkpoint at a bucket boundary failed: {}", error.what());
    }
  }
}

// ---- carbon ----------------------------------------------------------------------------------------------

Result<CarbonReport> carbon_of(const BucketedMeasurement& measurement, CarbonSignal& signal) {
  CarbonReport report;
  report.source = signal.describe();
  if (measurement.buckets.empty()) {
    return report;
  }
  const int64_t from = measurement.buckets.front().start_unix_s;
  const int64_t to = measurement.buckets.back().start_unix_s + measurement.bucket_s;
  auto history = JOULE_TRY(signal.history(from, to));
  for (size_t b = 0; b < measurement.buckets.size(); ++b) {
    const BucketEnergy& bucket = measurement.buckets[b];
    auto intensity =
        intensity_for(history, signal.period_s(), bucket.start_unix_s, measurement.bucket_s, report.source);
    if (!intensity && b + 1 == measurement.buckets.size()) {
      // The current hour is often not published yet: take the freshest value if it covers the bucket.
      auto latest = signal.latest();
      if (latest && latest->time_unix_s < bucket.start_unix_s + measurement.bucket_s &&
          latest->time_unix_s + signal.period_s() > bucket.start_unix_s) {
        intensity = IntensityPoint{bucket.start_unix_s, latest->intensity_g_per_kwh, true};
      }
    }
    if (!intensity) {
      return tl::make_unexpected(intensity.error());
    }
    const double g_per_j = intensity->intensity_g_per_kwh / kJoulesPerKwh;
    BucketCarbon carbon;
    carbon.start_unix_s = bucket.start_unix_s;
    carbon.energy_j = bucket.total_energy_j();
    carbon.intensity_g_per_kwh = intensity->intensity_g_per_kwh;
    carbon.estimated = intensity->estimated;
    carbon.carbon_g = carbon.energy_j * g_per_j;
    const auto add = [&](std::vector<double>& into, const std::vector<double>& energies) {
      if (into.size() < energies.size()) {
        into.resize(energies.size(), 0.0);
      }
      for (size_t i = 0; i < energies.size(); ++i) {
        into[i] += energies[i] * g_per_j;
      }
    };
    add(report.gpu_carbon_g, bucket.gpu_energy_j);
    add(report.cpu_carbon_g, bucket.cpu_energy_j);
    add(report.dram_carbon_g, bucket.dram_energy_j);
    report.energy_j += carbon.energy_j;
    report.carbon_g += carbon.carbon_g;
    report.estimated = report.estimated || carbon.estimated;
    report.buckets.push_back(carbon);
  }
  return report;
}

CarbonMonitor::CarbonMonitor(measure::EnergyMonitor& monitor, CarbonSignal& signal,
                             BucketedMonitorOptions options)
    : buckets_(monitor, options), signal_(signal) {}

CarbonMeasurement CarbonMonitor::end_window(std::string_view name) {
  BucketedMeasurement energy = buckets_.end_window(name);
  auto carbon = carbon_of(energy, signal_);
  return CarbonMeasurement{std::move(energy), std::move(carbon)};
}

}  // namespace joule::carbon
