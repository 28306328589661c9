// SPDX-License-Identifier: Apache-2.0
// joule/measure/process_energy.hpp — each process's estimated share of a GPU's measured energy, from the
// driver's per-process SM utilisation samples (NVML), for GPUs that several processes or jobs share.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/nvml.hpp"

namespace joule::measure {

/// The method process shares are estimated by, as reports name it.
inline constexpr std::string_view kProcessEnergyMethod = "nvml process utilisation samples";

/// One process's estimated share of a GPU's energy over a window.
struct ProcessEnergy {
  uint32_t pid = 0;
  uint64_t energy_mj = 0;  ///< estimated, mJ
  double sm_share = 0;     ///< its share of the window's SM time, 0–1
};

/// A GPU's measured energy over a window split among its processes. The shares plus `unattributed_mj` add up
/// to `energy_mj` exactly (whole mJ): the split never creates or loses energy.
struct ProcessAttribution {
  uint64_t energy_mj = 0;                ///< the GPU's measured energy over the window, mJ
  std::vector<ProcessEnergy> processes;  ///< one per process sampled in the window, by PID
  /// What no process's SM time accounts for: idle time, SM capacity no kernel used, memory-bound stretches.
  uint64_t unattributed_mj = 0;
  std::string_view method = kProcessEnergyMethod;  ///< always estimated
};

/// Splits `energy_mj`, measured over (start_us, end_us], among processes by their SM utilisation samples
/// (times in µs since 1970, as NVML stamps them; samples outside the window are ignored):
///
/// - the window holds P sample periods: the driver's period is the smallest gap between distinct sample
///   times (the whole window when fewer than two), and P is the window over it, at least the number of
///   distinct times;
/// - in each period the processes' SM percentages count as they are, scaled down to 100 % together where
///   they add up to more (overlapping kernels); a process's SM share is its total over 100 × P;
/// - its energy is energy_mj × its share, rounded down to a whole mJ; the rest is unattributed.
///
/// A process that starts or ends inside the window gets the periods it was sampled in, no more.
/// @return kInvalidArgument for a window that ends before it starts, a sample over 100 %, or two different
/// samples of one process at one time (each message names the process and the time).
Result<ProcessAttribution> attribute_energy_by_process(
    uint64_t energy_mj, std::span<const device::ProcessUtilizationSample> samples, uint64_t start_us,
    uint64_t end_us);

/// Measures one GPU's energy over a window and splits it among its processes (attribute_energy_by_process):
/// begin(), poll() often enough that the driver's short sample history is never outrun (every few seconds),
/// end(). Not thread-safe; one window at a time.
class ProcessEnergyMeter {
 public:
  /// @param gpu an NVIDIA GPU with an energy counter (it must outlive the meter).
  explicit ProcessEnergyMeter(device::Gpu& gpu) : gpu_(gpu) {}

  /// Starts a window at `now_us` (µs since 1970): reads the energy counter. @return the counter's error, or
  /// kNotSupported for a GPU without one (per-process shares need a measured total).
  Result<void> begin(uint64_t now_us);
  /// Reads the samples the driver took since the last read, keeping those of the window. @return the
  /// driver's error (nvml_process_utilization()); kState outside a window.
  Result<void> poll();
  /// Ends the window at `now_us`: polls once more, reads the counter and splits the energy. @return kState
  /// outside a window; the errors of poll(), the counter and attribute_energy_by_process().
  Result<ProcessAttribution> end(uint64_t now_us);

 private:
  device::Gpu& gpu_;
  bool open_ = false;
  uint64_t start_us_ = 0;
  uint64_t start_energy_mj_ = 0;
  uint64_t last_seen_us_ = 0;
  std::vector<device::ProcessUtilizationSample> samples_;
};

/// Running per-process energy totals of one GPU since the first update() (what the exporter serves), with a
/// bounded number of series: at most `max_processes` PIDs have a total of their own, the first seen; the
/// energy of further PIDs goes to "other", that of PIDs that have exited (no longer running and not sampled
/// in the last window) to "exited" (freeing their place), and what no process accounts for to
/// "unattributed". The totals always add up to the GPU's measured energy since the first update().
class ProcessEnergyTotals {
 public:
  struct Total {
    std::string process;  ///< a PID, "other", "exited" or "unattributed"
    uint64_t energy_mj = 0;
  };

  /// @param gpu an NVIDIA GPU with an energy counter (it must outlive this). @param max_processes ≥ 1.
  explicit ProcessEnergyTotals(device::Gpu& gpu, size_t max_processes = 32);

  /// Ends the current window at `now_us` (µs since 1970), adds its split to the totals and starts the next.
  /// The first call only starts. On failure the window's energy is left out and the next window starts now.
  /// @return the errors of ProcessEnergyMeter.
  Result<void> update(uint64_t now_us);
  /// @return the totals: the PIDs in the order first seen, then "other", "exited", "unattributed".
  std::vector<Total> totals() const;

 private:
  ProcessEnergyMeter meter_;
  device::Gpu& gpu_;
  size_t max_processes_;
  bool started_ = false;
  std::vector<std::pair<uint32_t, uint64_t>> by_pid_;  // in the order first seen
  uint64_t other_mj_ = 0;
  uint64_t exited_mj_ = 0;
  uint64_t unattributed_mj_ = 0;
};

}  // namespace joule::measure
