// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/run_figures.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "joule/core/units.hpp"

namespace joule::measure {

std::vector<PowerChannel> device_power_channels(const std::vector<device::Gpu*>& gpus,
                                                const std::vector<device::Cpu*>& cpus, Clock& clock) {
  std::vector<PowerChannel> channels;
  channels.reserve(gpus.size() + 2 * cpus.size());
  for (auto* gpu : gpus) {
    channels.push_back(gpu_power_channel(*gpu));
  }
  for (auto* cpu : cpus) {
    channels.push_back(cpu_power_channel(*cpu, clock));
    if (cpu->info().has_dram) {
      channels.push_back(cpu_power_channel(*cpu, clock, true));
    }
  }
  return channels;
}

std::vector<DeviceFigure> device_figures(const Measurement& measurement,
                                         const std::vector<device::Gpu*>& gpus,
                                         const std::vector<device::Cpu*>& cpus, const PowerSampler& sampler,
                                         Nanos start, Nanos end) {
  std::vector<DeviceFigure> figures;
  size_t channel = 0;
  auto figure = [&](std::string kind, const DeviceEnergy& energy, std::string name) {
    const auto sampled_peak = sampler.peak_mw(channel++, start, end);
    const double average_w = !energy.measurable()     ? std::numeric_limits<double>::quiet_NaN()
                             : measurement.time_s > 0 ? energy.energy_j / measurement.time_s
                                                      : 0.0;
    // The power that was integrated never stays below its own average, but a sampler can miss its highest
    // moments: the peak is the highest sample, or the average when that is higher (never "avg > peak").
    std::optional<double> peak_w;
    if (sampled_peak) {
      peak_w = std::max(mw_to_w(*sampled_peak), average_w);
    }
    figures.push_back({std::move(kind), energy.index, std::move(name), energy.energy_j, average_w, peak_w,
                       energy.source, energy.not_measurable});
  };
  for (size_t i = 0; i < gpus.size(); ++i) {
    figure("gpu", measurement.gpu_energy[i], gpus[i]->info().name);
  }
  size_t dram = 0;
  for (size_t i = 0; i < cpus.size(); ++i) {
    figure("cpu", measurement.cpu_energy[i], cpus[i]->info().name);
    if (cpus[i]->info().has_dram) {
      figure("dram", measurement.dram_energy[dram++], "dram");
    }
  }
  return figures;
}

Spread spread_of(const std::vector<double>& values) {
  Spread out;
  if (values.empty()) {
    return out;
  }
  for (const double v : values) {
    out.mean += v;
  }
  out.mean /= static_cast<double>(values.size());
  if (values.size() > 1) {
    double squares = 0;
    for (const double v : values) {
      squares += (v - out.mean) * (v - out.mean);
    }
    out.stddev = std::sqrt(squares / static_cast<double>(values.size() - 1));
  }
  return out;
}

}  // namespace joule::measure
