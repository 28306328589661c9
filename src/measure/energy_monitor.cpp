// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/energy_monitor.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/device/nvml.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::measure {

namespace {

constexpr size_t kNotPolled = std::numeric_limits<size_t>::max();

template <class T>
T read_or_throw(Result<T> result, std::string_view what) {
  if (!result) {
    throw Exception(result.error().code() == ErrorCode::kPermissionDenied ? ErrorCode::kPermissionDenied
                                                                          : ErrorCode::kDevice,
                    fmt::format("{}: {}", what, result.error().message()));
  }
  return *result;
}

double sum_energy(const std::vector<DeviceEnergy>& energies) {
  double total = 0;
  for (const auto& energy : energies) {
    total += energy.energy_j;  // NaN (not measurable) makes the sum NaN: a total is never silently low
  }
  return total;
}

// The energy between two readings of one CPU counter (package or DRAM), or why it is not known: a reset
// between them (the RAPL backend counted one), or a counter that went back (a new origin: the joule daemon
// that serves it restarted). Subtracting would give a little less than the truth, or nothing.
DeviceEnergy cpu_window_energy(int index, const device::CpuEnergyReading& begin,
                               const device::CpuEnergyReading& end) {
  DeviceEnergy energy{index, 0, EnergySource::kCounter, {}};
  if (auto why = device::why_not_measurable(begin, end)) {
    energy.not_measurable = std::move(*why);
  } else if (end.energy_mj < begin.energy_mj) {
    energy.not_measurable = fmt::format(
        "not measurable: the energy counter went back from {} mJ to {} mJ between the readings (its origin "
        "changed: the joule daemon that serves it restarted); the energy between them is unknown",
        begin.energy_mj, end.energy_mj);
  }
  energy.energy_j = energy.measurable() ? mj_to_j(static_cast<double>(end.energy_mj - begin.energy_mj))
                                        : std::numeric_limits<double>::quiet_NaN();
  return energy;
}

// "GPU 1", "CPU 0", "CPU 0 DRAM": a figure's device in Measurement::why_not_measurable().
void append_not_measurable(std::vector<std::string>& reasons, const std::vector<DeviceEnergy>& energies,
                           std::string_view kind, std::string_view suffix) {
  for (const auto& energy : energies) {
    if (!energy.measurable()) {
      reasons.push_back(fmt::format("{} {}{}: {}", kind, energy.index, suffix, energy.not_measurable));
    }
  }
}

}  // namespace

std::string_view to_string(EnergySource source) {
  switch (source) {
    case EnergySource::kCounter:
      return "counter";
    case EnergySource::kPowerSamples:
      return "power-samples";
    case EnergySource::kInstantPower:
      return "instant-power";
    case EnergySource::kMigSliceShare:
      return device::kMigEnergyMethod;
  }
  return "unknown";
}

double Measurement::total_gpu_energy_j() const {
  return sum_energy(gpu_energy);
}

double Measurement::total_energy_j() const {
  return sum_energy(gpu_energy) + sum_energy(cpu_energy) + sum_energy(dram_energy);
}

bool Measurement::estimated() const {
  auto any = [](const std::vector<DeviceEnergy>& energies) {
    return std::any_of(energies.begin(), energies.end(), [](const DeviceEnergy& e) { return e.estimated(); });
  };
  return any(gpu_energy) || any(cpu_energy) || any(dram_energy);
}

bool Measurement::measurable() const {
  auto all = [](const std::vector<DeviceEnergy>& energies) {
    return std::all_of(energies.begin(), energies.end(),
                       [](const DeviceEnergy& e) { return e.measurable(); });
  };
  return all(gpu_energy) && all(cpu_energy) && all(dram_energy);
}

std::optional<std::string> Measurement::why_not_measurable() const {
  std::vector<std::string> reasons;
  append_not_measurable(reasons, gpu_energy, "GPU", "");
  append_not_measurable(reasons, cpu_energy, "CPU", "");
  append_not_measurable(reasons, dram_energy, "CPU", " DRAM");
  if (reasons.empty()) {
    return std::nullopt;
  }
  return fmt::format("{}", fmt::join(reasons, "; "));
}

EnergyMonitor::EnergyMonitor(std::vector<device::Gpu*> gpus, std::vector<device::Cpu*> cpus, Clock& clock,
                             MonitorOptions options)
    : gpus_(std::move(gpus)), cpus_(std::move(cpus)), clock_(clock), options_(std::move(options)) {
  std::vector<device::Gpu*> polled;
  for (auto* gpu : gpus_) {
    if (gpu == nullptr) {
      throw Exception(ErrorCode::kInvalidArgument, "EnergyMonitor was given a null GPU");
    }
    if (gpu->info().has_energy_counter) {
      polled_position_.push_back(kNotPolled);
      read_or_throw(gpu->energy_mj(), fmt::format("cannot read the energy counter of {}", gpu->label()));
    } else {
      polled_position_.push_back(polled.size());
      polled.push_back(gpu);
      read_or_throw(gpu->power_mw(), fmt::format("cannot read the power of {}", gpu->label()));
    }
  }
  for (auto* cpu : cpus_) {
    if (cpu == nullptr) {
      throw Exception(ErrorCode::kInvalidArgument, "EnergyMonitor was given a null CPU");
    }
    read_or_throw(cpu->package_reading(), fmt::format("cannot read the energy counter of {}", cpu->label()));
  }
  if (!polled.empty()) {
    sampler_ = std::make_unique<PowerSampler>(std::move(polled), clock_, options_.polling_period);
    sampler_->sample_now();
    // On a virtual clock time only moves when the program moves it, so a polling thread would see
    // nothing new; edge samples at begin and end cover the windows instead.
    if (!clock_.is_virtual()) {
      sampler_->start();
    }
  }
}

EnergyMonitor::~EnergyMonitor() = default;

EnergyMonitor::Reading EnergyMonitor::read_all() {
  Reading reading;
  reading.gpu_energy_mj.resize(gpus_.size(), 0);
  reading.cpu_energy.resize(cpus_.size());
  reading.dram_energy.resize(cpus_.size());
  if (sampler_) {
    sampler_->sample_now();
  }
  reading.time = clock_.now();
  for (size_t i = 0; i < gpus_.size(); ++i) {
    if (polled_position_[i] == kNotPolled) {
      reading.gpu_energy_mj[i] = read_or_throw(
          gpus_[i]->energy_mj(), fmt::format("cannot read the energy counter of {}", gpus_[i]->label()));
    }
  }
  for (size_t i = 0; i < cpus_.size(); ++i) {
    // Readings with their reset counts, so that a window across a counter reset is not measurable.
    reading.cpu_energy[i] = read_or_throw(cpus_[i]->package_reading(),
                                          fmt::format("cannot read the energy of {}", cpus_[i]->label()));
    if (cpus_[i]->info().has_dram) {
      reading.dram_energy[i] = read_or_throw(
          cpus_[i]->dram_reading(), fmt::format("cannot read the DRAM energy of {}", cpus_[i]->label()));
    }
  }
  return reading;
}

void EnergyMonitor::begin_window(std::string_view name, bool sync) {
  {
    std::lock_guard lock(mutex_);
    if (windows_.find(name) != windows_.end()) {
      throw Exception(ErrorCode::kState,
                      fmt::format("window '{}' is already open; end or cancel it first", name));
    }
  }
  if (sync && options_.sync) {
    options_.sync();
  }
  Reading reading = read_all();
  std::lock_guard lock(mutex_);
  if (!windows_.emplace(std::string(name), std::move(reading)).second) {
    throw Exception(ErrorCode::kState,
                    fmt::format("window '{}' is already open; end or cancel it first", name));
  }
}

void EnergyMonitor::throw_unknown_window(std::string_view name) const {
  std::vector<std::string> open;
  for (const auto& [open_name, reading] : windows_) {
    open.push_back(open_name);
  }
  std::sort(open.begin(), open.end());
  throw Exception(ErrorCode::kNotFound,
                  open.empty()
                      ? fmt::format("no open window named '{}' (no window is open)", name)
                      : fmt::format("no open window named '{}' (open: {})", name, fmt::join(open, ", ")));
}

Measurement EnergyMonitor::end_window(std::string_view name, bool sync) {
  Reading begin;
  {
    std::lock_guard lock(mutex_);
    const auto found = windows_.find(name);
    if (found == windows_.end()) {
      throw_unknown_window(name);
    }
    begin = std::move(found->second);
    windows_.erase(found);
  }
  if (sync && options_.sync) {
    options_.sync();
  }
  const Reading end = read_all();
  Measurement measurement = difference(name, begin, end);
  if (options_.on_window_end) {
    try {
      options_.on_window_end(measurement);
    } catch (const std::exception& error) {
      log().warn("window '{}': the on_window_end observer failed: {}", measurement.name, error.what());
    }
  }
  return measurement;
}

void EnergyMonitor::cancel_window(std::string_view name) {
  std::lock_guard lock(mutex_);
  const auto found = windows_.find(name);
  if (found == windows_.end()) {
    throw_unknown_window(name);
  }
  windows_.erase(found);
}

bool EnergyMonitor::is_open(std::string_view name) const {
  std::lock_guard lock(mutex_);
  return windows_.find(name) != windows_.end();
}

std::vector<std::string> EnergyMonitor::open_windows() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, reading] : windows_) {
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Measurement EnergyMonitor::difference(std::string_view name, const Reading& begin, const Reading& end) {
  Measurement measurement;
  measurement.name = std::string(name);
  measurement.time_s = to_seconds(end.time - begin.time);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    device::Gpu& gpu = *gpus_[i];
    DeviceEnergy energy{gpu.info().index, 0, EnergySource::kCounter, {}};
    if (polled_position_[i] != kNotPolled) {
      auto integral = sampler_->energy_j(polled_position_[i], begin.time, end.time);
      if (integral) {
        energy.energy_j = *integral;
        energy.source = EnergySource::kPowerSamples;
      } else {
        const auto power =
            read_or_throw(gpu.power_mw(), fmt::format("cannot read the power of {}", gpu.label()));
        energy.energy_j = mw_to_w(power) * measurement.time_s;
        energy.source = EnergySource::kInstantPower;
      }
    } else {
      const uint64_t delta_mj =
          end.gpu_energy_mj[i] >= begin.gpu_energy_mj[i] ? end.gpu_energy_mj[i] - begin.gpu_energy_mj[i] : 0;
      energy.energy_j = mj_to_j(static_cast<double>(delta_mj));
      if (device::is_mig_uuid(gpu.info().uuid)) {
        energy.source = EnergySource::kMigSliceShare;
      }
      if (delta_mj == 0 && measurement.time_s > 0) {
        if (options_.approx_instant_energy) {
          const auto power =
              read_or_throw(gpu.power_mw(), fmt::format("cannot read the power of {}", gpu.label()));
          energy.energy_j = mw_to_w(power) * measurement.time_s;
          energy.source = EnergySource::kInstantPower;
        } else {
          log().warn(
              "window '{}': the energy counter of {} did not move in {:.6f} s; the window is shorter than "
              "the "
              "counter's update interval (enable approx_instant_energy to estimate it)",
              name, gpu.label(), measurement.time_s);
        }
      }
    }
    measurement.gpu_energy.push_back(energy);
  }
  for (size_t i = 0; i < cpus_.size(); ++i) {
    const int index = cpus_[i]->info().index;
    measurement.cpu_energy.push_back(cpu_window_energy(index, begin.cpu_energy[i], end.cpu_energy[i]));
    if (!measurement.cpu_energy.back().measurable()) {
      log().warn("window '{}': the package energy of {} is {}", name, cpus_[i]->label(),
                 measurement.cpu_energy.back().not_measurable);
    }
    if (cpus_[i]->info().has_dram) {
      measurement.dram_energy.push_back(cpu_window_energy(index, begin.dram_energy[i], end.dram_energy[i]));
      if (!measurement.dram_energy.back().measurable()) {
        log().warn("window '{}': the DRAM energy of {} is {}", name, cpus_[i]->label(),
                   measurement.dram_energy.back().not_measurable);
      }
    }
  }
  return measurement;
}

}  // namespace joule::measure
