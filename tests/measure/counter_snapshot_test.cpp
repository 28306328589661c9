// SPDX-License-Identifier: Apache-2.0
// One snapshot of the energy counters (joule/measure/counter_snapshot.hpp): joules, the counters' resets,
// and a failed reading kept as null with its error.
#include "joule/measure/counter_snapshot.hpp"

#include <gtest/gtest.h>

#include "mocks/mock_gpu.hpp"

namespace joule::measure {
namespace {

using ::testing::Return;

TEST(CounterSnapshot, JoulesOfEveryCounterAndTheErrorOfOneThatFails) {
  test::MockGpu with_counter(test::mock_gpu_info(0));
  test::MockGpu failing(test::mock_gpu_info(1));
  EXPECT_CALL(with_counter, do_energy_mj()).WillOnce(Return(12'500u));
  EXPECT_CALL(failing, do_energy_mj())
      .WillOnce(Return(tl::make_unexpected(Error(ErrorCode::kIo, "counter unreadable"))));
  test::MockCpu cpu(device::CpuInfo{"mock", 0, "package-0", false});
  EXPECT_CALL(cpu, do_package_energy_mj()).WillOnce(Return(2'000u));
  const nlohmann::json snapshot = counter_snapshot_json({&with_counter, &failing}, {&cpu}, 1700000000.5);
  EXPECT_EQ(snapshot["time_unix_s"], 1700000000.5);
  ASSERT_EQ(snapshot["gpus"].size(), 2u);
  EXPECT_EQ(snapshot["gpus"][0]["energy_j"], 12.5);
  EXPECT_EQ(snapshot["gpus"][0]["uuid"], "GPU-mock");
  EXPECT_FALSE(snapshot["gpus"][0].contains("error"));
  EXPECT_TRUE(snapshot["gpus"][1]["energy_j"].is_null());
  EXPECT_EQ(snapshot["gpus"][1]["error"], "counter unreadable");
  ASSERT_EQ(snapshot["cpus"].size(), 1u);
  EXPECT_EQ(snapshot["cpus"][0]["package_energy_j"], 2.0);
  EXPECT_TRUE(snapshot["cpus"][0]["dram_energy_j"].is_null());
  EXPECT_EQ(snapshot["cpus"][0]["wrap_corrected_across_processes"], false);
  EXPECT_EQ(snapshot["gpus"][0]["energy_source"], "counter");
}

TEST(CounterSnapshot, AMigInstanceSaysItsEnergyIsASliceShareEstimate) {
  device::GpuInfo info = test::mock_gpu_info(0);
  info.uuid = "MIG-11111111-0000-4000-8000-000000000000";
  test::MockGpu mig(info);
  EXPECT_CALL(mig, do_energy_mj()).WillOnce(Return(3'000u));
  const nlohmann::json snapshot = counter_snapshot_json({&mig}, {}, 1700000000.5);
  EXPECT_EQ(snapshot["gpus"][0]["energy_source"], "mig-slice-share");
  EXPECT_EQ(snapshot["gpus"][0]["energy_j"], 3.0);
}

}  // namespace
}  // namespace joule::measure
