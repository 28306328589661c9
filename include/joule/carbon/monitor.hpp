// SPDX-License-Identifier: Apache-2.0
// joule/carbon/monitor.hpp — energy bucketed per device per UTC hour (or any period), and the
// carbon (gCO2e) of a window: Σ over buckets of energy_J / 3.6e6 × intensity of the bucket (Zeus's
// CarbonEmissionMonitor, with an injectable clock instead of a spawned process).
//
//   joule::measure::EnergyMonitor energy(gpus, {}, clock);
//   joule::carbon::CarbonMonitor carbon(energy, signal);   // signal: any CarbonSignal
//   carbon.begin_window("train");
//   …
//   auto m = carbon.end_window("train");                   // energy always; carbon a Result
//   if (m.carbon) fmt::print("{:.1f} gCO2e\n", m.carbon->carbon_g);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/measure/energy_monitor.hpp"

namespace joule::carbon {

/// The energy of one bucket (one UTC hour, say) of a window, per device, in the monitor's device order.
struct BucketEnergy {
  int64_t start_unix_s = 0;           ///< the bucket's start, UTC
  std::vector<double> gpu_energy_j;   ///< J, one per monitored GPU
  std::vector<double> cpu_energy_j;   ///< J, one per monitored CPU package
  std::vector<double> dram_energy_j;  ///< J, one per monitored CPU with a DRAM domain
  /// @return the sum over all devices, J.
  double total_energy_j() const;
};

/// What a bucketed window measured.
struct BucketedMeasurement {
  measure::Measurement measurement;            ///< the whole window, as measure::EnergyMonitor measures it
  int64_t start_unix_s = 0;           ///< window begin, UTC (whole seconds, floor)
  int64_t end_unix_s = 0;             ///< window end, UTC
  int64_t bucket_s = 3600;            ///< the bucket length
  std::vector<BucketEnergy> buckets;  ///< the buckets the window touched, oldest first
};

struct BucketedMonitorOptions {
  int64_t bucket_s = 3600;  ///< bucket length (> 0); buckets start at multiples of it since the Unix epoch
  /// On a real clock, a background thread checkpoints at every bucket boundary, so that each bucket's
  /// energy is what the counters measured in it. On a virtual clock (and with false here) the energy
  /// between two checkpoints is split over the buckets it spans in proportion to time: call checkpoint()
  /// whenever the power changes (e.g. after setting a power limit) and the split stays exact.
  bool background_checkpoints = true;
};

/// Splits every open window's energy into buckets. Windows are named as in EnergyMonitor (the inner
/// windows it opens there are called "__joule_bucket…"). Thread-safe.
class BucketedEnergyMonitor {
 public:
  /// `monitor` must outlive this object. @throws joule::Exception (kInvalidArgument) for bucket_s ≤ 0.
  explicit BucketedEnergyMonitor(measure::EnergyMonitor& monitor, BucketedMonitorOptions options = {});
  ~BucketedEnergyMonitor();
  BucketedEnergyMonitor(const BucketedEnergyMonitor&) = delete;
  BucketedEnergyMonitor& operator=(const BucketedEnergyMonitor&) = delete;

  /// @throws as EnergyMonitor::begin_window (kState if the name is open).
  void begin_window(std::string_view name);
  /// @throws as EnergyMonitor::end_window (kNotFound if the name is not open).
  BucketedMeasurement end_window(std::string_view name);
  /// Discards a window. @throws kNotFound if it is not open.
  void cancel_window(std::string_view name);
  /// Attributes the energy measured since the last checkpoint to the open windows' buckets, now.
  void checkpoint();

  measure::EnergyMonitor& energy_monitor() const { return monitor_; }
  int64_t bucket_s() const { return options_.bucket_s; }

 private:
  struct Window {
    int64_t start_unix_s = 0;
    std::map<int64_t, BucketEnergy> buckets;
  };
  void checkpoint_locked();
  void run_thread();
  std::string whole_name(std::string_view name) const;

  measure::EnergyMonitor& monitor_;
  BucketedMonitorOptions options_;
  std::mutex mutex_;
  std::map<std::string, Window, std::less<>> windows_;
  bool segment_open_ = false;
  Nanos segment_start_{0};
  uint64_t id_;  // distinguishes the inner windows of several bucketed monitors on one measure::EnergyMonitor

  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

/// The carbon of one bucket.
struct BucketCarbon {
  int64_t start_unix_s = 0;
  double energy_j = 0;             ///< all devices, J
  double intensity_g_per_kwh = 0;  ///< the signal's value for the bucket (overlap-weighted mean)
  bool estimated = false;          ///< the intensity was estimated or forecast (or came from latest())
  double carbon_g = 0;             ///< gCO2e
};

/// The carbon of a window.
struct CarbonReport {
  std::string source;                ///< the signal's describe()
  double energy_j = 0;               ///< Σ over buckets, J
  double carbon_g = 0;               ///< gCO2e
  std::vector<double> gpu_carbon_g;  ///< per GPU, gCO2e
  std::vector<double> cpu_carbon_g;  ///< per CPU package
  std::vector<double> dram_carbon_g;
  std::vector<BucketCarbon> buckets;
  bool estimated = false;  ///< any bucket's intensity was estimated
  /// @return carbon_g / energy in kWh (the energy-weighted intensity), or 0 without energy.
  double average_intensity_g_per_kwh() const;
};

/// @return the carbon of `measurement` under `signal`: one history() call over the window's buckets,
/// then each bucket's intensity (intensity_for()). The last bucket, if history lacks it (the current hour
/// is often not published yet), takes latest() when that value covers the bucket (marked estimated).
/// Errors: the signal's errors; kNotFound "no carbon intensity for <hour> from <source>" for a bucket the
/// signal has no value for.
Result<CarbonReport> carbon_of(const BucketedMeasurement& measurement, CarbonSignal& signal);

/// A window's energy and, if the signal could give every bucket's intensity, its carbon.
struct CarbonMeasurement {
  BucketedMeasurement energy;
  Result<CarbonReport> carbon;  ///< an Error keeps the energy: retry with carbon_of(energy, signal)
};

/// BucketedEnergyMonitor + a CarbonSignal. Thread-safe as far as the signal is (carbon is computed in
/// end_window(), on the caller's thread).
class CarbonMonitor {
 public:
  /// `monitor` and `signal` must outlive this object.
  CarbonMonitor(measure::EnergyMonitor& monitor, CarbonSignal& signal, BucketedMonitorOptions options = {});
  void begin_window(std::string_view name) { buckets_.begin_window(name); }
  /// @throws as EnergyMonitor::end_window; signal failures go into the result's `carbon`.
  CarbonMeasurement end_window(std::string_view name);
  void cancel_window(std::string_view name) { buckets_.cancel_window(name); }
  void checkpoint() { buckets_.checkpoint(); }
  CarbonSignal& signal() const { return signal_; }

 private:
  BucketedEnergyMonitor buckets_;
  CarbonSignal& signal_;
};

}  // namespace joule::carbon
