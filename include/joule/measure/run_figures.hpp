// SPDX-License-Identifier: Apache-2.0
// joule/measure/run_figures.hpp — the figures of one measured run per device (energy, average and peak
// power), and the spread of a figure over repeated runs: what `joule measure` reports.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/power_sampler.hpp"

namespace joule::measure {

/// One device's figures over one measured run.
struct DeviceFigure {
  std::string kind;     ///< "gpu", "cpu" (a package) or "dram" (a package's DRAM domain)
  int index = 0;        ///< the device's index (GPU framework index, CPU package)
  std::string name;     ///< the device's name ("dram" for a DRAM domain)
  double energy_j = 0;  ///< J; NaN when not measurable
  double average_power_w =
      0;  ///< energy over the run's time, W; NaN when not measurable, 0 for a zero-length run
  std::optional<double>
      peak_power_w;  ///< the highest power sampled (never below the average), W; none unsampled
  EnergySource source = EnergySource::kCounter;
  /// Why energy_j and average_power_w are NaN (a RAPL counter reset during the run); empty when measured.
  std::string not_measurable;
};

/// The power channels that device_figures() reads, in its order: every GPU, then every CPU's package and,
/// when it has one, its DRAM domain. `clock` must outlive the channels.
std::vector<PowerChannel> device_power_channels(const std::vector<device::Gpu*>& gpus,
                                                const std::vector<device::Cpu*>& cpus, Clock& clock);

/// The figures of every device of one window: `measurement` from an EnergyMonitor over `gpus` and `cpus`,
/// peaks from `sampler` (over device_power_channels() of the same devices) between `start` and `end`.
std::vector<DeviceFigure> device_figures(const Measurement& measurement,
                                         const std::vector<device::Gpu*>& gpus,
                                         const std::vector<device::Cpu*>& cpus, const PowerSampler& sampler,
                                         Nanos start, Nanos end);

/// Mean and sample standard deviation (n − 1; 0 for one value) of one figure over runs.
struct Spread {
  double mean = 0;
  double stddev = 0;
};

/// @return the spread of `values`; {0, 0} for none. A NaN value makes both NaN.
Spread spread_of(const std::vector<double>& values);

}  // namespace joule::measure
