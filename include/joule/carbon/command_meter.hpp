// SPDX-License-Identifier: Apache-2.0
// joule/carbon/command_meter.hpp — measures runs of a command (`joule measure -- CMD`): the energy of the
// chosen GPUs and CPUs, their peak power, and, when asked for, the run's carbon and cost. Any C++ program
// that starts a command and wants its energy uses the same meter.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"
#include "joule/carbon/run_report.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/child_process.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/power_sampler.hpp"

namespace joule::carbon {

struct CommandMeterOptions {
  /// The carbon intensity's source; nullopt (or no source given) measures no carbon.
  std::optional<CarbonSourceOptions> carbon;
  /// The electricity tariff; nullopt measures no cost.
  std::optional<HourlyTariff> tariff;
  /// How often power is sampled for the peaks (> 0).
  std::chrono::milliseconds sample_period{100};
};

/// The devices' monitors, made once before the first run (bad sources cost no run) and kept for every run.
/// Not thread-safe: one run at a time.
class CommandMeter {
 public:
  /// Opens the energy monitor over `gpus` and `cpus` on `clock`, the carbon and price monitors when asked
  /// for, and starts sampling power. The devices and the clock must outlive the meter.
  /// @return the source's error if the carbon signal cannot be made.
  static Result<std::unique_ptr<CommandMeter>> open(std::vector<device::Gpu*> gpus,
                                                    std::vector<device::Cpu*> cpus, Clock& clock,
                                                    CommandMeterOptions options);
  ~CommandMeter();
  CommandMeter(const CommandMeter&) = delete;
  CommandMeter& operator=(const CommandMeter&) = delete;

  /// Runs `command` (run_child) inside every monitor's window. @return the run's figures; the child's error
  /// (kNotFound, kPermissionDenied, …) if it could not start, with the windows cancelled and sampling
  /// stopped.
  Result<CommandRun> run(const std::vector<std::string>& command, ChildSignals& signals);
  /// Stops sampling power (at the end of the last run).
  void stop();

 private:
  CommandMeter(std::vector<device::Gpu*> gpus, std::vector<device::Cpu*> cpus, Clock& clock);

  std::vector<device::Gpu*> gpus_;
  std::vector<device::Cpu*> cpus_;
  Clock& clock_;
  std::unique_ptr<measure::EnergyMonitor> monitor_;
  std::unique_ptr<CarbonSignal> signal_;
  std::unique_ptr<CarbonMonitor> carbon_;
  std::optional<HourlyTariff> tariff_;
  std::unique_ptr<PriceMonitor> price_;
  std::unique_ptr<measure::PowerSampler> sampler_;
};

}  // namespace joule::carbon
