// SPDX-License-Identifier: Apache-2.0
#include "joule/fleet/fleet_monitor.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/clock.hpp"
#include "joule/core/strings.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/daemon_client.hpp"
#include "joule/device/daemon_cpu.hpp"
#include "joule/device/daemon_gpu.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/counter_snapshot.hpp"

namespace joule::fleet {

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Runs `work(i)` for every index on a thread each and waits for all: the nodes are asked at once, so that
// their windows begin (and end) as close together as the network allows.
template <class Work>
void for_each_node_at_once(size_t count, Work work) {
  std::vector<std::future<void>> running;
  running.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    running.push_back(std::async(std::launch::async, [&work, i] { work(i); }));
  }
  for (auto& done : running) {
    done.get();
  }
}

}  // namespace

struct FleetMonitor::NodeState {
  Node node;
  std::shared_ptr<device::DaemonClient> client;
  std::vector<std::unique_ptr<device::Gpu>> gpus;
  std::vector<std::unique_ptr<device::Cpu>> cpus;
  std::unique_ptr<measure::EnergyMonitor> monitor;

  std::vector<device::Gpu*> gpu_pointers() const {
    std::vector<device::Gpu*> pointers;
    for (const auto& gpu : gpus) {
      pointers.push_back(gpu.get());
    }
    return pointers;
  }
  std::vector<device::Cpu*> cpu_pointers() const {
    std::vector<device::Cpu*> pointers;
    for (const auto& cpu : cpus) {
      pointers.push_back(cpu.get());
    }
    return pointers;
  }
};

struct FleetMonitor::Window {
  std::string name;
  struct Begin {
    double sent_s = 0;
    double answered_s = 0;
  };
  std::vector<Begin> begins;  // per node
};

namespace {

// Seconds on this machine's steady clock, from a fixed origin.
double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string node_text(const Node& node) {
  return node.name == node.socket_path ? fmt::format("node {}", node.name)
                                       : fmt::format("node {} ({})", node.name, node.socket_path);
}

}  // namespace

Result<std::vector<Node>> parse_nodes(std::string_view list) {
  std::vector<Node> nodes;
  std::set<std::string, std::less<>> names;
  std::set<std::string, std::less<>> sockets;
  if (trim(list).empty()) {
    return fail(ErrorCode::kInvalidArgument, "no node given (a list NAME=SOCKET,NAME=SOCKET)");
  }
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string_view entry = trim(list.substr(start, end - start));
    start = end + 1;
    if (entry.empty()) {
      return fail(ErrorCode::kInvalidArgument, "an empty entry in the node list {}", quoted_excerpt(list));
    }
    const size_t equals = entry.find('=');
    Node node;
    node.socket_path = std::string(trim(equals == std::string_view::npos ? entry : entry.substr(equals + 1)));
    node.name =
        equals == std::string_view::npos ? node.socket_path : std::string(trim(entry.substr(0, equals)));
    if (node.name.empty() || node.socket_path.empty()) {
      return fail(ErrorCode::kInvalidArgument, "node {} needs a name and a socket (NAME=SOCKET)",
                  quoted_excerpt(entry));
    }
    if (!names.insert(node.name).second) {
      return fail(ErrorCode::kInvalidArgument, "node {} is listed twice", quoted_excerpt(node.name));
    }
    if (!sockets.insert(node.socket_path).second) {
      return fail(ErrorCode::kInvalidArgument, "the socket {} is listed twice (one daemon counted twice)",
                  quoted_excerpt(node.socket_path));
    }
    nodes.push_back(std::move(node));
    if (end == list.size()) {
      break;
    }
  }
  return nodes;
}

bool FleetMeasurement::complete() const {
  return std::all_of(nodes.begin(), nodes.end(), [](const NodeMeasurement& node) { return node.complete; });
}

std::string FleetMeasurement::incomplete_nodes() const {
  std::vector<std::string> named;
  for (const auto& node : nodes) {
    if (!node.complete) {
      named.push_back(fmt::format("{} ({})", node.node, node.error));
    }
  }
  return fmt::format("{}", fmt::join(named, ", "));
}

FleetMonitor::~FleetMonitor() = default;

Result<std::unique_ptr<FleetMonitor::NodeState>> FleetMonitor::open_node(const Node& node,
                                                                         const FleetOptions& options) {
  auto state = std::make_unique<NodeState>();
  state->node = node;
  device::DaemonClientOptions client_options = options.connection;
  client_options.client_name = "joule fleet";
  client_options.timeout = options.timeout;
  auto client = device::DaemonClient::connect(node.socket_path, client_options);
  if (!client) {
    return fail(client.error().code(), "cannot reach {}: {}", node_text(node), client.error().message());
  }
  state->client = *client;
  auto gpus = device::open_daemon_gpus(state->client, /*apply_visible_devices=*/false);
  if (!gpus) {
    return fail(ErrorCode::kIo, "{}: {}", node_text(node), gpus.error().message());
  }
  state->gpus = std::move(*gpus);
  if (auto cpus = device::open_daemon_cpus(state->client)) {
    state->cpus = std::move(*cpus);  // (a daemon without RAPL serves GPUs only)
  }
  return state;
}

Result<std::unique_ptr<FleetMonitor>> FleetMonitor::connect(std::vector<Node> nodes, FleetOptions options) {
  if (nodes.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a fleet needs at least one node");
  }
  std::unique_ptr<FleetMonitor> fleet(new FleetMonitor());
  fleet->options_ = options;
  std::vector<std::optional<Error>> failures(nodes.size());
  fleet->nodes_.resize(nodes.size());
  for_each_node_at_once(nodes.size(), [&](size_t i) {
    auto state = open_node(nodes[i], options);
    if (!state) {
      failures[i] = state.error();
      return;
    }
    try {
      (*state)->monitor = std::make_unique<measure::EnergyMonitor>(
          (*state)->gpu_pointers(), (*state)->cpu_pointers(), SteadyClock::instance());
    } catch (const Exception& error) {
      failures[i] = Error(ErrorCode::kIo, fmt::format("{}: {}", node_text(nodes[i]), error.what()));
      return;
    }
    fleet->nodes_[i] = std::move(*state);
  });
  std::vector<std::string> failed;
  std::set<ErrorCode> codes;
  for (const auto& failure : failures) {
    if (failure) {
      failed.push_back(failure->message());
      codes.insert(failure->code());
    }
  }
  if (!failed.empty()) {
    // One kind of failure keeps its code (every node refused this client: kPermissionDenied); a mix is kIo.
    return fail(codes.size() == 1 ? *codes.begin() : ErrorCode::kIo, "{}", fmt::join(failed, "; "));
  }
  return fleet;
}

FleetPower FleetMonitor::power() {
  FleetPower result;
  result.time_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  result.nodes.resize(nodes_.size());
  for_each_node_at_once(nodes_.size(), [&](size_t i) {
    FleetPower::NodePower& node = result.nodes[i];
    node.node = nodes_[i]->node.name;
    node.complete = true;
    for (const auto& gpu : nodes_[i]->gpus) {
      const auto power = gpu->power_mw();
      if (!power) {
        node.complete = false;
        node.error = power.error().message();
        break;
      }
      node.gpu_power_w.push_back(*power / 1000.0);
      node.total_w += *power / 1000.0;
    }
    if (!node.complete) {
      node.total_w = kNan;
    }
  });
  for (const auto& node : result.nodes) {
    result.total_w += node.total_w;
  }
  return result;
}

namespace {

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

nlohmann::json FleetMonitor::read_counters(const std::vector<Node>& nodes, const FleetOptions& options) {
  std::vector<nlohmann::json> snapshots(nodes.size());
  for_each_node_at_once(nodes.size(), [&](size_t i) {
    nlohmann::json node = {{"node", nodes[i].name}, {"address", nodes[i].socket_path}};
    auto state = open_node(nodes[i], options);
    if (!state) {
      // Named with why: the reader of two readings then knows this node's energy is unknown.
      node.update({{"time_unix_s", unix_now_s()},
                   {"error", state.error().message()},
                   {"gpus", nlohmann::json::array()},
                   {"cpus", nlohmann::json::array()}});
    } else {
      // Wall-clock time, not a steady one: the two readings come from different processes.
      node.update(
          measure::counter_snapshot_json((*state)->gpu_pointers(), (*state)->cpu_pointers(), unix_now_s()));
    }
    snapshots[i] = std::move(node);
  });
  return nlohmann::json{{"time_unix_s", unix_now_s()}, {"nodes", std::move(snapshots)}};
}

std::vector<std::string> FleetMonitor::node_names() const {
  std::vector<std::string> names;
  for (const auto& node : nodes_) {
    names.push_back(node->node.name);
  }
  return names;
}

Result<void> FleetMonitor::begin_window(std::string_view name) {
  if (std::any_of(windows_.begin(), windows_.end(),
                  [&](const auto& window) { return window->name == name; })) {
    return fail(ErrorCode::kState, "a fleet window called {} is already open", quoted_excerpt(name));
  }
  auto window = std::make_unique<Window>();
  window->name = std::string(name);
  window->begins.resize(nodes_.size());
  std::vector<std::string> failures(nodes_.size());
  for_each_node_at_once(nodes_.size(), [&](size_t i) {
    window->begins[i].sent_s = steady_s();
    try {
      nodes_[i]->monitor->begin_window(name, /*sync=*/false);
    } catch (const Exception& error) {
      failures[i] = fmt::format("{}: {}", node_text(nodes_[i]->node), error.what());
    }
    window->begins[i].answered_s = steady_s();
  });
  std::vector<std::string> failed;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (!failures[i].empty()) {
      failed.push_back(failures[i]);
    }
  }
  if (!failed.empty()) {
    // Open on none: a window that could not begin everywhere would measure part of the fleet.
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (failures[i].empty()) {
        nodes_[i]->monitor->cancel_window(name);
      }
    }
    return fail(ErrorCode::kIo, "fleet window {} not begun: {}", quoted_excerpt(name),
                fmt::join(failed, "; "));
  }
  windows_.push_back(std::move(window));
  return {};
}

Result<void> FleetMonitor::cancel_window(std::string_view name) {
  const auto found = std::find_if(windows_.begin(), windows_.end(),
                                  [&](const auto& window) { return window->name == name; });
  if (found == windows_.end()) {
    return fail(ErrorCode::kNotFound, "no fleet window called {} is open", quoted_excerpt(name));
  }
  windows_.erase(found);
  for (const auto& node : nodes_) {
    if (node->monitor->is_open(name)) {
      node->monitor->cancel_window(name);
    }
  }
  return {};
}

Result<FleetMeasurement> FleetMonitor::end_window(std::string_view name) {
  const auto found = std::find_if(windows_.begin(), windows_.end(),
                                  [&](const auto& window) { return window->name == name; });
  if (found == windows_.end()) {
    return fail(ErrorCode::kNotFound, "no fleet window called {} is open", quoted_excerpt(name));
  }
  const std::unique_ptr<Window> window = std::move(*found);
  windows_.erase(found);

  FleetMeasurement result;
  result.name = window->name;
  result.nodes.resize(nodes_.size());
  for_each_node_at_once(nodes_.size(), [&](size_t i) {
    NodeState& state = *nodes_[i];
    NodeMeasurement& node = result.nodes[i];
    node.node = state.node.name;
    node.begin_sent_s = window->begins[i].sent_s;
    node.begin_answered_s = window->begins[i].answered_s;
    node.end_sent_s = steady_s();
    try {
      node.measurement = state.monitor->end_window(name, /*sync=*/false);
      node.complete = true;
      node.energy_j = node.measurement.total_energy_j();
    } catch (const Exception& error) {
      node.error = error.what();
      node.energy_j = kNan;
      if (state.monitor->is_open(name)) {
        state.monitor->cancel_window(name);
      }
    }
    node.end_answered_s = steady_s();
    if (node.complete) {
      if (auto offset = state.client->clock_offset(options_.clock_probes)) {
        node.clock_offset = *offset;
      } else {
        node.clock_offset.offset_s = kNan;
        node.error = offset.error().message();  // kept for the warning below; the figure stands
      }
    }
  });

  double first_sent = std::numeric_limits<double>::infinity();
  double last_answered = -std::numeric_limits<double>::infinity();
  double begin_low = first_sent;
  double begin_high = last_answered;
  double end_low = first_sent;
  double end_high = last_answered;
  result.total_energy_j = 0;
  for (auto& node : result.nodes) {
    first_sent = std::min(first_sent, node.begin_sent_s);
    last_answered = std::max(last_answered, node.end_answered_s);
    begin_low = std::min(begin_low, node.begin_sent_s);
    begin_high = std::max(begin_high, node.begin_answered_s);
    result.total_energy_j += node.energy_j;  // NaN from an incomplete node makes the total NaN
    if (!node.complete) {
      continue;  // (its end is a failure's time, not a window's: it does not widen the alignment)
    }
    end_low = std::min(end_low, node.end_sent_s);
    end_high = std::max(end_high, node.end_answered_s);
    if (std::isnan(node.clock_offset.offset_s)) {
      result.warnings.push_back(fmt::format("node {}: clock offset unknown ({})", node.node, node.error));
      node.error.clear();
    }
  }
  result.time_s = last_answered - first_sent;
  result.alignment_error_s = std::max(begin_high - begin_low, end_high > end_low ? end_high - end_low : 0.0);
  for (const auto& node : result.nodes) {
    if (node.complete && std::abs(node.clock_offset.offset_s) > result.time_s) {
      result.warnings.push_back(
          fmt::format("node {}'s clock is {:.3g} s off this machine's, more than the window ({:.3g} s): its "
                      "samples' times "
                      "do not line up with the others' (check its time synchronization, NTP or PTP)",
                      node.node, node.clock_offset.offset_s, result.time_s));
    }
  }
  return result;
}

}  // namespace joule::fleet
