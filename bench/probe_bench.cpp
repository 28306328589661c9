// SPDX-License-Identifier: Apache-2.0
// `joule probe` on a simulated V100 (docs/cards.md): the full and the quick probe in virtual time (CPU cost
// of the probe itself: what `joule --sim v100 probe` costs), and the quick probe in real time (the pace of a
// device: bounded by the probe's windows and runs, ~0.25 s). Budget: the full probe in virtual time well
// under 1 s; in real time (`--real-time`) a few seconds.
#include <benchmark/benchmark.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/probe/probe.hpp"

namespace {

void probe_v100(benchmark::State& state, const std::shared_ptr<joule::Clock>& clock,
                const joule::probe::ProbeOptions& options) {
  auto spec = joule::device::sim::parse_spec("v100");
  auto gpus = joule::device::sim::open_sim_gpus(*spec, clock);
  auto& gpu = *gpus->front();
  auto runner = joule::probe::make_simulated_runner(gpu);
  for (auto _ : state) {
    auto card = joule::probe::probe_gpu(gpu, *clock, runner.get(), options);
    if (!card) {
      state.SkipWithError(card.error().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(card);
  }
}

void BM_FullProbeVirtualTime(benchmark::State& state) {
  probe_v100(state, std::make_shared<joule::VirtualClock>(), joule::probe::ProbeOptions{});
}
BENCHMARK(BM_FullProbeVirtualTime)->Unit(benchmark::kMillisecond);

void BM_QuickProbeVirtualTime(benchmark::State& state) {
  probe_v100(state, std::make_shared<joule::VirtualClock>(), joule::probe::quick_probe_options());
}
BENCHMARK(BM_QuickProbeVirtualTime)->Unit(benchmark::kMillisecond);

void BM_QuickProbeRealTime(benchmark::State& state) {
  probe_v100(state,
             std::shared_ptr<joule::Clock>(std::shared_ptr<joule::Clock>{}, &joule::SteadyClock::instance()),
             joule::probe::quick_probe_options());
}
BENCHMARK(BM_QuickProbeRealTime)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
