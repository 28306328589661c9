// SPDX-License-Identifier: Apache-2.0
// The cost of one `joule infer govern` control period (docs/inference.md, "With vLLM / SGLang / TGI"):
// parsing a vLLM /metrics body of realistic size, and a whole tick (parse, window, the GPUs' energy, the
// controller's decision, the setting) for a tensor-parallel group of 1, 4 and 8 simulated GPUs. The scrape's
// network time is left out (the engine's, not ours): it is bounded by --scrape-timeout-s.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/govern/governor.hpp"
#include "joule/metrics/exposition.hpp"

namespace {

using namespace joule;

// vLLM V1's series for one model (the histograms with vLLM's own bucket bounds), plus the Python process
// collector's, as a real scrape returns them: about 400 lines.
struct FakeVllm {
  double served = 0;

  static std::string histogram(const std::string& name, const std::vector<double>& bounds, double n,
                               double value) {
    std::string text = fmt::format("# HELP {} A histogram.\n# TYPE {} histogram\n", name, name);
    for (const double bound : bounds) {
      text += fmt::format(
          "{}_bucket{{engine=\"0\",le=\"{}\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {}\n", name,
          bound, value <= bound ? n : n * 0.5);
    }
    text += fmt::format(
        "{0}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {1}\n"
        "{0}_count{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {1}\n"
        "{0}_sum{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}} {2}\n",
        name, n, n * value);
    return text;
  }

  std::string render() {
    served += 50;
    const std::vector<double> latency{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
    const std::vector<double> tokens{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    std::string text =
        "# HELP python_gc_objects_collected_total Objects collected.\n"
        "# TYPE python_gc_objects_collected_total counter\n";
    for (int i = 0; i < 40; ++i) {
      text += fmt::format("python_gc_objects_collected_total{{generation=\"{}\"}} 1234.0\n", i);
    }
    text += fmt::format(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\","
        "model_name=\"m\"}} 12.0\n# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} 0.0\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} "
        "0.3\n"
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\",model_name=\"m\"}} "
        "{}\n"
        "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine=\"0\","
        "model_name=\"m\"}} {}\n# TYPE vllm:request_success_total counter\n"
        "vllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"m\"}} {}\n",
        served * 400, served * 150, served);
    text += histogram("vllm:time_to_first_token_seconds", latency, served, 0.2);
    text += histogram("vllm:inter_token_latency_seconds", latency, served * 150, 0.03);
    text += histogram("vllm:e2e_request_latency_seconds", latency, served, 5);
    text += histogram("vllm:request_queue_time_seconds", latency, served, 0.01);
    text += histogram("vllm:request_prefill_time_seconds", latency, served, 0.1);
    text += histogram("vllm:iteration_tokens_total", tokens, served * 10, 500);
    text += histogram("vllm:request_prompt_tokens", tokens, served, 400);
    text += histogram("vllm:request_generation_tokens", tokens, served, 150);
    return text;
  }
};

void BM_ParseVllmMetrics(benchmark::State& state) {
  FakeVllm engine;
  const std::string body = engine.render();
  for (auto _ : state) {
    auto parsed = metrics::parse_exposition(body, "vllm");
    if (!parsed) {
      state.SkipWithError(parsed.error().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(parsed);
  }
  state.counters["bytes"] = static_cast<double>(body.size());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ParseVllmMetrics)->Unit(benchmark::kMicrosecond);

void BM_GovernTick(benchmark::State& state) {
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(
      *device::sim::open_sim_gpus(*device::sim::parse_spec(fmt::format("{}xv100", state.range(0))), clock));
  FakeVllm engine;
  govern::EngineTarget target;
  target.metrics_url = "http://127.0.0.1:8000/metrics";
  for (auto& gpu : gpus) {
    target.gpus.push_back(gpu.get());
  }
  govern::GovernOptions options;
  options.slo = {.ttft_s = 1, .tpot_s = 0.1};
  const govern::Scraper scraper = [&engine](const std::string&, double, size_t) -> Result<std::string> {
    return engine.render();
  };
  auto started = govern::EngineGovernor::start(target, options, clock, scraper);
  if (!started) {
    state.SkipWithError(started.error().message().c_str());
    return;
  }
  auto governor = std::move(*started);
  for (auto _ : state) {
    clock->advance(std::chrono::seconds(1));
    benchmark::DoNotOptimize(governor->tick());
  }
}
BENCHMARK(BM_GovernTick)->Arg(1)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace
