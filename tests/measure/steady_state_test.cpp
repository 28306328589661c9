// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/steady_state.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::measure {
namespace {

using ::testing::Invoke;
using ::testing::NiceMock;

// A mock that also reports temperature (the plain mock keeps the default: not supported).
class HotMockGpu : public test::MockGpu {
 public:
  using test::MockGpu::MockGpu;
  bool reports_temperature = false;

 protected:
  Result<double> do_temperature_c() override {
    if (!reports_temperature) {
      return tl::unexpected(telemetry_not_supported(device::TelemetryField::kTemperature));
    }
    return 70.0;
  }
};

// A GPU whose power swings ±10% from one reading to the next around a mean that `drift_w_per_s` moves, at a
// temperature `temperature_c` gives.
struct SwingingGpu {
  explicit SwingingGpu(VirtualClock& clock, double drift_w_per_s, bool temperature)
      : gpu([&] {
          auto info = test::mock_gpu_info(0);
          info.backend = "nvml";
          return info;
        }()) {
    ON_CALL(gpu, do_power_mw()).WillByDefault(Invoke([this, &clock, drift_w_per_s]() -> Result<uint32_t> {
      const double mean_w = 200 + drift_w_per_s * to_seconds(clock.now());
      swing = !swing;
      return static_cast<uint32_t>((swing ? 1.1 : 0.9) * mean_w * 1e3);
    }));
    gpu.reports_temperature = temperature;
  }
  NiceMock<HotMockGpu> gpu;
  bool swing = false;
};

TEST(SteadyState, SwingingPowerIsSteadyAndDriftingPowerIsNot) {
  VirtualClock clock;
  SwingingGpu swinging(clock, 0, true);
  SwingingGpu drifting(clock, 0.5, false);  // +5 W over the 10 s between the halves' centres: 2.5%
  SteadyStateOptions options;
  SteadyStateDetector steady({&swinging.gpu}, clock, options);
  SteadyStateDetector warming({&drifting.gpu}, clock, options);
  EXPECT_EQ(steady.mode(), SteadyStateMode::kSteady);  // a real backend
  for (int step = 0; step < 100; ++step) {             // 0.25 s steps, 25 s
    steady.sample();
    warming.sample();
    clock.advance(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(steady.ready());
  EXPECT_FALSE(steady.timed_out());
  EXPECT_NE(steady.describe().find("steady after 25.0 s (GPU 0: 70.0–70.0 °C, 180.0–220.0 W)"),
            std::string::npos)
      << steady.describe();
  EXPECT_FALSE(warming.ready());
  EXPECT_NE(warming.describe().find("waiting after 25.0 s (GPU 0: "), std::string::npos)
      << warming.describe();
  clock.advance(std::chrono::seconds(160));
  warming.sample();
  EXPECT_TRUE(warming.ready());  // max_wait_s passed
  EXPECT_TRUE(warming.timed_out());
  warming.restart();
  EXPECT_FALSE(warming.ready());
}

TEST(SteadyState, FixedAndOffModes) {
  VirtualClock clock;
  SwingingGpu gpu(clock, 0, false);
  SteadyStateOptions options;
  options.mode = SteadyStateMode::kFixed;
  options.fixed_warmup_s = 5;
  SteadyStateDetector fixed({&gpu.gpu}, clock, options);
  EXPECT_FALSE(fixed.ready());
  clock.advance(std::chrono::seconds(5));
  EXPECT_TRUE(fixed.ready());
  options.mode = SteadyStateMode::kOff;
  EXPECT_TRUE(SteadyStateDetector({&gpu.gpu}, clock, options).ready());
  options.window_s = -1;
  try {
    SteadyStateDetector bad({&gpu.gpu}, clock, options);
    FAIL() << "no exception";
  } catch (const Exception& error) {
    EXPECT_EQ(std::string(error.what()), "steady state: window_s must be a finite number > 0, got -1");
  }
}

}  // namespace
}  // namespace joule::measure
