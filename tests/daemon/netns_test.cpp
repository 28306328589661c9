// SPDX-License-Identifier: Apache-2.0
// Four `joule daemon`s as four nodes in network namespaces of their own (ip netns, one veth pair each, node N
// at 10.S.N.2 and this side at 10.S.N.1, S from the process id): a fleet window over them through TLS, a node
// killed mid-window named in an incomplete result, and a control client cut off the network (its link down)
// whose power limit the node restores when its lease ends. Needs root and iproute2; skipped, saying so, where
// namespaces cannot be made (tests/daemon/network_cli_test.cpp runs the same daemons on loopback addresses
// everywhere).
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/device/daemon_client.hpp"
#include "joule/fleet/fleet_monitor.hpp"

#include "integration/run_process.hpp"
#include "test_pki.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
namespace proto = device::daemon_protocol;

constexpr int kNodes = 4;
constexpr uint32_t kSimDefaultLimitMw = 250000;  // the simulated V100's

// iproute2's `ip` (in /usr/sbin, which a test's PATH may lack), or empty.
std::string ip_command() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(path, X_OK) == 0) {
      return path;
    }
  }
  return {};
}

bool shell(const std::string& command, std::string* why = nullptr) {
  const auto result = run({"/bin/sh", "-c", command});
  if (result.exit_code != 0 && why != nullptr) {
    *why = fmt::format("`{}`: {}", command, result.err);
  }
  return result.exit_code == 0;
}

// The namespaces and links of one test, removed when it ends (names unique to this process).
class Namespaces {
 public:
  // Names and addresses unique to this process: ctest runs tests in parallel, and two processes' nodes on one
  // subnet would share routes.
  Namespaces()
      : prefix_(fmt::format("j{}", ::getpid() % 100000)),
        subnet_(fmt::format("10.{}", 20 + ::getpid() % 200)),
        ip_(ip_command()) {
    if (::geteuid() != 0) {
      why_ = "not root: network namespaces need CAP_SYS_ADMIN";
      return;
    }
    if (ip_.empty()) {
      why_ = "no `ip` command (Debian package iproute2; scripts/install-deps has it)";
      return;
    }
    for (int i = 1; i <= kNodes; ++i) {
      const std::string ns = name(i);
      const std::string host_end = ns + "h";
      const std::string node_end = ns + "n";
      const std::string commands[] = {
          fmt::format("{} netns add {}", ip_, ns),
          fmt::format("{} link add {} type veth peer name {}", ip_, host_end, node_end),
          fmt::format("{} link set {} netns {}", ip_, node_end, ns),
          fmt::format("{} addr add {} dev {}", ip_, host_address(i) + "/24", host_end),
          fmt::format("{} link set {} up", ip_, host_end),
          fmt::format("{0} netns exec {1} {0} addr add {2}/24 dev {3}", ip_, ns, node_address(i), node_end),
          fmt::format("{0} netns exec {1} {0} link set {2} up", ip_, ns, node_end),
          fmt::format("{0} netns exec {1} {0} link set lo up", ip_, ns)};
      made_ = i;
      for (const auto& command : commands) {
        if (!shell(command, &why_)) {
          return;
        }
      }
    }
    ready_ = true;
  }
  ~Namespaces() {
    for (int i = 1; i <= made_; ++i) {
      shell(fmt::format("{0} link del {1}h 2>/dev/null; {0} netns del {1} 2>/dev/null", ip_, name(i)));
    }
  }
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;

  bool ready() const { return ready_; }
  const std::string& why_not() const { return why_; }
  std::string name(int node) const { return fmt::format("{}x{}", prefix_, node); }
  /// Cuts node `node` off this side's network (its link down), or joins it again.
  bool set_link(int node, bool up) const {
    return shell(fmt::format("{} link set {}h {}", ip_, name(node), up ? "up" : "down"));
  }
  const std::string& ip() const { return ip_; }
  /// Node `node`'s address in its namespace, and this side's on its link.
  std::string node_address(int node) const { return fmt::format("{}.{}.2", subnet_, node); }
  std::string host_address(int node) const { return fmt::format("{}.{}.1", subnet_, node); }

 private:
  std::string prefix_;
  std::string subnet_;
  std::string ip_;
  std::string why_;
  int made_ = 0;
  bool ready_ = false;
};

class NetnsFleet : public ::testing::Test {
 protected:
  NetnsFleet() : pki_("netns") {
    ::chmod(dir_.path().c_str(), 0755);
    authority_ = pki_.authority("ca");
    std::vector<std::string> addresses;
    for (int i = 1; i <= kNodes; ++i) {
      addresses.push_back("IP:" + namespaces_.node_address(i));
    }
    server_ = pki_.issue("ca", "node", "node", addresses);
    tokens_ = dir_.write("tokens", fmt::format("fleet control {}\n", token_));
    ::chmod(tokens_.c_str(), 0600);
  }

  void SetUp() override {
    if (!namespaces_.ready()) {
      GTEST_SKIP() << "no network namespaces here: " << namespaces_.why_not();
    }
  }

  /// Starts node `i`'s daemon inside its namespace, listening on its address, port 9700.
  std::unique_ptr<Process> start(int i, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {namespaces_.ip(), "netns",
                                     "exec",           namespaces_.name(i),
                                     JOULE_BINARY,     "--sim",
                                     "2xv100",         "daemon",
                                     "--socket",       socket(i),
                                     "--audit-log",    audit(i),
                                     "--listen",       namespaces_.node_address(i) + ":9700",
                                     "--tls-cert",     server_.certificate,
                                     "--tls-key",      server_.key,
                                     "--tokens",       tokens_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto process = std::make_unique<Process>(argv, environment_);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (process->out_so_far().find("network listener on") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_NE(process->out_so_far().find("network listener on"), std::string::npos) << process->err_so_far();
    return process;
  }
  std::string socket(int i) const { return fmt::format("{}/node{}.sock", dir_.path(), i); }
  std::string audit(int i) const { return fmt::format("{}/audit/node{}.log", dir_.path(), i); }
  device::DaemonClientOptions options() const {
    device::DaemonClientOptions options;
    options.tls_ca_file = authority_.certificate;
    options.token = token_;
    options.timeout = 3s;
    return options;
  }

  Namespaces namespaces_;
  TempDir dir_;
  testing::TestPki pki_;
  testing::TestPki::Files authority_;
  testing::TestPki::Files server_;
  const std::string token_ = std::string(64, 'n');
  std::string tokens_;
  std::map<std::string, std::string> environment_ = {{"JOULE_SIM", Process::kUnset},
                                                     {"JOULE_DAEMON_SOCKET", Process::kUnset},
                                                     {"CUDA_VISIBLE_DEVICES", Process::kUnset},
                                                     {"JOULE_POWERCAP_ROOT", "/nonexistent-powercap"}};
};

TEST_F(NetnsFleet, AWindowOverFourNamespacesAndANodeKilledMidWindow) {
  std::vector<std::unique_ptr<Process>> daemons;
  std::vector<fleet::Node> nodes;
  for (int i = 1; i <= kNodes; ++i) {
    daemons.push_back(start(i));
    nodes.push_back({fmt::format("node{}", i), namespaces_.node_address(i) + ":9700"});
  }
  fleet::FleetOptions options;
  options.connection = this->options();
  options.timeout = 3s;
  auto fleet = fleet::FleetMonitor::connect(nodes, options);
  ASSERT_TRUE(fleet) << fleet.error().message();
  ASSERT_TRUE((*fleet)->begin_window("epoch"));
  std::this_thread::sleep_for(300ms);
  const auto whole = (*fleet)->end_window("epoch");
  ASSERT_TRUE(whole) << whole.error().message();
  ASSERT_TRUE(whole->complete()) << whole->incomplete_nodes();
  for (const auto& node : whole->nodes) {
    EXPECT_GE(node.energy_j, 2 * 220.25 * 0.3 * 0.99) << node.node;
  }
  // node3's daemon is killed mid-window: named, and no total.
  ASSERT_TRUE((*fleet)->begin_window("cut"));
  daemons[2]->signal(SIGKILL);
  (void)daemons[2]->wait();
  const auto cut = (*fleet)->end_window("cut");
  ASSERT_TRUE(cut) << cut.error().message();
  EXPECT_FALSE(cut->complete());
  EXPECT_TRUE(std::isnan(cut->total_energy_j));
  EXPECT_EQ(cut->incomplete_nodes().rfind("node3 (", 0), 0u) << cut->incomplete_nodes();
}

TEST_F(NetnsFleet, AClientCutOffTheNetworkHasItsLimitRestoredWhenItsLeaseEnds) {
  auto daemon = start(2, {"--lease-s", "1"});
  auto options = this->options();
  options.renew_lease = false;
  auto remote = device::DaemonClient::connect(namespaces_.node_address(2) + ":9700", options);
  ASSERT_TRUE(remote) << remote.error().message();
  ASSERT_TRUE((*remote)->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150000}));
  // The node's own view, through its Unix socket.
  auto local = device::DaemonClient::connect(socket(2));
  ASSERT_TRUE(local) << local.error().message();
  const auto limit = [&] {
    const auto answer = (*local)->call({.op = proto::Op::kPowerLimit, .gpu = 0});
    return answer ? (*answer)["power_limit_mw"].get<uint32_t>() : 0U;
  };
  EXPECT_EQ(limit(), 150000u);
  ASSERT_TRUE(namespaces_.set_link(2, false));  // the network between them is cut: no FIN, no RST
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (limit() != kSimDefaultLimitMw && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(limit(), kSimDefaultLimitMw);
  std::ifstream in(audit(2));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("action=restore gpu=0 setting=power_limit_mw old=150000 new=250000"), std::string::npos)
      << text;
  EXPECT_NE(text.find("client=fleet addr=" + namespaces_.host_address(2) + ":"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=lease-expired"), std::string::npos) << text;
  ASSERT_TRUE(namespaces_.set_link(2, true));
}

}  // namespace
}  // namespace joule::test
