// SPDX-License-Identifier: Apache-2.0
#include "joule/device/gpu.hpp"

#include <gtest/gtest.h>

#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using test::MockGpu;
using ::testing::Return;

TEST(Gpu, RefusesLimitsOutsideTheConstraintsBeforeCallingTheBackend) {
  MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_power_limit_constraints())
      .Times(1)  // cached after the first read
      .WillOnce(Return(PowerLimitConstraints{100'000, 250'000, 250'000}));
  EXPECT_CALL(gpu, do_set_power_limit_mw(150'000)).WillOnce(Return(Result<void>{}));
  EXPECT_CALL(gpu, do_set_power_limit_mw(250'000)).WillOnce(Return(Result<void>{}));
  EXPECT_TRUE(gpu.set_power_limit_mw(150'000));
  JOULE_EXPECT_ERROR(gpu.set_power_limit_mw(300'000), ErrorCode::kOutOfRange,
                     "power limit 300 W is outside GPU 0 (Mock GPU)'s range 100 W to 250 W");
  JOULE_EXPECT_ERROR(gpu.set_power_limit_mw(99'500), ErrorCode::kOutOfRange,
                     "power limit 99.5 W is outside GPU 0 (Mock GPU)'s range 100 W to 250 W");
  EXPECT_TRUE(gpu.reset_power_limit());
}

TEST(Gpu, ConstraintErrorsPassThroughAndAreNotCached) {
  MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_power_limit_constraints())
      .WillOnce(Return(tl::make_unexpected(Error(ErrorCode::kNotSupported, "no power management"))))
      .WillOnce(Return(PowerLimitConstraints{100'000, 250'000, 200'000}));
  JOULE_EXPECT_ERROR(gpu.set_power_limit_mw(150'000), ErrorCode::kNotSupported, "no power management");
  EXPECT_EQ(gpu.power_limit_constraints()->default_mw, 200'000u);
}

TEST(Gpu, EnergyWithoutCounterIsNotSupported) {
  MockGpu gpu(test::mock_gpu_info(3, false));
  EXPECT_CALL(gpu, do_energy_mj()).Times(0);
  JOULE_EXPECT_ERROR(gpu.energy_mj(), ErrorCode::kNotSupported,
                     "GPU 3 (Mock GPU) has no energy counter; its energy is estimated from power samples");
}

TEST(Gpu, ClockLockChecksOrder) {
  MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_lock_sm_clocks).Times(0);
  JOULE_EXPECT_ERROR(gpu.lock_sm_clocks(1500, 900), ErrorCode::kInvalidArgument,
                     "cannot lock GPU 0 (Mock GPU)'s SM clock: minimum 1500 MHz is above maximum 900 MHz");
}

TEST(Gpu, MemoryClockLocksAreNotSupportedUnlessABackendSaysSo) {
  MockGpu gpu(test::mock_gpu_info());
  JOULE_EXPECT_ERROR(
      gpu.lock_memory_clocks(1500, 900), ErrorCode::kInvalidArgument,
      "cannot lock GPU 0 (Mock GPU)'s memory clock: minimum 1500 MHz is above maximum 900 MHz");
  JOULE_EXPECT_ERROR(gpu.lock_memory_clocks(900, 900), ErrorCode::kNotSupported,
                     "GPU 0 (Mock GPU) cannot lock its memory clock (mock backend)");
  JOULE_EXPECT_ERROR(gpu.supported_memory_clocks_mhz(), ErrorCode::kNotSupported,
                     "GPU 0 (Mock GPU) cannot lock its memory clock (mock backend)");
  JOULE_EXPECT_ERROR(gpu.reset_memory_clocks(), ErrorCode::kNotSupported,
                     "GPU 0 (Mock GPU) cannot lock its memory clock (mock backend)");
}

TEST(Gpu, FormatWatts) {
  EXPECT_EQ(format_watts(250'000), "250 W");
  EXPECT_EQ(format_watts(212'500), "212.5 W");
  EXPECT_EQ(format_watts(1), "0.001 W");
  EXPECT_EQ(format_watts(0), "0 W");
}

TEST(SimulatedBusy, ARealGpuIsNotSimulated) {
  GpuInfo info;
  info.index = 2;
  info.name = "Tesla V100";
  ::testing::NiceMock<MockGpu> gpu(info);
  const auto refused = gpu.set_simulated_busy(true);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(refused.error().message(),
            "GPU 2 (Tesla V100) is not simulated: only a simulated GPU can be made busy or idle");
}

}  // namespace
}  // namespace joule::device
