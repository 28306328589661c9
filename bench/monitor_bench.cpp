// SPDX-License-Identifier: Apache-2.0
// Cost of the measurement hot paths. Budget (DESIGN.md): begin + end of a window on the simulated device
// ≤ 2 µs.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"

namespace {

using joule::device::sim::open_sim_gpus;
using joule::device::sim::parse_spec;

struct SimSetup {
  explicit SimSetup(std::shared_ptr<joule::Clock> clock, const char* spec)
      : gpus(std::move(*open_sim_gpus(*parse_spec(spec), std::move(clock)))) {
    for (auto& gpu : gpus) {
      raw.push_back(gpu.get());
    }
  }
  std::vector<std::unique_ptr<joule::device::sim::SimulatedGpu>> gpus;
  std::vector<joule::device::Gpu*> raw;
};

void window_begin_end(benchmark::State& state, std::shared_ptr<joule::Clock> clock, const char* spec) {
  SimSetup setup(clock, spec);
  joule::measure::EnergyMonitor monitor(setup.raw, {}, *clock);
  for (auto _ : state) {
    monitor.begin_window("step");
    benchmark::DoNotOptimize(monitor.end_window("step"));
  }
}

void BM_WindowBeginEnd_SimSteadyClock(benchmark::State& state) {
  window_begin_end(
      state, std::shared_ptr<joule::Clock>(std::shared_ptr<joule::Clock>{}, &joule::SteadyClock::instance()),
      "v100");
}
BENCHMARK(BM_WindowBeginEnd_SimSteadyClock);

void BM_WindowBeginEnd_SimVirtualClock(benchmark::State& state) {
  window_begin_end(state, std::make_shared<joule::VirtualClock>(), "v100");
}
BENCHMARK(BM_WindowBeginEnd_SimVirtualClock);

void BM_WindowBeginEnd_8SimGpus(benchmark::State& state) {
  window_begin_end(
      state, std::shared_ptr<joule::Clock>(std::shared_ptr<joule::Clock>{}, &joule::SteadyClock::instance()),
      "8xa40");
}
BENCHMARK(BM_WindowBeginEnd_8SimGpus);

// A GPU without an energy counter: every edge also takes a power sample for the integral.
void BM_WindowBeginEnd_SimPolledGpu(benchmark::State& state) {
  window_begin_end(state, std::make_shared<joule::VirtualClock>(), "p100");
}
BENCHMARK(BM_WindowBeginEnd_SimPolledGpu);

void BM_SimGpuEnergyRead(benchmark::State& state) {
  auto clock =
      std::shared_ptr<joule::Clock>(std::shared_ptr<joule::Clock>{}, &joule::SteadyClock::instance());
  SimSetup setup(clock, "v100");
  for (auto _ : state) {
    benchmark::DoNotOptimize(setup.raw[0]->energy_mj());
  }
}
BENCHMARK(BM_SimGpuEnergyRead);

void BM_CsvParsePowerTrace(benchmark::State& state) {
  const std::string text = *joule::read_text_file(JOULE_SOURCE_DIR "/data/zeus-traces/summary_train.csv");
  for (auto _ : state) {
    benchmark::DoNotOptimize(joule::csv::parse(text, "summary_train.csv"));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_CsvParsePowerTrace);

}  // namespace
