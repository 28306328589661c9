// SPDX-License-Identifier: Apache-2.0
// joule/metrics/device_exporter.hpp — the one device exporter of `joule power --serve` and
// `joule daemon --metrics`: GPU and CPU collectors in a MetricsRegistry, a carbon intensity kept current on
// its own timer, and the /metrics endpoint (docs/metrics.md).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"
#include "joule/metrics/endpoint.hpp"
#include "joule/metrics/gpu_metrics.hpp"
#include "joule/metrics/registry.hpp"

namespace joule::metrics {

/// Where the carbon metrics' intensity comes from. `metrics` does not depend on `carbon`
/// (docs/architecture.md): the caller wraps its signal (carbon::CarbonSignal) in this callback.
struct CarbonIntensitySource {
  /// @return the grid's current intensity in gCO2eq/kWh, or why it is unknown now. Called on the
  /// exporter's timer thread.
  std::function<Result<double>()> latest;
  /// What the source is, for messages (e.g. "Electricity Maps zone DE").
  std::string description;
};

/// Everything a device exporter is given, once.
struct DeviceExporterOptions {
  /// HOST:PORT of /metrics (port 0: any free port).
  std::string address;
  /// The command and flag in messages, e.g. "power: --serve"; `name` prefixes warnings, e.g. "power".
  std::string flag = "metrics address";
  std::string name = "metrics";
  /// A constant intensity in gCO2eq/kWh (checked: finite, not negative); ignored when `carbon` is given.
  std::optional<double> carbon_intensity_g_per_kwh;
  /// A source asked at start (a failure then is a configuration error) and every carbon_refresh_s
  /// seconds after, on the exporter's own thread; a failed refresh keeps the last value and logs why.
  std::optional<CarbonIntensitySource> carbon;
  /// Seconds between refreshes; 0: the source is asked only at start (a constant).
  double carbon_refresh_s = 300;
};

/// Serves the GPUs' (GpuMetrics) and CPUs' (CpuMetrics) readings, with their carbon, on /metrics.
/// Other metrics (the daemon's) register in registry(). Thread-safe; stops on destruction.
class DeviceExporter {
 public:
  /// Builds the collectors, sets the first carbon intensity, then binds the endpoint and starts the
  /// carbon timer. @param gpus, cpus the devices to export (CPUs: none for an empty list); they and
  /// `clock` must outlive the exporter.
  /// @return kInvalidArgument for a malformed address or intensity, the source's error (its message
  /// prefixed by `name`) if it cannot give the first intensity, kIo if the address cannot be bound.
  static Result<std::unique_ptr<DeviceExporter>> start(std::vector<device::Gpu*> gpus,
                                                       std::vector<device::Cpu*> cpus, Clock& clock,
                                                       DeviceExporterOptions options);
  ~DeviceExporter();  ///< stop()
  DeviceExporter(const DeviceExporter&) = delete;
  DeviceExporter& operator=(const DeviceExporter&) = delete;

  MetricsRegistry& registry() { return registry_; }
  GpuMetrics& gpu_metrics() { return *gpu_metrics_; }
  /// @return "http://HOST:PORT/metrics" (the bound port).
  std::string url() const { return endpoint_->url(); }
  /// Asks the carbon source now and sets what it says; on failure keeps the last value and logs why
  /// (the timer calls this). No source: does nothing. @return the failure, for tests.
  Result<void> refresh_carbon_intensity();
  /// Stops the timer and the endpoint (requests in flight finish). Idempotent.
  void stop();

 private:
  DeviceExporter(std::vector<device::Gpu*> gpus, Clock& clock, DeviceExporterOptions options);
  void carbon_timer();

  DeviceExporterOptions options_;
  MetricsRegistry registry_;
  std::shared_ptr<GpuMetrics> gpu_metrics_;
  std::unique_ptr<MetricsEndpoint> endpoint_;

  std::mutex timer_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by timer_mutex_
  std::thread timer_;
};

}  // namespace joule::metrics
