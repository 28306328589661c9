// SPDX-License-Identifier: Apache-2.0
// joule/fleet/fleet_monitor.hpp — one energy figure for work that spans several nodes: a window opened on
// the `joule daemon` of every node at once and closed into one result, per node, per device and in total,
// with how far apart the nodes' windows may be (docs/fleet.md).
//
//   auto fleet =
//   joule::fleet::FleetMonitor::connect(*joule::fleet::parse_nodes("a=/run/a.sock,b=/run/b.sock"));
//   (*fleet)->begin_window("epoch");
//   ... the job runs on the nodes ...
//   const auto result = (*fleet)->end_window("epoch");   // result.total_energy_j, result.nodes[i]…
//
// A node is reached through its daemon: a Unix socket (the local one, or another node's forwarded with
// `ssh -L`), or "HOST:PORT" of a daemon's network listener over TLS (`joule daemon --listen`, authenticated
// by FleetOptions::connection's token or client certificate). A node that stops answering mid-window makes
// the result incomplete, with the node named: never a silently lower total.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/clock_offset.hpp"
#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/daemon_client_options.hpp"
#include "joule/measure/energy_monitor.hpp"

namespace joule::fleet {

/// One node of a fleet: a name for reports and its daemon's address.
struct Node {
  std::string name;
  std::string socket_path;  ///< a Unix socket's path, or "HOST:PORT" of a network listener
};

/// @return the nodes of a list "NAME=ADDRESS,…", ADDRESS a Unix socket or HOST:PORT (a bare ADDRESS is named
/// after itself: "node1:9700,node2:9700").
/// Errors: kInvalidArgument for an empty list or entry, an empty name or socket, a name or a socket given
/// twice (each named).
Result<std::vector<Node>> parse_nodes(std::string_view list);

struct FleetOptions {
  /// `time` requests per node to estimate its clock offset (at connect and at each window's end).
  size_t clock_probes = 8;
  /// How long one request to a node may take before the node counts as not answering.
  Nanos timeout = std::chrono::seconds(10);
  /// For HOST:PORT nodes: the TLS files, the token (or their environment variables, see
  /// DaemonClientOptions) and plain_tcp; its client_name, timeout and lease renewal are the fleet's own.
  device::DaemonClientOptions connection;
};

/// One node's part of a window.
struct NodeMeasurement {
  std::string node;
  /// Whether the node answered at both ends of the window; if not, `error` says why and its energy is NaN.
  bool complete = false;
  std::string error;
  measure::Measurement measurement;  ///< its GPUs' (and CPUs') energy, when complete
  double energy_j = 0;               ///< its total (GPUs, CPU packages, DRAM), J; NaN when incomplete
  /// When the node read its counters, as seen from here: the window's begin lies in
  /// [begin_sent_s, begin_answered_s] of this machine's clock (s since the fleet's start), and so its end.
  double begin_sent_s = 0;
  double begin_answered_s = 0;
  double end_sent_s = 0;
  double end_answered_s = 0;
  ClockOffset clock_offset;  ///< the node's clock − this machine's, estimated at the window's end
};

/// A window over the fleet.
struct FleetMeasurement {
  std::string name;
  double time_s = 0;  ///< this machine's time from the first begin request to the last end answer, s
  std::vector<NodeMeasurement> nodes;
  /// The sum over the nodes, J; NaN if any node is incomplete (incomplete_nodes() names them) or not
  /// measurable.
  double total_energy_j = 0;
  /// How far apart the nodes' windows may be, s: the widest span within which all of them began (or ended),
  /// from request and answer times on this machine's clock (no clock needs to agree with another).
  double alignment_error_s = 0;
  /// Things to know about the figure, e.g. a node whose clock is further off than the window is long.
  std::vector<std::string> warnings;

  /// @return whether every node answered at both ends.
  bool complete() const;
  /// @return "b (the joule daemon at /run/b.sock closed the connection), c (…)", or "" when complete.
  std::string incomplete_nodes() const;
};

/// The power of every node's GPUs at one moment (`joule fleet power`).
struct FleetPower {
  int64_t time_unix_ms = 0;  ///< when the reads were asked for, this machine's clock
  struct NodePower {
    std::string node;
    bool complete = false;  ///< every GPU of the node answered; if not, `error` says why
    std::string error;
    std::vector<double> gpu_power_w;  ///< by the node's GPU index
    double total_w = 0;               ///< NaN when incomplete
  };
  std::vector<NodePower> nodes;
  double total_w = 0;  ///< the fleet's; NaN if a node is incomplete
};

/// Windows over several nodes' daemons. Thread-compatible: one window operation at a time.
class FleetMonitor {
 public:
  /// Connects to every node's daemon (in parallel) and opens its GPUs (all of them, whatever this process's
  /// CUDA_VISIBLE_DEVICES) and CPU packages. @return kInvalidArgument for no node; kIo naming every node that
  /// could not be reached and why ("cannot reach node b (/run/b.sock): …; node c …").
  static Result<std::unique_ptr<FleetMonitor>> connect(std::vector<Node> nodes, FleetOptions options = {});
  ~FleetMonitor();
  FleetMonitor(const FleetMonitor&) = delete;
  FleetMonitor& operator=(const FleetMonitor&) = delete;

  /// Opens window `name` on every node at once. @return kState if such a window is open; kIo naming the
  /// nodes that did not answer (the window is then open on none).
  Result<void> begin_window(std::string_view name);

  /// Closes window `name` on every node at once. A node that does not answer is reported incomplete in the
  /// result, not as an error. @return kNotFound if no such window is open.
  Result<FleetMeasurement> end_window(std::string_view name);

  /// Discards window `name` on every node (those that answer). @return kNotFound if no such window is open.
  Result<void> cancel_window(std::string_view name);

  /// Reads the power of every node's GPUs, on all nodes at once. A node that does not answer is incomplete
  /// in the result, not an error.
  FleetPower power();

  /// Reads the energy counters of every node's daemon at once (connecting to each), as `joule counters`
  /// reads one node's, so that two readings taken by different processes (Slurm's controller prolog and
  /// epilog, packaging/slurm/) give each node's energy in between. @return {time_unix_s, nodes: [{node,
  /// address, time_unix_s, gpus, cpus} as measure::counter_snapshot_json gives them]}; a node that cannot be
  /// reached has empty gpus and cpus and its "error" (never left out).
  static nlohmann::json read_counters(const std::vector<Node>& nodes, const FleetOptions& options = {});

  /// @return the nodes, in the order given.
  std::vector<std::string> node_names() const;

 private:
  struct NodeState;
  struct Window;
  FleetMonitor() = default;
  /// Connects to `node`'s daemon and opens its GPUs and CPUs. @return why not, naming the node.
  static Result<std::unique_ptr<NodeState>> open_node(const Node& node, const FleetOptions& options);

  std::vector<std::unique_ptr<NodeState>> nodes_;
  std::vector<std::unique_ptr<Window>> windows_;
  FleetOptions options_;
};

}  // namespace joule::fleet
