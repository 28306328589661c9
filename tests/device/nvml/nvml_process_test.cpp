// SPDX-License-Identifier: Apache-2.0
// Per-process energy: measure::attribute_energy_by_process on its own, and ProcessEnergyMeter over the NVML
// backend's real dlopen path against the fake libnvidia-ml.so.1's per-process samples.
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/device/nvml.hpp"
#include "joule/measure/process_energy.hpp"
#include "joule/metrics/gpu_metrics.hpp"

#include "test_util.hpp"

namespace joule::measure {
namespace {

using device::ProcessUtilizationSample;

uint64_t sum_of(const ProcessAttribution& attribution) {
  uint64_t total = attribution.unattributed_mj;
  for (const auto& process : attribution.processes) {
    total += process.energy_mj;
  }
  return total;
}

TEST(ProcessEnergy, SharesFollowSmTimeAndSumToTheMeasuredEnergyExactly) {
  // Periods of 1 s over a 4 s window: pid 10 at 50 % in all four, pid 20 at 25 % in the first two.
  const std::vector<ProcessUtilizationSample> samples = {
      {10, 1'000'000, 50}, {20, 1'000'000, 25}, {10, 2'000'000, 50},
      {20, 2'000'000, 25}, {10, 3'000'000, 50}, {10, 4'000'000, 50},
  };
  const auto attribution = attribute_energy_by_process(1'000'003, samples, 0, 4'000'000);
  ASSERT_TRUE(attribution) << attribution.error().message();
  ASSERT_EQ(attribution->processes.size(), 2u);
  EXPECT_EQ(attribution->processes[0].pid, 10u);
  EXPECT_DOUBLE_EQ(attribution->processes[0].sm_share, 0.5);
  EXPECT_EQ(attribution->processes[0].energy_mj, 500'001u);
  EXPECT_DOUBLE_EQ(attribution->processes[1].sm_share, 0.125);
  EXPECT_EQ(attribution->processes[1].energy_mj, 125'000u);
  EXPECT_EQ(attribution->unattributed_mj, 375'002u);
  EXPECT_EQ(sum_of(*attribution), 1'000'003u);
  EXPECT_EQ(attribution->method, "nvml process utilisation samples");
}

TEST(ProcessEnergy, OverlappingKernelsAreScaledToOneGpuAndNothingIsCreated) {
  // Two processes at 80 % in the same single period: each gets half.
  const std::vector<ProcessUtilizationSample> samples = {{1, 500, 80}, {2, 500, 80}};
  const auto attribution = attribute_energy_by_process(999, samples, 0, 1'000);
  ASSERT_TRUE(attribution);
  EXPECT_EQ(attribution->processes[0].energy_mj, 499u);
  EXPECT_EQ(attribution->processes[1].energy_mj, 499u);
  EXPECT_EQ(attribution->unattributed_mj, 1u);
  EXPECT_EQ(sum_of(*attribution), 999u);
}

TEST(ProcessEnergy, AProcessListThatChangesChargesEachOnlyItsPeriods) {
  // pid 1 runs alone, exits; pid 2 starts later; a sample outside the window is ignored.
  const std::vector<ProcessUtilizationSample> samples = {
      {1, 100, 100}, {1, 200, 100}, {2, 300, 100}, {2, 400, 100}, {3, 900, 100}};
  const auto attribution = attribute_energy_by_process(4'000, samples, 0, 400);
  ASSERT_TRUE(attribution);
  ASSERT_EQ(attribution->processes.size(), 2u);
  EXPECT_EQ(attribution->processes[0].energy_mj, 2'000u);
  EXPECT_EQ(attribution->processes[1].energy_mj, 2'000u);
  EXPECT_EQ(attribution->unattributed_mj, 0u);
  // No sample at all: everything is unattributed.
  const auto idle = attribute_energy_by_process(4'000, {}, 0, 400);
  ASSERT_TRUE(idle);
  EXPECT_TRUE(idle->processes.empty());
  EXPECT_EQ(idle->unattributed_mj, 4'000u);
}

TEST(ProcessEnergy, BadInputIsRefusedWithTheProcessAndTime) {
  JOULE_EXPECT_ERROR(attribute_energy_by_process(1, {}, 500, 500), ErrorCode::kInvalidArgument,
                     "per-process energy: the window ends at 500 µs, not after it starts at 500 µs");
  const std::vector<ProcessUtilizationSample> over = {{42, 100, 140}};
  JOULE_EXPECT_ERROR(attribute_energy_by_process(1, over, 0, 200), ErrorCode::kInvalidArgument,
                     "per-process energy: process 42's SM utilisation sample at 100 µs is 140 %, over 100 %");
  const std::vector<ProcessUtilizationSample> twice = {{42, 100, 10}, {42, 100, 10}, {42, 100, 30}};
  JOULE_EXPECT_ERROR(
      attribute_energy_by_process(1, twice, 0, 200), ErrorCode::kInvalidArgument,
      "per-process energy: process 42 has two different SM utilisation samples at 100 µs (10 % "
      "and 30 %)");
}

// ---- Through the fake NVML ------------------------------------------------------------------------------

// An A100 whose counter advances 100 J a read (probe = read 0, begin = read 1, end = read 2), with four 1 s
// sample periods: pid 100 at 60 % throughout, pid 200 at 40 % in the last two only.
constexpr const char* kSharedGpu = R"(gpu0.name=NVIDIA A100-SXM4-40GB
gpu0.architecture=ampere
gpu0.energy_step_mj=100000
gpu0.process_samples=100@1000000:60,100@2000000:60,100@3000000:60,200@3000000:40,100@4000000:60,200@4000000:40
gpu0.running_processes=100,200
)";

class NvmlProcessTest : public ::testing::Test {
 protected:
  std::vector<std::unique_ptr<device::Gpu>> open(const std::string& config,
                                                 const char* library = JOULE_FAKE_NVML_PATH) {
    const std::string path = dir_.write("nvml.conf", config);
    const test::ScopedEnv script("JOULE_FAKE_NVML_CONFIG", path.c_str());
    auto gpus = device::open_nvml_gpus(device::NvmlOptions{library},
                                       *device::parse_visible_devices("CUDA_VISIBLE_DEVICES", nullptr));
    if (!gpus) {
      ADD_FAILURE() << gpus.error().message();
      return {};
    }
    return std::move(*gpus);
  }

  test::TempDir dir_;
};

TEST_F(NvmlProcessTest, MeterSplitsTheGpusMeasuredEnergyAmongItsProcesses) {
  auto gpus = open(kSharedGpu);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(device::nvml_compute_processes(*gpus[0]), (std::vector<uint32_t>{100, 200}));
  ProcessEnergyMeter meter(*gpus[0]);
  ASSERT_TRUE(meter.begin(0));
  ASSERT_TRUE(meter.poll());
  const auto attribution = meter.end(4'000'000);
  ASSERT_TRUE(attribution) << attribution.error().message();
  EXPECT_EQ(attribution->energy_mj, 100'000u);
  ASSERT_EQ(attribution->processes.size(), 2u);
  EXPECT_EQ(attribution->processes[0].energy_mj, 60'000u);
  EXPECT_EQ(attribution->processes[1].energy_mj, 20'000u);
  EXPECT_EQ(attribution->unattributed_mj, 20'000u);
  EXPECT_EQ(sum_of(*attribution), attribution->energy_mj);
  // Outside a window.
  JOULE_EXPECT_ERROR(meter.poll(), ErrorCode::kState,
                     "per-process energy on GPU 0 (NVIDIA A100-SXM4-40GB): poll() outside a window");
}

TEST_F(NvmlProcessTest, DriverFailuresAndMissingCallsSayWhy) {
  auto gpus = open(std::string(kSharedGpu) + "gpu0.get_process_utilization=gpu_is_lost\n" +
                   "gpu0.get_running_processes=no_permission\n");
  ASSERT_EQ(gpus.size(), 1u);
  ProcessEnergyMeter meter(*gpus[0]);
  ASSERT_TRUE(meter.begin(0));
  JOULE_EXPECT_ERROR(
      meter.end(4'000'000), ErrorCode::kDevice,
      "reading the per-process utilisation samples on GPU 0 (NVIDIA A100-SXM4-40GB): GPU is lost "
      "(NVML_ERROR_GPU_IS_LOST)");
  const auto listed = device::nvml_compute_processes(*gpus[0]);
  ASSERT_FALSE(listed);
  EXPECT_EQ(listed.error().code(), ErrorCode::kPermissionDenied);
  gpus.clear();
  auto old = open(kSharedGpu, JOULE_FAKE_NVML_NO_ARCH_FIELDS_PATH);
  ASSERT_EQ(old.size(), 1u);
  const auto samples = device::nvml_process_utilization(*old[0], 0);
  ASSERT_FALSE(samples);
  EXPECT_EQ(samples.error().code(), ErrorCode::kNotSupported);
  EXPECT_NE(samples.error().message().find("lacks nvmlDeviceGetProcessUtilization"), std::string::npos)
      << samples.error().message();
}

TEST_F(NvmlProcessTest, AGpuWithoutAnEnergyCounterIsRefused) {
  auto gpus = open(std::string(kSharedGpu) + "gpu0.get_energy=not_supported\n");
  ASSERT_EQ(gpus.size(), 1u);
  ProcessEnergyMeter meter(*gpus[0]);
  JOULE_EXPECT_ERROR(
      meter.begin(0), ErrorCode::kNotSupported,
      "per-process energy on GPU 0 (NVIDIA A100-SXM4-40GB) needs an energy counter: its measured "
      "total is what is split");
}

}  // namespace
}  // namespace joule::measure

namespace joule::measure {
namespace {

TEST_F(NvmlProcessTest, TotalsAreBoundedFoldExitedProcessesAndSumToTheGpusEnergy) {
  // Three processes sampled, only pid 300 still running: at most two own series.
  auto gpus =
      open(std::string(kSharedGpu) + "gpu0.process_samples=100@1000000:50,200@2000000:50,300@3000000:50\n" +
           "gpu0.running_processes=300\n");
  ASSERT_EQ(gpus.size(), 1u);
  ProcessEnergyTotals totals(*gpus[0], 2);
  ASSERT_TRUE(totals.update(0));
  const auto sum = [](const std::vector<ProcessEnergyTotals::Total>& result) {
    uint64_t total_mj = 0;
    for (const auto& total : result) {
      total_mj += total.energy_mj;
    }
    return total_mj;
  };
  // Window 1 (100 J, four 1 s periods): 12.5 J each; pids 100 and 200 get the two series, 300 goes to
  // "other".
  ASSERT_TRUE(totals.update(4'000'000));
  auto result = totals.totals();
  ASSERT_EQ(result.size(), 5u);
  EXPECT_EQ(result[0].process, "100");
  EXPECT_EQ(result[0].energy_mj, 12'500u);
  EXPECT_EQ(result[1].process, "200");
  EXPECT_EQ(result[2].process, "other");
  EXPECT_EQ(result[2].energy_mj, 12'500u);
  EXPECT_EQ(result[4].process, "unattributed");
  EXPECT_EQ(result[4].energy_mj, 62'500u);
  EXPECT_EQ(sum(result), 100'000u);  // exactly the GPU's measured energy
  // Window 2 (100 J, no sample): 100 and 200 are neither running nor sampled, so they fold into "exited".
  ASSERT_TRUE(totals.update(8'000'000));
  result = totals.totals();
  ASSERT_EQ(result.size(), 3u);
  EXPECT_EQ(result[0].process, "other");
  EXPECT_EQ(result[1].process, "exited");
  EXPECT_EQ(result[1].energy_mj, 25'000u);
  EXPECT_EQ(result[2].energy_mj, 162'500u);
  EXPECT_EQ(sum(result), 200'000u);
  EXPECT_THROW(ProcessEnergyTotals(*gpus[0], 0), Exception);
}

}  // namespace
}  // namespace joule::measure

namespace joule::measure {
namespace {

TEST_F(NvmlProcessTest, ExporterServesBoundedPerProcessSeries) {
  auto gpus = open(kSharedGpu);
  ASSERT_EQ(gpus.size(), 1u);
  metrics::GpuMetrics exporter({gpus[0].get()}, SteadyClock::instance(), metrics::GpuMetricsOptions{});
  (void)exporter.Collect();  // starts the per-process window
  const auto families = exporter.Collect();
  std::vector<std::string> pids;
  double sum_j = 0;
  for (const auto& family : families) {
    if (family.name != "joule_gpu_process_energy_joules_total") {
      continue;
    }
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "pid") {
          pids.push_back(label.value);
        }
      }
      sum_j += metric.counter.value;
    }
  }
  // The fake's samples lie before this window: everything is unattributed, and the series add up to the
  // counter's step between the two scrapes' reads of it.
  EXPECT_EQ(pids, (std::vector<std::string>{"other", "exited", "unattributed"}));
  EXPECT_GT(sum_j, 0.0);
  // Turned off: no family.
  metrics::GpuMetricsOptions off;
  off.max_processes = 0;
  metrics::GpuMetrics quiet({gpus[0].get()}, SteadyClock::instance(), off);
  (void)quiet.Collect();
  for (const auto& family : quiet.Collect()) {
    EXPECT_NE(family.name, "joule_gpu_process_energy_joules_total");
  }
}

}  // namespace
}  // namespace joule::measure
