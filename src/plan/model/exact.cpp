// SPDX-License-Identifier: Apache-2.0
// The exact frontier of a tiny pipeline by brute force, the yardstick for the planner's approximation.
#include "joule/plan/exact.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace joule::plan {

Result<Frontier<FrequencyPlan>> exact_frontier(const PipelineDag& dag, const Profile& profile,
                                               double p_blocking_w, size_t max_plans) {
  JOULE_TRY(check_inputs(dag, profile, p_blocking_w));
  const std::vector<uint32_t>& frequencies = profile.frequencies_mhz();
  const size_t options = frequencies.size();
  const size_t count = dag.computations.size();
  size_t plans = 1;
  for (size_t v = 0; v < count; ++v) {
    if (plans > max_plans / options) {
      return fail(ErrorCode::kInvalidArgument,
                  "{} frequencies for each of {} computations make {}^{} plans, more than max_plans = {}",
                  options, count, options, count, max_plans);
    }
    plans *= options;
  }

  // A private index, so that a hand-built DAG works too; the per-node option tables avoid frequency lookups.
  PipelineDag indexed = dag;
  JOULE_TRY(index_dag(indexed));
  std::vector<double> time_table(count * options);
  std::vector<double> energy_table(count * options);
  for (size_t v = 0; v < count; ++v) {
    const Computation& computation = dag.computations[v];
    if (computation.stage < 0 || computation.stage >= profile.stage_count()) {
      return fail(ErrorCode::kInvalidArgument, "{} is outside the profile's {} stages",
                  to_string(computation), profile.stage_count());
    }
    const auto& list = profile.options(computation.stage, computation.instruction);
    for (size_t k = 0; k < options; ++k) {
      time_table[v * options + k] = list[k].time_s;
      energy_table[v * options + k] = list[k].energy_j;
    }
  }

  // The running Pareto staircase: time → (energy, plan number); energies strictly fall as times rise.
  std::map<double, std::pair<double, size_t>> staircase;
  std::vector<size_t> digits(count, 0);
  std::vector<double> end_s(count, 0);
  const double stages = static_cast<double>(dag.stages);
  for (size_t number = 0; number < plans; ++number) {
    double time_s = 0;
    double busy_s = 0;
    double energy_j = 0;
    for (const int v : indexed.topological_order) {
      const auto node = static_cast<size_t>(v);
      double start_s = 0;
      for (int k = indexed.predecessor_offsets[node]; k < indexed.predecessor_offsets[node + 1]; ++k) {
        start_s = std::max(start_s, end_s[static_cast<size_t>(indexed.predecessors[static_cast<size_t>(k)])]);
      }
      const double duration_s = time_table[node * options + digits[node]];
      end_s[node] = start_s + duration_s;
      time_s = std::max(time_s, end_s[node]);
      busy_s += duration_s;
      energy_j += energy_table[node * options + digits[node]];
    }
    energy_j += p_blocking_w * (stages * time_s - busy_s);

    // Dominated by (or equal to) an earlier plan at most as slow: the one with the largest time ≤ ours has
    // the least energy among those.
    auto after = staircase.upper_bound(time_s);
    const bool dominated = after != staircase.begin() && std::prev(after)->second.first <= energy_j;
    if (!dominated) {
      auto it = staircase.lower_bound(time_s);
      while (it != staircase.end() && it->second.first >= energy_j) {
        it = staircase.erase(it);
      }
      staircase.emplace(time_s, std::pair{energy_j, number});
    }

    for (size_t v = 0; v < count; ++v) {  // next plan number
      if (++digits[v] < options) {
        break;
      }
      digits[v] = 0;
    }
  }

  std::vector<FrontierPoint<FrequencyPlan>> points;
  points.reserve(staircase.size());
  for (const auto& [time_s, entry] : staircase) {
    FrequencyPlan plan(count);
    size_t number = entry.second;
    for (size_t v = 0; v < count; ++v) {
      plan[v] = frequencies[number % options];
      number /= options;
    }
    points.push_back({std::move(plan), time_s, entry.first});
  }
  return Frontier<FrequencyPlan>::from_points(std::move(points));
}

FrontierGap compare_to_exact(const Frontier<FrequencyPlan>& exact, const Frontier<FrequencyPlan>& other,
                             double time_tolerance_s) {
  // The least energy among other's points up to each position (its points are sorted by time).
  std::vector<double> times_s;
  std::vector<double> best_energy_j;
  times_s.reserve(other.size());
  best_energy_j.reserve(other.size());
  for (const auto& point : other.points()) {
    times_s.push_back(point.time_s);
    best_energy_j.push_back(best_energy_j.empty() ? point.energy_j
                                                  : std::min(best_energy_j.back(), point.energy_j));
  }
  FrontierGap gap;
  double sum = 0;
  for (const auto& point : exact.points()) {
    const auto end = std::upper_bound(times_s.begin(), times_s.end(), point.time_s + time_tolerance_s);
    if (end == times_s.begin()) {
      ++gap.unmatched;
      continue;
    }
    const double energy_j = best_energy_j[static_cast<size_t>(end - times_s.begin()) - 1];
    const double relative = (energy_j - point.energy_j) / point.energy_j;
    if (gap.matched == 0 || relative > gap.max_gap) {
      gap.max_gap = relative;
      gap.worst_time_s = point.time_s;
    }
    sum += relative;
    ++gap.matched;
  }
  gap.mean_gap = gap.matched == 0 ? 0 : sum / static_cast<double>(gap.matched);
  return gap;
}

}  // namespace joule::plan
