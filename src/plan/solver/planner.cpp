// SPDX-License-Identifier: Apache-2.0
// The pipeline frequency planner. Like Perseus's reference (lowtime), it walks the time–cost tradeoff with
// Phillips–Dessouky minimum cuts, one time unit at a time, from every computation at its slowest useful
// clock to the shortest iteration. Where it differs, and why:
// - Each computation type's cost over integer durations is the lower convex hull of its measured options
//   (exact at the options), not a fitted exponential: no fitting error, no fitting failures.
// - A cut is recomputed only when the critical subnetwork or its capacities changed; otherwise the previous
//   minimum cut is still minimal and is applied again. Most steps need no max flow.
// - A cut starts from the previous cut's maximum flow, which usually still is one: then finding the cut is
//   one search. The cut taken is the one with the smallest source side, the same for every maximum flow,
//   so the walk does not depend on where the flow started or on the algorithm.
// - Every plan is evaluated on the profile itself, then improved by slack reclamation: a computation off the
//   critical path moves to the option with the least effective energy that still fits in its slack. The
//   frontier is the Pareto set of all evaluated plans, kept as they come (plans are as long as the
//   pipeline, and most are dominated).
#include "joule/plan/planner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/core/validate.hpp"

#include "plan/solver/min_cut.hpp"

namespace joule::plan {

namespace {

using detail::CutArc;
using detail::CutResult;
using detail::kInfiniteCapacity;

// Costs go to the max flow as integers in micro-joules (per time unit of duration change).
constexpr double kCostQuantumJ = 1e-6;

// Per computation, the index of its option in the profile's lists: the i-th option of every list runs at
// frequencies_mhz()[i]. Plans are handled as indices so that no evaluation searches an option list.
using OptionPlan = std::vector<uint16_t>;

// The cost model of one computation type (stage, instruction) over integer durations.
struct CostModel {
  std::vector<ProfileOption> options;  // the Pareto options, slowest first
  std::vector<uint16_t> clock_index;   // per option: its index in the profile's list
  std::vector<int> quantized;          // per option: floor(time / unit)
  int min_units = 0;
  int max_units = 0;
  std::vector<double> cost_j;  // convex piecewise-linear effective energy at min_units … max_units
  // Per duration, the option that runs in it: the slowest with quantized time ≤ duration.
  std::vector<uint16_t> option_at_units;

  double cost(int units) const { return cost_j[static_cast<size_t>(units - min_units)]; }
  // Extra cost of shortening from `units` by one; cost saved by lengthening by one.
  double shorten_cost(int units) const { return cost(units - 1) - cost(units); }
  double lengthen_saving(int units) const { return cost(units) - cost(units + 1); }
  uint16_t clock_index_at(int units) const {
    return clock_index[option_at_units[static_cast<size_t>(units - min_units)]];
  }
};

double effective_energy_j(const ProfileOption& option, double p_blocking_w) {
  return option.energy_j - p_blocking_w * option.time_s;
}

CostModel build_cost_model(const std::vector<ProfileOption>& all_options, double unit_s,
                           double p_blocking_w) {
  // Pareto options in (time, effective energy): a slower option is worth considering only if it saves
  // effective energy.
  std::vector<ProfileOption> sorted = all_options;
  std::sort(sorted.begin(), sorted.end(), [&](const ProfileOption& a, const ProfileOption& b) {
    if (a.time_s != b.time_s) {
      return a.time_s < b.time_s;
    }
    return effective_energy_j(a, p_blocking_w) < effective_energy_j(b, p_blocking_w);
  });
  std::vector<ProfileOption> pareto;  // fastest first, effective energy strictly decreasing
  for (const ProfileOption& option : sorted) {
    if (pareto.empty() ||
        effective_energy_j(option, p_blocking_w) < effective_energy_j(pareto.back(), p_blocking_w)) {
      pareto.push_back(option);
    }
  }
  // Durations round down, as the reference does; of several options in one unit, keep the fastest, whose
  // real time is closest to the unit's start, so that modelled and real times stay close.
  CostModel model;
  for (size_t i = 0; i < pareto.size(); ++i) {
    const int units = static_cast<int>(std::floor(pareto[i].time_s / unit_s));
    if (!model.quantized.empty() && model.quantized.back() == units) {
      continue;
    }
    model.quantized.push_back(units);
    model.options.push_back(pareto[i]);
  }
  // Slowest first, as durations are lowered from the slowest.
  std::reverse(model.options.begin(), model.options.end());
  std::reverse(model.quantized.begin(), model.quantized.end());
  model.max_units = model.quantized.front();
  model.min_units = model.quantized.back();

  // The lower convex hull of (units, effective energy), walked from the fastest option.
  std::vector<size_t> hull;
  for (size_t k = model.options.size(); k-- > 0;) {
    const auto point_x = static_cast<double>(model.quantized[k]);
    const double point_y = effective_energy_j(model.options[k], p_blocking_w);
    while (hull.size() >= 2) {
      const size_t a = hull[hull.size() - 2];
      const size_t b = hull.back();
      const auto ax = static_cast<double>(model.quantized[a]);
      const double ay = effective_energy_j(model.options[a], p_blocking_w);
      const auto bx = static_cast<double>(model.quantized[b]);
      const double by = effective_energy_j(model.options[b], p_blocking_w);
      // Drop b if it lies on or above the segment a → point.
      if ((by - ay) * (point_x - ax) >= (point_y - ay) * (bx - ax)) {
        hull.pop_back();
      } else {
        break;
      }
    }
    hull.push_back(k);
  }
  const auto span = static_cast<size_t>(model.max_units - model.min_units) + 1;
  model.cost_j.assign(span, 0);
  for (size_t h = 0; h + 1 < hull.size(); ++h) {
    const size_t a = hull[h];
    const size_t b = hull[h + 1];
    const int ax = model.quantized[a];
    const int bx = model.quantized[b];
    const double ay = effective_energy_j(model.options[a], p_blocking_w);
    const double by = effective_energy_j(model.options[b], p_blocking_w);
    for (int units = ax; units <= bx; ++units) {
      const double fraction = bx == ax ? 0.0 : static_cast<double>(units - ax) / static_cast<double>(bx - ax);
      model.cost_j[static_cast<size_t>(units - model.min_units)] = ay + (by - ay) * fraction;
    }
  }
  if (hull.size() == 1) {
    model.cost_j[0] = effective_energy_j(model.options[hull[0]], p_blocking_w);
  }
  model.option_at_units.assign(span, 0);
  for (int units = model.min_units; units <= model.max_units; ++units) {
    // Options are slowest first with decreasing quantized time: the first with quantized ≤ units.
    size_t chosen = model.options.size() - 1;
    for (size_t k = 0; k < model.options.size(); ++k) {
      if (model.quantized[k] <= units) {
        chosen = k;
        break;
      }
    }
    model.option_at_units[static_cast<size_t>(units - model.min_units)] = static_cast<uint16_t>(chosen);
  }
  for (const ProfileOption& option : model.options) {
    const auto same_clock = std::find_if(all_options.begin(), all_options.end(), [&](const ProfileOption& o) {
      return o.frequency_mhz == option.frequency_mhz;
    });
    model.clock_index.push_back(static_cast<uint16_t>(same_clock - all_options.begin()));
  }
  return model;
}

int64_t to_capacity(double cost_j) {
  return std::max<int64_t>(0, static_cast<int64_t>(std::floor(cost_j / kCostQuantumJ)));
}

// The planner's working state: the DAG with a source and a sink around it, each computation's cost model
// and current duration in units.
class Walk {
 public:
  Walk(const PipelineDag& dag, const Profile& profile, const PlannerOptions& options)
      : dag_(dag), node_count_(static_cast<int>(dag.computations.size())) {
    models_.reserve(static_cast<size_t>(dag.stages) * 2);
    for (int stage = 0; stage < dag.stages; ++stage) {
      for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
        models_.push_back(
            build_cost_model(profile.options(stage, instruction), options.unit_time_s, options.p_blocking_w));
      }
    }
    model_of_.resize(static_cast<size_t>(node_count_));
    for (int v = 0; v < node_count_; ++v) {
      const Computation& c = dag.computations[static_cast<size_t>(v)];
      model_of_[static_cast<size_t>(v)] =
          static_cast<size_t>(c.stage) * 2 + (c.instruction == Instruction::kForward ? 0 : 1);
    }
    // Successors in compressed rows (every computation's side by side, in the edges' order): every step
    // walks every edge several times.
    const auto n = static_cast<size_t>(node_count_);
    successor_begin_.assign(n + 1, 0);
    has_predecessor_.assign(n, 0);
    for (const auto& [from, to] : dag.edges) {
      ++successor_begin_[static_cast<size_t>(from) + 1];
      has_predecessor_[static_cast<size_t>(to)] = 1;
    }
    for (size_t v = 0; v < n; ++v) {
      successor_begin_[v + 1] += successor_begin_[v];
    }
    successors_.resize(dag.edges.size());
    std::vector<size_t> placed(successor_begin_.begin(), successor_begin_.end() - 1);
    for (const auto& [from, to] : dag.edges) {
      successors_[placed[static_cast<size_t>(from)]++] = to;
    }
    // Topological order (Kahn).
    std::vector<int> indegree(static_cast<size_t>(node_count_), 0);
    for (const auto& [from, to] : dag.edges) {
      ++indegree[static_cast<size_t>(to)];
    }
    for (int v = 0; v < node_count_; ++v) {
      if (indegree[static_cast<size_t>(v)] == 0) {
        order_.push_back(v);
      }
    }
    for (size_t i = 0; i < order_.size(); ++i) {
      for (const int next : successors(order_[i])) {
        if (--indegree[static_cast<size_t>(next)] == 0) {
          order_.push_back(next);
        }
      }
    }
    units_.resize(static_cast<size_t>(node_count_));
    // Flow memory: computation arcs, source arcs and sink arcs by computation, then edges by position.
    edge_key_.resize(static_cast<size_t>(node_count_));
    size_t key = 3 * static_cast<size_t>(node_count_);
    for (int v = 0; v < node_count_; ++v) {
      edge_key_[static_cast<size_t>(v)] = key;
      key += successors(v).size();
    }
    warm_flow_.assign(key, 0);
  }

  const CostModel& model(int v) const { return models_[model_of_[static_cast<size_t>(v)]]; }
  int& units(int v) { return units_[static_cast<size_t>(v)]; }
  int node_count() const { return node_count_; }
  const std::vector<int>& order() const { return order_; }
  std::span<const int> successors(int v) const {
    return {successors_.data() + successor_begin_[static_cast<size_t>(v)],
            successors_.data() + successor_begin_[static_cast<size_t>(v) + 1]};
  }
  bool has_predecessor(int v) const { return has_predecessor_[static_cast<size_t>(v)] != 0; }

  void set_all_slowest() {
    for (int v = 0; v < node_count_; ++v) {
      units(v) = model(v).max_units;
    }
  }
  void set_all_fastest() {
    for (int v = 0; v < node_count_; ++v) {
      units(v) = model(v).min_units;
    }
  }

  // Critical path method on integer durations. Returns the project length.
  int critical_path() {
    earliest_start_.assign(static_cast<size_t>(node_count_), 0);
    latest_finish_.assign(static_cast<size_t>(node_count_), 0);
    int length = 0;
    for (const int v : order_) {
      const int finish = earliest_start_[static_cast<size_t>(v)] + units(v);
      length = std::max(length, finish);
      for (const int next : successors(v)) {
        earliest_start_[static_cast<size_t>(next)] =
            std::max(earliest_start_[static_cast<size_t>(next)], finish);
      }
    }
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      const int v = *it;
      int finish = length;
      for (const int next : successors(v)) {
        finish = std::min(finish, latest_finish_[static_cast<size_t>(next)] - units(next));
      }
      latest_finish_[static_cast<size_t>(v)] = finish;
    }
    return length;
  }

  bool critical(int v) const {
    return earliest_start_[static_cast<size_t>(v)] + units_[static_cast<size_t>(v)] ==
           latest_finish_[static_cast<size_t>(v)];
  }
  bool critical_edge(int from, int to) const {
    return critical(from) && critical(to) &&
           earliest_start_[static_cast<size_t>(from)] + units_[static_cast<size_t>(from)] ==
               earliest_start_[static_cast<size_t>(to)];
  }
  int earliest_start(int v) const { return earliest_start_[static_cast<size_t>(v)]; }

  // The cut network on the critical subgraph in activity-on-arc form: computation v is the arc 2v → 2v+1,
  // an edge u → v the dummy arc 2u+1 → 2v; the source is node 2N (feeding every computation without
  // predecessors), the sink 2N+1.
  void critical_network(std::vector<CutArc>& arcs) {
    arcs.clear();
    arc_keys_.clear();
    arcs_of_computation_.assign(static_cast<size_t>(node_count_), -1);
    const auto n = static_cast<size_t>(node_count_);
    const int source = 2 * node_count_;
    const int sink = source + 1;
    for (int v = 0; v < node_count_; ++v) {
      if (!critical(v)) {
        continue;
      }
      const CostModel& m = model(v);
      const int d = units(v);
      CutArc arc{2 * v, 2 * v + 1, 0, kInfiniteCapacity};
      if (m.min_units != m.max_units) {
        if (d > m.min_units) {
          arc.upper = to_capacity(m.shorten_cost(d));
        }
        if (d < m.max_units) {
          arc.lower = to_capacity(m.lengthen_saving(d));
        }
        // Floors of two costs that convexity orders can only keep the order.
        arc.lower = std::min(arc.lower, arc.upper);
      }
      arcs_of_computation_[static_cast<size_t>(v)] = static_cast<int>(arcs.size());
      const auto index = static_cast<size_t>(v);
      add_arc(arcs, arc, index);
      if (!has_predecessor(v) && earliest_start(v) == 0) {
        add_arc(arcs, {source, 2 * v, 0, kInfiniteCapacity}, n + index);
      }
      if (successors(v).empty()) {
        add_arc(arcs, {2 * v + 1, sink, 0, kInfiniteCapacity}, 2 * n + index);
      }
      const auto& next_of = successors(v);
      for (size_t k = 0; k < next_of.size(); ++k) {
        if (critical_edge(v, next_of[k])) {
          add_arc(arcs, {2 * v + 1, 2 * next_of[k], 0, kInfiniteCapacity}, edge_key_[index] + k);
        }
      }
    }
  }

  // Keeps the maximum flow of the cut just computed on `arcs` (critical_network()'s last result), so that
  // the next cut starts from it: consecutive critical networks differ in a few arcs and capacities.
  void remember_flow(const std::vector<int64_t>& flow) {
    std::fill(warm_flow_.begin(), warm_flow_.end(), 0);
    for (size_t i = 0; i < flow.size() && i < arc_keys_.size(); ++i) {
      warm_flow_[arc_keys_[i]] = flow[i];
    }
  }

  int arc_of(int v) const { return arcs_of_computation_[static_cast<size_t>(v)]; }

  void plan(OptionPlan& plan) const {
    plan.resize(static_cast<size_t>(node_count_));
    for (int v = 0; v < node_count_; ++v) {
      plan[static_cast<size_t>(v)] = model(v).clock_index_at(units_[static_cast<size_t>(v)]);
    }
  }

 private:
  void add_arc(std::vector<CutArc>& arcs, CutArc arc, size_t key) {
    arc.flow = warm_flow_[key];
    arcs.push_back(arc);
    arc_keys_.push_back(key);
  }

  const PipelineDag& dag_;
  int node_count_;
  std::vector<CostModel> models_;
  std::vector<size_t> model_of_;
  std::vector<size_t> successor_begin_;  // per computation, then the end
  std::vector<int> successors_;
  std::vector<char> has_predecessor_;
  std::vector<int> order_;
  std::vector<int> units_;
  std::vector<int> earliest_start_;
  std::vector<int> latest_finish_;
  std::vector<int> arcs_of_computation_;
  std::vector<size_t> edge_key_;    // per computation: the flow key of its first outgoing edge
  std::vector<int64_t> warm_flow_;  // per arc key: its flow in the last cut computed (0 if not in it)
  std::vector<size_t> arc_keys_;    // per arc of the last critical_network(): its flow key
};

// Real-time evaluation and slack reclamation on the profile itself.
class Evaluator {
 public:
  Evaluator(const PipelineDag& dag, const Profile& profile, const Walk& walk, double p_blocking_w)
      : stages_(dag.stages),
        walk_(walk),
        p_blocking_w_(p_blocking_w),
        clocks_(profile.frequencies_mhz().size()) {
    const size_t n = dag.computations.size();
    const size_t types = 2 * static_cast<size_t>(dag.stages);
    option_time_s_.resize(types * clocks_);
    option_energy_j_.resize(types * clocks_);
    for (int stage = 0; stage < dag.stages; ++stage) {
      for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
        const size_t type = type_of(stage, instruction);
        const auto& options = profile.options(stage, instruction);
        for (size_t i = 0; i < clocks_; ++i) {
          option_time_s_[type * clocks_ + i] = options[i].time_s;
          option_energy_j_[type * clocks_ + i] = options[i].energy_j;
        }
      }
    }
    if (clocks_ <= kMostTabledClocks) {
      build_reclaim_tables(types);
    }
    first_option_.resize(n);
    for (size_t v = 0; v < n; ++v) {
      const Computation& c = dag.computations[v];
      first_option_[v] = static_cast<uint32_t>(type_of(c.stage, c.instruction) * clocks_);
    }
    // Successors as one array (compressed rows): the passes below run over every edge of every plan.
    successor_begin_.reserve(n + 1);
    for (size_t v = 0; v < n; ++v) {
      successor_begin_.push_back(static_cast<uint32_t>(successors_.size()));
      for (const int next : walk.successors(static_cast<int>(v))) {
        successors_.push_back(static_cast<uint32_t>(next));
      }
    }
    successor_begin_.push_back(static_cast<uint32_t>(successors_.size()));
    time_s_.resize(n);
    start_s_.resize(n);
    latest_finish_s_.resize(n);
  }

  PlanCost cost(const OptionPlan& plan) {
    double sum_energy = 0;
    double sum_time = 0;
    for (size_t v = 0; v < plan.size(); ++v) {
      const size_t option = first_option_[v] + plan[v];
      time_s_[v] = option_time_s_[option];
      sum_energy += option_energy_j_[option];
      sum_time += option_time_s_[option];
    }
    length_s_ = forward_pass();
    return {length_s_, sum_energy + p_blocking_w_ * (static_cast<double>(stages_) * length_s_ - sum_time)};
  }

  // Moves computations off the critical path to the option with the least effective energy that fits in
  // their slack, latest first, without lengthening the iteration. Call right after cost(plan), whose
  // times and starts it reuses. @return true if anything changed.
  bool reclaim_slack(OptionPlan& plan) {
    bool changed = false;
    const auto& order = walk_.order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const auto v = static_cast<size_t>(*it);
      double finish_by = length_s_;
      for (uint32_t e = successor_begin_[v]; e < successor_begin_[v + 1]; ++e) {
        const uint32_t next = successors_[e];
        finish_by = std::min(finish_by, latest_finish_s_[next] - time_s_[next]);
      }
      latest_finish_s_[v] = finish_by;
      const uint16_t best = least_energy_within(v, plan[v], finish_by - start_s_[v]);
      if (best != plan[v]) {
        plan[v] = best;
        time_s_[v] = option_time_s_[first_option_[v] + best];
        changed = true;
      }
    }
    return changed;
  }

 private:
  // Reclamation tables take (clocks + 1) × clocks entries per computation type: beyond this many clocks the
  // options are scanned instead.
  static constexpr size_t kMostTabledClocks = 128;
  static constexpr double kTolerance = 1e-12;

  static size_t type_of(int stage, Instruction instruction) {
    return static_cast<size_t>(stage) * 2 + (instruction == Instruction::kForward ? 0 : 1);
  }

  double effective_j(size_t option) const {
    return option_energy_j_[option] - p_blocking_w_ * option_time_s_[option];
  }

  // The option a computation at `current` moves to with `room_s` of time: of the options that fit, scanned
  // in profile order, each one with less effective energy (by more than the tolerance) than the best so far.
  uint16_t scan_options(size_t first, uint16_t current, double fits_s) const {
    size_t best = first + current;
    for (size_t option = first; option < first + clocks_; ++option) {
      if (option_time_s_[option] <= fits_s && effective_j(option) < effective_j(best) - kTolerance) {
        best = option;
      }
    }
    return static_cast<uint16_t>(best - first);
  }

  // scan_options() depends on `room_s` only through how many options fit: per type, the options' times
  // sorted, and for every current option and every count of fitting options, the scan's answer.
  void build_reclaim_tables(size_t types) {
    sorted_time_s_.resize(types * clocks_);
    reclaim_.resize(types * clocks_ * (clocks_ + 1));
    for (size_t type = 0; type < types; ++type) {
      const size_t first = type * clocks_;
      double* sorted = &sorted_time_s_[first];
      std::copy_n(&option_time_s_[first], clocks_, sorted);
      std::sort(sorted, sorted + clocks_);
      for (size_t current = 0; current < clocks_; ++current) {
        for (size_t fitting = 0; fitting <= clocks_; ++fitting) {
          // The fitting options are those no slower than the fitting-th fastest (ties fit together).
          const double fits_s = fitting == 0 ? -std::numeric_limits<double>::infinity() : sorted[fitting - 1];
          reclaim_[(first + current) * (clocks_ + 1) + fitting] =
              scan_options(first, static_cast<uint16_t>(current), fits_s);
        }
      }
    }
  }

  uint16_t least_energy_within(size_t v, uint16_t current, double room_s) const {
    const size_t first = first_option_[v];
    const double fits_s = room_s + kTolerance;
    if (reclaim_.empty()) {
      return scan_options(first, current, fits_s);
    }
    const double* sorted = &sorted_time_s_[first];
    const auto fitting = static_cast<size_t>(std::upper_bound(sorted, sorted + clocks_, fits_s) - sorted);
    return reclaim_[(first + current) * (clocks_ + 1) + fitting];
  }

  double forward_pass() {
    std::fill(start_s_.begin(), start_s_.end(), 0.0);
    double length = 0;
    for (const int v : walk_.order()) {
      const auto index = static_cast<size_t>(v);
      const double finish = start_s_[index] + time_s_[index];
      length = std::max(length, finish);
      for (uint32_t e = successor_begin_[index]; e < successor_begin_[index + 1]; ++e) {
        start_s_[successors_[e]] = std::max(start_s_[successors_[e]], finish);
      }
    }
    return length;
  }

  int stages_;
  const Walk& walk_;
  double p_blocking_w_;
  size_t clocks_;
  std::vector<double> option_time_s_;    // per computation type, per clock index
  std::vector<double> option_energy_j_;  // likewise
  std::vector<double> sorted_time_s_;    // per computation type, its options' times ascending
  std::vector<uint16_t> reclaim_;        // per type, current option and count of fitting options
  std::vector<uint32_t> first_option_;   // per computation: its type's first entry in the option arrays
  std::vector<uint32_t> successor_begin_;
  std::vector<uint32_t> successors_;
  std::vector<double> time_s_;
  std::vector<double> start_s_;
  std::vector<double> latest_finish_s_;
  double length_s_ = 0;  // of the plan cost() evaluated last
};

// The Pareto set of the plans evaluated so far, kept as they come so that the dominated ones (most of them,
// and every plan is as long as the pipeline) are dropped at once. Slowest first, energy increasing. It
// keeps what Frontier::from_points() would keep of all of them: of equal points, the first.
class ParetoSet {
 public:
  void add(const OptionPlan& plan, const PlanCost& cost) {
    // The first entry no slower than the new point has the least energy of all those no slower.
    const auto no_slower = std::partition_point(entries_.begin(), entries_.end(),
                                                [&](const Entry& e) { return e.time_s > cost.time_s; });
    if (no_slower != entries_.end() && no_slower->energy_j <= cost.energy_j) {
      return;
    }
    // It dominates the entries no faster that use no less energy: a run ending where time gets shorter.
    const auto dominated_begin = std::partition_point(
        entries_.begin(), no_slower, [&](const Entry& e) { return e.energy_j < cost.energy_j; });
    const auto dominated_end = std::partition_point(no_slower, entries_.end(),
                                                    [&](const Entry& e) { return e.time_s >= cost.time_s; });
    const auto at = entries_.erase(dominated_begin, dominated_end);
    entries_.insert(at, Entry{cost.time_s, cost.energy_j, plan});
  }

  // @return the frontier, with every plan in MHz.
  Frontier<FrequencyPlan> frontier(const std::vector<uint32_t>& frequencies_mhz) const {
    std::vector<FrontierPoint<FrequencyPlan>> points;
    points.reserve(entries_.size());
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      FrequencyPlan plan(it->plan.size());
      for (size_t v = 0; v < plan.size(); ++v) {
        plan[v] = frequencies_mhz[it->plan[v]];
      }
      points.push_back({std::move(plan), it->time_s, it->energy_j});
    }
    return Frontier<FrequencyPlan>::from_points(std::move(points));
  }

 private:
  struct Entry {
    double time_s;
    double energy_j;
    OptionPlan plan;
  };
  std::vector<Entry> entries_;
};

}  // namespace

Result<void> validate(const PlannerOptions& options) {
  if (!(options.unit_time_s > 0) || !std::isfinite(options.unit_time_s)) {
    return fail(ErrorCode::kInvalidArgument, "the unit time must be a positive number of seconds (got {})",
                options.unit_time_s);
  }
  if (!(options.p_blocking_w >= 0) || !std::isfinite(options.p_blocking_w)) {
    return fail(ErrorCode::kInvalidArgument, "the blocking power must be finite and non-negative, got {} W",
                options.p_blocking_w);
  }
  // The rule `joule plan --p-blocking-w` applies too: 75000 is 75 W in mW, not a GPU.
  JOULE_TRY(check_number(options.p_blocking_w, quantity::power_w(), "p_blocking_w"));
  if (!(options.max_planning_units >= 1 && options.max_planning_units <= kMostPlanningUnits)) {
    return fail(ErrorCode::kInvalidArgument, "max_planning_units must be from 1 to {:.0f}, got {}",
                kMostPlanningUnits, options.max_planning_units);
  }
  return {};
}

Result<PlanningUnits> planning_units(const PipelineDag& dag, const Profile& profile, double unit_time_s) {
  if (!(unit_time_s > 0) || !std::isfinite(unit_time_s)) {
    return fail(ErrorCode::kInvalidArgument, "the unit time must be a positive number of seconds (got {})",
                unit_time_s);
  }
  JOULE_TRY(check_inputs(dag, profile, 0));
  PlanningUnits result;
  // Every computation at the slowest row of its type, whatever that row's clock: the walk's start (the
  // slowest useful rows) can only be faster.
  std::vector<std::array<uint32_t, 2>> slowest_mhz(static_cast<size_t>(dag.stages));
  bool first = true;
  for (int stage = 0; stage < dag.stages; ++stage) {
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      const auto& options = profile.options(stage, instruction);
      const auto slowest = std::max_element(
          options.begin(), options.end(),
          [](const ProfileOption& a, const ProfileOption& b) { return a.time_s < b.time_s; });
      slowest_mhz[static_cast<size_t>(stage)][instruction == Instruction::kForward ? 0 : 1] =
          slowest->frequency_mhz;
      if (first || slowest->time_s > result.slowest_time_s) {
        first = false;
        result.slowest_stage = stage;
        result.slowest_instruction = instruction;
        result.slowest_frequency_mhz = slowest->frequency_mhz;
        result.slowest_time_s = slowest->time_s;
      }
    }
  }
  FrequencyPlan plan(dag.computations.size());
  for (size_t v = 0; v < plan.size(); ++v) {
    const Computation& c = dag.computations[v];
    plan[v] = slowest_mhz[static_cast<size_t>(c.stage)][c.instruction == Instruction::kForward ? 0 : 1];
  }
  const auto cost = JOULE_TRY(evaluate(dag, profile, plan, 0));
  result.slowest_iteration_s = cost.time_s;
  result.units = cost.time_s / unit_time_s;
  return result;
}

Result<PlanningUnits> check_planning_units(const PipelineDag& dag, const Profile& profile,
                                           const PlannerOptions& options) {
  JOULE_TRY(validate(options));
  auto units = planning_units(dag, profile, options.unit_time_s);
  if (!units) {
    return units;
  }
  // Not `units > limit`: an iteration that overflows to infinity (or NaN) must be refused too.
  if (!(units->units <= options.max_planning_units)) {
    return fail(ErrorCode::kInvalidArgument,
                "the planner would walk {:.3g} time units of {:g} s, more than its limit of {:.0f}: at its "
                "slowest rows one iteration takes {:.6g} s, and the slowest row is stage {} {} at {} MHz "
                "({:.6g} s); check that row of the profile, use a larger unit_time_s, or raise "
                "max_planning_units",
                units->units, options.unit_time_s, options.max_planning_units, units->slowest_iteration_s,
                units->slowest_stage, to_string(units->slowest_instruction), units->slowest_frequency_mhz,
                units->slowest_time_s);
  }
  return units;
}

Result<PlannerResult> plan_frontier(const PipelineDag& dag, const Profile& profile,
                                    const PlannerOptions& options) {
  JOULE_TRY(validate(options));
  JOULE_TRY(check_inputs(dag, profile, options.p_blocking_w));
  if (dag.computations.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the pipeline has no computations");
  }
  // Before any table is sized or step taken: both grow with the units of the slowest rows.
  JOULE_TRY(check_planning_units(dag, profile, options));
  Walk walk(dag, profile, options);
  Evaluator evaluator(dag, profile, walk, options.p_blocking_w);
  PlannerResult result;
  const OptionPlan fastest_clocks(dag.computations.size(), 0);
  result.max_clock = evaluator.cost(fastest_clocks);

  ParetoSet pareto;
  OptionPlan previous;
  OptionPlan reclaimed;
  auto add_plan = [&](const OptionPlan& plan) {
    if (plan == previous) {
      return;
    }
    previous = plan;
    pareto.add(plan, evaluator.cost(plan));
    ++result.plans_considered;
    reclaimed = plan;
    if (evaluator.reclaim_slack(reclaimed)) {
      pareto.add(reclaimed, evaluator.cost(reclaimed));
      ++result.plans_considered;
    }
  };
  add_plan(fastest_clocks);

  walk.set_all_fastest();
  const int shortest = walk.critical_path();
  walk.set_all_slowest();
  int length = walk.critical_path();
  // The walk's plan, kept up to date as computations move: a step changes a few of them.
  OptionPlan plan;
  walk.plan(plan);
  add_plan(plan);

  std::vector<CutArc> network;
  std::vector<CutArc> last_network;
  std::vector<char> last_side;
  std::vector<std::pair<int, int>> moves;  // (computation, −1 shorten / +1 lengthen)
  while (length > shortest) {
    walk.critical_network(network);
    const bool same =
        network.size() == last_network.size() &&
        std::equal(network.begin(), network.end(), last_network.begin(),
                   [](const CutArc& a, const CutArc& b) {
                     return a.from == b.from && a.to == b.to && a.lower == b.lower && a.upper == b.upper;
                   });
    if (!same) {
      CutResult cut = detail::min_cut_with_lower_bounds(2 * walk.node_count() + 2, 2 * walk.node_count(),
                                                        2 * walk.node_count() + 1, network, options.max_flow);
      ++result.iterations;
      // spdlog tests the level before formatting: free unless debug logging is on.
      log().debug("planner: minimum cut {} ({}) at {} units, {} arcs over {} computations", result.iterations,
                  options.max_flow == MaxFlowAlgorithm::kDinic ? "dinic" : "boost push-relabel", length,
                  network.size(), walk.node_count());
      if (cut.status != CutResult::Status::kOk) {
        break;  // nothing on the critical paths can get faster any more
      }
      walk.remember_flow(cut.flow);
      last_side = std::move(cut.source_side);
      std::swap(network, last_network);
    }
    // Validate the whole move before changing anything. The computations of the network are its arcs
    // 2v → 2v + 1 (the source's arcs leave 2N, which is even, but end at an even node).
    bool valid = true;
    bool any_forward = false;
    moves.clear();
    for (const CutArc& arc : last_network) {
      if (arc.from % 2 != 0 || arc.to != arc.from + 1) {
        continue;
      }
      const int v = arc.from / 2;
      const bool tail = last_side[static_cast<size_t>(arc.from)] != 0;
      const bool head = last_side[static_cast<size_t>(arc.to)] != 0;
      if (tail && !head) {
        valid = valid && walk.units(v) > walk.model(v).min_units;
        any_forward = true;
        moves.emplace_back(v, -1);
      } else if (!tail && head) {
        valid = valid && walk.units(v) < walk.model(v).max_units;
        moves.emplace_back(v, +1);
      }
    }
    if (!valid || !any_forward) {
      break;
    }
    for (const auto& [v, change] : moves) {
      walk.units(v) += change;
    }
    const int new_length = walk.critical_path();
    if (new_length >= length) {
      // The cut did not shorten every critical path (it can only happen with a stale cut): recompute.
      for (const auto& [v, change] : moves) {
        walk.units(v) -= change;
      }
      walk.critical_path();
      if (last_network.empty()) {
        return fail(ErrorCode::kInternal, "a minimum cut did not shorten the critical path");
      }
      last_network.clear();
      continue;
    }
    length = new_length;
    bool changed = false;
    for (const auto& [v, change] : moves) {
      const uint16_t clock = walk.model(v).clock_index_at(walk.units(v));
      changed = changed || clock != plan[static_cast<size_t>(v)];
      plan[static_cast<size_t>(v)] = clock;
    }
    if (changed) {
      add_plan(plan);
    }
  }
  result.frontier = pareto.frontier(profile.frequencies_mhz());
  return result;
}

double energy_at_target(const FrontierPoint<FrequencyPlan>& point, double target_time_s, double p_blocking_w,
                        int stages) {
  return point.energy_j +
         p_blocking_w * static_cast<double>(stages) * std::max(0.0, target_time_s - point.time_s);
}

Result<size_t> select_for_target(const Frontier<FrequencyPlan>& frontier, double target_time_s,
                                 double p_blocking_w, int stages) {
  if (!(target_time_s > 0) || !std::isfinite(target_time_s)) {
    return fail(ErrorCode::kInvalidArgument,
                "the target iteration time must be a positive number of seconds (got {})", target_time_s);
  }
  if (frontier.empty()) {
    return fail(ErrorCode::kState, "the frontier is empty");
  }
  std::optional<size_t> best;
  double best_energy = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < frontier.size(); ++i) {
    const auto& point = frontier.points()[i];
    if (point.time_s > target_time_s) {
      continue;
    }
    const double energy = energy_at_target(point, target_time_s, p_blocking_w, stages);
    if (energy < best_energy) {
      best_energy = energy;
      best = i;
    }
  }
  if (!best) {
    return fail(ErrorCode::kNotFound, "no plan meets the target of {:.6g} s: the fastest plan takes {:.6g} s",
                target_time_s, frontier.fastest().time_s);
  }
  return *best;
}

Result<PlanChoice> choose_plan(const Frontier<FrequencyPlan>& frontier, const PlanCost& max_clock,
                               const PlanTarget& target, double p_blocking_w, int stages) {
  if (frontier.empty()) {
    return fail(ErrorCode::kState, "the frontier is empty");
  }
  if (target.time_s && target.slowdown) {
    return fail(ErrorCode::kInvalidArgument, "give a target time or a slowdown, not both");
  }
  PlanChoice choice;
  choice.target_time_s = target.time_s;
  if (target.slowdown) {
    if (!(*target.slowdown >= 1) || !std::isfinite(*target.slowdown)) {
      return fail(ErrorCode::kInvalidArgument, "the slowdown must be a finite number of at least 1 (got {})",
                  *target.slowdown);
    }
    choice.target_time_s = frontier.fastest().time_s * *target.slowdown;
  }
  if (choice.target_time_s) {
    choice.index = JOULE_TRY(select_for_target(frontier, *choice.target_time_s, p_blocking_w, stages));
    choice.time_s = *choice.target_time_s;
  } else {
    choice.time_s = frontier.points()[0].time_s;
  }
  choice.energy_j = energy_at_target(frontier.points()[choice.index], choice.time_s, p_blocking_w, stages);
  choice.max_clock_energy_j = max_clock.energy_j + p_blocking_w * static_cast<double>(stages) *
                                                       std::max(0.0, choice.time_s - max_clock.time_s);
  return choice;
}

}  // namespace joule::plan
