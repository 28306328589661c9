// SPDX-License-Identifier: Apache-2.0
// One window over several nodes (joule/fleet/fleet_monitor.hpp): four `joule daemon`s on simulated GPUs,
// each a "node" with a socket of its own, measured at once; a node that goes away mid-window is named in an
// incomplete result; bad node lists and unreachable nodes are named.
#include "joule/fleet/fleet_monitor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "joule/core/clock.hpp"
#include "joule/daemon/daemon.hpp"
#include "joule/device/sim_gpu.hpp"

#include "test_util.hpp"

namespace joule::fleet {
namespace {

using namespace std::chrono_literals;

// The simulated V100 draws 220.25 W at its default limit (tests/integration/cli_test.cpp).
constexpr double kV100PowerW = 220.25029530245453;

// One node: a daemon serving two simulated V100s on its own socket (and, given `listen` and `tokens`, on a
// network listener over plain TCP on loopback), run on a thread of its own.
class TestNode {
 public:
  TestNode(const std::string& folder, const std::string& name, const std::string& listen = {},
           const std::string& tokens = {})
      : socket_(folder + "/" + name + ".sock") {
    auto opened = device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100"), clock_);
    for (auto& gpu : *opened) {
      gpus_.push_back(std::move(gpu));
    }
    daemon::DaemonOptions options;
    options.socket_path = socket_;
    options.audit_log = folder + "/" + name + ".audit.log";
    if (!listen.empty()) {
      options.network.listen = {listen};
      options.network.allow_plain_loopback = true;
      options.network.tokens_file = tokens;
    }
    auto started = daemon::Daemon::start({gpus_[0].get(), gpus_[1].get()}, *clock_, std::move(options));
    if (!started) {
      throw std::runtime_error(started.error().message());
    }
    daemon_ = std::move(*started);
    if (!listen.empty()) {
      address_ = daemon_->network_addresses().front();
    }
    thread_ = std::thread([this] { (void)daemon_->run(); });
  }
  ~TestNode() { stop(); }
  TestNode(const TestNode&) = delete;
  TestNode& operator=(const TestNode&) = delete;

  void stop() {
    if (daemon_) {
      daemon_->stop();
      thread_.join();
      daemon_.reset();
    }
  }
  const std::string& socket() const { return socket_; }
  /// The network listener's "127.0.0.N:PORT", or empty.
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::shared_ptr<Clock> clock_{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
  std::vector<std::unique_ptr<device::Gpu>> gpus_;
  std::string socket_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::thread thread_;
};

class Fleet : public ::testing::Test {
 protected:
  Fleet() {
    for (const char* name : {"node1", "node2", "node3", "node4"}) {
      nodes_.push_back(std::make_unique<TestNode>(dir_.path(), name));
    }
  }
  std::vector<Node> all_nodes() const {
    std::vector<Node> nodes;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      nodes.push_back({"node" + std::to_string(i + 1), nodes_[i]->socket()});
    }
    return nodes;
  }

  test::TempDir dir_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

TEST_F(Fleet, OneWindowOverFourNodesIsTheSumOfTheirOwn) {
  auto fleet = FleetMonitor::connect(all_nodes());
  ASSERT_TRUE(fleet) << fleet.error().message();
  EXPECT_EQ((*fleet)->node_names(), (std::vector<std::string>{"node1", "node2", "node3", "node4"}));
  ASSERT_TRUE((*fleet)->begin_window("epoch"));
  std::this_thread::sleep_for(300ms);
  const auto result = (*fleet)->end_window("epoch");
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_TRUE(result->complete()) << result->incomplete_nodes();
  EXPECT_EQ(result->incomplete_nodes(), "");
  ASSERT_EQ(result->nodes.size(), 4u);
  double sum_j = 0;
  for (const auto& node : result->nodes) {
    ASSERT_TRUE(node.complete) << node.node << ": " << node.error;
    ASSERT_EQ(node.measurement.gpu_energy.size(), 2u) << node.node;
    // Each GPU: its power over the node's own window. The daemon read the counters somewhere within each
    // end's round trip, while the window's time is this machine's: the two differ by at most the round trips
    // (plus the counter's 1 mJ).
    const double round_trips_s =
        (node.begin_answered_s - node.begin_sent_s) + (node.end_answered_s - node.end_sent_s);
    for (const auto& gpu : node.measurement.gpu_energy) {
      EXPECT_EQ(gpu.source, measure::EnergySource::kCounter);
      EXPECT_NEAR(gpu.energy_j, kV100PowerW * node.measurement.time_s, kV100PowerW * round_trips_s + 2e-3)
          << node.node;
    }
    EXPECT_GE(node.measurement.time_s, 0.3);
    EXPECT_DOUBLE_EQ(node.energy_j, node.measurement.total_energy_j());
    // Its begin and end were read within what this machine saw of the requests.
    EXPECT_LE(node.begin_sent_s, node.begin_answered_s);
    EXPECT_LT(node.begin_answered_s, node.end_sent_s);
    EXPECT_LE(node.end_sent_s, node.end_answered_s);
    // The same machine's clock: the offset is within its bound (and a millisecond of slack for the
    // daemon's clock reading on another thread).
    EXPECT_LE(std::abs(node.clock_offset.offset_s), node.clock_offset.uncertainty_s + 1e-3) << node.node;
    EXPECT_EQ(node.clock_offset.probes, 8u);
    sum_j += node.energy_j;
  }
  EXPECT_DOUBLE_EQ(result->total_energy_j, sum_j);
  // 4 nodes × 2 GPUs × 220 W × ≥ 0.3 s.
  EXPECT_GE(result->total_energy_j, 8 * kV100PowerW * 0.3 * 0.99);
  EXPECT_GE(result->time_s, 0.3);
  EXPECT_LT(result->alignment_error_s, result->time_s);
  EXPECT_TRUE(result->warnings.empty()) << result->warnings.front();
}

TEST_F(Fleet, ANodeThatStopsAnsweringMidWindowIsNamedAndTheTotalIsNotALowerFigure) {
  auto fleet = FleetMonitor::connect(all_nodes(), {.clock_probes = 2, .timeout = 2s, .connection = {}});
  ASSERT_TRUE(fleet) << fleet.error().message();
  ASSERT_TRUE((*fleet)->begin_window("step"));
  nodes_[2]->stop();  // node3's daemon goes away
  const auto result = (*fleet)->end_window("step");
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_FALSE(result->complete());
  EXPECT_TRUE(std::isnan(result->total_energy_j));
  EXPECT_FALSE(result->nodes[2].complete);
  EXPECT_TRUE(std::isnan(result->nodes[2].energy_j));
  EXPECT_EQ(result->incomplete_nodes().rfind("node3 (", 0), 0u) << result->incomplete_nodes();
  EXPECT_NE(result->nodes[2].error.find("daemon"), std::string::npos) << result->nodes[2].error;
  for (const size_t answered : {0U, 1U, 3U}) {
    EXPECT_TRUE(result->nodes[answered].complete) << result->nodes[answered].error;
    EXPECT_GT(result->nodes[answered].energy_j, 0);
  }
  // The node is gone: a new window cannot begin, and says which node.
  const auto again = (*fleet)->begin_window("next");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), ErrorCode::kIo);
  EXPECT_NE(again.error().message().find("node node3 ("), std::string::npos) << again.error().message();
  // ... and it is open on none of the others.
  nodes_[2] = std::make_unique<TestNode>(dir_.path(), "node3");
}

TEST_F(Fleet, WindowsAreNamedOnce) {
  auto fleet = FleetMonitor::connect(
      all_nodes(), {.clock_probes = 1, .timeout = std::chrono::seconds(10), .connection = {}});
  ASSERT_TRUE(fleet);
  ASSERT_TRUE((*fleet)->begin_window("a"));
  JOULE_EXPECT_ERROR((*fleet)->begin_window("a"), ErrorCode::kState,
                     "a fleet window called \"a\" is already open");
  JOULE_EXPECT_ERROR((*fleet)->end_window("b"), ErrorCode::kNotFound, "no fleet window called \"b\" is open");
  ASSERT_TRUE((*fleet)->end_window("a"));
  JOULE_EXPECT_ERROR((*fleet)->end_window("a"), ErrorCode::kNotFound, "no fleet window called \"a\" is open");
}

TEST_F(Fleet, UnreachableNodesAreAllNamed) {
  std::vector<Node> nodes = all_nodes();
  nodes.push_back({"ghost", dir_.path() + "/ghost.sock"});
  nodes.push_back({"phantom", dir_.path() + "/phantom.sock"});
  const auto fleet = FleetMonitor::connect(nodes);
  ASSERT_FALSE(fleet);
  EXPECT_EQ(fleet.error().code(), ErrorCode::kIo);
  const std::string& message = fleet.error().message();
  EXPECT_EQ(message.rfind("cannot reach node ghost (" + dir_.path() + "/ghost.sock): ", 0), 0u) << message;
  EXPECT_NE(message.find("; cannot reach node phantom (" + dir_.path() + "/phantom.sock): "),
            std::string::npos)
      << message;
  JOULE_EXPECT_ERROR(FleetMonitor::connect({}), ErrorCode::kInvalidArgument,
                     "a fleet needs at least one node");
}

// Four nodes on their own loopback addresses (127.0.0.2–5) over TCP, each also measured on its own through
// its Unix socket at the same time: the fleet's window is the sum of the nodes' own windows, each node's
// energy within what the few milliseconds between the two windows' ends can hold.
TEST(FleetNetwork, AWindowOverFourNetworkNodesIsTheSumOfTheNodesOwnWindows) {
  test::TempDir dir;
  const std::string token(64, 'k');
  const std::string tokens = dir.write("tokens", fmt::format("fleet read {}\n", token));
  ::chmod(tokens.c_str(), 0600);
  std::vector<std::unique_ptr<TestNode>> nodes;
  std::vector<Node> network;
  for (int i = 2; i <= 5; ++i) {
    const std::string name = fmt::format("n{}", i);
    nodes.push_back(std::make_unique<TestNode>(dir.path(), name, fmt::format("127.0.0.{}:0", i), tokens));
    network.push_back({name, nodes.back()->address()});
  }
  FleetOptions options;
  options.connection.plain_tcp = true;
  options.connection.token = token;
  auto fleet = FleetMonitor::connect(network, options);
  ASSERT_TRUE(fleet) << fleet.error().message();
  std::vector<std::unique_ptr<FleetMonitor>> own;  // each node alone, through its Unix socket
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto alone = FleetMonitor::connect({{network[i].name, nodes[i]->socket()}});
    ASSERT_TRUE(alone) << alone.error().message();
    own.push_back(std::move(*alone));
  }
  ASSERT_TRUE((*fleet)->begin_window("w"));
  for (auto& alone : own) {
    ASSERT_TRUE(alone->begin_window("w"));
  }
  std::this_thread::sleep_for(3s);
  std::vector<FleetMeasurement> own_results;
  for (auto& alone : own) {
    auto result = alone->end_window("w");
    ASSERT_TRUE(result) << result.error().message();
    own_results.push_back(std::move(*result));
  }
  const auto result = (*fleet)->end_window("w");
  ASSERT_TRUE(result) << result.error().message();
  ASSERT_TRUE(result->complete()) << result->incomplete_nodes();
  double own_sum_j = 0;
  double longer_total_s = 0;  // over the nodes: how much longer the network window was than the node's own
  double round_trips_total_s = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeMeasurement& over_network = result->nodes[i];
    const NodeMeasurement& alone = own_results[i].nodes.front();
    own_sum_j += alone.energy_j;
    // The network window began before the node's own and ended after it: it holds the node's own energy, and
    // more by at most both GPUs' power over the difference of the two windows' times (each time known within
    // its round trips).
    const double round_trips_s = (over_network.begin_answered_s - over_network.begin_sent_s) +
                                 (over_network.end_answered_s - over_network.end_sent_s) +
                                 (alone.begin_answered_s - alone.begin_sent_s) +
                                 (alone.end_answered_s - alone.end_sent_s);
    const double longer_s = over_network.measurement.time_s - alone.measurement.time_s;
    longer_total_s += longer_s;
    round_trips_total_s += round_trips_s;
    EXPECT_GE(over_network.energy_j, alone.energy_j - 2e-3) << over_network.node;
    EXPECT_LE(over_network.energy_j - alone.energy_j, 2 * kV100PowerW * (longer_s + round_trips_s) + 2e-3)
        << over_network.node;
  }
  const double relative = std::abs(result->total_energy_j - own_sum_j) / own_sum_j;
  // Issue 25's 0.1%. The network windows are longer than the nodes' own by the few milliseconds between the
  // two windows' requests (more under a sanitizer): that much of the difference is time, not energy, and is
  // taken out (the GPUs' constant 220.25 W over the difference of the windows' times).
  const double explained_j = 2 * kV100PowerW * longer_total_s;
  const double unexplained = std::abs(result->total_energy_j - own_sum_j - explained_j) / own_sum_j;
  std::cout << fmt::format(
      "network window {:.3f} J, the nodes' own windows {:.3f} J: {:.4f}% apart, {:.4f}% once the windows' "
      "{:.3f} ms of difference in length is taken out (round trips {:.3f} ms)\n",
      result->total_energy_j, own_sum_j, 100 * relative, 100 * unexplained, 1e3 * longer_total_s,
      1e3 * round_trips_total_s);
  // Within 0.1%, or within what the round trips leave unknown where they are long (a sanitizer's build: tens
  // of milliseconds each).
  EXPECT_LE(unexplained * own_sum_j, std::max(0.001 * own_sum_j, 2 * kV100PowerW * round_trips_total_s))
      << fmt::format("round trips {:.3f} ms in all", 1e3 * round_trips_total_s);
}

TEST(FleetNodes, ParsesNamesAndSocketsAndNamesWhatIsWrong) {
  const auto nodes = parse_nodes(" a=/run/a.sock, b = /run/b.sock ,/run/c.sock");
  ASSERT_TRUE(nodes) << nodes.error().message();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "a");
  EXPECT_EQ((*nodes)[0].socket_path, "/run/a.sock");
  EXPECT_EQ((*nodes)[1].name, "b");
  EXPECT_EQ((*nodes)[1].socket_path, "/run/b.sock");
  EXPECT_EQ((*nodes)[2].name, "/run/c.sock");  // named after its socket
  JOULE_EXPECT_ERROR(parse_nodes(""), ErrorCode::kInvalidArgument,
                     "no node given (a list NAME=SOCKET,NAME=SOCKET)");
  JOULE_EXPECT_ERROR(parse_nodes("a=/x,,b=/y"), ErrorCode::kInvalidArgument,
                     "an empty entry in the node list \"a=/x,,b=/y\"");
  JOULE_EXPECT_ERROR(parse_nodes("a=/x,"), ErrorCode::kInvalidArgument,
                     "an empty entry in the node list \"a=/x,\"");
  JOULE_EXPECT_ERROR(parse_nodes("=/x"), ErrorCode::kInvalidArgument,
                     "node \"=/x\" needs a name and a socket (NAME=SOCKET)");
  JOULE_EXPECT_ERROR(parse_nodes("a="), ErrorCode::kInvalidArgument,
                     "node \"a=\" needs a name and a socket (NAME=SOCKET)");
  JOULE_EXPECT_ERROR(parse_nodes("a=/x,a=/y"), ErrorCode::kInvalidArgument, "node \"a\" is listed twice");
  JOULE_EXPECT_ERROR(parse_nodes("a=/x,b=/x"), ErrorCode::kInvalidArgument,
                     "the socket \"/x\" is listed twice (one daemon counted twice)");
}

}  // namespace
}  // namespace joule::fleet
