// SPDX-License-Identifier: Apache-2.0
// The cluster service enforcing through real node daemons: two `joule daemon`s in this process on simulated
// GPUs (2 × V100 on n1, 1 × V100 on n2), each on its own socket. Each decision reaches the GPUs, a cap change
// moves them, a daemon that stops is counted silent at its GPUs' maximum, a job that ends gives its GPUs back
// to their own limits, and the service going away restores everything it set (the daemons' restore contract).
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "joule/cluster/service.hpp"
#include "joule/daemon/daemon.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/store/store.hpp"

#include "test_util.hpp"

namespace joule::cluster {
namespace {

using std::chrono::seconds;

// A daemon on simulated GPUs, served on its own thread.
class NodeDaemon {
 public:
  NodeDaemon(const std::string& spec, std::string socket_path) : socket_path_(std::move(socket_path)) {
    auto opened = device::sim::open_sim_gpus(*device::sim::parse_spec(spec), clock_);
    EXPECT_TRUE(opened) << opened.error().message();
    gpus_ = std::move(*opened);
  }
  ~NodeDaemon() { stop(); }

  void start() {
    daemon::DaemonOptions options;
    options.socket_path = socket_path_;
    options.audit_log = socket_path_ + ".audit";
    std::vector<device::Gpu*> served;
    for (auto& gpu : gpus_) {
      served.push_back(gpu.get());
    }
    auto started = daemon::Daemon::start(std::move(served), *clock_, std::move(options));
    ASSERT_TRUE(started) << started.error().message();
    daemon_ = std::move(*started);
    thread_ = std::thread([this] { (void)daemon_->run(); });
  }
  void stop() {
    if (daemon_) {
      daemon_->stop();
      thread_.join();
      daemon_.reset();
    }
  }
  /// @return GPU `index`'s power limit, W.
  double limit_w(size_t index) { return *gpus_[index]->power_limit_mw() / 1000.0; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  std::shared_ptr<Clock> clock_{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus_;
  std::string socket_path_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::thread thread_;
};

JobSpec v100_job(const std::string& id, JobKind kind, std::vector<GpuRef> gpus) {
  JobSpec spec;
  spec.id = id;
  spec.kind = kind;
  spec.gpus = std::move(gpus);
  spec.frontier = {{100, 1.8}, {150, 1.3}, {200, 1.1}, {250, 1.0}};
  if (kind == JobKind::kInference) {
    // Near full speed at its floor: the watts above it buy the training job more.
    spec.frontier = {{100, 1.8}, {150, 1.02}, {250, 1.0}};
    spec.slo_floor_w = 150;
  }
  return spec;
}

TEST(ClusterDaemonEnforcement, DecisionsReachTheNodesGpusAndAStoppedDaemonIsCountedAtItsMaximum) {
  test::TempDir dir;
  NodeDaemon n1("2xv100", dir.path() + "/n1/joule.sock");
  NodeDaemon n2("v100", dir.path() + "/n2/joule.sock");
  n1.start();
  n2.start();
  auto opened = store::open_store("sqlite:" + dir.path() + "/cluster.db");
  ASSERT_TRUE(opened) << opened.error().message();
  VirtualClock clock(1'800'000'000'000'000'000);
  auto enforcer = DaemonEnforcer::create({{"n1", n1.socket_path()}, {"n2", n2.socket_path()}});
  ASSERT_TRUE(enforcer) << enforcer.error().message();
  ClusterServiceOptions options;
  options.initial_cap_w = 450;
  options.controller.node_timeout_s = 10;
  options.clock = &clock;
  options.enforcer = std::move(*enforcer);
  auto service = ClusterService::open(std::shared_ptr<store::Store>(std::move(*opened)), options);
  ASSERT_TRUE(service) << service.error().message();

  ASSERT_TRUE((*service)->add_job(v100_job("pretrain", JobKind::kTraining, {{"n1", 0}, {"n1", 1}})));
  auto both = (*service)->add_job(v100_job("chat", JobKind::kInference, {{"n2", 0}}));
  ASSERT_TRUE(both) << both.error().message();
  // 450 W: the inference job at its floor, the training job's two GPUs share the rest.
  EXPECT_DOUBLE_EQ(n2.limit_w(0), 150);
  EXPECT_DOUBLE_EQ(n1.limit_w(0), 150);
  EXPECT_DOUBLE_EQ(n1.limit_w(1), 150);
  EXPECT_TRUE((*service)->stats().unanswered_nodes.empty());

  ASSERT_TRUE((*service)->set_cap(650));
  EXPECT_DOUBLE_EQ(n1.limit_w(0), 250);
  EXPECT_DOUBLE_EQ(n1.limit_w(1), 250);

  // n2's daemon stops: not heard from, then silent once the timeout passes (ticks within it hear n1).
  n2.stop();
  ASSERT_TRUE((*service)->tick());
  EXPECT_EQ((*service)->stats().unanswered_nodes, std::vector<std::string>{"n2"});
  clock.advance(seconds(6));
  ASSERT_TRUE((*service)->tick());
  clock.advance(seconds(6));
  auto silent = (*service)->tick();
  ASSERT_TRUE(silent) << silent.error().message();
  EXPECT_EQ((*silent)->silent_nodes, std::vector<std::string>{"n2"});
  EXPECT_DOUBLE_EQ((*silent)->reserved_w, 250);
  EXPECT_LE(n1.limit_w(0) + n1.limit_w(1) + (*silent)->reserved_w, 650);

  // The training job ends: n1's GPUs go back to their own (default) limit.
  ASSERT_TRUE((*service)->remove_job("pretrain"));
  EXPECT_DOUBLE_EQ(n1.limit_w(0), 250);
  ASSERT_TRUE((*service)->add_job(v100_job("pretrain2", JobKind::kTraining, {{"n1", 0}, {"n1", 1}})));
  ASSERT_TRUE((*service)->set_cap(550));
  EXPECT_DOUBLE_EQ(n1.limit_w(0), 150);
  // The service goes away: the daemon restores what its connection set.
  service->reset();
  options.enforcer.reset();  // the last owner of the daemon connections
  for (int i = 0; i < 100 && n1.limit_w(0) != 250; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_DOUBLE_EQ(n1.limit_w(0), 250);
}

}  // namespace
}  // namespace joule::cluster
