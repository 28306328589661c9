// SPDX-License-Identifier: Apache-2.0
// Measures a 10 s window of a simulated V100 on a virtual clock through the installed joule package, and
// prints the energy (the test checks it: the simulated V100 draws 220.25 W at its default limit).
#include <cstdio>
#include <memory>

#include <joule/core/clock.hpp>
#include <joule/device/sim_gpu.hpp>
#include <joule/measure/energy_monitor.hpp>

int main() {
  auto clock = std::make_shared<joule::VirtualClock>();
  const auto spec = joule::value_or_throw(joule::device::sim::parse_spec("v100:imagenet:256"));
  auto gpus = joule::value_or_throw(joule::device::sim::open_sim_gpus(spec, clock));
  joule::measure::EnergyMonitor monitor({gpus.at(0).get()}, {}, *clock);
  monitor.begin_window("window");
  clock->advance(std::chrono::seconds(10));
  const auto measurement = monitor.end_window("window");
  std::printf("%.3f s %.3f J\n", measurement.time_s, measurement.total_gpu_energy_j());
  return measurement.total_gpu_energy_j() > 0 ? 0 : 1;
}
