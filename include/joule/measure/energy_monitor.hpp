// SPDX-License-Identifier: Apache-2.0
// joule/measure/energy_monitor.hpp — energy and time of named code regions ("windows") on GPUs and CPUs.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/power_sampler.hpp"

namespace joule::measure {

/// How an energy figure was obtained.
enum class EnergySource {
  kCounter,       ///< difference of the device's cumulative energy counter: measured
  kPowerSamples,  ///< trapezoid integral of polled power: estimated
  kInstantPower,  ///< one instantaneous power reading × window time: estimated (short windows, no samples)
  /// An NVIDIA MIG instance (uuid "MIG-…"): its GPU's counter difference × the instance's share of the GPU's
  /// compute slices (device::kMigEnergyMethod, docs/devices.md): estimated, since NVML measures whole GPUs.
  kMigSliceShare,
};

/// @return "counter", "power-samples", "instant-power" or "mig-slice-share".
std::string_view to_string(EnergySource source);

/// Energy of one device over one window.
struct DeviceEnergy {
  int index = 0;  ///< the device's index (GPU framework index or CPU package index)
  /// Joules; NaN when not measurable (never a guess), so that every sum it enters is NaN, not silently low.
  double energy_j = 0;
  EnergySource source = EnergySource::kCounter;
  /// Why energy_j is not known, starting "not measurable: " (e.g. a RAPL counter reset inside the window:
  /// device::why_not_measurable()); empty when measured.
  std::string not_measurable;
  /// @return true unless the figure came from an energy counter.
  bool estimated() const { return source != EnergySource::kCounter; }
  /// @return true if energy_j is a figure (not_measurable is empty).
  bool measurable() const { return not_measurable.empty(); }
};

/// What one window measured.
struct Measurement {
  std::string name;                       ///< the window's name
  double time_s = 0;                      ///< elapsed time, seconds
  std::vector<DeviceEnergy> gpu_energy;   ///< one per monitored GPU, in the monitor's order
  std::vector<DeviceEnergy> cpu_energy;   ///< CPU package energy, one per monitored CPU
  std::vector<DeviceEnergy> dram_energy;  ///< DRAM energy, one per monitored CPU that has a DRAM domain

  /// @return the sum of GPU energies, J; NaN if one is not measurable.
  double total_gpu_energy_j() const;
  /// @return GPU + CPU package + DRAM energy, J (Zeus's total_energy counts GPUs only); NaN if one of them
  /// is not measurable.
  double total_energy_j() const;
  /// @return true if any figure is estimated.
  bool estimated() const;
  /// @return true if every figure is measurable.
  bool measurable() const;
  /// @return why some figures are not measurable, one "<device>: <reason>" per figure joined by "; " (devices
  /// as "CPU 0", "CPU 0 DRAM", "GPU 1"), or nullopt if every figure is measurable.
  std::optional<std::string> why_not_measurable() const;
};

struct MonitorOptions {
  /// Called before every reading when a window begins or ends with sync = true, so that queued GPU work is
  /// finished and counted (e.g. cudaDeviceSynchronize). Must not call back into the monitor.
  std::function<void()> sync;
  /// If a counter GPU's energy delta is exactly 0 (windows shorter than the counter's update interval),
  /// estimate it as instantaneous power × window time instead of reporting 0 (Zeus's
  /// approx_instant_energy). If false, such a zero is reported as measured and logged as a warning.
  bool approx_instant_energy = false;
  /// Polling period for GPUs without an energy counter. Their energy is integrated from these samples.
  Nanos polling_period = std::chrono::milliseconds(100);
  /// Called with every result of end_window(), on the thread that ended the window, after the monitor's
  /// lock is released (e.g. WindowMetrics::observer() feeds Prometheus histograms). Exceptions it throws
  /// are logged and dropped; it must not call back into the monitor.
  std::function<void(const Measurement&)> on_window_end;
};

/// Measures time and energy of named windows. Windows may overlap and nest arbitrarily; each has a name
/// that is unique while it is open.
///
/// GPUs with an energy counter are measured by counter differences. GPUs without one are polled by an
/// owned PowerSampler (on a background thread, unless the clock is virtual) and their energy is the
/// integral of the samples; a sample is also taken at every window edge so that short windows are covered.
///
/// CPU package and DRAM energy is the difference of the counters' readings. A window across a counter reset
/// (the RAPL backend tells one from a wraparound by the power a wrap would imply; the reset count differs
/// between the window's readings, device::why_not_measurable()) or across a counter that went back (its
/// origin changed: the `joule daemon` that serves it restarted) reports that energy as not measurable
/// (DeviceEnergy::not_measurable, NaN joules) and logs a warning: the energy before the reset is unknown, and
/// a wrap's worth would be phantom.
///
/// Thread-safe: windows may be begun and ended from several threads.
class EnergyMonitor {
 public:
  /// @param gpus GPUs to measure (they must outlive the monitor); @param cpus CPUs to measure.
  /// @param clock the clock windows are timed with; the devices must run on the same clock.
  /// @throws joule::Exception if a device cannot be read at all (the message names the device).
  EnergyMonitor(std::vector<device::Gpu*> gpus, std::vector<device::Cpu*> cpus, Clock& clock,
                MonitorOptions options = {});
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  /// Opens window `name` now. @param sync call the sync callback first.
  /// @throws joule::Exception kState if a window of that name is open; kDevice if a device read fails.
  void begin_window(std::string_view name, bool sync = true);

  /// Closes window `name` now and returns what it measured.
  /// @throws joule::Exception kNotFound if no window of that name is open (never begun, already ended or
  /// cancelled); kDevice if a device read fails.
  Measurement end_window(std::string_view name, bool sync = true);

  /// Discards window `name` without reading any device. @throws kNotFound as end_window does.
  void cancel_window(std::string_view name);

  /// @return true if a window called `name` is open.
  bool is_open(std::string_view name) const;
  /// @return the names of the open windows, sorted.
  std::vector<std::string> open_windows() const;

  const std::vector<device::Gpu*>& gpus() const { return gpus_; }
  const std::vector<device::Cpu*>& cpus() const { return cpus_; }
  Clock& clock() const { return clock_; }
  /// @return the sampler polling GPUs without an energy counter, or nullptr if every GPU has one.
  PowerSampler* fallback_sampler() const { return sampler_.get(); }

 private:
  struct Reading {
    Nanos time{0};
    std::vector<uint64_t> gpu_energy_mj;                // per GPU; 0 for polled GPUs
    std::vector<device::CpuEnergyReading> cpu_energy;   // per CPU, with the counter resets seen so far
    std::vector<device::CpuEnergyReading> dram_energy;  // per CPU; zero without DRAM
  };
  Reading read_all();
  Measurement difference(std::string_view name, const Reading& begin, const Reading& end);
  [[noreturn]] void throw_unknown_window(std::string_view name) const;

  std::vector<device::Gpu*> gpus_;
  std::vector<device::Cpu*> cpus_;
  Clock& clock_;
  MonitorOptions options_;
  std::vector<size_t> polled_position_;  // per GPU: position in sampler_, or SIZE_MAX for counter GPUs
  std::unique_ptr<PowerSampler> sampler_;

  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Reading, NameHash, std::equal_to<>> windows_;
};

}  // namespace joule::measure
