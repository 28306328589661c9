// SPDX-License-Identifier: Apache-2.0
// The thermal wait of a pipeline stage's warm-up: a thread-safe SteadyStateDetector that owns its clock.
#include "joule/plan/warmup_detector.hpp"

#include <utility>

namespace joule::plan {

WarmupDetector::WarmupDetector(std::shared_ptr<const void> owner, std::vector<device::Gpu*> gpus,
                               std::shared_ptr<Clock> clock, const measure::SteadyStateOptions& options)
    : owner_(std::move(owner)), clock_(std::move(clock)), detector_(std::move(gpus), *clock_, options) {}

void WarmupDetector::sample() {
  std::lock_guard lock(mutex_);
  detector_.sample();
}

bool WarmupDetector::ready() const {
  std::lock_guard lock(mutex_);
  return detector_.ready();
}

bool WarmupDetector::timed_out() const {
  std::lock_guard lock(mutex_);
  return detector_.timed_out();
}

void WarmupDetector::restart() {
  std::lock_guard lock(mutex_);
  detector_.restart();
}

double WarmupDetector::waited_s() const {
  std::lock_guard lock(mutex_);
  return detector_.waited_s();
}

std::string WarmupDetector::describe() const {
  std::lock_guard lock(mutex_);
  return detector_.describe();
}

measure::SteadyStateMode WarmupDetector::mode() const {
  std::lock_guard lock(mutex_);
  return detector_.mode();
}

}  // namespace joule::plan
