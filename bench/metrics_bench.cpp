// SPDX-License-Identifier: Apache-2.0
// The cost of a Prometheus scrape: rendering /metrics (every GPU read, text serialised) for 1 and 8
// simulated GPUs, with window histograms and carbon, and the same over HTTP on loopback.
#include <benchmark/benchmark.h>
#include <httplib.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/metrics/gpu_metrics.hpp"
#include "joule/metrics/endpoint.hpp"

namespace {

using namespace joule;

struct Node {
  explicit Node(int gpus) {
    const std::string spec = std::to_string(gpus) + "xv100";
    std::shared_ptr<Clock> clock{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
    sims = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec), clock));
    std::vector<device::Gpu*> raw;
    for (auto& gpu : sims) {
      raw.push_back(gpu.get());
    }
    auto collector = std::make_shared<metrics::GpuMetrics>(raw, *clock);
    (void)collector->set_carbon_intensity(400);
    metrics.add_collector(collector);
    windows = std::make_unique<metrics::WindowMetrics>(metrics.registry());
    for (const char* window : {"epoch", "step", "eval"}) {
      windows->observe(window, 1.5, 300);
    }
  }
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> sims;
  metrics::MetricsRegistry metrics;
  std::unique_ptr<metrics::WindowMetrics> windows;
};

void BM_RenderMetrics(benchmark::State& state) {
  Node node(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = node.metrics.render();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderMetrics)->Arg(1)->Arg(8)->Unit(benchmark::kMicrosecond);

void BM_ScrapeOverLoopback(benchmark::State& state) {
  Node node(static_cast<int>(state.range(0)));
  auto endpoint = metrics::MetricsEndpoint::start(
      "127.0.0.1:0", [&node] { return node.metrics.render(); }, "bench");
  if (!endpoint) {
    state.SkipWithError(endpoint.error().message().c_str());
    return;
  }
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  client.set_keep_alive(true);
  for (auto _ : state) {
    auto response = client.Get("/metrics");
    if (!response || response->status != 200) {
      state.SkipWithError("scrape failed");
      return;
    }
    benchmark::DoNotOptimize(response->body.data());
  }
}
BENCHMARK(BM_ScrapeOverLoopback)->Arg(1)->Arg(8)->Unit(benchmark::kMicrosecond);

void BM_WindowObserve(benchmark::State& state) {
  prometheus::Registry registry;
  metrics::WindowMetrics windows(registry);
  for (auto _ : state) {
    windows.observe("epoch", 1.5, 300);
  }
}
BENCHMARK(BM_WindowObserve);

}  // namespace
