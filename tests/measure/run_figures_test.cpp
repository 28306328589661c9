// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/run_figures.hpp"

#include <cmath>
#include <limits>
#include <memory>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

#include "test_util.hpp"

namespace joule::measure {
namespace {

TEST(RunFigures, SpreadIsTheMeanAndTheSampleStandardDeviation) {
  const Spread none = spread_of({});
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.stddev, 0);
  const Spread one = spread_of({3});
  EXPECT_EQ(one.mean, 3);
  EXPECT_EQ(one.stddev, 0);
  const Spread three = spread_of({1, 2, 3});
  EXPECT_DOUBLE_EQ(three.mean, 2);
  EXPECT_DOUBLE_EQ(three.stddev, 1);  // n − 1
  EXPECT_TRUE(std::isnan(spread_of({1, std::numeric_limits<double>::quiet_NaN()}).mean));
}

// Two simulated GPUs measured over 2 s; their peaks come from scripted channels.
struct FiguresFixture : ::testing::Test {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> owned =
      value_or_throw(device::sim::open_sim_gpus(value_or_throw(device::sim::parse_spec("2xv100")), clock));
  std::vector<device::Gpu*> gpus = {owned[0].get(), owned[1].get()};
  uint32_t power_mw[2] = {0, 0};
  PowerSampler sampler{{{"a", [this]() -> Result<std::optional<uint32_t>> { return power_mw[0]; }},
                        {"b", [this]() -> Result<std::optional<uint32_t>> { return power_mw[1]; }}},
                       *clock,
                       std::chrono::milliseconds(10)};
};

TEST_F(FiguresFixture, AveragePeakAndWhyNotMeasurable) {
  power_mw[0] = 150'000;  // below its average: the peak is the average
  power_mw[1] = 300'000;
  const Nanos start = clock->now();
  sampler.sample_now();
  clock->advance(from_seconds(2));
  sampler.sample_now();
  Measurement measurement;
  measurement.time_s = 2;
  measurement.gpu_energy = {{0, 400, EnergySource::kCounter, ""},
                            {1, std::numeric_limits<double>::quiet_NaN(), EnergySource::kCounter,
                             "not measurable: the counter went back"}};
  const auto figures = device_figures(measurement, gpus, {}, sampler, start, clock->now());
  ASSERT_EQ(figures.size(), 2U);
  EXPECT_EQ(figures[0].kind, "gpu");
  EXPECT_EQ(figures[0].name, gpus[0]->info().name);
  EXPECT_DOUBLE_EQ(figures[0].average_power_w, 200);
  ASSERT_TRUE(figures[0].peak_power_w.has_value());
  EXPECT_DOUBLE_EQ(*figures[0].peak_power_w, 200);
  EXPECT_EQ(figures[1].index, 1);
  EXPECT_TRUE(std::isnan(figures[1].average_power_w));
  EXPECT_EQ(figures[1].not_measurable, "not measurable: the counter went back");
}

TEST_F(FiguresFixture, OneChannelPerGpu) {
  EXPECT_EQ(device_power_channels(gpus, {}, *clock).size(), 2U);
}

}  // namespace
}  // namespace joule::measure
