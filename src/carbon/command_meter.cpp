// SPDX-License-Identifier: Apache-2.0
#include "joule/carbon/command_meter.hpp"

#include "joule/core/log.hpp"
#include "joule/measure/run_figures.hpp"

namespace joule::carbon {

CommandMeter::CommandMeter(std::vector<device::Gpu*> gpus, std::vector<device::Cpu*> cpus, Clock& clock)
    : gpus_(std::move(gpus)),
      cpus_(std::move(cpus)),
      clock_(clock),
      monitor_(std::make_unique<measure::EnergyMonitor>(gpus_, cpus_, clock)) {}

CommandMeter::~CommandMeter() {
  stop();
}

Result<std::unique_ptr<CommandMeter>> CommandMeter::open(std::vector<device::Gpu*> gpus,
                                                         std::vector<device::Cpu*> cpus, Clock& clock,
                                                         CommandMeterOptions options) {
  std::unique_ptr<CommandMeter> meter(new CommandMeter(std::move(gpus), std::move(cpus), clock));
  if (options.carbon && options.carbon->sources_given() > 0) {
    meter->signal_ = JOULE_TRY(make_carbon_signal(*options.carbon, clock));
    meter->carbon_ = std::make_unique<CarbonMonitor>(*meter->monitor_, *meter->signal_);
  }
  if (options.tariff) {
    meter->tariff_ = std::move(options.tariff);
    meter->price_ = std::make_unique<PriceMonitor>(*meter->monitor_, *meter->tariff_);
  }
  // One sampler for the peak power of every device; energy comes from the monitor.
  meter->sampler_ = std::make_unique<measure::PowerSampler>(
      measure::device_power_channels(meter->gpus_, meter->cpus_, clock), clock, options.sample_period);
  if (meter->sampler_->channel_count() > 0) {
    meter->sampler_->start();
  }
  return meter;
}

void CommandMeter::stop() {
  if (sampler_) {
    sampler_->stop();
  }
}

Result<CommandRun> CommandMeter::run(const std::vector<std::string>& command, ChildSignals& signals) {
  const Nanos window_start = clock_.now();
  const int64_t started_unix_s = clock_.to_unix_ns(window_start) / 1'000'000'000;
  monitor_->begin_window("measure", false);
  if (carbon_) {
    carbon_->begin_window("measure");
  }
  if (price_) {
    price_->begin_window("measure");
  }
  const auto exit = run_child(command, signals);
  if (!exit) {
    monitor_->cancel_window("measure");
    if (carbon_) {
      carbon_->cancel_window("measure");
    }
    if (price_) {
      price_->cancel_window("measure");
    }
    sampler_->stop();
    return tl::make_unexpected(exit.error());
  }
  sampler_->sample_now();
  const measure::Measurement measurement = monitor_->end_window("measure", false);
  CommandRun run{command, exit->exit_code, exit->signal, started_unix_s, measurement.time_s,
                 {},      std::nullopt,    std::nullopt};
  if (carbon_) {
    auto carbon_measurement = carbon_->end_window("measure");
    if (!carbon_measurement.carbon) {
      log().warn("carbon: {}", carbon_measurement.carbon.error().message());
    }
    run.carbon = std::move(carbon_measurement.carbon);
  }
  if (price_) {
    run.price = price_->end_window("measure");
  }
  run.devices = measure::device_figures(measurement, gpus_, cpus_, *sampler_, window_start, clock_.now());
  return run;
}

}  // namespace joule::carbon
