// SPDX-License-Identifier: Apache-2.0
// What the cluster service's tests share: a start time, a training job with a knee-shaped frontier, and the
// sum of a decision's limits (the cap check).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "joule/cluster/controller.hpp"

namespace joule::test {

/// The replicas' clocks start here: 2027-01-15, ns since the Unix epoch.
inline constexpr int64_t kStartUnixNs = 1'800'000'000'000'000'000;

/// A training job on `gpus`: 1.6 s per step at 200 W down to 1.0 s at 500 W and above.
inline cluster::JobSpec training(const std::string& id, std::vector<cluster::GpuRef> gpus) {
  cluster::JobSpec spec;
  spec.id = id;
  spec.gpus = std::move(gpus);
  spec.frontier = {{200, 1.6}, {300, 1.25}, {400, 1.1}, {500, 1.0}, {700, 1.0}};
  return spec;
}

/// @return Σ of every GPU's limit in `decision`, W.
inline double sum_of_limits(const cluster::ClusterDecision& decision) {
  double sum = 0;
  for (const cluster::GpuLimit& limit : decision.limits) {
    sum += limit.power_limit_w;
  }
  return sum;
}

}  // namespace joule::test
