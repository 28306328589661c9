// SPDX-License-Identifier: Apache-2.0
// The stage runtime's shared pieces: SharedSettingsGuard (a SettingsGuard that keeps the GPUs' owners alive)
// and WarmupDetector (the warm-up's steady-state wait, callable from several threads).
#include "joule/plan/shared_guard.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/plan/warmup_detector.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

// A GPU at a constant operating point (the guard and the detector do not care what it computes).
class SteadyLoad final : public device::sim::Workload {
 public:
  std::string description() const override { return "steady load"; }
  device::sim::OperatingPoint at(double, std::optional<double>) const override { return {200, 1, 1410}; }
};

// A simulated GPU owned through a shared_ptr, as a Python DeviceSet owns its GPUs.
struct OwnedGpu {
  device::sim::GpuModel model = *device::sim::find_gpu_model("v100").value();
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  device::sim::SimulatedGpu gpu{model, std::make_shared<SteadyLoad>(), clock, 0};
};

TEST(SharedSettingsGuard, KeepsTheOwnerAliveUntilItHasRestored) {
  auto owned = std::make_shared<OwnedGpu>();
  const std::weak_ptr<OwnedGpu> watch = owned;
  {
    SharedSettingsGuard guard({.owner = "test", .restore_on_signals = false});
    ASSERT_TRUE(guard.lock_sm_clocks(owned, owned->gpu, 1200, 1200));
    ASSERT_TRUE(guard.lock_sm_clocks(owned, owned->gpu, 1005, 1005));
    EXPECT_EQ(guard.owner_count(), 1u) << "one owner, kept once";
    EXPECT_TRUE(guard.guard().changed());
    device::sim::SimulatedGpu* gpu = &owned->gpu;
    owned.reset();
    ASSERT_FALSE(watch.expired()) << "the guard keeps the GPU's owner";
    EXPECT_EQ(gpu->settings_log().back().setting, "sm_clocks_locked_mhz");
  }
  EXPECT_TRUE(watch.expired()) << "released once the guard has restored";
}

TEST(SharedSettingsGuard, RestoresBeforeTheOwnersGo) {
  auto owned = std::make_shared<OwnedGpu>();
  std::vector<std::string> settings;
  {
    SharedSettingsGuard guard({.owner = "test", .restore_on_signals = false});
    ASSERT_TRUE(guard.lock_sm_clocks(owned, owned->gpu, 1200, 1200));
    ASSERT_TRUE(guard.guard().restore());
    EXPECT_FALSE(guard.guard().changed());
    ASSERT_TRUE(guard.lock_sm_clocks(owned, owned->gpu, 1305, 1305));
  }
  for (const auto& record : owned->gpu.settings_log()) {
    settings.push_back(record.setting);
  }
  EXPECT_EQ(settings, (std::vector<std::string>{"sm_clocks_locked_mhz", "sm_clocks_reset",
                                                "sm_clocks_locked_mhz", "sm_clocks_reset"}));
}

TEST(WarmupDetector, AnswersAsTheSteadyStateDetectorFromAnyThread) {
  auto owned = std::make_shared<OwnedGpu>();
  measure::SteadyStateOptions options;
  options.mode = measure::SteadyStateMode::kFixed;
  options.fixed_warmup_s = 5;
  WarmupDetector detector(owned, {&owned->gpu}, owned->clock, options);
  EXPECT_EQ(detector.mode(), measure::SteadyStateMode::kFixed);
  EXPECT_FALSE(detector.ready());
  std::thread sampler([&detector] {
    for (int i = 0; i < 50; ++i) {
      detector.sample();
    }
  });
  for (int i = 0; i < 50; ++i) {
    (void)detector.describe();
    (void)detector.waited_s();
  }
  sampler.join();
  owned->clock->advance(std::chrono::seconds(5));
  EXPECT_TRUE(detector.ready());
  EXPECT_FALSE(detector.timed_out());
  EXPECT_DOUBLE_EQ(detector.waited_s(), 5.0);
  EXPECT_EQ(detector.describe(), "ready after 5.0 s (fixed mode)");
  detector.restart();
  EXPECT_FALSE(detector.ready());
}

}  // namespace
}  // namespace joule::plan
