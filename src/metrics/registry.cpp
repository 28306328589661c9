// SPDX-License-Identifier: Apache-2.0
// The registry that renders every /metrics endpoint.
#include "joule/metrics/registry.hpp"

#include <prometheus/text_serializer.h>

#include "joule/core/log.hpp"

namespace joule::metrics {

MetricsRegistry::MetricsRegistry() : registry_(std::make_shared<prometheus::Registry>()) {}

void MetricsRegistry::add_collector(std::shared_ptr<const prometheus::Collectable> collector) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(collector));
}

void MetricsRegistry::set_identity_labels(IdentityLabels labels) {
  std::lock_guard lock(mutex_);
  identity_labels_ = std::move(labels);
}

IdentityLabels MetricsRegistry::identity_labels() const {
  {
    std::lock_guard lock(mutex_);
    if (identity_labels_) {
      return *identity_labels_;
    }
  }
  return default_identity_labels();
}

std::vector<prometheus::MetricFamily> MetricsRegistry::collect() const {
  std::vector<std::shared_ptr<const prometheus::Collectable>> collectors;
  {
    std::lock_guard lock(mutex_);
    collectors = collectors_;
  }
  const IdentityLabels identity = identity_labels();
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collector : collectors) {
    try {
      auto collected = collector->Collect();
      families.insert(families.end(), std::make_move_iterator(collected.begin()),
                      std::make_move_iterator(collected.end()));
    } catch (const std::exception& error) {
      log().error("metrics: a collector failed and is left out of this scrape: {}", error.what());
    }
  }
  auto own = registry_->Collect();
  families.insert(families.end(), std::make_move_iterator(own.begin()), std::make_move_iterator(own.end()));
  // Here, once, rather than in each collector: every exporter's samples carry the workload's identity.
  apply_identity_labels(families, identity);
  return families;
}

std::string MetricsRegistry::render() const {
  try {
    return prometheus::TextSerializer().Serialize(collect());
  } catch (const std::exception& error) {
    log().error("metrics: rendering failed: {}", error.what());
    return std::string();
  }
}

}  // namespace joule::metrics
