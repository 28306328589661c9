// SPDX-License-Identifier: Apache-2.0
// CPU cost of a PowerSampler polling at a given rate. Budget (DESIGN.md): at 100 Hz, < 1% of a core.
//
// Usage: sampler_overhead [SPEC] [HZ] [SECONDS]   (default: 8xa40 100 5)
// Prints the process CPU time (user + system) spent while the sampler runs, as a share of one core.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <sys/resource.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/measure/power_sampler.hpp"

namespace {
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string spec_text = argc > 1 ? argv[1] : "8xa40";
  const double hz = argc > 2 ? std::atof(argv[2]) : 100.0;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 5.0;
  auto clock =
      std::shared_ptr<joule::Clock>(std::shared_ptr<joule::Clock>{}, &joule::SteadyClock::instance());
  auto spec = joule::device::sim::parse_spec(spec_text);
  if (!spec) {
    std::fprintf(stderr, "%s\n", spec.error().message().c_str());
    return 2;
  }
  auto gpus = std::move(*joule::device::sim::open_sim_gpus(*spec, clock));
  std::vector<joule::device::Gpu*> raw;
  for (auto& gpu : gpus) {
    raw.push_back(gpu.get());
  }
  joule::measure::PowerSampler sampler(raw, *clock, joule::from_seconds(1.0 / hz));
  const double cpu_before = cpu_seconds();
  const auto wall_before = std::chrono::steady_clock::now();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  sampler.stop();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  const double cpu = cpu_seconds() - cpu_before;
  std::printf("sampler: %zu GPU(s) at %.0f Hz for %.2f s: %llu reads, CPU %.4f s = %.3f%% of one core\n",
              raw.size(), hz, wall, static_cast<unsigned long long>(sampler.reads()), cpu,
              100.0 * cpu / wall);
  return 0;
}
