// SPDX-License-Identifier: Apache-2.0
// joule/metrics/gpu_metrics.hpp — Prometheus metrics of GPUs: energy, power, power limit and carbon read at
// scrape time, and window histograms (docs/metrics.md). A MetricsRegistry (registry.hpp) renders them in the
// text exposition format; a MetricsEndpoint (endpoint.hpp) or `joule serve` serves them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/process_energy.hpp"
#include "joule/metrics/registry.hpp"

namespace joule::metrics {

struct GpuMetricsOptions {
  /// How often GPUs without an energy counter have their power read and integrated, on a background
  /// thread (real clocks only; on a virtual clock call GpuMetrics::update()). Scrapes read power too.
  Nanos polling_period = std::chrono::milliseconds(100);
  /// Per-process energy (NVIDIA GPUs with an energy counter, not MIG instances): at most this many PIDs per
  /// GPU have a series of their own in joule_gpu_process_energy_joules_total (measure::ProcessEnergyTotals);
  /// 0 turns the family off. Each GPU then has at most max_processes + 3 such series.
  size_t max_processes = 32;
};

/// The GPU readings of a node, read when scraped (a custom collector, as exporters should be), with DCGM
/// exporter-like labels `gpu` (framework index), `uuid` and `name`:
///
/// | metric | type | unit |
/// |---|---|---|
/// | `joule_gpu_info{gpu,uuid,name,backend,energy_source}` | gauge (1) | – |
/// | `joule_gpu_energy_joules_total` | counter | J |
/// | `joule_gpu_power_watts` | gauge | W |
/// | `joule_gpu_power_limit_watts` | gauge | W |
/// | `joule_gpu_read_errors_total{…,reading}` | counter | reads (energy, power, power_limit, telemetry) |
/// | `joule_gpu_temperature_celsius` | gauge | °C |
/// | `joule_gpu_sm_clock_hertz`, `joule_gpu_memory_clock_hertz` | gauge | Hz |
/// | `joule_gpu_utilization_ratio`, `joule_gpu_memory_utilization_ratio` | gauge | 0–1 |
/// | `joule_gpu_clock_event_reasons` | gauge | NVML clocks-event bit set |
/// | `joule_gpu_clock_event_active{…,reason}` | gauge | 0 or 1 |
/// | `joule_gpu_memory_power_watts` | gauge | W |
/// | `joule_gpu_module_power_watts{…,scope="module"}` | gauge | W (Grace Hopper/Blackwell module, GPU included) |
/// | `joule_gpu_module_energy_joules_total{…,scope="module"}` | counter | J (the module's, since driver load) |
/// | `joule_gpu_process_energy_joules_total{…,pid}` | counter | J (estimated per-process share; bounded) |
/// | `joule_grid_carbon_intensity_grams_per_kwh` | gauge | gCO2eq/kWh (once an intensity is set) |
/// | `joule_gpu_carbon_grams_total` | counter | gCO2eq (once an intensity is set) |
///
/// Energy is the device's cumulative counter (mJ → J; its origin is the driver's) where the GPU has one
/// (energy_source="counter"); otherwise the trapezoid integral of polled power since this object was
/// created (energy_source="power", estimated). A MIG instance's is its GPU's × its slice share
/// (energy_source="mig-slice-share", estimated). Carbon is Σ energy × intensity over the time each intensity
/// was in force (set_carbon_intensity() accounts the energy so far at the old value before changing it).
///
/// Telemetry a device does not report (kNotSupported) has no series at all, never a zero; a family no GPU
/// reports is left out.
///
/// A failing read skips that sample in this scrape (the series is absent, not zero) and counts the failure
/// in joule_gpu_read_errors_total; other readings and GPUs are unaffected. Thread-safe: scrapes, updates
/// and intensity changes may run on any threads (one at a time inside; each reads each device once).
class GpuMetrics final : public prometheus::Collectable {
 public:
  /// @param gpus the GPUs to read; they must outlive this object. @param clock the GPUs' clock.
  GpuMetrics(std::vector<device::Gpu*> gpus, Clock& clock, GpuMetricsOptions options = {});
  ~GpuMetrics() override;  ///< stops the polling thread
  GpuMetrics(const GpuMetrics&) = delete;
  GpuMetrics& operator=(const GpuMetrics&) = delete;

  /// Sets the grid's carbon intensity from now on, in gCO2eq/kWh; energy used before now is accounted at
  /// the previous intensity (none: not accounted). For carbon-intensity providers to call whenever they
  /// learn a new value. @return kInvalidArgument if negative or not finite.
  Result<void> set_carbon_intensity(double grams_per_kwh);
  /// Stops accounting carbon (energy from now on is not charged); the carbon counters keep their values.
  void clear_carbon_intensity();
  /// @return the intensity in force, gCO2eq/kWh.
  std::optional<double> carbon_intensity() const;

  /// Reads every GPU now: integrates power of GPUs without a counter and accounts carbon. Scrapes do this
  /// themselves; call it on a virtual clock between advances to integrate at a finer step.
  void update();

  /// @return the GPU families (read now).
  std::vector<prometheus::MetricFamily> Collect() const override;

  const std::vector<device::Gpu*>& gpus() const { return gpus_; }

 private:
  enum Reading : size_t { kEnergy = 0, kPower = 1, kPowerLimit = 2, kTelemetry = 3, kReadings = 4 };
  // The telemetry families of one scrape, filled GPU by GPU.
  struct TelemetryFamilies {
    TelemetryFamilies();
    // Appends the families at least one GPU reported.
    void append_to(std::vector<prometheus::MetricFamily>& families);
    prometheus::MetricFamily temperature, sm_clock, memory_clock, utilization, memory_utilization,
        clock_event_reasons, clock_event_active, memory_power, module_power, module_energy;
  };
  struct PowerPoint {
    Nanos time{0};
    double power_w = 0;
  };
  struct State {
    std::optional<double> energy_j;       // last energy read (counter or integral)
    bool energy_read = false;             // energy_j was read in the latest full update
    std::optional<double> power_w;        // last power read in the latest update
    std::optional<double> limit_w;        // last power limit read in the latest update
    std::optional<PowerPoint> polled;     // GPUs without a counter: the last power read
    double integrated_j = 0;              // GPUs without a counter: energy since creation
    std::optional<double> carbon_base_j;  // energy when carbon was last accounted
    double carbon_g = 0;
    uint64_t errors[kReadings] = {0, 0, 0, 0};
    bool error_logged[kReadings] = {false, false, false, false};
    std::shared_ptr<measure::ProcessEnergyTotals> processes;  // NVIDIA GPUs with a counter; null otherwise
  };

  // Reads (all = every reading of every GPU; otherwise power of GPUs without a counter) and accounts.
  void update_locked(bool all) const;
  void count_error(size_t gpu, Reading reading, const Error& error) const;
  void collect_telemetry_locked(size_t gpu, TelemetryFamilies& out) const;
  void collect_processes_locked(size_t gpu, uint64_t now_us, prometheus::MetricFamily& out) const;
  void account_carbon_locked(State& state) const;
  void poll_thread();

  std::vector<device::Gpu*> gpus_;
  Clock& clock_;
  GpuMetricsOptions options_;
  mutable std::mutex mutex_;
  mutable std::vector<State> states_;
  std::optional<double> intensity_g_per_kwh_;  // guarded by mutex_
  bool ever_intensity_ = false;                // guarded by mutex_

  std::mutex thread_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by thread_mutex_
  std::thread thread_;
};

/// Bucket upper bounds of the window histograms (strictly increasing; +Inf is implicit).
struct WindowMetricsOptions {
  std::vector<double> duration_buckets_s = {0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400};
  std::vector<double> energy_buckets_j = {1, 10, 50, 100, 500, 1e3, 5e3, 1e4, 5e4, 1e5, 5e5, 1e6, 5e6};
  /// The metric names: `<prefix>_duration_seconds` and `<prefix>_energy_joules`.
  std::string prefix = "joule_window";
  /// What a window is, for the HELP text (e.g. "measurement window", "training epoch").
  std::string what = "measurement window";
};

/// Histograms of window duration (s) and GPU energy (J, all GPUs of the window together) by window name
/// (label `window`), the Prometheus side of EnergyMonitor windows (Zeus's EnergyHistogram). Window names
/// become label values: keep them few (per region of code, not per iteration). Thread-safe.
class WindowMetrics {
 public:
  /// @throws joule::Exception (kInvalidArgument) for empty or unsorted buckets.
  explicit WindowMetrics(prometheus::Registry& registry, WindowMetricsOptions options = {});

  /// Observes one window. Negative or non-finite values are skipped (logged at debug level).
  void observe(std::string_view window, double duration_s, double energy_j);
  /// Observes an EnergyMonitor result (its name, time and total GPU energy).
  void observe(const measure::Measurement& measurement);
  /// @return a callback for MonitorOptions::on_window_end; this object must outlive the monitor.
  std::function<void(const measure::Measurement&)> observer();

 private:
  WindowMetricsOptions options_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Histogram>& energy_;
};

}  // namespace joule::metrics
