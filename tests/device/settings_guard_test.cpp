// SPDX-License-Identifier: Apache-2.0
#include "joule/device/settings_guard.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

#include "device/settings_guard_helper.hpp"
#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using ::testing::_;
using ::testing::NiceMock;
using ::testing::Return;

// Two simulated V100s (100–250 W, default 250 W) on a virtual clock.
struct Rig {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<sim::SimulatedGpu>> gpus =
      std::move(*sim::open_sim_gpus(*sim::parse_spec("2xv100"), clock));

  // "limit 200000", "lock 1200-1200", "reset" per device call, in order.
  std::vector<std::string> calls(size_t gpu = 0) const {
    std::vector<std::string> result;
    for (const auto& record : gpus[gpu]->settings_log()) {
      if (record.setting == "power_limit_mw") {
        result.push_back("limit " + std::to_string(record.value));
      } else if (record.setting == "sm_clocks_locked_mhz") {
        result.push_back("lock " + std::to_string(record.value_min) + "-" + std::to_string(record.value));
      } else if (record.setting == "memory_clocks_locked_mhz") {
        result.push_back("memory lock " + std::to_string(record.value));
      } else if (record.setting == "memory_clocks_reset") {
        result.push_back("memory reset");
      } else {
        result.push_back("reset");
      }
    }
    return result;
  }
};

using Calls = std::vector<std::string>;

TEST(SettingsGuard, RecordsTheFirstValueAndRestoresItOnDestruction) {
  Rig rig;
  ASSERT_TRUE(rig.gpus[0]->set_power_limit_mw(180'000));
  {
    SettingsGuard guard({.owner = "test", .restore_on_signals = false});
    EXPECT_FALSE(guard.changed());
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 150'000));  // the first value stays 180 W
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[1], 120'000));
    ASSERT_TRUE(guard.lock_sm_clocks(*rig.gpus[1], 1200, 1300));
    EXPECT_TRUE(guard.changed());
  }
  EXPECT_EQ(rig.calls(0), (Calls{"limit 180000", "limit 200000", "limit 150000", "limit 180000"}));
  EXPECT_EQ(rig.calls(1), (Calls{"limit 120000", "lock 1200-1300", "limit 250000", "reset"}));
  EXPECT_EQ(*rig.gpus[0]->power_limit_mw(), 180'000u);
}

// The memory clock is a third control with the SM clock's rules: the state before is taken to be unlocked,
// a repeat is no call, and the restore removes the lock.
TEST(SettingsGuard, RestoresAMemoryClockLock) {
  Rig rig;
  {
    SettingsGuard guard({.owner = "test", .restore_on_signals = false});
    ASSERT_TRUE(guard.lock_memory_clocks(*rig.gpus[0], 877, 877));
    ASSERT_TRUE(guard.lock_memory_clocks(*rig.gpus[0], 877, 877));
    EXPECT_TRUE(guard.changed());
    // A range the GPU cannot lock records nothing more.
    EXPECT_FALSE(guard.lock_memory_clocks(*rig.gpus[1], 5000, 6000));
  }
  EXPECT_EQ(rig.calls(0), (Calls{"memory lock 877", "memory reset"}));
  EXPECT_EQ(rig.calls(1), Calls{});
}

TEST(SettingsGuard, DefaultRestoreTarget) {
  Rig rig;
  ASSERT_TRUE(rig.gpus[0]->set_power_limit_mw(180'000));
  {
    SettingsGuard guard({.power_limit_restore = PowerLimitRestore::kDefault, .restore_on_signals = false});
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));
  }
  EXPECT_EQ(*rig.gpus[0]->power_limit_mw(), 250'000u);
}

TEST(SettingsGuard, UnreadableLimitRestoresTheDefault) {
  NiceMock<test::MockGpu> gpu(test::mock_gpu_info());
  ON_CALL(gpu, do_power_limit_mw())
      .WillByDefault(Return(Result<uint32_t>(fail(ErrorCode::kNotSupported, "no reading"))));
  ON_CALL(gpu, do_power_limit_constraints())
      .WillByDefault(Return(Result<PowerLimitConstraints>({100'000, 300'000, 280'000})));
  ON_CALL(gpu, do_set_power_limit_mw(_)).WillByDefault(Return(Result<void>()));
  {
    ::testing::InSequence order;
    EXPECT_CALL(gpu, do_set_power_limit_mw(200'000));
    EXPECT_CALL(gpu, do_set_power_limit_mw(280'000));
  }
  SettingsGuard guard({.restore_on_signals = false});
  ASSERT_TRUE(guard.set_power_limit_mw(gpu, 200'000));
  EXPECT_TRUE(guard.restore());
}

TEST(SettingsGuard, RestoresOnceAndRecordsAgainAfterARestore) {
  Rig rig;
  {
    SettingsGuard guard({.restore_on_signals = false});
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));  // the same setting: no device call
    ASSERT_TRUE(guard.lock_sm_clocks(*rig.gpus[0], 1200, 1200));
    ASSERT_TRUE(guard.lock_sm_clocks(*rig.gpus[0], 1200, 1200));
    ASSERT_TRUE(guard.restore());
    EXPECT_FALSE(guard.changed());
    ASSERT_TRUE(guard.restore());  // nothing changed since: no device call
    EXPECT_EQ(rig.calls(), (Calls{"limit 200000", "lock 1200-1200", "limit 250000", "reset"}));
    // A change after a restore is recorded again (the limit in force is 250 W now) and restored once more.
    ASSERT_TRUE(rig.gpus[0]->set_power_limit_mw(230'000));
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));
  }
  EXPECT_EQ(rig.calls(), (Calls{"limit 200000", "lock 1200-1200", "limit 250000", "reset", "limit 230000",
                                "limit 200000", "limit 230000"}));
}

TEST(SettingsGuard, ARefusedFirstChangeRecordsNothingAndAFailedRestoreIsKept) {
  NiceMock<test::MockGpu> gpu(test::mock_gpu_info());
  ON_CALL(gpu, do_power_limit_mw()).WillByDefault(Return(Result<uint32_t>(250'000)));
  ON_CALL(gpu, do_lock_sm_clocks(_, _))
      .WillByDefault(Return(Result<void>(fail(ErrorCode::kPermissionDenied, "needs root"))));
  ON_CALL(gpu, do_reset_sm_clocks())
      .WillByDefault(Return(Result<void>(fail(ErrorCode::kDevice, "GPU is lost"))));
  SettingsGuard guard({.restore_on_signals = false});
  JOULE_EXPECT_ERROR(guard.lock_sm_clocks(gpu, 1200, 1200), ErrorCode::kPermissionDenied, "needs root");
  EXPECT_FALSE(guard.changed()) << "the device refused: nothing to restore";
  ON_CALL(gpu, do_lock_sm_clocks(_, _)).WillByDefault(Return(Result<void>()));
  ASSERT_TRUE(guard.lock_sm_clocks(gpu, 1200, 1200));
  EXPECT_CALL(gpu, do_reset_sm_clocks()).Times(1);
  JOULE_EXPECT_ERROR(guard.restore(), ErrorCode::kDevice, "GPU is lost");
  EXPECT_TRUE(guard.changed()) << "kept, so that a later restore tries again";
  ::testing::Mock::VerifyAndClearExpectations(&gpu);
  ON_CALL(gpu, do_reset_sm_clocks()).WillByDefault(Return(Result<void>()));
  EXPECT_CALL(gpu, do_reset_sm_clocks()).Times(1);
  EXPECT_TRUE(guard.restore());
  EXPECT_FALSE(guard.changed());
}

TEST(SettingsGuard, HandlersFollowTheGuardsThatAskForThem) {
  {
    SettingsGuard quiet({.restore_on_signals = false});
    EXPECT_FALSE(SettingsGuard::signal_handler_installed(SIGINT));
  }
  auto first = std::make_unique<SettingsGuard>();
  auto second = std::make_unique<SettingsGuard>();
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    EXPECT_TRUE(SettingsGuard::signal_handler_installed(signal_number)) << signal_number;
  }
  first.reset();
  EXPECT_TRUE(SettingsGuard::signal_handler_installed(SIGHUP));  // one is still alive
  second.reset();
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    EXPECT_FALSE(SettingsGuard::signal_handler_installed(signal_number)) << signal_number;
  }
}

std::atomic<int> g_previous_handler_calls{0};
void count_previous_handler(int) {
  g_previous_handler_calls.fetch_add(1);
}

TEST(SettingsGuard, SignalRestoresThenCallsThePreviousHandlerInProcess) {
  struct sigaction mine {};
  struct sigaction before {};
  mine.sa_handler = &count_previous_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGHUP, &mine, &before), 0);
  g_previous_handler_calls = 0;
  Rig rig;
  {
    SettingsGuard guard;
    ASSERT_TRUE(guard.set_power_limit_mw(*rig.gpus[0], 200'000));
    ASSERT_TRUE(guard.lock_sm_clocks(*rig.gpus[1], 1200, 1200));
    EXPECT_FALSE(guard.consume_signal_restore());
    ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
    for (int i = 0; i < 2000 && g_previous_handler_calls.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(g_previous_handler_calls.load(), 1);
    EXPECT_EQ(rig.calls(0), (Calls{"limit 200000", "limit 250000"}));
    EXPECT_EQ(rig.calls(1), (Calls{"lock 1200-1200", "reset"}));
    EXPECT_TRUE(guard.consume_signal_restore());
    EXPECT_FALSE(guard.consume_signal_restore());  // once
    EXPECT_FALSE(guard.changed());
  }
  // Destruction found nothing left to restore.
  EXPECT_EQ(rig.calls(0).size(), 2u);
  EXPECT_EQ(rig.calls(1).size(), 2u);
  struct sigaction after {};
  ::sigaction(SIGHUP, &before, &after);
  EXPECT_EQ(after.sa_handler, &count_previous_handler);
}

// --- in a child process ----------------------------------------------------------------------------------

// What the helper's guard sets, and what puts its GPU back.
std::vector<std::string> changed() {
  return {"limit 200000", "lock 1200 1200"};
}
std::vector<std::string> restored() {
  return {"limit 220000", "reset-clocks"};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class SettingsGuardSignals : public ::testing::TestWithParam<int> {};

TEST_P(SettingsGuardSignals, RestoreThenDieOfTheSignal) {
  const int signal_number = GetParam();
  test::SettingsGuardHelper helper;
  const auto result = helper.end_with_signal("guard", signal_number);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 128 + signal_number) << result->err;
  EXPECT_EQ(helper.lines(), concat(changed(), restored()));
}

INSTANTIATE_TEST_SUITE_P(IntTermAndHup, SettingsGuardSignals, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& test_info) {
                           return "SIG" + std::string(sigabbrev_np(test_info.param));
                         });

TEST(SettingsGuardChild, RaisedSigterm) {
  test::SettingsGuardHelper helper;
  const auto result = test::run(helper.argv("guard", "raise-term"));
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_EQ(helper.lines(), concat(changed(), restored()));
}

TEST(SettingsGuardChild, ExitWithAGuardAlive) {
  test::SettingsGuardHelper helper;
  const auto result = test::run(helper.argv("guard", "exit"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(helper.lines(), concat(changed(), restored()));
}

TEST(SettingsGuardChild, AForkedChildNeverTouchesTheParentsGpus) {
  test::SettingsGuardHelper helper;
  const auto result = test::run(helper.argv("guard", "fork"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // The children (change refused, guard destroyed, exit, SIGTERM) restored nothing; the parent's exit did.
  EXPECT_EQ(helper.lines(),
            concat(concat(changed(), {"child: change refused", "children done"}), restored()));
}

}  // namespace
}  // namespace joule::device
