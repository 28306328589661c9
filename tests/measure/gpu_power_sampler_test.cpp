// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/gpu_power_sampler.hpp"

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

namespace joule::measure {
namespace {

struct GpuSamplerFixture : ::testing::Test {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::vector<device::Gpu*> open(std::string_view spec_text) {
    gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec_text), clock));
    std::vector<device::Gpu*> raw;
    for (auto& gpu : gpus) {
      raw.push_back(gpu.get());
    }
    return raw;
  }
};

TEST_F(GpuSamplerFixture, FindsChannelsByFrameworkIndex) {
  auto all = open("3xv100:imagenet:256");
  GpuPowerSampler sampler({all[2], all[0]}, *clock, std::chrono::milliseconds(100));
  EXPECT_EQ(sampler.gpu_indices(), (std::vector<int>{2, 0}));
  EXPECT_EQ(*sampler.channel(2), 0u);
  EXPECT_EQ(*sampler.channel(0), 1u);
  const auto missing = sampler.channel(1);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "GPU 1 is not sampled (sampled GPUs: 2, 0)");
}

TEST_F(GpuSamplerFixture, SampleForOnAVirtualClockReadsAtBothEndsWithoutAThread) {
  GpuPowerSampler sampler(open("2xv100:imagenet:256"), *clock, std::chrono::milliseconds(100));
  sampler.sample_for(std::chrono::seconds(10));
  EXPECT_FALSE(sampler.sampler().running());
  EXPECT_EQ(clock->now(), std::chrono::seconds(10));
  EXPECT_EQ(sampler.sampler().reads(), 4u);  // two GPUs, read at both ends
  const auto energies = sampler.energy_j(Nanos(0), std::chrono::seconds(10));
  ASSERT_TRUE(energies) << energies.error().message();
  ASSERT_EQ(energies->size(), 2u);
  EXPECT_EQ((*energies)[1].first, 1);
  EXPECT_GT((*energies)[1].second, 0.0);
  // A constant simulated draw: the energy is the power times the time.
  const double power_w = mw_to_w(sampler.sampler().latest(1)->power_mw);
  EXPECT_NEAR((*energies)[1].second, power_w * 10, 1e-6);
}

TEST_F(GpuSamplerFixture, EnergyBeforeAReadingAndBackwardsWindowsAreRefused) {
  GpuPowerSampler sampler(open("v100:imagenet:256"), *clock, std::chrono::milliseconds(100));
  EXPECT_EQ(sampler.energy_j(Nanos(0), Nanos(1)).error().code(), ErrorCode::kNotFound);
  sampler.sampler().sample_now();
  EXPECT_EQ(sampler.energy_j(Nanos(1), Nanos(0)).error().code(), ErrorCode::kInvalidArgument);
}

TEST(GpuPowerSamplerReal, SampleForOnTheSteadyClockStartsAndStopsTheThread) {
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100:imagenet:256"), clock));
  GpuPowerSampler sampler({gpus[0].get()}, SteadyClock::instance(), std::chrono::milliseconds(1));
  sampler.sample_for(Nanos(0));
  EXPECT_FALSE(sampler.sampler().running());
  EXPECT_GE(sampler.sampler().reads(), 1u);  // at least the closing read (the thread may not have polled)
}

}  // namespace
}  // namespace joule::measure
