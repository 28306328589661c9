// SPDX-License-Identifier: Apache-2.0
// The daemon's metrics in-process: connections, requests, setting changes and restores by reason, as a
// scrape sees them next to the GPUs' metrics.
#include "joule/daemon/metrics.hpp"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "joule/daemon/daemon.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/metrics/gpu_metrics.hpp"

#include "daemon/line_client.hpp"
#include "metrics/metrics_text.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

using test::LineClient;

template <class Predicate>
bool wait_until(Predicate done, std::chrono::milliseconds timeout = 3s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

TEST(DaemonMetricsTest, CountsConnectionsRequestsChangesAndRestores) {
  TempDir dir;
  std::shared_ptr<Clock> clock{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100"), clock));
  std::vector<device::Gpu*> raw = {gpus[0].get(), gpus[1].get()};
  metrics::MetricsRegistry metrics;
  metrics.add_collector(std::make_shared<metrics::GpuMetrics>(raw, *clock));
  daemon::DaemonOptions options;
  options.socket_path = dir.path() + "/joule.sock";
  options.audit_log = dir.path() + "/audit.log";
  options.metrics = std::make_shared<daemon::DaemonMetrics>(metrics);
  auto started = daemon::Daemon::start(raw, *clock, std::move(options));
  ASSERT_TRUE(started) << started.error().message();
  auto daemon = std::move(*started);
  std::thread loop([&daemon] { EXPECT_TRUE(daemon->run()); });
  struct Joiner {
    daemon::Daemon& daemon;
    std::thread& loop;
    ~Joiner() {
      daemon.stop();
      loop.join();
    }
  } joiner{*daemon, loop};

  const auto scrape = [&metrics] { return parse_exposition(metrics.render()); };
  {
    LineClient client(dir.path() + "/joule.sock");
    const auto hello = client.request(R"({"id":1,"op":"hello","protocol":1,"client":"metrics"})");
    ASSERT_TRUE(hello["ok"]) << hello;
    ASSERT_TRUE(client.request(R"({"id":2,"op":"set_power_limit","gpu":0,"power_limit_mw":150000})")["ok"]);
    ASSERT_TRUE(client.request(R"({"id":3,"op":"reset_power_limit","gpu":0})")["ok"]);
    ASSERT_TRUE(client.request(R"({"id":4,"op":"set_power_limit","gpu":1,"power_limit_mw":200000})")["ok"]);
    const auto during = scrape();
    EXPECT_EQ(during.value("joule_daemon_connections_open"), 1.0);
    EXPECT_EQ(during.value("joule_daemon_requests_total"), 4.0);
    EXPECT_EQ(during.value("joule_daemon_setting_changes_total", {{"setting", "power_limit_mw"}}), 2.0);
    EXPECT_EQ(
        during.value("joule_daemon_restores_total", {{"setting", "power_limit_mw"}, {"reason", "reset"}}),
        1.0);
    // The GPUs' metrics see the limit the daemon set.
    EXPECT_EQ(during.value("joule_gpu_power_limit_watts", {{"gpu", "1"}}), 200.0);
  }
  // The limit comes back before the restore is audited (and counted): wait for the count.
  ASSERT_TRUE(wait_until([&] {
    return scrape().value("joule_daemon_restores_total",
                          {{"setting", "power_limit_mw"}, {"reason", "disconnected"}}) == 1.0;
  }));
  const auto after = scrape();
  EXPECT_EQ(after.value("joule_daemon_connections_accepted_total"), 1.0);
  EXPECT_TRUE(wait_until([&] { return scrape().value("joule_daemon_connections_open") == 0.0; }));
  EXPECT_EQ(
      after.value("joule_daemon_restores_total", {{"setting", "power_limit_mw"}, {"reason", "disconnected"}}),
      1.0);
  EXPECT_EQ(after.value("joule_daemon_refused_requests_total"), 0.0);
  EXPECT_EQ(after.count("joule_daemon_restore_failures_total"),
            0u);  // labelled series appear when first used
  EXPECT_EQ(after.value("joule_gpu_power_limit_watts", {{"gpu", "1"}}), 250.0);
}

TEST(DaemonMetricsTest, AuditEntriesMapToTheirCounters) {
  metrics::MetricsRegistry registry;
  daemon::DaemonMetrics metrics(registry);
  daemon::AuditEntry entry;
  entry.setting = "sm_clocks_mhz";
  for (const char* action : {"set", "set", "release", "restore", "restore-failed", "unknown"}) {
    entry.action = action;
    entry.reason = "lease-expired";
    metrics.audited(entry);
  }
  // Refusals: a request without the right, and network peers by their reason.
  for (const char* reason : {"permission", "tls", "authentication", "authentication"}) {
    entry.action = "refused";
    entry.reason = reason;
    metrics.audited(entry);
  }
  const auto parsed = parse_exposition(registry.render());
  EXPECT_EQ(parsed.value("joule_daemon_setting_changes_total", {{"setting", "sm_clocks_mhz"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_daemon_restores_total", {{"reason", "lease-expired"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_daemon_restore_failures_total", {{"reason", "lease-expired"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_daemon_refused_requests_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_daemon_network_refusals_total", {{"reason", "tls"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_daemon_network_refusals_total", {{"reason", "authentication"}}), 2.0);
}

}  // namespace
}  // namespace joule::test
