// SPDX-License-Identifier: Apache-2.0
// joule/metrics/registry.hpp — the registry every `/metrics` endpoint renders: prometheus-cpp families for
// direct instrumentation plus collectors read at scrape time, in the text exposition format
// (docs/metrics.md). Server, daemon and GPU metrics all register here.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "joule/metrics/identity.hpp"

namespace joule::metrics {

/// The Content-Type of the text exposition format.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Everything one `/metrics` endpoint shows: a prometheus-cpp registry for direct instrumentation (counters
/// and histograms that code increments as things happen) plus collectors read at scrape time (GpuMetrics).
///
/// Thread-safe: metrics may be updated and collectors added while render() runs on other threads.
class MetricsRegistry {
 public:
  MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  /// @return the registry to build families in (prometheus::BuildCounter()…Register(registry())).
  prometheus::Registry& registry() { return *registry_; }

  /// Adds a collector read on every render(), before the registry's own families. Its family names must
  /// not repeat another collector's or the registry's.
  void add_collector(std::shared_ptr<const prometheus::Collectable> collector);

  /// Puts `labels` on every sample collect() returns — the collectors' and the registry's — instead of
  /// the process's default_identity_labels() (docs/operators.md). Pass checked labels
  /// (merge_identity_labels); an empty map turns identity labels off for this registry.
  void set_identity_labels(IdentityLabels labels);

  /// @return the labels collect() adds: those set here, else default_identity_labels() now.
  IdentityLabels identity_labels() const;

  /// @return the families of every collector, then the registry's, each sample with identity_labels().
  std::vector<prometheus::MetricFamily> collect() const;

  /// @return the text exposition (version 0.0.4) of collect(). Never throws: a collector that throws is
  /// left out and the failure logged.
  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const prometheus::Collectable>> collectors_;
  std::optional<IdentityLabels> identity_labels_;  // nullopt: the process default
};

}  // namespace joule::metrics
