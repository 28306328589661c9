// SPDX-License-Identifier: Apache-2.0
// gpu_config_of: the GpuConfig a batch-size job is registered with, from its GPUs (Zeus's client's rule).
#include "joule/optimize/batch_size_gpu.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mocks/mock_gpu.hpp"

namespace joule::optimize::batch_size {
namespace {

using ::testing::Return;

device::GpuInfo named_gpu_info(int index, const char* name) {
  device::GpuInfo info = test::mock_gpu_info(index);
  info.name = name;
  return info;
}

TEST(BatchSizeGpuConfig, TakesGpu0sModelTheCountAndGpu0sWholeMaxWattsTimesTheCount) {
  test::MockGpu first(named_gpu_info(0, "NVIDIA A40"));
  test::MockGpu second(named_gpu_info(1, "Other"));
  EXPECT_CALL(first, do_power_limit_constraints())
      .WillOnce(
          Return(device::PowerLimitConstraints{.min_mw = 100000, .max_mw = 300999, .default_mw = 300000}));
  EXPECT_CALL(second, do_power_limit_constraints()).Times(0);
  const Result<GpuConfig> config = gpu_config_of({&first, &second});
  ASSERT_TRUE(config) << config.error().message();
  EXPECT_EQ(config->gpu_model, "NVIDIA A40");
  EXPECT_EQ(config->number_of_gpus, 2);
  EXPECT_EQ(config->max_power, 600.0);  // floor(300.999 W) × 2
}

TEST(BatchSizeGpuConfig, AGivenMaxPowerIsKeptAndTheLimitsAreNotRead) {
  test::MockGpu gpu(named_gpu_info(0, "NVIDIA V100"));
  EXPECT_CALL(gpu, do_power_limit_constraints()).Times(0);
  const Result<GpuConfig> config = gpu_config_of({&gpu}, 123.5);
  ASSERT_TRUE(config) << config.error().message();
  EXPECT_EQ(config->max_power, 123.5);
  EXPECT_EQ(config->number_of_gpus, 1);
  EXPECT_EQ(config->gpu_model, "NVIDIA V100");
}

TEST(BatchSizeGpuConfig, NoGpuIsAnInvalidArgument) {
  const Result<GpuConfig> config = gpu_config_of({});
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(config.error().message(), ::testing::HasSubstr("at least one GPU"));
}

TEST(BatchSizeGpuConfig, TheLimitsErrorComesBackUnchanged) {
  test::MockGpu gpu(named_gpu_info(0, "NVIDIA A40"));
  EXPECT_CALL(gpu, do_power_limit_constraints())
      .WillOnce(Return(tl::make_unexpected(Error(ErrorCode::kNotSupported, "no power limits here"))));
  const Result<GpuConfig> config = gpu_config_of({&gpu});
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(config.error().message(), "no power limits here");
}

TEST(BatchSizeGpuConfig, ANullGpuIsMisuse) {
  EXPECT_THROW((void)gpu_config_of({nullptr}), Exception);
}

}  // namespace
}  // namespace joule::optimize::batch_size
