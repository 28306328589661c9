// SPDX-License-Identifier: Apache-2.0
// The cluster power allocator (docs/cluster.md): one re-plan of a cluster of N GPUs in jobs of 1–64 GPUs
// (1,000 GPUs: about 60 jobs), each with a 21-point frontier (100–700 W every 30 W, knees and slopes drawn
// at random; knees from 400 to 700 W, so that the cap binds), under a cap of 70% of the GPUs' summed maximum.
// Budget (issue 28): a re-plan of 1,000 GPUs within 100 ms.
#include <cmath>
#include <random>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "joule/cluster/allocator.hpp"

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

}  // namespace
