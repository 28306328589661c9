// SPDX-License-Identifier: Apache-2.0
// Building blocks of the collectors read at scrape time (GpuMetrics, CpuMetrics): a family and its samples.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

namespace joule::metrics {

inline prometheus::MetricFamily make_family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily out;
  out.name = std::move(name);
  out.help = std::move(help);
  out.type = type;
  return out;
}

inline prometheus::ClientMetric gauge_sample(std::vector<prometheus::ClientMetric::Label> labels,
                                             double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  return metric;
}

inline prometheus::ClientMetric counter_sample(std::vector<prometheus::ClientMetric::Label> labels,
                                               double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  return metric;
}

}  // namespace joule::metrics
