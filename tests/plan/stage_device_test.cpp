// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/stage_device.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "joule/device/settings_guard.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

constexpr auto kF = Instruction::kForward;
constexpr auto kB = Instruction::kBackward;
constexpr double kBlockingW = 75;

const Profile& example_profile() {
  static const Profile profile =
      value_or_throw(Profile::read(std::string(JOULE_PERSEUS_DATA_DIR) + "/example_s4_m8_profile.csv"));
  return profile;
}

std::unique_ptr<StageDevice> make_device(int stage, double slowdown = 1.0) {
  auto device = StageDevice::create(example_profile(), stage, kBlockingW, slowdown);
  EXPECT_TRUE(device) << device.error().message();
  return std::move(*device);
}

double energy_j(StageDevice& device) {
  return mj_to_j(static_cast<double>(value_or_throw(device.gpu().energy_mj())));
}

// The option of (stage, instruction) at a profiled frequency.
ProfileOption option(int stage, Instruction instruction, uint32_t frequency_mhz) {
  for (const ProfileOption& candidate : example_profile().options(stage, instruction)) {
    if (candidate.frequency_mhz == frequency_mhz) {
      return candidate;
    }
  }
  ADD_FAILURE() << "no " << frequency_mhz << " MHz in the profile";
  return {};
}

TEST(StageDevice, ComputesAtTheLockedClockWithTheProfilesTimeAndEnergy) {
  auto device = make_device(2);
  const auto& frequencies = example_profile().frequencies_mhz();
  for (const uint32_t frequency_mhz :
       {frequencies.front(), frequencies[frequencies.size() / 2], frequencies.back()}) {
    ASSERT_TRUE(device->gpu().lock_sm_clocks(frequency_mhz, frequency_mhz));
    for (const Instruction instruction : {kF, kB}) {
      const ProfileOption expected = option(2, instruction, frequency_mhz);
      const double before_j = energy_j(*device);
      const double before_s = device->now_s();
      auto run = device->run(instruction, 0);
      ASSERT_TRUE(run) << run.error().message();
      EXPECT_DOUBLE_EQ(run->start_s, before_s);
      EXPECT_NEAR(run->end_s - run->start_s, expected.time_s, 1e-12);
      EXPECT_DOUBLE_EQ(device->now_s(), run->end_s);
      // The counter has 1 mJ resolution; the clock 1 ns (at most ~0.4 mJ at these powers).
      EXPECT_NEAR(energy_j(*device) - before_j, expected.energy_j, 2e-3) << frequency_mhz << " MHz";
    }
  }
}

TEST(StageDevice, UnlockedItRunsAtTheHighestClock) {
  auto device = make_device(0);
  const ProfileOption fastest = example_profile().options(0, kF).front();
  auto run = device->run(kF, 0);
  ASSERT_TRUE(run);
  EXPECT_NEAR(run->end_s - run->start_s, fastest.time_s, 1e-12);
  EXPECT_NEAR(energy_j(*device), fastest.energy_j, 2e-3);
}

TEST(StageDevice, IdlesAtTheBlockingPowerUntilTheInputArrives) {
  auto device = make_device(1);
  const ProfileOption fastest = example_profile().options(1, kB).front();
  ASSERT_TRUE(device->idle_until(0.5));
  EXPECT_DOUBLE_EQ(device->now_s(), 0.5);
  EXPECT_NEAR(energy_j(*device), 0.5 * kBlockingW, 2e-3);
  EXPECT_NEAR(mw_to_w(value_or_throw(device->gpu().power_mw())), kBlockingW, 1e-3);
  ASSERT_TRUE(device->idle_until(0.25));  // the past: nothing
  EXPECT_DOUBLE_EQ(device->now_s(), 0.5);

  auto run = device->run(kB, 1.5);  // waits a second on its input first
  ASSERT_TRUE(run);
  EXPECT_DOUBLE_EQ(run->start_s, 1.5);
  EXPECT_NEAR(run->end_s, 1.5 + fastest.time_s, 1e-12);
  EXPECT_NEAR(energy_j(*device), 1.5 * kBlockingW + fastest.energy_j, 2e-3);

  auto next = device->run(kB, 0.0);  // an input that arrived long ago: starts right away
  ASSERT_TRUE(next);
  EXPECT_DOUBLE_EQ(next->start_s, run->end_s);
}

TEST(StageDevice, SlowdownStretchesTimeAtTheSamePower) {
  auto device = make_device(3, 1.5);
  EXPECT_DOUBLE_EQ(device->slowdown(), 1.5);
  const ProfileOption fastest = example_profile().options(3, kF).front();
  auto slow = device->run(kF, 0);
  ASSERT_TRUE(slow);
  EXPECT_NEAR(slow->end_s - slow->start_s, 1.5 * fastest.time_s, 1e-12);
  EXPECT_NEAR(energy_j(*device), 1.5 * fastest.energy_j, 2e-3);

  ASSERT_TRUE(device->set_slowdown(1.0));
  const double before_j = energy_j(*device);
  auto normal = device->run(kF, 0);
  ASSERT_TRUE(normal);
  EXPECT_NEAR(normal->end_s - normal->start_s, fastest.time_s, 1e-12);
  EXPECT_NEAR(energy_j(*device) - before_j, fastest.energy_j, 2e-3);
}

TEST(StageDevice, TimeDoesNotDriftOverManyComputations) {
  auto device = make_device(0);
  const ProfileOption fastest = example_profile().options(0, kF).front();
  double expected_s = 0;
  for (int i = 0; i < 10'000; ++i) {
    ASSERT_TRUE(device->run(kF, 0));
    expected_s += fastest.time_s;
  }
  EXPECT_NEAR(device->now_s(), expected_s, 1e-9);
  EXPECT_NEAR(to_seconds(device->clock().now()), expected_s, 1e-9);
}

TEST(StageDevice, IsAGpuWithTheProfilesClocksAndASettingsGuardRestoresIt) {
  auto device = make_device(0);
  const auto supported = value_or_throw(device->gpu().supported_sm_clocks_mhz());
  for (const uint32_t frequency_mhz : example_profile().frequencies_mhz()) {
    EXPECT_NE(std::find(supported.begin(), supported.end(), frequency_mhz), supported.end()) << frequency_mhz;
  }
  EXPECT_TRUE(device->gpu().info().has_energy_counter);
  {
    device::SettingsGuard guard({.owner = "test", .restore_on_signals = false});
    ASSERT_TRUE(guard.lock_sm_clocks(device->gpu(), 1200, 1200));
    EXPECT_EQ(device->gpu().settings_log().back().setting, "sm_clocks_locked_mhz");
  }
  EXPECT_EQ(device->gpu().settings_log().back().setting, "sm_clocks_reset");
}

TEST(StageDevice, RejectsBadArguments) {
  JOULE_EXPECT_ERROR(StageDevice::create(example_profile(), 4, kBlockingW), ErrorCode::kInvalidArgument,
                     "stage 4 is not in the profile, which has stages 0 to 3");
  JOULE_EXPECT_ERROR(StageDevice::create(example_profile(), 0, -1), ErrorCode::kInvalidArgument,
                     "the blocking power must be finite and non-negative, got -1 W");
  JOULE_EXPECT_ERROR(StageDevice::create(example_profile(), 0, kBlockingW, 0), ErrorCode::kInvalidArgument,
                     "the slowdown must be a finite factor in [0.01, 100], got 0");
  auto device = make_device(0);
  JOULE_EXPECT_ERROR(device->run(kF, std::nan("")), ErrorCode::kInvalidArgument,
                     "not_before_s must be finite, got nan");
  JOULE_EXPECT_ERROR(device->idle_until(INFINITY), ErrorCode::kInvalidArgument,
                     "the idle end must be finite, got inf s");
  JOULE_EXPECT_ERROR(device->set_slowdown(1000), ErrorCode::kInvalidArgument,
                     "the slowdown must be a finite factor in [0.01, 100], got 1000");
}

}  // namespace
}  // namespace joule::plan
