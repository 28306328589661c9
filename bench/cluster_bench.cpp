// SPDX-License-Identifier: Apache-2.0
// The cluster power allocator (docs/cluster.md): one re-plan of a cluster of N GPUs in jobs of 1–64 GPUs
// (1,000 GPUs: about 60 jobs), each with a 21-point frontier (100–700 W every 30 W, knees and slopes drawn
// at random; knees from 400 to 700 W, so that the cap binds), under a cap of 70% of the GPUs' summed maximum.
// Budget (issue 28): a re-plan of 1,000 GPUs within 100 ms. BM_ControllerReplan: the controller's whole
// re-plan (silent-node reserve, deferral over a 24-slot forecast, allocation, every GPU's limit and reason)
// of the same clusters on nodes of 8 GPUs, a third of the training jobs deferrable.
#include <cmath>
#include <random>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "joule/cluster/allocator.hpp"
#include "joule/cluster/controller.hpp"

namespace {

std::vector<joule::cluster::JobDemand> cluster_of(int gpus_total, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> size_exponent(0, 6);  // 1, 2, 4, … 64 GPUs
  std::uniform_real_distribution<double> knee(400, 700);
  std::uniform_real_distribution<double> exponent(0.3, 1.5);
  std::vector<joule::cluster::JobDemand> jobs;
  int placed = 0;
  while (placed < gpus_total) {
    joule::cluster::JobDemand job;
    job.id = fmt::format("job{}", jobs.size());
    job.gpus = std::min(1 << size_exponent(random), gpus_total - placed);
    const double knee_w = knee(random);
    const double slope = exponent(random);
    for (double limit_w = 100; limit_w <= 700; limit_w += 30) {
      job.frontier.push_back({limit_w, limit_w >= knee_w ? 1.0 : std::pow(knee_w / limit_w, slope)});
    }
    if (jobs.size() % 5 == 0) {
      job.kind = joule::cluster::JobKind::kInference;
      job.slo_floor_w = 340;
    }
    placed += job.gpus;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

void allocate_cluster(benchmark::State& state, const joule::cluster::AllocateOptions& options) {
  const int gpus = static_cast<int>(state.range(0));
  const auto jobs = cluster_of(gpus, 28);
  const double cap_w = 0.7 * gpus * 700;
  bool exact = false;
  double gap_share = 0;
  for (auto _ : state) {
    auto allocation = joule::cluster::allocate(jobs, cap_w, options);
    if (!allocation) {
      state.SkipWithError(allocation.error().message().c_str());
      return;
    }
    exact = allocation->exact;
    gap_share = allocation->gap_bound / gpus;
    benchmark::DoNotOptimize(allocation);
  }
  state.counters["jobs"] = static_cast<double>(jobs.size());
  state.counters["exact"] = exact ? 1 : 0;
  state.counters["gap_ppm"] = gap_share * 1e6;  // the bound, in millionths of the cluster's throughput
}

// As joule allocates: the heuristic, then the exact search where its states stay under the limit.
void BM_Allocate(benchmark::State& state) {
  allocate_cluster(state, {});
}
BENCHMARK(BM_Allocate)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// The heuristic alone (hull greedy, leftover steps, exchanges).
void BM_AllocateHeuristicOnly(benchmark::State& state) {
  allocate_cluster(state, {.exact_work_limit = 0});
}
BENCHMARK(BM_AllocateHeuristicOnly)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// The controller over the same jobs: GPUs on nodes of 8 in order, every third training job deferrable (1–12 h
// of work, 1–12 h of slack before its deadline), a 24-hour forecast swinging between 150 and 450 g/kWh (225
// g/kWh now, falling).
void BM_ControllerReplan(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const auto demands = cluster_of(gpus, 28);
  std::mt19937_64 random(29);
  std::uniform_real_distribution<double> work_h(1, 12);
  std::uniform_real_distribution<double> slack_h(1, 12);
  joule::cluster::Controller controller({.node_timeout_s = 1e9});
  int next_gpu = 0;
  int deferrable = 0;
  for (size_t j = 0; j < demands.size(); ++j) {
    const auto& demand = demands[j];
    joule::cluster::JobSpec spec{.id = demand.id,
                                 .kind = demand.kind,
                                 .gpus = {},
                                 .priority = demand.priority,
                                 .frontier = demand.frontier,
                                 .slo_floor_w = demand.slo_floor_w};
    for (int g = 0; g < demand.gpus; ++g, ++next_gpu) {
      spec.gpus.push_back({fmt::format("node{}", next_gpu / 8), next_gpu % 8});
    }
    if (demand.kind == joule::cluster::JobKind::kTraining && j % 3 == 1) {
      spec.deferrable = true;
      spec.remaining_s = work_h(random) * 3600;
      spec.deadline_s = spec.remaining_s + slack_h(random) * 3600;
      ++deferrable;
    }
    if (auto added = controller.add_job(std::move(spec), 0); !added) {
      state.SkipWithError(added.error().message().c_str());
      return;
    }
  }
  std::vector<joule::cluster::ForecastSlot> forecast;
  for (int hour = 0; hour < 24; ++hour) {
    forecast.push_back(
        {.length_s = 3600, .intensity_g_per_kwh = 300 + 150 * std::cos((hour + 8) * M_PI / 12)});
  }
  (void)controller.set_forecast(forecast, 0);
  (void)controller.set_cap(0.7 * gpus * 700);
  size_t waiting = 0;
  size_t at_risk = 0;
  for (auto _ : state) {
    auto decision = controller.replan(60);
    if (!decision) {
      state.SkipWithError(decision.error().message().c_str());
      return;
    }
    waiting = decision->deferred_waiting.size();
    at_risk = decision->at_risk.size();
    benchmark::DoNotOptimize(decision);
  }
  state.counters["jobs"] = static_cast<double>(demands.size());
  state.counters["deferrable"] = deferrable;
  state.counters["waiting"] = static_cast<double>(waiting);
  state.counters["at_risk"] = static_cast<double>(at_risk);
}
BENCHMARK(BM_ControllerReplan)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

}  // namespace
