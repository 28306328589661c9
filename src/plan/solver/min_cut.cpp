// SPDX-License-Identifier: Apache-2.0
#include "plan/solver/min_cut.hpp"

#include <algorithm>

// Boost.Graph stays in this file: it is slow to compile and noisy at -O2.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <boost/property_map/property_map.hpp>
#include <boost/range/iterator_range.hpp>
#pragma GCC diagnostic pop

namespace joule::plan::detail {

namespace {

struct EdgeData {
  int64_t capacity = 0;
  int64_t residual = 0;
  uint32_t original = 0;  // position in the order the arcs were added
};

// Compressed sparse rows: a handful of vectors per graph instead of one per vertex, which matters because
// the planner builds a network for every cut it computes.
using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, EdgeData,
                                                 boost::no_property, uint32_t, uint32_t>;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

// A flow network: arcs are collected, then frozen into a CSR graph, every arc with its reverse (capacity 0),
// as push-relabel needs.
class BoostNetwork {
 public:
  void reset(int nodes) {
    nodes_ = static_cast<uint32_t>(nodes);
    ends_.clear();
    data_.clear();
  }

  // @return the arc's id (for flow()).
  uint32_t add(int from, int to, int64_t capacity) {
    const auto id = static_cast<uint32_t>(ends_.size());
    ends_.emplace_back(static_cast<uint32_t>(from), static_cast<uint32_t>(to));
    data_.push_back({capacity, 0, id});
    ends_.emplace_back(static_cast<uint32_t>(to), static_cast<uint32_t>(from));
    data_.push_back({0, 0, id + 1});
    return id;
  }

  int64_t max_flow(int source, int sink) {
    graph_ = Graph(boost::edges_are_unsorted_multi_pass, ends_.begin(), ends_.end(), data_.begin(), nodes_);
    const size_t edge_count = boost::num_edges(graph_);
    by_original_.assign(edge_count, Edge());
    std::vector<Edge> reverse(edge_count);
    const auto index = boost::get(boost::edge_index, graph_);
    for (const Edge edge : boost::make_iterator_range(boost::edges(graph_))) {
      by_original_[graph_[edge].original] = edge;
    }
    for (const Edge edge : boost::make_iterator_range(boost::edges(graph_))) {
      reverse[edge.idx] = by_original_[graph_[edge].original ^ 1U];
    }
    const auto reverse_map = boost::make_iterator_property_map(reverse.begin(), index);
    return boost::push_relabel_max_flow(graph_, source, sink, boost::get(&EdgeData::capacity, graph_),
                                        boost::get(&EdgeData::residual, graph_), reverse_map,
                                        boost::get(boost::vertex_index, graph_));
  }

  // Flow on arc `id` after max_flow().
  int64_t flow(uint32_t id) const {
    const Edge edge = by_original_[id];
    return graph_[edge].capacity - graph_[edge].residual;
  }

  // Nodes reachable from `source` through arcs with residual capacity left.
  std::vector<char> reachable(int source) const {
    std::vector<char> seen(nodes_, 0);
    std::vector<uint32_t> stack = {static_cast<uint32_t>(source)};
    seen[static_cast<size_t>(source)] = 1;
    while (!stack.empty()) {
      const uint32_t node = stack.back();
      stack.pop_back();
      for (const Edge edge : boost::make_iterator_range(boost::out_edges(node, graph_))) {
        const uint32_t next = boost::target(edge, graph_);
        if (seen[next] == 0 && graph_[edge].residual > 0) {
          seen[next] = 1;
          stack.push_back(next);
        }
      }
    }
    return seen;
  }

 private:
  uint32_t nodes_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> ends_;
  std::vector<EdgeData> data_;
  Graph graph_;
  std::vector<Edge> by_original_;
};

// No such arc (an arc of the cut network without a backward residual).
constexpr uint32_t kNoArc = 0xffffffffU;

int64_t saturating_subtract(int64_t upper, int64_t amount) {
  return upper >= kInfiniteCapacity ? kInfiniteCapacity : upper - amount;
}

// The residual network of a flow within bounds, in compressed rows (every node's residual arcs side by
// side), and Dinic's algorithm on it: BFS levels, then blocking flows by depth-first search. Its buffers are
// kept between calls: the planner computes thousands of cuts on similar networks.
class ResidualNetwork {
 public:
  // Every arc gives two residual arcs, each the other's twin: forward with room upper − flow (unbounded
  // stays unbounded), backward with room flow − lower.
  void build(int node_count, const std::vector<CutArc>& arcs, const std::vector<int64_t>& flow) {
    const auto nodes = static_cast<size_t>(node_count);
    begin_.assign(nodes + 1, 0);
    for (const CutArc& arc : arcs) {
      ++begin_[static_cast<size_t>(arc.from) + 1];
      ++begin_[static_cast<size_t>(arc.to) + 1];
    }
    for (size_t node = 1; node <= nodes; ++node) {
      begin_[node] += begin_[node - 1];
    }
    const size_t entries = 2 * arcs.size();
    head_.resize(entries);
    room_.resize(entries);
    twin_.resize(entries);
    backward_.resize(arcs.size());
    lower_.resize(arcs.size());
    cursor_.assign(begin_.begin(), begin_.end() - 1);  // where each node's next residual arc goes
    for (size_t i = 0; i < arcs.size(); ++i) {
      const CutArc& arc = arcs[i];
      const uint32_t forward = cursor_[static_cast<size_t>(arc.from)]++;
      const uint32_t backward = cursor_[static_cast<size_t>(arc.to)]++;
      head_[forward] = static_cast<uint32_t>(arc.to);
      room_[forward] = saturating_subtract(arc.upper, flow[i]);
      twin_[forward] = backward;
      head_[backward] = static_cast<uint32_t>(arc.from);
      room_[backward] = flow[i] - arc.lower;
      twin_[backward] = forward;
      backward_[i] = backward;
      lower_[i] = arc.lower;
    }
    level_.resize(nodes);
  }

  // Augments to a maximum flow. @return the flow added, or at least kInfiniteCapacity if unbounded.
  int64_t max_flow(int source, int sink) {
    const auto s = static_cast<uint32_t>(source);
    const auto t = static_cast<uint32_t>(sink);
    int64_t total = 0;
    while (levels(s, t)) {
      cursor_.assign(begin_.begin(), begin_.end() - 1);
      total += blocking_flow(s, t);
      if (total >= kInfiniteCapacity) {
        return total;
      }
    }
    return total;
  }

  // @return whether the sink is in residual reach of the source; if not, reachable() gives what is.
  bool reaches(int source, int sink) {
    return levels(static_cast<uint32_t>(source), static_cast<uint32_t>(sink));
  }

  // After max_flow() or a reaches() that returned false: the nodes its last search reached, those reachable
  // through residual arcs.
  std::vector<char> reachable() const {
    std::vector<char> seen(level_.size());
    for (size_t node = 0; node < level_.size(); ++node) {
      seen[node] = level_[node] >= 0 ? 1 : 0;
    }
    return seen;
  }

  // The flow on arc `i` of build()'s list now.
  int64_t flow(size_t i) const { return lower_[i] + room_[backward_[i]]; }

 private:
  // BFS levels from the source over residual arcs with room, up to the sink's level. @return whether the
  // sink is in reach; if not, the levels mark exactly what is.
  bool levels(uint32_t source, uint32_t sink) {
    std::fill(level_.begin(), level_.end(), -1);
    queue_.clear();
    queue_.push_back(source);
    level_[source] = 0;
    for (size_t i = 0; i < queue_.size(); ++i) {
      const uint32_t node = queue_[i];
      if (level_[sink] >= 0 && level_[node] >= level_[sink]) {
        break;  // nothing beyond the sink's level lies on a shortest path
      }
      for (uint32_t e = begin_[node]; e < begin_[node + 1]; ++e) {
        if (room_[e] > 0 && level_[head_[e]] < 0) {
          level_[head_[e]] = level_[node] + 1;
          queue_.push_back(head_[e]);
        }
      }
    }
    return level_[sink] >= 0;
  }

  // Augmenting paths along increasing levels, iteratively (paths can be thousands of arcs long). After each
  // augmentation the search goes on from the tail of the first arc it saturated, not from the source.
  int64_t blocking_flow(uint32_t source, uint32_t sink) {
    int64_t total = 0;
    path_.clear();
    uint32_t node = source;
    while (true) {
      if (node == sink) {
        int64_t bottleneck = kInfiniteCapacity;
        for (const uint32_t e : path_) {
          bottleneck = std::min(bottleneck, room_[e]);
        }
        size_t first_saturated = path_.size();
        for (size_t k = 0; k < path_.size(); ++k) {
          const uint32_t e = path_[k];
          room_[e] -= bottleneck;
          room_[twin_[e]] += bottleneck;
          if (room_[e] == 0 && first_saturated == path_.size()) {
            first_saturated = k;
          }
        }
        total += bottleneck;
        if (total >= kInfiniteCapacity) {
          return total;  // unbounded: only arcs without bounds on the path
        }
        node = head_[twin_[path_[first_saturated]]];
        path_.resize(first_saturated);
        continue;
      }
      uint32_t& e = cursor_[node];
      const uint32_t end = begin_[node + 1];
      while (e < end && !(room_[e] > 0 && level_[head_[e]] == level_[node] + 1)) {
        ++e;
      }
      if (e < end) {
        path_.push_back(e);
        node = head_[e];
        continue;
      }
      // Dead end: never come back here in this phase, and retreat.
      level_[node] = -1;
      if (path_.empty()) {
        return total;
      }
      const uint32_t back = path_.back();
      path_.pop_back();
      node = head_[twin_[back]];
      ++cursor_[node];
    }
  }

  std::vector<uint32_t> begin_;     // per node: its first residual arc; begin_[nodes] = the end
  std::vector<uint32_t> head_;      // per residual arc
  std::vector<int64_t> room_;       // likewise
  std::vector<uint32_t> twin_;      // likewise: the residual arc the other way
  std::vector<uint32_t> backward_;  // per arc of build()'s list: its backward residual arc
  std::vector<int64_t> lower_;      // likewise: its lower bound
  std::vector<int> level_;
  std::vector<uint32_t> queue_;
  std::vector<uint32_t> cursor_;
  std::vector<uint32_t> path_;
};

// Sets the value of the cut in `result.source_side` (or kUnbounded if an unbounded arc crosses it) and keeps
// the maximum flow it came from.
void finish_cut(const std::vector<CutArc>& arcs, std::vector<int64_t> flow, CutResult& result) {
  for (const CutArc& arc : arcs) {
    const bool from_source = result.source_side[static_cast<size_t>(arc.from)] != 0;
    const bool to_source = result.source_side[static_cast<size_t>(arc.to)] != 0;
    if (from_source && !to_source) {
      if (arc.upper >= kInfiniteCapacity) {
        result.status = CutResult::Status::kUnbounded;
        return;
      }
      result.value += arc.upper;
    } else if (!from_source && to_source) {
      result.value -= arc.lower;
    }
  }
  result.flow = std::move(flow);
}

// Where a cut's search starts: each arc's guess clamped to its bounds, and what that leaves unbalanced.
// Where the guesses do not balance (an arc left the network, bounds moved), nodes keep an excess or a
// deficit; with no guesses that is the lower bounds'.
struct Start {
  std::vector<int64_t> flow;    // per arc
  std::vector<int64_t> excess;  // per node: inflow − outflow, the sink → source arc included
  int64_t returned = 0;         // the sink → source arc's flow, which closes the circulation
  int64_t required = 0;         // Σ positive excess: what phase 1 must move
};

Start start_flow(int node_count, int source, int sink, const std::vector<CutArc>& arcs) {
  Start start;
  start.flow.resize(arcs.size());
  start.excess.assign(static_cast<size_t>(node_count), 0);
  for (size_t i = 0; i < arcs.size(); ++i) {
    const CutArc& arc = arcs[i];
    start.flow[i] = std::clamp(arc.flow, arc.lower, std::max(arc.lower, arc.upper));
    start.excess[static_cast<size_t>(arc.to)] += start.flow[i];
    start.excess[static_cast<size_t>(arc.from)] -= start.flow[i];
  }
  // The sink → source arc starts with what leaves the source.
  start.returned = std::max<int64_t>(0, -start.excess[static_cast<size_t>(source)]);
  start.excess[static_cast<size_t>(source)] += start.returned;
  start.excess[static_cast<size_t>(sink)] -= start.returned;
  for (const int64_t amount : start.excess) {
    start.required += std::max<int64_t>(0, amount);
  }
  return start;
}

// The minimum cut with Dinic on compressed rows. Phase 1 (only where the start is unbalanced): a feasible
// flow, moving excesses from a super source to their nodes and deficits to a super sink through the
// residual network of the start plus the sink → source arc. Phase 2: a maximum flow from source to sink
// from there. A start that is already a maximum flow costs one search.
CutResult solve_dinic(int node_count, int source, int sink, const std::vector<CutArc>& arcs) {
  thread_local ResidualNetwork network;
  CutResult result;
  Start start = start_flow(node_count, source, sink, arcs);
  std::vector<int64_t>& flow = start.flow;
  if (start.required > 0) {
    const int super_source = node_count;
    const int super_sink = node_count + 1;
    std::vector<CutArc> circulation = arcs;
    std::vector<int64_t> circulation_flow = flow;
    circulation.push_back({sink, source, 0, kInfiniteCapacity});
    circulation_flow.push_back(start.returned);
    for (int node = 0; node < node_count; ++node) {
      const int64_t amount = start.excess[static_cast<size_t>(node)];
      if (amount > 0) {
        circulation.push_back({super_source, node, 0, amount});
        circulation_flow.push_back(0);
      } else if (amount < 0) {
        circulation.push_back({node, super_sink, 0, -amount});
        circulation_flow.push_back(0);
      }
    }
    network.build(node_count + 2, circulation, circulation_flow);
    if (network.max_flow(super_source, super_sink) < start.required) {
      result.status = CutResult::Status::kInfeasible;
      return result;
    }
    for (size_t i = 0; i < arcs.size(); ++i) {
      flow[i] = network.flow(i);
    }
  }
  network.build(node_count, arcs, flow);
  if (network.max_flow(source, sink) >= kInfiniteCapacity / 2) {
    result.status = CutResult::Status::kUnbounded;
    return result;
  }
  result.source_side = network.reachable();
  if (result.source_side[static_cast<size_t>(sink)] != 0) {
    result.status = CutResult::Status::kUnbounded;
    return result;
  }
  for (size_t i = 0; i < arcs.size(); ++i) {
    flow[i] = network.flow(i);
  }
  finish_cut(arcs, std::move(flow), result);
  return result;
}

// The minimum cut with Boost.Graph's push-relabel, in two networks of its own (it takes no starting flow):
// the same two phases as solve_dinic(), after the same check of the start.
CutResult solve_boost(int node_count, int source, int sink, const std::vector<CutArc>& arcs) {
  CutResult result;
  Start start = start_flow(node_count, source, sink, arcs);
  std::vector<int64_t>& flow = start.flow;
  if (start.required == 0) {
    thread_local ResidualNetwork check;
    check.build(node_count, arcs, flow);
    if (!check.reaches(source, sink)) {
      result.source_side = check.reachable();
      finish_cut(arcs, std::move(flow), result);
      return result;
    }
  }
  const int super_source = node_count;
  const int super_sink = node_count + 1;
  if (start.required > 0) {
    BoostNetwork feasibility;
    feasibility.reset(node_count + 2);
    std::vector<uint32_t> forward(arcs.size());
    std::vector<uint32_t> backward(arcs.size(), kNoArc);
    for (size_t i = 0; i < arcs.size(); ++i) {
      const CutArc& arc = arcs[i];
      forward[i] = feasibility.add(arc.from, arc.to, saturating_subtract(arc.upper, flow[i]));
      if (flow[i] > arc.lower) {
        backward[i] = feasibility.add(arc.to, arc.from, flow[i] - arc.lower);
      }
    }
    feasibility.add(sink, source, kInfiniteCapacity);
    if (start.returned > 0) {
      feasibility.add(source, sink, start.returned);
    }
    for (int node = 0; node < node_count; ++node) {
      const int64_t amount = start.excess[static_cast<size_t>(node)];
      if (amount > 0) {
        feasibility.add(super_source, node, amount);
      } else if (amount < 0) {
        feasibility.add(node, super_sink, -amount);
      }
    }
    if (feasibility.max_flow(super_source, super_sink) < start.required) {
      result.status = CutResult::Status::kInfeasible;
      return result;
    }
    for (size_t i = 0; i < arcs.size(); ++i) {
      flow[i] += feasibility.flow(forward[i]) - (backward[i] != kNoArc ? feasibility.flow(backward[i]) : 0);
    }
  }
  BoostNetwork augmenting;
  augmenting.reset(node_count);
  std::vector<uint32_t> forward(arcs.size());
  std::vector<uint32_t> backward(arcs.size(), kNoArc);
  for (size_t i = 0; i < arcs.size(); ++i) {
    const CutArc& arc = arcs[i];
    forward[i] = augmenting.add(arc.from, arc.to, saturating_subtract(arc.upper, flow[i]));
    if (flow[i] > arc.lower) {
      backward[i] = augmenting.add(arc.to, arc.from, flow[i] - arc.lower);
    }
  }
  if (augmenting.max_flow(source, sink) >= kInfiniteCapacity / 2) {
    result.status = CutResult::Status::kUnbounded;
    return result;
  }
  result.source_side = augmenting.reachable(source);
  if (result.source_side[static_cast<size_t>(sink)] != 0) {
    result.status = CutResult::Status::kUnbounded;
    return result;
  }
  for (size_t i = 0; i < arcs.size(); ++i) {
    flow[i] += augmenting.flow(forward[i]) - (backward[i] != kNoArc ? augmenting.flow(backward[i]) : 0);
  }
  finish_cut(arcs, std::move(flow), result);
  return result;
}

}  // namespace

CutResult min_cut_with_lower_bounds(int node_count, int source, int sink, const std::vector<CutArc>& arcs,
                                    MaxFlowAlgorithm algorithm) {
  if (algorithm == MaxFlowAlgorithm::kBoostPushRelabel) {
    return solve_boost(node_count, source, sink, arcs);
  }
  return solve_dinic(node_count, source, sink, arcs);
}

}  // namespace joule::plan::detail
