// SPDX-License-Identifier: Apache-2.0
// Ownership of GPU settings: save the original on the first change, keep the latest owner's value in
// force, restore when the last owner goes, and audit every step.
#include "joule/daemon/ledger.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/device/sim_gpu.hpp"

#include "test_util.hpp"

namespace joule::test {
namespace {

using daemon::AuditLog;
using daemon::Owner;
using daemon::RestoreReason;
using daemon::SettingsLedger;
using daemon::SmClockLock;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    // Drop the timestamp: the rest is deterministic.
    lines.push_back(line.substr(line.find(' ') + 1));
  }
  return lines;
}

class Ledger : public ::testing::Test {
 protected:
  Ledger() {
    auto spec = device::sim::parse_spec("2xv100");
    auto opened = device::sim::open_sim_gpus(*spec, clock);
    for (auto& gpu : *opened) {
      gpus.push_back(std::move(gpu));
    }
    audit_path = dir.path() + "/log/audit.log";
    audit = std::move(*AuditLog::open(audit_path));
    ledger =
        std::make_unique<SettingsLedger>(std::vector<device::Gpu*>{gpus[0].get(), gpus[1].get()}, *audit);
  }

  uint32_t limit(size_t gpu) { return *gpus[gpu]->power_limit_mw(); }

  TempDir dir;
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::string audit_path;
  std::unique_ptr<AuditLog> audit;
  std::unique_ptr<SettingsLedger> ledger;
  const Owner alice{1, 1000, 11};
  const Owner bob{2, 1001, 22};
};

TEST_F(Ledger, OneOwnerSetsAndTheOriginalComesBack) {
  ASSERT_EQ(limit(0), 250'000u);
  EXPECT_EQ(ledger->set_power_limit(alice, 0, 150'000), 250'000u);
  EXPECT_EQ(ledger->set_power_limit(alice, 0, 175'000), 150'000u);  // a second change keeps the original
  EXPECT_EQ(limit(0), 175'000u);
  EXPECT_TRUE(ledger->owns_any(alice.connection));
  EXPECT_FALSE(ledger->owns_any(bob.connection));
  EXPECT_EQ(ledger->owned_settings(), 1u);
  EXPECT_EQ(limit(1), 250'000u);  // the other GPU is untouched
  const auto released = ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_EQ(released,
            std::vector<std::string>{"GPU 0 (Tesla V100-PCIE-32GB (simulated)) power limit 175 W -> 250 W"});
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_FALSE(ledger->owns_any(alice.connection));
  EXPECT_EQ(lines_of(audit_path),
            (std::vector<std::string>{
                "action=set gpu=0 setting=power_limit_mw old=250000 new=150000 conn=1 uid=1000 pid=11 "
                "reason=request",
                "action=set gpu=0 setting=power_limit_mw old=150000 new=175000 conn=1 uid=1000 pid=11 "
                "reason=request",
                "action=restore gpu=0 setting=power_limit_mw old=175000 new=250000 conn=1 uid=1000 pid=11 "
                "reason=disconnected",
            }));
}

TEST_F(Ledger, TheLatestOwnerWinsAndTheOriginalComesBackWhenTheLastGoes) {
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  EXPECT_EQ(ledger->set_power_limit(bob, 0, 200'000), 150'000u);
  EXPECT_EQ(limit(0), 200'000u);
  // alice goes: bob's value, in force, stays.
  ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_EQ(limit(0), 200'000u);
  // bob goes: the value before anyone changed it.
  ledger->release_all(bob.connection, RestoreReason::kLeaseExpired);
  EXPECT_EQ(limit(0), 250'000u);
  const auto lines = lines_of(audit_path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2],
            "action=release gpu=0 setting=power_limit_mw old=200000 new=200000 conn=1 uid=1000 pid=11 "
            "reason=disconnected detail=\"connection 2 keeps its value in force\"");
  EXPECT_EQ(lines[3],
            "action=restore gpu=0 setting=power_limit_mw old=200000 new=250000 conn=2 uid=1001 pid=22 "
            "reason=lease-expired");
}

TEST_F(Ledger, WhenTheOwnerInForceGoesTheNextOwnersValueComesBack) {
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  ASSERT_TRUE(ledger->set_power_limit(bob, 0, 200'000));
  EXPECT_EQ(ledger->release_power_limit(bob, 0, RestoreReason::kReset), 150'000u);
  EXPECT_EQ(limit(0), 150'000u);
  // alice sets again: she moves on top; her own release then restores the original.
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 125'000));
  EXPECT_EQ(ledger->release_power_limit(alice, 0, RestoreReason::kReset), 250'000u);
  // Releasing what one does not own changes nothing.
  EXPECT_EQ(ledger->release_power_limit(bob, 0, RestoreReason::kReset), 250'000u);
  EXPECT_EQ(ledger->owned_settings(), 0u);
}

TEST_F(Ledger, AFailedChangeTakesNoOwnership) {
  const auto refused = ledger->set_power_limit(alice, 0, 50'000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
  EXPECT_FALSE(ledger->owns_any(alice.connection));
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_TRUE(lines_of(audit_path).empty());
  // The original of a later change is still the real one.
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_EQ(limit(0), 250'000u);
}

TEST_F(Ledger, ClockLocksAreOwnedAndResetLikeLimits) {
  ASSERT_TRUE(ledger->lock_sm_clocks(alice, 1, SmClockLock{900, 1200}));
  ASSERT_TRUE(ledger->lock_sm_clocks(bob, 1, SmClockLock{600, 800}));
  EXPECT_EQ(ledger->sm_clock_lock(1), (SmClockLock{600, 800}));
  EXPECT_FALSE(ledger->sm_clock_lock(0));
  ASSERT_TRUE(ledger->release_sm_clocks(bob, 1, RestoreReason::kReset));
  EXPECT_EQ(ledger->sm_clock_lock(1), (SmClockLock{900, 1200}));
  ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_FALSE(ledger->sm_clock_lock(1));
  std::vector<std::string> settings;
  for (const auto& record : gpus[1]->settings_log()) {
    settings.push_back(fmt::format("{} {} {}", record.setting, record.value_min, record.value));
  }
  EXPECT_EQ(settings,
            (std::vector<std::string>{"sm_clocks_locked_mhz 900 1200", "sm_clocks_locked_mhz 600 800",
                                      "sm_clocks_locked_mhz 900 1200", "sm_clocks_reset 0 0"}));
  const auto lines = lines_of(audit_path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3],
            "action=restore gpu=1 setting=sm_clocks_mhz old=900-1200 new=unlocked conn=1 uid=1000 pid=11 "
            "reason=disconnected");
  // A lock the device refuses takes no ownership.
  EXPECT_FALSE(ledger->lock_sm_clocks(alice, 1, SmClockLock{1200, 900}));
  EXPECT_FALSE(ledger->owns_any(alice.connection));
}

TEST_F(Ledger, ShutdownRestoresEveryOriginalOnce) {
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  ASSERT_TRUE(ledger->set_power_limit(bob, 0, 200'000));
  ASSERT_TRUE(ledger->set_power_limit(bob, 1, 100'000));
  ASSERT_TRUE(ledger->lock_sm_clocks(alice, 1, SmClockLock{900, 1200}));
  const auto restored = ledger->restore_everything(RestoreReason::kShutdown);
  EXPECT_EQ(restored.size(), 3u);
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_EQ(limit(1), 250'000u);
  EXPECT_FALSE(ledger->sm_clock_lock(1));
  EXPECT_EQ(ledger->owned_settings(), 0u);
  // One device write per setting: GPU 0 went 150 → 200 → 250, never back through 150.
  std::vector<uint32_t> gpu0;
  for (const auto& record : gpus[0]->settings_log()) {
    gpu0.push_back(record.value);
  }
  EXPECT_EQ(gpu0, (std::vector<uint32_t>{150'000, 200'000, 250'000}));
  const auto lines = lines_of(audit_path);
  EXPECT_EQ(lines.back(),
            "action=restore gpu=1 setting=sm_clocks_mhz old=900-1200 new=unlocked conn=1 uid=1000 pid=11 "
            "reason=shutdown");
}

TEST_F(Ledger, TheStateFileListsOriginalsWhileSettingsAreOwned) {
  const std::string state = dir.path() + "/joule.sock.state";
  ledger->set_state_file(state);
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  ASSERT_TRUE(std::filesystem::exists(state));
  const auto saved = nlohmann::json::parse(std::ifstream(state));
  EXPECT_EQ(saved["format"], "joule-daemon-state");
  ASSERT_EQ(saved["settings"].size(), 1u);
  EXPECT_EQ(saved["settings"][0]["uuid"], gpus[0]->info().uuid);
  EXPECT_EQ(saved["settings"][0]["setting"], "power_limit_mw");
  EXPECT_EQ(saved["settings"][0]["original"], 250'000);
  ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_FALSE(std::filesystem::exists(state));
}

TEST_F(Ledger, ARestartedDaemonRestoresWhatADeadOneLeft) {
  const std::string state = dir.path() + "/joule.sock.state";
  ledger->set_state_file(state);
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  ASSERT_TRUE(ledger->set_power_limit(bob, 0, 175'000));
  ASSERT_TRUE(ledger->lock_sm_clocks(bob, 1, SmClockLock{900, 1200}));
  // The daemon dies without restoring; a new one starts on the same GPUs.
  SettingsLedger next({gpus[0].get(), gpus[1].get()}, *audit);
  next.set_state_file(state);
  const auto recovered = next.recover();
  EXPECT_EQ(recovered, (std::vector<std::string>{
                           "GPU 0 (Tesla V100-PCIE-32GB (simulated)) power limit -> 250000",
                           "GPU 1 (Tesla V100-PCIE-32GB (simulated)) SM clocks -> unlocked",
                       }));
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_EQ(gpus[1]->settings_log().back().setting, "sm_clocks_reset");
  EXPECT_FALSE(std::filesystem::exists(state));
  const auto lines = lines_of(audit_path);
  EXPECT_EQ(lines[lines.size() - 2],
            fmt::format(
                "action=restore gpu=0 setting=power_limit_mw new=250000 conn=0 uid=0 pid={} reason=recovered "
                "detail=\"left by a daemon that stopped without restoring\"",
                ::getpid()));
  // Nothing to recover the second time; a broken file is left alone with an error logged.
  EXPECT_TRUE(next.recover().empty());
  dir.write("joule.sock.state", "{broken");
  EXPECT_TRUE(next.recover().empty());
}

TEST(AuditLog, LinesAreOneLineWithQuotedDetail) {
  daemon::AuditEntry entry;
  entry.action = "refused";
  entry.gpu = 1;
  entry.setting = "power_limit_mw";
  entry.new_value = "150000";
  entry.connection = 4;
  entry.uid = 65534;
  entry.pid = 99;
  entry.reason = "permission";
  entry.detail = "needs \"control\"\nsecond line";
  EXPECT_EQ(
      AuditLog::format(entry, 1'767'225'600'123'000'000),
      "2026-01-01T00:00:00.123Z action=refused gpu=1 setting=power_limit_mw new=150000 conn=4 uid=65534 "
      "pid=99 reason=permission detail=\"needs \\\"control\\\"\\nsecond line\"\n");
}

TEST(AuditLog, UnwritableFolderIsAClearError) {
  JOULE_EXPECT_ERROR(
      AuditLog::open("/proc/joule/audit.log"), ErrorCode::kIo,
      "--audit-log /proc/joule/audit.log: cannot create folder /proc/joule: No such file or directory");
}

}  // namespace
}  // namespace joule::test
