// SPDX-License-Identifier: Apache-2.0
// The CUDA kernel runner against the fake libcuda (tests/fakes/cuda) through the real loader: loading, the
// embedded PTX, launches and the driver's errors by name. The frontier figures come from the simulated runner
// (probe_test.cpp): the fake cannot reach a simulated GPU.
#include "joule/probe/cuda_runner.hpp"

#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::probe {
namespace {

TEST(CudaRunner, RunsBothKernelsThroughTheDriver) {
  auto runner = make_cuda_runner(0, JOULE_FAKE_CUDA_LIBRARY);
  ASSERT_TRUE(runner) << runner.error().message();
  EXPECT_EQ((*runner)->name(), "cuda");
  EXPECT_EQ((*runner)->driver_version(), "12.4");
  for (const Kernel kernel : {Kernel::kCompute, Kernel::kMemory}) {
    int calls = 0;
    const auto result = (*runner)->run(kernel, 10, 0.0, [&] { return ++calls < 4; });
    ASSERT_TRUE(result) << result.error().message();
    EXPECT_EQ(result->iterations, 4);  // stopped by `between`
    EXPECT_EQ(calls, 4);
    EXPECT_GE(result->time_s, 0);
  }
  const auto all = (*runner)->run(Kernel::kCompute, 7, 1.0, nullptr);
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->iterations, 7);
}

TEST(CudaRunner, DriverErrorsAreNamed) {
  const auto missing = make_cuda_runner(0, "/nonexistent/libcuda.so.1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kLibraryMissing);
  EXPECT_EQ(missing.error().message().rfind("cannot load the CUDA driver: /nonexistent/libcuda.so.1", 0), 0u)
      << missing.error().message();
  const auto old = make_cuda_runner(0, JOULE_FAKE_CUDA_NO_LAUNCH_LIBRARY);
  ASSERT_FALSE(old);
  EXPECT_EQ(old.error().message(),
            std::string(JOULE_FAKE_CUDA_NO_LAUNCH_LIBRARY) +
                " lacks the required symbol cuLaunchKernel: the NVIDIA driver is probably "
                "too old for joule probe's kernels; upgrade it, or set JOULE_CUDA_LIBRARY "
                "to a newer libcuda.so.1");
  const auto no_device = make_cuda_runner(3, JOULE_FAKE_CUDA_LIBRARY);
  ASSERT_FALSE(no_device);
  EXPECT_EQ(no_device.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(no_device.error().message(), "CUDA has no device 3 (it sees 1)");
  {
    const test::ScopedEnv fail("FAKE_CUDA_FAIL", "cuModuleLoadData");
    const auto ptx = make_cuda_runner(0, JOULE_FAKE_CUDA_LIBRARY);
    ASSERT_FALSE(ptx);
    EXPECT_EQ(ptx.error().code(), ErrorCode::kDevice);
    EXPECT_EQ(ptx.error().message(), "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (218)");
  }
  {
    const test::ScopedEnv fail("FAKE_CUDA_FAIL", "cuMemAlloc_v2");
    const auto memory = make_cuda_runner(0, JOULE_FAKE_CUDA_LIBRARY);
    ASSERT_FALSE(memory);
    EXPECT_EQ(memory.error().code(), ErrorCode::kOutOfRange);
    EXPECT_EQ(memory.error().message(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)");
  }
  auto runner = make_cuda_runner(0, JOULE_FAKE_CUDA_LIBRARY);
  ASSERT_TRUE(runner) << runner.error().message();
  const test::ScopedEnv fail("FAKE_CUDA_FAIL", "cuLaunchKernel");
  const auto launch = (*runner)->run(Kernel::kMemory, 3, 0.0, nullptr);
  ASSERT_FALSE(launch);
  EXPECT_EQ(launch.error().message(), "cuLaunchKernel: CUDA_ERROR_UNKNOWN (999)");
}

}  // namespace
}  // namespace joule::probe
