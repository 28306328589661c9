// SPDX-License-Identifier: Apache-2.0
// The Zeus reference grid: 4 GPUs × 6 workloads × seeds 1–3 (η 0.5, β 2). Budget (DESIGN.md): < 1 s on one
// core; the original Python simulator needs about 0.3 s per run, ~22 s for the grid.
#include <benchmark/benchmark.h>

#include "joule/sim/simulator.hpp"

namespace {

void BM_ZeusGrid72Runs(benchmark::State& state) {
  for (auto _ : state) {
    int runs = 0;
    for (const std::string& gpu : joule::sim::trace_gpus()) {
      const joule::sim::Trace trace = *joule::sim::gpu_trace(gpu);  // parsing the traces is part of the work
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        joule::sim::SimulationOptions options;
        options.seed = seed;
        const joule::sim::Simulator simulator = joule::sim::zeus_simulator(trace, options);
        for (const std::string& workload : joule::sim::paper_workloads()) {
          auto result = simulator.simulate(*joule::sim::paper_job(trace, workload));
          benchmark::DoNotOptimize(result);
          ++runs;
        }
      }
    }
    state.counters["runs"] = runs;
  }
}
BENCHMARK(BM_ZeusGrid72Runs)->Unit(benchmark::kMillisecond);

void BM_OneRunLibrispeechV100(benchmark::State& state) {
  const joule::sim::Trace trace = *joule::sim::gpu_trace("v100");
  const joule::sim::Simulator simulator = joule::sim::zeus_simulator(trace, {});
  const joule::sim::Job job = *joule::sim::paper_job(trace, "librispeech");
  for (auto _ : state) {
    auto result = simulator.simulate(job);
    benchmark::DoNotOptimize(result);
  }
}
BENCHMARK(BM_OneRunLibrispeechV100)->Unit(benchmark::kMillisecond);

void BM_ParseTraceV100(benchmark::State& state) {
  for (auto _ : state) {
    auto trace = joule::sim::gpu_trace("v100");
    benchmark::DoNotOptimize(trace);
  }
}
BENCHMARK(BM_ParseTraceV100)->Unit(benchmark::kMillisecond);

}  // namespace
