// SPDX-License-Identifier: Apache-2.0
// joule/metrics/cpu_metrics.hpp — Prometheus metrics of CPU packages: RAPL package and DRAM energy read at
// scrape time (docs/metrics.md). Registered beside GpuMetrics in a MetricsRegistry.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "joule/device/cpu.hpp"

namespace joule::metrics {

/// The CPU energy counters of a node, read when scraped, labelled `cpu` (package index) and `name`:
///
/// | metric | type | unit |
/// |---|---|---|
/// | `joule_cpu_package_energy_joules_total` | counter | J |
/// | `joule_cpu_dram_energy_joules_total` | counter | J (packages with a DRAM domain) |
/// | `joule_cpu_read_errors_total{…,reading}` | counter | reads (package, dram) |
///
/// Values are the devices' cumulative counters (mJ → J, wraparound corrected by the backend; origin
/// arbitrary). A failing read leaves that series out of the scrape and is counted. Thread-safe.
class CpuMetrics final : public prometheus::Collectable {
 public:
  /// @param cpus the CPU packages to read; they must outlive this object.
  explicit CpuMetrics(std::vector<device::Cpu*> cpus);

  /// @return the CPU families (read now).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<device::Cpu*> cpus_;
  mutable std::mutex mutex_;
  mutable std::vector<uint64_t> package_errors_;  // guarded by mutex_
  mutable std::vector<uint64_t> dram_errors_;     // guarded by mutex_
};

}  // namespace joule::metrics
