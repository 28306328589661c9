// SPDX-License-Identifier: Apache-2.0
// How long a serving controller explored before it reached the knob it then held (sim::KnobRecorder).
#include <algorithm>
#include <cstdlib>

#include "joule/sim/serving.hpp"

namespace joule::sim {

void KnobRecorder::on_iteration(const optimize::IterationSample& sample) {
  records_.push_back({sample.start_s, sample.end_s, sample.knob.value, energy_j_});
  energy_j_ += sample.energy_j;
  policy_.on_iteration(sample);
}

void KnobRecorder::on_idle(double from_s, double to_s, double energy_j) {
  energy_j_ += energy_j;
  policy_.on_idle(from_s, to_s, energy_j);
}

ServingExploration KnobRecorder::exploration(std::vector<uint32_t> levels, double hold_s) const {
  ServingExploration result;
  if (records_.empty() || levels.empty()) {
    return result;
  }
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const auto level_of = [&](uint32_t knob) {
    size_t nearest = 0;
    for (size_t k = 1; k < levels.size(); ++k) {
      if (std::abs(static_cast<double>(levels[k]) - knob) <
          std::abs(static_cast<double>(levels[nearest]) - knob)) {
        nearest = k;
      }
    }
    return nearest;
  };
  std::vector<size_t> level(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    level[i] = level_of(records_[i].knob);
  }
  // Busy time per level over the hold [start of i, start of i + hold_s), slid along the iterations.
  std::vector<double> busy_s(levels.size(), 0.0);
  size_t end = 0;  // one past the last iteration in the hold
  const double first_s = records_.front().start_s;
  size_t done = records_.size() - 1;  // without a hold that matches, the whole run explored
  for (size_t i = 0; i < records_.size(); ++i) {
    while (end < records_.size() && records_[end].start_s < records_[i].start_s + hold_s) {
      busy_s[level[end]] += records_[end].end_s - records_[end].start_s;
      ++end;
    }
    double total_s = 0;
    for (const double s : busy_s) {
      total_s += s;
    }
    double below_s = 0;
    size_t median = 0;
    for (size_t k = 0; k < levels.size(); ++k) {
      below_s += busy_s[k];
      if (below_s >= total_s / 2) {
        median = k;
        break;
      }
    }
    if ((level[i] > median ? level[i] - median : median - level[i]) <= 1) {
      done = i;
      result.held = {knob().kind, levels[median]};
      break;
    }
    busy_s[level[i]] -= records_[i].end_s - records_[i].start_s;
  }
  result.seconds = records_[done].start_s - first_s;
  result.iterations = static_cast<int64_t>(done);
  result.energy_j = records_[done].energy_before_j;
  if (result.held.value == 0) {
    result.held = {knob().kind, records_.back().knob};
  }
  return result;
}

}  // namespace joule::sim
