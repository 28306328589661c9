// SPDX-License-Identifier: Apache-2.0
// CPU package and DRAM energy read at scrape time.
#include "joule/metrics/cpu_metrics.hpp"

#include <string>

#include "joule/core/log.hpp"

#include "metrics/samples.hpp"

namespace joule::metrics {

CpuMetrics::CpuMetrics(std::vector<device::Cpu*> cpus)
    : cpus_(std::move(cpus)), package_errors_(cpus_.size(), 0), dram_errors_(cpus_.size(), 0) {}

std::vector<prometheus::MetricFamily> CpuMetrics::Collect() const {
  std::lock_guard lock(mutex_);
  using prometheus::MetricType;
  auto package = make_family("joule_cpu_package_energy_joules_total",
                             "CPU package energy in joules (RAPL package domain; origin arbitrary)",
                             MetricType::Counter);
  auto dram = make_family("joule_cpu_dram_energy_joules_total",
                          "DRAM energy in joules (RAPL DRAM domain of the package; origin arbitrary)",
                          MetricType::Counter);
  auto errors =
      make_family("joule_cpu_read_errors_total",
                  "Failed CPU energy reads by reading (package, dram); a failed read leaves its sample "
                  "out of that scrape",
                  MetricType::Counter);
  constexpr double kJoulesPerMillijoule = 1e-3;
  for (size_t i = 0; i < cpus_.size(); ++i) {
    device::Cpu& cpu = *cpus_[i];
    const std::vector<prometheus::ClientMetric::Label> labels = {{"cpu", std::to_string(cpu.info().index)},
                                                                 {"name", cpu.info().name}};
    const auto count = [&](uint64_t& errors_so_far, const Error& error) {
      if (errors_so_far++ == 0) {
        log().warn("metrics: {}: {} (later failures are only counted in joule_cpu_read_errors_total)",
                   cpu.label(), error.message());
      }
    };
    if (auto energy = cpu.package_energy_mj()) {
      package.metric.push_back(counter_sample(labels, static_cast<double>(*energy) * kJoulesPerMillijoule));
    } else {
      count(package_errors_[i], energy.error());
    }
    if (cpu.info().has_dram) {
      if (auto energy = cpu.dram_energy_mj()) {
        dram.metric.push_back(counter_sample(labels, static_cast<double>(*energy) * kJoulesPerMillijoule));
      } else {
        count(dram_errors_[i], energy.error());
      }
    }
    for (const auto& [reading, count_so_far] :
         {std::pair{"package", package_errors_[i]}, {"dram", dram_errors_[i]}}) {
      auto error_labels = labels;
      error_labels.push_back({"reading", reading});
      errors.metric.push_back(counter_sample(std::move(error_labels), static_cast<double>(count_so_far)));
    }
  }
  std::vector<prometheus::MetricFamily> families;
  families.push_back(std::move(package));
  if (!dram.metric.empty()) {
    families.push_back(std::move(dram));
  }
  families.push_back(std::move(errors));
  return families;
}

}  // namespace joule::metrics
