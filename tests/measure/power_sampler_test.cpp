// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/power_sampler.hpp"

#include <thread>

#include <gtest/gtest.h>

#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::measure {
namespace {

using ::testing::Return;

// A channel whose power the test sets directly.
struct ScriptedChannel {
  uint32_t power_mw = 0;
  bool fail = false;
  PowerChannel channel() {
    return {"scripted", [this]() -> Result<std::optional<uint32_t>> {
              if (fail) {
                return joule::fail(ErrorCode::kDevice, "sensor unplugged");
              }
              return std::optional<uint32_t>(power_mw);
            }};
  }
};

struct SamplerFixture : ::testing::Test {
  VirtualClock clock;
  ScriptedChannel source;
  // Samples `power_mw` at time `t_s`.
  void at(PowerSampler& sampler, double t_s, uint32_t power_mw) {
    clock.advance(from_seconds(t_s) - clock.now());
    source.power_mw = power_mw;
    sampler.sample_now();
  }
};

TEST_F(SamplerFixture, KeepsAChangeOnlyTimeline) {
  PowerSampler sampler({source.channel()}, clock, std::chrono::milliseconds(10));
  at(sampler, 0, 100'000);
  at(sampler, 1, 100'000);
  at(sampler, 2, 100'000);
  at(sampler, 3, 200'000);
  at(sampler, 4, 200'000);
  const auto timeline = sampler.timeline(0);
  ASSERT_EQ(timeline.size(), 2u);
  EXPECT_EQ(timeline[0].time, from_seconds(0));
  EXPECT_EQ(timeline[1].time, from_seconds(3));
  EXPECT_EQ(timeline[1].power_mw, 200'000u);
  EXPECT_EQ(sampler.latest(0)->time, from_seconds(4));
  EXPECT_EQ(sampler.timeline(0, from_seconds(1), from_seconds(3)).size(), 1u);
}

TEST_F(SamplerFixture, IntegratesFlatStretchesExactly) {
  PowerSampler sampler({source.channel()}, clock, std::chrono::milliseconds(10));
  at(sampler, 0, 100'000);  // 100 W flat from 0 to 2 s (repeats deduplicated)
  at(sampler, 1, 100'000);
  at(sampler, 2, 100'000);
  at(sampler, 3, 200'000);  // ramp 2 → 3 s, then 200 W to 5 s
  at(sampler, 5, 200'000);
  // 200 J flat + 150 J ramp + 400 J flat.
  EXPECT_DOUBLE_EQ(*sampler.energy_j(0, from_seconds(0), from_seconds(5)), 750.0);
  // Clipped inside the ramp: from 2.5 s (150 W) to 3 s (200 W) = 87.5 J, then 200 W × 1 s.
  EXPECT_DOUBLE_EQ(*sampler.energy_j(0, from_seconds(2.5), from_seconds(4)), 287.5);
  // Outside the readings the signal is held flat.
  EXPECT_DOUBLE_EQ(*sampler.energy_j(0, from_seconds(5), from_seconds(6)), 200.0);
  EXPECT_DOUBLE_EQ(*sampler.energy_j(0, from_seconds(1), from_seconds(1)), 0.0);
  JOULE_EXPECT_ERROR(sampler.energy_j(0, from_seconds(2), from_seconds(1)), ErrorCode::kInvalidArgument,
                     "energy requested over a range that ends before it starts");
  EXPECT_EQ(*sampler.peak_mw(0, from_seconds(0), from_seconds(2)), 100'000u);
  EXPECT_EQ(*sampler.peak_mw(0, from_seconds(0), from_seconds(5)), 200'000u);
}

TEST_F(SamplerFixture, NoReadingYet) {
  PowerSampler sampler({source.channel()}, clock, std::chrono::milliseconds(10));
  JOULE_EXPECT_ERROR(sampler.energy_j(0, Nanos(0), Nanos(1)), ErrorCode::kNotFound,
                     "no power reading of scripted yet");
  EXPECT_FALSE(sampler.latest(0));
  EXPECT_FALSE(sampler.peak_mw(0, Nanos(0), Nanos(1)));
  JOULE_EXPECT_THROW_MESSAGE(sampler.timeline(1), ErrorCode::kOutOfRange,
                             "power channel 1 requested from a sampler of 1 channels");
}

TEST_F(SamplerFixture, FailedReadsAreCountedNotThrown) {
  PowerSampler sampler({source.channel()}, clock, std::chrono::milliseconds(10));
  source.fail = true;
  EXPECT_NO_THROW(sampler.sample_now());
  EXPECT_EQ(sampler.failed_reads(), 1u);
  EXPECT_EQ(sampler.reads(), 1u);
  EXPECT_FALSE(sampler.latest(0));
}

TEST_F(SamplerFixture, BoundsStoredPoints) {
  PowerSampler sampler({source.channel()}, clock, std::chrono::milliseconds(10), 3);
  for (uint32_t i = 0; i < 10; ++i) {
    at(sampler, i, 1000 * (i + 1));
  }
  const auto timeline = sampler.timeline(0);
  ASSERT_EQ(timeline.size(), 3u);
  EXPECT_EQ(timeline[0].power_mw, 8000u);
}

TEST_F(SamplerFixture, RejectsBadConfiguration) {
  JOULE_EXPECT_THROW_MESSAGE(PowerSampler({source.channel()}, clock, Nanos(0)), ErrorCode::kInvalidArgument,
                             "the power sampling period must be positive (got 0 ns)");
  JOULE_EXPECT_THROW_MESSAGE(PowerSampler({PowerChannel{"empty", nullptr}}, clock, Nanos(1)),
                             ErrorCode::kInvalidArgument, "power channel 'empty' has no reader");
}

TEST(PowerSampler, BackgroundThreadPollsUntilStopped) {
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_power_mw()).WillRepeatedly(Return(123'000u));
  PowerSampler sampler(std::vector<device::Gpu*>{&gpu}, SteadyClock::instance(),
                       std::chrono::milliseconds(1));
  sampler.start();
  EXPECT_TRUE(sampler.running());
  JOULE_EXPECT_THROW_MESSAGE(sampler.start(), ErrorCode::kState, "the power sampler is already running");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (sampler.reads() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  sampler.stop();
  EXPECT_FALSE(sampler.running());
  const uint64_t reads = sampler.reads();
  EXPECT_GE(reads, 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(sampler.reads(), reads);  // stopped means stopped
  EXPECT_EQ(sampler.latest(0)->power_mw, 123'000u);
  EXPECT_EQ(sampler.label(0), "GPU 0 (Mock GPU)");
  sampler.stop();  // idempotent
}

TEST(PowerSampler, CpuPowerFromEnergyDifferences) {
  VirtualClock clock;
  device::CpuInfo info{"mock", 0, "package-0", true};
  test::MockCpu cpu(info);
  EXPECT_CALL(cpu, do_package_energy_mj()).WillOnce(Return(1'000u)).WillOnce(Return(51'000u));
  EXPECT_CALL(cpu, do_dram_energy_mj()).WillOnce(Return(10u)).WillOnce(Return(5'010u));
  PowerSampler sampler({cpu_power_channel(cpu, clock), cpu_power_channel(cpu, clock, true)}, clock,
                       std::chrono::milliseconds(10));
  sampler.sample_now();  // first reads: no power yet
  EXPECT_FALSE(sampler.latest(0));
  clock.advance(from_seconds(2));
  sampler.sample_now();
  EXPECT_EQ(sampler.latest(0)->power_mw, 25'000u);  // 50 J over 2 s
  EXPECT_EQ(sampler.latest(1)->power_mw, 2'500u);
  EXPECT_EQ(sampler.label(1), "CPU 0 (package-0) DRAM");
}

}  // namespace
}  // namespace joule::measure
