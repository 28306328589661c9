// SPDX-License-Identifier: Apache-2.0
// Ownership of GPU settings: save the original on the first change, keep the latest owner's value in
// force, restore when the last owner goes, and audit every step.
#include "joule/daemon/ledger.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/core/log.hpp"
#include "joule/device/sim_gpu.hpp"

#include "captured_log.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using daemon::AuditLog;
using daemon::MemoryClockLock;
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

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A state file in the daemon's format asking to "restore" GPU `uuid`'s power limit to `original_mw`.
std::string state_asking(const std::string& uuid, uint32_t original_mw) {
  const nlohmann::json settings = nlohmann::json::array(
      {{{"gpu", 0}, {"uuid", uuid}, {"setting", "power_limit_mw"}, {"original", original_mw}}});
  return nlohmann::json{
             {"format", "joule-daemon-state"}, {"version", 1}, {"pid", 4242}, {"settings", settings}}
             .dump() +
         "\n";
}

// @return the names in `folder` that begin with `prefix`.
std::vector<std::string> names_beginning(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) {
      names.push_back(name);
    }
  }
  return names;
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
  const Owner alice{1, 1000, 11, {}, {}};
  const Owner bob{2, 1001, 22, {}, {}};
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

TEST_F(Ledger, MemoryClockLocksAreOwnedResetAndRecoveredLikeSmClocks) {
  // An A40: GDDR6 with four lockable memory clocks.
  auto opened = device::sim::open_sim_gpus(*device::sim::parse_spec("a40"), clock);
  ASSERT_TRUE(opened);
  device::sim::SimulatedGpu& board = *(*opened)[0];
  const std::string state = dir.path() + "/joule.sock.state";
  SettingsLedger with_memory({&board}, *audit);
  with_memory.set_state_file(state);
  ASSERT_TRUE(with_memory.lock_memory_clocks(alice, 0, MemoryClockLock{5001, 5001}));
  ASSERT_TRUE(with_memory.lock_memory_clocks(bob, 0, MemoryClockLock{405, 810}));
  EXPECT_EQ(with_memory.memory_clock_lock(0), (MemoryClockLock{405, 810}));
  EXPECT_FALSE(with_memory.sm_clock_lock(0));  // a memory lock is not an SM clock lock
  const auto saved = nlohmann::json::parse(std::ifstream(state));
  ASSERT_EQ(saved["settings"].size(), 1u);
  EXPECT_EQ(saved["settings"][0]["setting"], "memory_clocks_mhz");
  ASSERT_TRUE(with_memory.release_memory_clocks(bob, 0, RestoreReason::kReset));
  EXPECT_EQ(with_memory.memory_clock_lock(0), (MemoryClockLock{5001, 5001}));
  EXPECT_EQ(
      with_memory.release_all(alice.connection, RestoreReason::kDisconnected),
      (std::vector<std::string>{"GPU 0 (NVIDIA A40 (simulated)) memory clocks 5001-5001 MHz -> unlocked"}));
  std::vector<std::string> settings;
  for (const auto& record : board.settings_log()) {
    settings.push_back(fmt::format("{} {} {}", record.setting, record.value_min, record.value));
  }
  EXPECT_EQ(settings, (std::vector<std::string>{
                          "memory_clocks_locked_mhz 5001 5001", "memory_clocks_locked_mhz 405 810",
                          "memory_clocks_locked_mhz 5001 5001", "memory_clocks_reset 0 0"}));
  EXPECT_FALSE(std::filesystem::exists(state));
  EXPECT_EQ(
      lines_of(audit_path).back(),
      "action=restore gpu=0 setting=memory_clocks_mhz old=5001-5001 new=unlocked conn=1 uid=1000 pid=11 "
      "reason=disconnected");
  // A daemon that died holding a lock: the next one resets it at start.
  ASSERT_TRUE(with_memory.lock_memory_clocks(bob, 0, MemoryClockLock{810, 810}));
  SettingsLedger next({&board}, *audit);
  next.set_state_file(state);
  EXPECT_EQ(next.recover(),
            (std::vector<std::string>{"GPU 0 (NVIDIA A40 (simulated)) memory clocks -> unlocked"}));
  EXPECT_EQ(board.settings_log().back().setting, "memory_clocks_reset");
  // A lock the device refuses takes no ownership.
  const auto outside = with_memory.lock_memory_clocks(alice, 0, MemoryClockLock{100, 200});
  ASSERT_FALSE(outside);
  EXPECT_EQ(
      outside.error().message(),
      "memory clock range 100-200 MHz holds none of GPU 0 (NVIDIA A40 (simulated))'s memory clocks (7251, "
      "5001, 810, 405 MHz)");
  EXPECT_FALSE(with_memory.owns_any(alice.connection));
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

TEST_F(Ledger, OnlyAStateFileTheDaemonCanHaveWrittenIsReplayed) {
  // Each case puts at joule.sock.state what an unprivileged user (or a bug) could put there, asking the
  // daemon to "restore" GPU 0 to 100 W as root. None may change the GPU, none may be deleted (nor replayed
  // later): each is logged with the reason and moved aside for the administrator.
  const std::string state = dir.path() + "/joule.sock.state";
  const std::string planted = state_asking(gpus[0]->info().uuid, 100'000);
  // Root's own file in the daemon's format, elsewhere: only the way it is reached is wrong.
  const std::string elsewhere = dir.write("elsewhere/state", planted);
  ASSERT_EQ(::chmod(elsewhere.c_str(), 0600), 0);
  const auto plant = [&](const std::string& content, mode_t mode) {
    dir.write("joule.sock.state", content);
    ASSERT_EQ(::chmod(state.c_str(), mode), 0);
  };
  struct Case {
    std::string what;
    std::function<void()> make;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"a symbolic link", [&] { ASSERT_EQ(::symlink(elsewhere.c_str(), state.c_str()), 0); },
       "it is a symbolic link (never followed)"},
      {"another user's file",
       [&] {
         plant(planted, 0600);
         ASSERT_EQ(::chown(state.c_str(), 65534, 65534), 0);
       },
       "it belongs to uid 65534, not to the daemon's user (root)"},
      {"a second name of another file", [&] { ASSERT_EQ(::link(elsewhere.c_str(), state.c_str()), 0); },
       "it has 2 hard links (it may be another file of root under a second name)"},
      {"a file others may write", [&] { plant(planted, 0666); }, "other users may write it (mode 0666)"},
      {"a file its group may write", [&] { plant(planted, 0620); }, "other users may write it (mode 0620)"},
      {"a FIFO", [&] { ASSERT_EQ(::mkfifo(state.c_str(), 0600), 0); }, "it is not a regular file"},
      {"a file too big to be the daemon's", [&] { plant(planted + std::string(70'000, ' '), 0600); },
       fmt::format("it has {} bytes, more than the daemon ever writes", planted.size() + 70'000)},
      {"another format",
       [&] {
         plant(R"({"settings":[{"uuid":")" + gpus[0]->info().uuid +
                   R"(","setting":"power_limit_mw","original":100000}]})",
               0600);
       },
       R"(it is not a state file of this daemon (expected "format":"joule-daemon-state","version":1))"},
      {"another version",
       [&] {
         plant(nlohmann::json{{"format", "joule-daemon-state"}, {"version", 2}}.dump(), 0600);
       },
       R"(it is not a state file of this daemon (expected "format":"joule-daemon-state","version":1))"},
      {"not JSON", [&] { plant("{broken", 0600); }, "it is not JSON ([json.exception.parse_error.101]"},
  };
  ledger->set_state_file(state);
  for (const auto& bad : cases) {
    SCOPED_TRACE(bad.what);
    bad.make();
    struct stat before {};
    ASSERT_EQ(::lstat(state.c_str(), &before), 0);
    CapturedLog captured;
    EXPECT_TRUE(ledger->recover().empty());
    EXPECT_EQ(limit(0), 250'000u);
    EXPECT_EQ(limit(1), 250'000u);
    EXPECT_TRUE(gpus[0]->settings_log().empty());
    const std::string logged = captured.text();
    const std::string expected =
        fmt::format("error: not replaying the daemon state file {}: {}", state, bad.why);
    EXPECT_EQ(logged.rfind(expected, 0), 0u) << logged;
    EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1) << logged;
    // Moved aside, the same file (not a copy: links stay links), and said where.
    const auto aside = names_beginning(dir.path(), "joule.sock.state.untrusted.");
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_NE(
        logged.find(fmt::format("; nothing was restored from it; it was moved to {}/{} for inspection\n",
                                dir.path(), aside[0])),
        std::string::npos)
        << logged;
    struct stat after {};
    ASSERT_EQ(::lstat((dir.path() + "/" + aside[0]).c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(state)));
    std::filesystem::remove(dir.path() + "/" + aside[0]);
  }
  EXPECT_EQ(read_all(elsewhere), planted);  // the link's target was neither read into the GPU nor changed
  EXPECT_TRUE(lines_of(audit_path).empty());
  // A second aside in the same second does not replace the first.
  plant(planted, 0666);
  ledger->recover();
  plant(planted, 0666);
  ledger->recover();
  EXPECT_EQ(names_beginning(dir.path(), "joule.sock.state.untrusted.").size(), 2u);
}

TEST_F(Ledger, AStateFileOfMode0644FromAnEarlierReleaseIsReplayed) {
  // Earlier releases wrote the state file 0644 (through the umask): still the daemon's own.
  const std::string state = dir.write("joule.sock.state", state_asking(gpus[0]->info().uuid, 150'000));
  ASSERT_EQ(::chmod(state.c_str(), 0644), 0);
  ledger->set_state_file(state);
  EXPECT_EQ(ledger->recover(),
            std::vector<std::string>{"GPU 0 (Tesla V100-PCIE-32GB (simulated)) power limit -> 150000"});
  EXPECT_EQ(limit(0), 150'000u);
  EXPECT_FALSE(std::filesystem::exists(state));
  EXPECT_TRUE(names_beginning(dir.path(), "joule.sock.state.untrusted.").empty());
}

TEST_F(Ledger, TheStateFileIsWrittenAfreshNeverThroughALink) {
  // Links planted where the daemon writes: the temporary file of this process and the state file itself.
  const std::string victim = dir.write("victim", "precious\n");
  const std::string state = dir.path() + "/joule.sock.state";
  const std::string temporary = fmt::format("{}.tmp.{}", state, ::getpid());
  ASSERT_EQ(::symlink(victim.c_str(), temporary.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), state.c_str()), 0);
  ledger->set_state_file(state);
  ASSERT_TRUE(ledger->set_power_limit(alice, 0, 150'000));
  EXPECT_EQ(read_all(victim), "precious\n");
  struct stat info {};
  ASSERT_EQ(::lstat(state.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_EQ(info.st_uid, ::geteuid());
  EXPECT_EQ(info.st_nlink, 1u);
  EXPECT_EQ(nlohmann::json::parse(read_all(state))["settings"][0]["original"], 250'000);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(temporary)));
  // Removing it when nothing is owned removes the name, never a link's target: a link put in its place
  // meanwhile goes, the victim stays.
  ASSERT_TRUE(std::filesystem::remove(state));
  ASSERT_EQ(::symlink(victim.c_str(), state.c_str()), 0);
  ledger->release_all(alice.connection, RestoreReason::kDisconnected);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(state)));
  EXPECT_EQ(read_all(victim), "precious\n");
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

TEST(AuditLog, IsOpenedOnlyAsTheDaemonsOwnFileInASafeFolder) {
  // Before: --audit-log was opened following links (and whatever file was there): a link or a second name
  // at its path made the daemon (root) append to any file.
  TempDir dir;
  const std::string root = std::filesystem::canonical(dir.path()).string();
  const std::string folder = root + "/log";
  std::filesystem::create_directories(folder);
  ASSERT_EQ(::chmod(folder.c_str(), 0750), 0);
  const std::string path = folder + "/audit.log";
  const std::string victim = dir.write("victim", "precious\n");
  const std::string daemon_user = ::geteuid() == 0 ? "root" : "uid " + std::to_string(::geteuid());
  const auto not_made = [&](const std::string& why) {
    return "the audit log " + path + " was not made by the daemon (" + why +
           "); it is left untouched: remove it (after checking who made it) or choose another --audit-log";
  };
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  JOULE_EXPECT_ERROR(
      AuditLog::open(path), ErrorCode::kPermissionDenied,
      "the audit log " + path +
          " is a symbolic link: someone planted it to make the daemon append to another file; it "
          "is not followed: remove it (after checking who made it) or choose another --audit-log");
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::link(victim.c_str(), path.c_str()), 0);
  JOULE_EXPECT_ERROR(
      AuditLog::open(path), ErrorCode::kPermissionDenied,
      not_made("it has 2 hard links (it may be another file of " + daemon_user + " under a second name)"));
  ASSERT_EQ(::unlink(path.c_str()), 0);
  dir.write("log/audit.log", "");
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  JOULE_EXPECT_ERROR(AuditLog::open(path), ErrorCode::kPermissionDenied,
                     not_made("other users may write it (mode 0666)"));
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    JOULE_EXPECT_ERROR(AuditLog::open(path), ErrorCode::kPermissionDenied,
                       not_made("it belongs to uid 65534, not to the daemon's user (root)"));
  }
  ASSERT_EQ(::unlink(path.c_str()), 0);
  // A folder others may write: they could plant any of the above.
  ASSERT_EQ(::chmod(folder.c_str(), 0777), 0);
  JOULE_EXPECT_ERROR(
      AuditLog::open(path), ErrorCode::kPermissionDenied,
      "the audit log's folder " + folder +
          " is writable by its group and others (mode 0777) and not sticky: any user could plant "
          "files that the daemon opens as " +
          daemon_user + "; make it 0750 (chmod go-w " + folder + ") or sticky (chmod +t " + folder +
          "), or choose another --audit-log");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(read_all(victim), "precious\n");
  // A folder above writable by its group is accepted (Ubuntu's /var/log is root:syslog 0775); the log is
  // created 0640 and appended to.
  ASSERT_EQ(::chmod(folder.c_str(), 0750), 0);
  ASSERT_EQ(::chmod(root.c_str(), 0775), 0);
  auto opened = AuditLog::open(path);
  ASSERT_TRUE(opened) << opened.error().message();
  daemon::AuditEntry entry;
  entry.action = "set";
  (*opened)->record(entry);
  struct stat info {};
  ASSERT_EQ(::lstat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
  EXPECT_EQ(lines_of(path), std::vector<std::string>{"action=set conn=0 uid=0 pid=0"});
}

}  // namespace
}  // namespace joule::test
