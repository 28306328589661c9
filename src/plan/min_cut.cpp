// SPDX-License-Identifier: Apache-2.0
#include "plan/min_cut.hpp"

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

// Dinic's algorithm (BFS levels, then blocking flows by depth-first search) on adjacency arrays that are
// cleared, not freed, between calls: the planner computes thousands of cuts on similar networks.
class DinicNetwork {
 public:
  void reset(int nodes) {
    head_.assign(static_cast<size_t>(nodes), kNone);
    next_.clear();
    to_.clear();
    capacity_.clear();
    flow_.clear();
  }

  uint32_t add(int from, int to, int64_t capacity) {
    const auto id = static_cast<uint32_t>(to_.size());
    link(from, to, capacity);
    link(to, from, 0);
    return id;
  }

  int64_t max_flow(int source, int sink) {
    const auto s = static_cast<uint32_t>(source);
    const auto t = static_cast<uint32_t>(sink);
    int64_t total = 0;
    while (levels(s, t)) {
      cursor_ = head_;
      while (true) {
        const int64_t pushed = augment(s, t);
        if (pushed == 0) {
          break;
        }
        total += pushed;
        if (total >= kInfiniteCapacity) {
          return total;
        }
      }
    }
    return total;
  }

  int64_t flow(uint32_t id) const { return flow_[id]; }

  std::vector<char> reachable(int source) const {
    std::vector<char> seen(head_.size(), 0);
    std::vector<uint32_t> stack = {static_cast<uint32_t>(source)};
    seen[static_cast<size_t>(source)] = 1;
    while (!stack.empty()) {
      const uint32_t node = stack.back();
      stack.pop_back();
      for (uint32_t e = head_[node]; e != kNone; e = next_[e]) {
        if (seen[to_[e]] == 0 && capacity_[e] - flow_[e] > 0) {
          seen[to_[e]] = 1;
          stack.push_back(to_[e]);
        }
      }
    }
    return seen;
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffU;

  void link(int from, int to, int64_t capacity) {
    const auto id = static_cast<uint32_t>(to_.size());
    to_.push_back(static_cast<uint32_t>(to));
    capacity_.push_back(capacity);
    flow_.push_back(0);
    next_.push_back(head_[static_cast<size_t>(from)]);
    head_[static_cast<size_t>(from)] = id;
  }

  bool levels(uint32_t source, uint32_t sink) {
    level_.assign(head_.size(), -1);
    queue_.clear();
    queue_.push_back(source);
    level_[source] = 0;
    for (size_t i = 0; i < queue_.size(); ++i) {
      const uint32_t node = queue_[i];
      for (uint32_t e = head_[node]; e != kNone; e = next_[e]) {
        if (level_[to_[e]] < 0 && capacity_[e] - flow_[e] > 0) {
          level_[to_[e]] = level_[node] + 1;
          queue_.push_back(to_[e]);
        }
      }
    }
    return level_[sink] >= 0;
  }

  // One augmenting path along increasing levels, iteratively (paths can be thousands of arcs long).
  int64_t augment(uint32_t source, uint32_t sink) {
    path_.clear();
    uint32_t node = source;
    while (true) {
      if (node == sink) {
        int64_t bottleneck = kInfiniteCapacity;
        for (const uint32_t e : path_) {
          bottleneck = std::min(bottleneck, capacity_[e] - flow_[e]);
        }
        for (const uint32_t e : path_) {
          flow_[e] += bottleneck;
          flow_[e ^ 1U] -= bottleneck;
        }
        return bottleneck;
      }
      uint32_t& e = cursor_[node];
      while (e != kNone && !(capacity_[e] - flow_[e] > 0 && level_[to_[e]] == level_[node] + 1)) {
        e = next_[e];
      }
      if (e != kNone) {
        path_.push_back(e);
        node = to_[e];
        continue;
      }
      // Dead end: never come back here in this phase, and retreat.
      level_[node] = -1;
      if (path_.empty()) {
        return 0;
      }
      const uint32_t back = path_.back();
      path_.pop_back();
      node = to_[back ^ 1U];
      cursor_[node] = next_[cursor_[node]];
    }
  }

  std::vector<uint32_t> head_;
  std::vector<uint32_t> next_;
  std::vector<uint32_t> to_;
  std::vector<int64_t> capacity_;
  std::vector<int64_t> flow_;
  std::vector<int> level_;
  std::vector<uint32_t> queue_;
  std::vector<uint32_t> cursor_;
  std::vector<uint32_t> path_;
};

// No such arc (an arc of the cut network without a backward residual).
constexpr uint32_t kNoArc = 0xffffffffU;

int64_t saturating_subtract(int64_t upper, int64_t amount) {
  return upper >= kInfiniteCapacity ? kInfiniteCapacity : upper - amount;
}

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

// Whether a flow within the bounds that is conserved everywhere but at the source and the sink is maximal:
// the sink is out of reach in its residual network. If so, what is in reach is the cut, and `result` gets
// it. After a small change to the network the previous maximum flow usually still is one, and this search
// on arrays costs a fraction of building a network for a max-flow algorithm.
bool cut_if_maximal(int node_count, int source, int sink, const std::vector<CutArc>& arcs,
                    const std::vector<int64_t>& flow, CutResult& result) {
  // Residual arcs grouped by tail (compressed rows): forward where flow < upper, backward where
  // flow > lower.
  thread_local std::vector<uint32_t> begin;
  thread_local std::vector<uint32_t> heads;
  thread_local std::vector<uint32_t> stack;
  begin.assign(static_cast<size_t>(node_count) + 1, 0);
  for (size_t i = 0; i < arcs.size(); ++i) {
    if (flow[i] < arcs[i].upper) {
      ++begin[static_cast<size_t>(arcs[i].from) + 1];
    }
    if (flow[i] > arcs[i].lower) {
      ++begin[static_cast<size_t>(arcs[i].to) + 1];
    }
  }
  for (size_t node = 1; node < begin.size(); ++node) {
    begin[node] += begin[node - 1];
  }
  heads.resize(begin.back());
  for (size_t i = 0; i < arcs.size(); ++i) {
    // begin[tail] counts up as heads are placed, and ends where begin[tail + 1] started.
    if (flow[i] < arcs[i].upper) {
      heads[begin[static_cast<size_t>(arcs[i].from)]++] = static_cast<uint32_t>(arcs[i].to);
    }
    if (flow[i] > arcs[i].lower) {
      heads[begin[static_cast<size_t>(arcs[i].to)]++] = static_cast<uint32_t>(arcs[i].from);
    }
  }
  // Now begin[node] is where node + 1's heads start: node's are begin[node − 1] … begin[node].
  std::vector<char> seen(static_cast<size_t>(node_count), 0);
  stack.assign(1, static_cast<uint32_t>(source));
  seen[static_cast<size_t>(source)] = 1;
  while (!stack.empty()) {
    const uint32_t node = stack.back();
    stack.pop_back();
    for (uint32_t e = node == 0 ? 0 : begin[node - 1]; e < begin[node]; ++e) {
      if (seen[heads[e]] == 0) {
        seen[heads[e]] = 1;
        stack.push_back(heads[e]);
      }
    }
  }
  if (seen[static_cast<size_t>(sink)] != 0) {
    return false;
  }
  result.source_side = std::move(seen);
  finish_cut(arcs, flow, result);
  return true;
}

template <class Network>
CutResult solve(Network& feasibility, Network& augmenting, int node_count, int source, int sink,
                const std::vector<CutArc>& arcs) {
  CutResult result;
  // Start from each arc's guess, clamped to its bounds. Where the guesses do not balance (an arc left the
  // network, bounds moved), nodes keep an excess or a deficit; with no guesses that is the lower bounds'.
  std::vector<int64_t> flow(arcs.size());
  std::vector<int64_t> excess(static_cast<size_t>(node_count), 0);
  for (size_t i = 0; i < arcs.size(); ++i) {
    const CutArc& arc = arcs[i];
    flow[i] = std::clamp(arc.flow, arc.lower, std::max(arc.lower, arc.upper));
    excess[static_cast<size_t>(arc.to)] += flow[i];
    excess[static_cast<size_t>(arc.from)] -= flow[i];
  }
  // The sink → source arc closes the circulation: it starts with what leaves the source.
  const int64_t returned = std::max<int64_t>(0, -excess[static_cast<size_t>(source)]);
  excess[static_cast<size_t>(source)] += returned;
  excess[static_cast<size_t>(sink)] -= returned;

  int64_t required = 0;
  for (int node = 0; node < node_count; ++node) {
    required += std::max<int64_t>(0, excess[static_cast<size_t>(node)]);
  }
  if (required == 0 && cut_if_maximal(node_count, source, sink, arcs, flow, result)) {
    return result;
  }

  // Phase 1: a feasible flow. In the residual network of the start (forward room upper − flow, backward
  // room flow − lower), excesses go from a super source to their nodes and deficits to a super sink.
  const int super_source = node_count;
  const int super_sink = node_count + 1;
  if (required > 0) {
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
    if (returned > 0) {
      feasibility.add(source, sink, returned);
    }
    for (int node = 0; node < node_count; ++node) {
      const int64_t amount = excess[static_cast<size_t>(node)];
      if (amount > 0) {
        feasibility.add(super_source, node, amount);
      } else if (amount < 0) {
        feasibility.add(node, super_sink, -amount);
      }
    }
    if (feasibility.max_flow(super_source, super_sink) < required) {
      result.status = CutResult::Status::kInfeasible;
      return result;
    }
    for (size_t i = 0; i < arcs.size(); ++i) {
      flow[i] += feasibility.flow(forward[i]) - (backward[i] != kNoArc ? feasibility.flow(backward[i]) : 0);
    }
  }

  // Phase 2: augment the feasible flow from source to sink in its residual network: forward room upper − f,
  // backward room f − lower.
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
  const int64_t extra = augmenting.max_flow(source, sink);
  if (extra >= kInfiniteCapacity / 2) {
    result.status = CutResult::Status::kUnbounded;
    return result;
  }
  result.source_side = augmenting.reachable(source);
  result.source_side.resize(static_cast<size_t>(node_count));
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
    BoostNetwork feasibility;
    BoostNetwork augmenting;
    return solve(feasibility, augmenting, node_count, source, sink, arcs);
  }
  thread_local DinicNetwork feasibility;
  thread_local DinicNetwork augmenting;
  return solve(feasibility, augmenting, node_count, source, sink, arcs);
}

}  // namespace joule::plan::detail
