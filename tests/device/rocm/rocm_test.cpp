// SPDX-License-Identifier: Apache-2.0
// The ROCm SMI backend through its real dlopen path, against the fake librocm_smi64.so.1 (tests/fakes/rocm).
#include "joule/device/rocm.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "device/rocm/rocm_library.hpp"
#include "fakes/fake_library_fixture.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using GpuList = std::vector<std::unique_ptr<Gpu>>;

constexpr const char* kFake = JOULE_FAKE_ROCM_LIBRARY;
constexpr double kValidationS = 0.05;  // short, so the suite stays fast

class RocmTest : public ::testing::Test, protected test::FakeLibraryConfig {
 protected:
  RocmTest() : FakeLibraryConfig("JOULE_FAKE_ROCM_CONFIG", "fake-rocm.conf") {}

  Result<GpuList> open(const VisibleDevices& visible = {}, double validation_s = kValidationS,
                       const std::string& library = kFake) {
    return open_rocm_gpus(RocmOptions{library, validation_s}, visible);
  }

  GpuList open_ok(const VisibleDevices& visible = {}, double validation_s = kValidationS) {
    return test::value_or_add_failure(open(visible, validation_s));
  }

  static VisibleDevices hip(const char* value) {
    return parse_visible_devices("HIP_VISIBLE_DEVICES", value).value();
  }
};

// --- Opening and identity ---------------------------------------------------------------------------------

TEST_F(RocmTest, OpensEveryGpuWithNameAndUuid) {
  configure(
      "devices=2\n"
      "device.0.name=AMD Instinct MI100\n"
      "device.0.unique_id=0x0123456789abcdef\n"
      "device.1.name=AMD Instinct MI210\n"
      "device.1.unique_id=0xfedcba9876543210\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().backend, "rocm");
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 0);
  EXPECT_EQ(gpus[0]->info().name, "AMD Instinct MI100");
  EXPECT_EQ(gpus[0]->info().uuid, "GPU-0123456789abcdef");
  EXPECT_EQ(gpus[1]->info().index, 1);
  EXPECT_EQ(gpus[1]->info().name, "AMD Instinct MI210");
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-fedcba9876543210");
  EXPECT_EQ(gpus[1]->label(), "GPU 1 (AMD Instinct MI210)");
}

TEST_F(RocmTest, NoGpusIsAnEmptyList) {
  configure("devices=0\n");
  const auto gpus = open_ok();
  EXPECT_TRUE(gpus.empty());
  // Nothing holds the library, so it was shut down at once.
  EXPECT_TRUE(called("rsmi_shut_down"));
}

TEST_F(RocmTest, MissingUniqueIdLeavesUuidEmpty) {
  configure("fail.rsmi_dev_unique_id_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->info().uuid, "");
}

TEST_F(RocmTest, MissingNameFallsBackToIndex) {
  configure("devices=2\ndevice.1.fail.rsmi_dev_name_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().name, "Fake AMD GPU 0");
  EXPECT_EQ(gpus[1]->info().name, "AMD GPU 1");
}

TEST_F(RocmTest, ShutsDownWhenTheLastGpuGoes) {
  configure("devices=2\n");
  auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(called("rsmi_init"));
  gpus.erase(gpus.begin());
  EXPECT_FALSE(called("rsmi_shut_down"));
  ASSERT_TRUE(gpus[0]->power_mw().has_value());  // the library is still usable
  gpus.clear();
  EXPECT_TRUE(called("rsmi_shut_down"));
}

TEST_F(RocmTest, TwoOpensShareTheProcessWideLibrary) {
  configure("");
  auto first = open_ok({}, 0);
  auto second = open_ok({}, 0);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  first.clear();
  EXPECT_TRUE(second[0]->power_mw().has_value());
}

TEST_F(RocmTest, NegativeValidationIntervalIsRejected) {
  configure("");
  JOULE_EXPECT_ERROR(
      open({}, -1), ErrorCode::kInvalidArgument,
      "the ROCm energy-counter check interval must be a non-negative number of seconds, not -1");
}

// --- Loading failures -------------------------------------------------------------------------------------

TEST_F(RocmTest, AbsentLibraryExplainsTheFix) {
  configure("");
  JOULE_EXPECT_ERROR(
      open({}, kValidationS, "/nonexistent/librocm_smi64.so.1"), ErrorCode::kLibraryMissing,
      "cannot load the ROCm SMI library '/nonexistent/librocm_smi64.so.1': /nonexistent/librocm_smi64.so.1: "
      "cannot "
      "open shared object file: No such file or directory. Install ROCm SMI (ROCm, or Debian/Ubuntu's "
      "librocm-smi64-1 package), or set JOULE_ROCM_SMI_LIBRARY to the full path of librocm_smi64.so.1");
}

TEST_F(RocmTest, MissingRequiredSymbolIsNamed) {
  configure("");
  const std::string library = JOULE_FAKE_ROCM_NO_POWER_AVE_LIBRARY;
  JOULE_EXPECT_ERROR(
      open({}, kValidationS, library), ErrorCode::kLibraryMissing,
      "the ROCm SMI library '" + library +
          "' has no function rsmi_dev_power_ave_get; it is too old (joule needs ROCm SMI 5.2 or "
          "later) or not ROCm SMI. Install a newer ROCm, or set JOULE_ROCM_SMI_LIBRARY to the full "
          "path of another librocm_smi64.so.1");
}

TEST_F(RocmTest, InitFailureCarriesRocmSmiText) {
  configure("fail.rsmi_init=RSMI_STATUS_INIT_ERROR\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kDevice,
      fmt::format("cannot initialise ROCm SMI ('{}'): RSMI_STATUS_INIT_ERROR: (fake) Initialisation "
                  "failed",
                  kFake));
  EXPECT_FALSE(called("rsmi_shut_down"));  // never shut down what did not start
}

TEST_F(RocmTest, DeviceCountFailure) {
  configure("fail.rsmi_num_monitor_devices=BUSY\n");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kDevice,
                     "cannot count the AMD GPUs: RSMI_STATUS_BUSY: (fake) Resource busy");
  EXPECT_TRUE(called("rsmi_shut_down"));
}

// --- Visible devices --------------------------------------------------------------------------------------

TEST_F(RocmTest, HipVisibleDevicesByIndexReorders) {
  configure("devices=3\n");
  const auto gpus = open_ok(hip("2,0"));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 2);
  EXPECT_EQ(gpus[0]->info().name, "Fake AMD GPU 2");
  EXPECT_EQ(gpus[1]->info().index, 1);
  EXPECT_EQ(gpus[1]->info().physical_index, 0);
}

TEST_F(RocmTest, HipVisibleDevicesByUuid) {
  configure("devices=3\ndevice.1.unique_id=0xabcdef0000000001\n");
  const auto gpus = open_ok(hip("GPU-abcdef"));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->info().physical_index, 1);
  EXPECT_EQ(gpus[0]->info().uuid, "GPU-abcdef0000000001");
}

TEST_F(RocmTest, HipVisibleDevicesOutOfRange) {
  configure("devices=3\n");
  JOULE_EXPECT_ERROR(open(hip("0,5")), ErrorCode::kNotFound,
                     "HIP_VISIBLE_DEVICES names GPU 5, but this machine has 3 GPUs (indices 0 to 2)");
}

TEST_F(RocmTest, HipVisibleDevicesEmptyHidesEveryGpu) {
  configure("devices=2\n");
  EXPECT_TRUE(open_ok(hip("")).empty());
}

TEST_F(RocmTest, DevicesCommandsGoToThePhysicalIndex) {
  configure("devices=3\n");
  const auto gpus = open_ok(hip("2"));
  ASSERT_EQ(gpus.size(), 1u);
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(150'000).has_value());
  EXPECT_TRUE(called("rsmi_dev_power_cap_set 2 150000000"));
}

// --- Power and energy -------------------------------------------------------------------------------------

TEST_F(RocmTest, PowerIsConvertedFromMicrowatts) {
  configure("device.0.power_w=123.4567\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->power_mw().value(), 123457u);
}

TEST_F(RocmTest, PowerNotSupported) {
  configure("fail.rsmi_dev_power_ave_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->power_mw(), ErrorCode::kNotSupported,
                     "cannot read the power of GPU 0 (Fake AMD GPU 0): RSMI_STATUS_NOT_SUPPORTED: (fake) Not "
                     "supported here.");
  // Without power there is nothing to check the counter against, so it is not trusted (Zeus's rule).
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

TEST_F(RocmTest, ConsistentCounterIsValidatedAndAdvancesWithTime) {
  configure("device.0.power_w=100\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  ASSERT_TRUE(gpus[0]->info().has_energy_counter);

  const auto outer_start = std::chrono::steady_clock::now();
  const uint64_t start_mj = gpus[0]->energy_mj().value();
  const auto inner_start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto inner_end = std::chrono::steady_clock::now();
  const uint64_t end_mj = gpus[0]->energy_mj().value();
  const auto outer_end = std::chrono::steady_clock::now();
  // 100 W for the time between the reads, in mJ (= 100 000 mW × s), with 1 mJ for flooring.
  const double inner_s = std::chrono::duration<double>(inner_end - inner_start).count();
  const double outer_s = std::chrono::duration<double>(outer_end - outer_start).count();
  const auto delta_mj = static_cast<double>(end_mj - start_mj);
  EXPECT_GE(delta_mj, 100'000 * inner_s - 1);
  EXPECT_LE(delta_mj, 100'000 * outer_s + 1);
}

TEST_F(RocmTest, CounterOffByHundredIsRejected) {
  configure("device.0.energy_scale=100\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
  JOULE_EXPECT_ERROR(
      gpus[0]->energy_mj(), ErrorCode::kNotSupported,
      "GPU 0 (Fake AMD GPU 0) has no energy counter; its energy is estimated from power samples");
}

TEST_F(RocmTest, CounterFarTooLowIsRejected) {
  configure("device.0.energy_scale=0.01\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

TEST_F(RocmTest, CounterWithinTenfoldIsAccepted) {
  configure("device.0.energy_scale=4\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
}

TEST_F(RocmTest, IdleGpuCounterIsNotTrusted) {
  configure("device.0.power_w=0\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

TEST_F(RocmTest, EachGpuIsJudgedOnItsOwn) {
  configure("devices=3\ndevice.*.energy_scale=100\ndevice.1.energy_scale=1\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
  EXPECT_TRUE(gpus[1]->info().has_energy_counter);
  EXPECT_FALSE(gpus[2]->info().has_energy_counter);
}

TEST_F(RocmTest, EnergyCounterNotSupported) {
  configure("fail.rsmi_dev_energy_count_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

TEST_F(RocmTest, NothingToCheckDoesNotWait) {
  configure("devices=2\nfail.rsmi_dev_energy_count_get=NOT_SUPPORTED\n");
  const auto start = std::chrono::steady_clock::now();
  const auto gpus = open_ok({}, 60);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
  EXPECT_FALSE(gpus[1]->info().has_energy_counter);
}

TEST_F(RocmTest, ZeroIntervalTrustsTheCounter) {
  configure("device.0.energy_scale=100\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
  EXPECT_TRUE(gpus[0]->energy_mj().has_value());
}

TEST_F(RocmTest, ZeroIntervalStillNeedsAReadableCounter) {
  configure("fail.rsmi_dev_energy_count_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

// --- Power limits -----------------------------------------------------------------------------------------

TEST_F(RocmTest, PowerLimitConstraintsInMilliwatts) {
  configure(
      "device.0.power_cap_min_w=100.5\ndevice.0.power_cap_max_w=290\ndevice.0.power_cap_default_w=250\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  const auto constraints = gpus[0]->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 100'500u);
  EXPECT_EQ(constraints.max_mw, 290'000u);
  EXPECT_EQ(constraints.default_mw, 250'000u);
}

TEST_F(RocmTest, SetAndResetPowerLimit) {
  configure("device.0.power_cap_w=290\ndevice.0.power_cap_max_w=290\ndevice.0.power_cap_default_w=250\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 290'000u);
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(200'000).has_value());
  EXPECT_TRUE(called("rsmi_dev_power_cap_set 0 200000000"));  // µW on the wire
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 200'000u);
  ASSERT_TRUE(gpus[0]->reset_power_limit().has_value());
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 250'000u);
}

TEST_F(RocmTest, PowerLimitOutsideRange) {
  configure("device.0.power_cap_min_w=100\ndevice.0.power_cap_max_w=300\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->set_power_limit_mw(350'000), ErrorCode::kOutOfRange,
                     "power limit 350 W is outside GPU 0 (Fake AMD GPU 0)'s range 100 W to 300 W");
}

TEST_F(RocmTest, SetPowerLimitWithoutPermissionSaysHowToFix) {
  configure("fail.rsmi_dev_power_cap_set=PERMISSION\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->set_power_limit_mw(200'000), ErrorCode::kPermissionDenied,
      "cannot set the power cap of GPU 0 (Fake AMD GPU 0) to 200 W: RSMI_STATUS_PERMISSION: (fake) "
      "Permission denied. Changing AMD GPU settings needs root: run joule as root (e.g. with sudo)");
}

TEST_F(RocmTest, PowerCapReadNotSupported) {
  configure("fail.rsmi_dev_power_cap_range_get=NOT_SUPPORTED\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->power_limit_constraints(), ErrorCode::kNotSupported,
      "cannot read the power cap range of GPU 0 (Fake AMD GPU 0): RSMI_STATUS_NOT_SUPPORTED: (fake) "
      "Not supported here.");
}

TEST_F(RocmTest, UnknownStatusIsADeviceError) {
  configure("fail.rsmi_dev_power_cap_get=99\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->power_limit_mw(), ErrorCode::kDevice,
      "cannot read the power cap of GPU 0 (Fake AMD GPU 0): ROCm SMI status 99: (fake) Some other "
      "failure");
}

TEST_F(RocmTest, LibraryWithoutDefaultCapUsesTheMaximum) {
  configure("device.0.power_cap_max_w=280\ndevice.0.power_cap_default_w=250\n");
  auto gpus = open({}, 0, JOULE_FAKE_ROCM_NO_CAP_DEFAULT_LIBRARY);
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0]->power_limit_constraints().value().default_mw, 280'000u);
}

// --- Clocks -----------------------------------------------------------------------------------------------

TEST_F(RocmTest, SupportedClocksHighestFirstInMegahertz) {
  configure("device.0.sclk_mhz=500,800,800,1502\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->supported_sm_clocks_mhz().value(), (std::vector<uint32_t>{1502, 800, 500}));
}

TEST_F(RocmTest, LockAndResetClocks) {
  configure("device.0.sclk_mhz=500,1000,1500\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  ASSERT_TRUE(gpus[0]->lock_sm_clocks(800, 1200).has_value());
  EXPECT_TRUE(called("rsmi_dev_clk_range_set 0 800 1200"));  // MHz on the wire
  ASSERT_TRUE(gpus[0]->reset_sm_clocks().has_value());
  EXPECT_TRUE(called("rsmi_dev_perf_level_set_v1 0 0"));  // RSMI_DEV_PERF_LEVEL_AUTO
}

TEST_F(RocmTest, LockClocksOutsideSupportedRange) {
  configure("device.0.sclk_mhz=500,1000,1500\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_sm_clocks(400, 1200), ErrorCode::kOutOfRange,
      "SM clock range 400-1200 MHz is outside GPU 0 (Fake AMD GPU 0)'s supported 500-1500 MHz");
}

TEST_F(RocmTest, LockClocksNotSupported) {
  configure("fail.rsmi_dev_clk_range_set=NOT_SUPPORTED\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_sm_clocks(800, 1200), ErrorCode::kNotSupported,
      "cannot lock the SM clock of GPU 0 (Fake AMD GPU 0) to 800-1200 MHz: RSMI_STATUS_NOT_SUPPORTED: "
      "(fake) Not supported here.");
}

TEST_F(RocmTest, ResetClocksWithoutPermission) {
  configure("fail.rsmi_dev_perf_level_set_v1=PERMISSION\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->reset_sm_clocks(), ErrorCode::kPermissionDenied,
      "cannot reset the SM clock of GPU 0 (Fake AMD GPU 0) (performance level auto): "
      "RSMI_STATUS_PERMISSION: (fake) Permission denied. Changing AMD GPU settings needs root: run "
      "joule as root (e.g. with sudo)");
}

TEST_F(RocmTest, ConcurrentReadsFromManyThreads) {
  configure("devices=2\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 2u);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Gpu& gpu = *gpus[static_cast<size_t>(t % 2)];
      for (int i = 0; i < 200; ++i) {
        if (!gpu.power_mw() || !gpu.energy_mj()) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(failures.load(), 0);
}

// --- Telemetry --------------------------------------------------------------------------------------------

TEST_F(RocmTest, TemperatureFallsBackToTheJunctionSensorWithoutAnEdgeOne) {
  configure("device.0.temperature_c=71.5\ndevice.0.edge_sensor=0\n");  // like MI300
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->temperature_c(), 71.5);
}

TEST_F(RocmTest, TelemetryInJouleUnits) {
  configure(
      "device.0.temperature_c=61.25\n"
      "device.0.sclk_mhz=500,1000,1502\ndevice.0.sclk_current=1\n"
      "device.0.mclk_mhz=800,1600\n"
      "device.0.busy_percent=87\ndevice.0.memory_busy_percent=23\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 1u);
  Gpu& gpu = *gpus[0];
  EXPECT_EQ(gpu.temperature_c(), 61.25);  // from 61250 millidegrees
  EXPECT_EQ(gpu.sm_clock_mhz(), 1000u);   // the current level, from Hz
  EXPECT_EQ(gpu.memory_clock_mhz(), 1600u);
  EXPECT_EQ(gpu.gpu_utilization_pct(), 87u);
  EXPECT_EQ(gpu.memory_utilization_pct(), 23u);
  JOULE_EXPECT_ERROR(gpu.clock_event_reasons(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD GPU 0) does not report clock event (throttle) reasons (rocm backend): "
                     "ROCm SMI has no call that reports them");
  JOULE_EXPECT_ERROR(gpu.memory_power_mw(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD GPU 0) does not report memory power (rocm backend): ROCm SMI reports "
                     "only the whole board's power");

  const GpuTelemetry telemetry = gpu.telemetry();
  EXPECT_EQ(telemetry.temperature_c, 61.25);
  EXPECT_EQ(telemetry.sm_clock_mhz, 1000u);
  EXPECT_EQ(telemetry.memory_clock_mhz, 1600u);
  EXPECT_EQ(telemetry.gpu_utilization_pct, 87u);
  EXPECT_EQ(telemetry.memory_utilization_pct, 23u);
  EXPECT_FALSE(telemetry.clock_event_reasons.has_value());
  EXPECT_FALSE(telemetry.memory_power_mw.has_value());
  ASSERT_EQ(telemetry.errors.size(), 2u);
  EXPECT_EQ(telemetry.errors[0].first, TelemetryField::kClockEventReasons);
  EXPECT_EQ(telemetry.errors[1].first, TelemetryField::kMemoryPower);
}

TEST_F(RocmTest, UnsupportedTelemetryIsAnErrorNotZero) {
  configure(
      "devices=2\n"
      "fail.rsmi_dev_temp_metric_get=NOT_SUPPORTED\n"
      "device.0.fail.rsmi_dev_busy_percent_get=NOT_YET_IMPLEMENTED\n"
      "device.0.fail.rsmi_dev_memory_busy_percent_get=BUSY\n"
      "device.0.mclk_mhz=\n"
      "device.1.sclk_current=7\n");
  const auto gpus = open_ok({}, 0);
  ASSERT_EQ(gpus.size(), 2u);
  const GpuTelemetry telemetry = gpus[0]->telemetry();
  EXPECT_FALSE(telemetry.temperature_c.has_value());
  EXPECT_EQ(telemetry.sm_clock_mhz, 1500u);
  EXPECT_FALSE(telemetry.memory_clock_mhz.has_value());
  EXPECT_FALSE(telemetry.gpu_utilization_pct.has_value());
  EXPECT_FALSE(telemetry.memory_utilization_pct.has_value());
  ASSERT_EQ(telemetry.errors.size(), 6u);
  const auto expect_error = [&](TelemetryField field, ErrorCode code, const std::string& message) {
    const Error* error = telemetry.error(field);
    ASSERT_NE(error, nullptr) << telemetry_field_name(field);
    EXPECT_EQ(error->code(), code) << telemetry_field_name(field);
    EXPECT_EQ(error->message(), message);
  };
  expect_error(TelemetryField::kTemperature, ErrorCode::kNotSupported,
               "GPU 0 (Fake AMD GPU 0) does not report temperature (rocm backend): rsmi_dev_temp_metric_get "
               "returned RSMI_STATUS_NOT_SUPPORTED: (fake) Not supported here.");
  expect_error(
      TelemetryField::kGpuUtilization, ErrorCode::kNotSupported,
      "GPU 0 (Fake AMD GPU 0) does not report GPU utilisation (rocm backend): "
      "rsmi_dev_busy_percent_get returned RSMI_STATUS_NOT_YET_IMPLEMENTED: (fake) Some other failure");
  expect_error(TelemetryField::kMemoryClock, ErrorCode::kNotSupported,
               "GPU 0 (Fake AMD GPU 0) does not report the memory clock (rocm backend): "
               "rsmi_dev_gpu_clk_freq_get lists no levels");
  // Other failures stay what they are.
  expect_error(TelemetryField::kMemoryUtilization, ErrorCode::kDevice,
               "cannot read the memory utilisation of GPU 0 (Fake AMD GPU 0): RSMI_STATUS_BUSY: (fake) "
               "Resource busy");
  JOULE_EXPECT_ERROR(
      gpus[1]->sm_clock_mhz(), ErrorCode::kDevice,
      "ROCm SMI reports level 7 as GPU 1 (Fake AMD GPU 1)'s current SM clock, but lists only 3 "
      "levels");
  EXPECT_EQ(gpus[1]->memory_clock_mhz(), 1200u);
}

TEST_F(RocmTest, LibraryWithoutTelemetrySymbolsStillLoads) {
  configure("device.0.busy_percent=50\n");
  auto gpus = open({}, 0, JOULE_FAKE_ROCM_NO_CAP_DEFAULT_LIBRARY);
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message();
  ASSERT_EQ(gpus->size(), 1u);
  Gpu& gpu = *(*gpus)[0];
  const std::string library = JOULE_FAKE_ROCM_NO_CAP_DEFAULT_LIBRARY;
  JOULE_EXPECT_ERROR(gpu.temperature_c(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD GPU 0) does not report temperature (rocm backend): '" + library +
                         "' has no function rsmi_dev_temp_metric_get; a newer ROCm may provide it");
  JOULE_EXPECT_ERROR(gpu.gpu_utilization_pct(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD GPU 0) does not report GPU utilisation (rocm backend): '" + library +
                         "' has no function rsmi_dev_busy_percent_get; a newer ROCm may provide it");
  JOULE_EXPECT_ERROR(gpu.memory_utilization_pct(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD GPU 0) does not report memory utilisation (rocm backend): '" + library +
                         "' has no function rsmi_dev_memory_busy_percent_get; a newer ROCm may provide it");
  EXPECT_EQ(gpu.sm_clock_mhz(), 1500u);  // rsmi_dev_gpu_clk_freq_get is required, so always there
}

// --- Helpers ----------------------------------------------------------------------------------------------

TEST(RocmHelpers, StatusCodesMapToErrorCodes) {
  using rocm_detail::error_code;
  using rocm_smi::Status;
  EXPECT_EQ(error_code(Status::kNotSupported), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(Status::kNotYetImplemented), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(Status::kPermission), ErrorCode::kPermissionDenied);
  EXPECT_EQ(error_code(Status::kInvalidArgs), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code(Status::kInputOutOfBounds), ErrorCode::kOutOfRange);
  EXPECT_EQ(error_code(Status::kNotFound), ErrorCode::kNotFound);
  EXPECT_EQ(error_code(Status::kFileError), ErrorCode::kIo);
  EXPECT_EQ(error_code(Status::kInitError), ErrorCode::kDevice);
  EXPECT_EQ(error_code(Status::kBusy), ErrorCode::kDevice);
  EXPECT_EQ(error_code(Status::kUnknownError), ErrorCode::kDevice);
  EXPECT_EQ(error_code(static_cast<Status>(1234)), ErrorCode::kDevice);
}

TEST(RocmHelpers, UniqueIdFormat) {
  EXPECT_EQ(rocm_detail::format_unique_id(0), "GPU-0000000000000000");
  EXPECT_EQ(rocm_detail::format_unique_id(0xABCDEF12ull), "GPU-00000000abcdef12");
}

TEST(RocmHelpers, CounterPlausibilityBoundsAreExclusive) {
  using rocm_detail::energy_counter_plausible;
  EXPECT_TRUE(energy_counter_plausible(1000, 1000));
  EXPECT_TRUE(energy_counter_plausible(9999, 1000));
  EXPECT_FALSE(energy_counter_plausible(10000, 1000));
  EXPECT_TRUE(energy_counter_plausible(101, 1000));
  EXPECT_FALSE(energy_counter_plausible(100, 1000));
  EXPECT_FALSE(energy_counter_plausible(0, 1000));
  EXPECT_FALSE(energy_counter_plausible(0.0005, 0.0009));  // expected < 0.001 mJ: unsupported
  EXPECT_TRUE(energy_counter_plausible(0.001, 0.001));
}

#ifndef JOULE_HAVE_ROCM_SMI_HEADER
TEST(RocmSmiApi, MatchesInstalledHeader) {
  GTEST_SKIP() << "rocm_smi/rocm_smi.h is not installed";
}
#endif

// Our symbol names exist in the real library (the header check covers the types).
TEST(RocmSmiApi, RealLibraryExportsEverySymbol) {
#ifdef JOULE_REAL_ROCM_SMI_LIBRARY
  void* handle = dlopen(JOULE_REAL_ROCM_SMI_LIBRARY, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
#define JOULE_CHECK_SYMBOL(symbol, type, required) EXPECT_NE(dlsym(handle, #symbol), nullptr) << #symbol;
  JOULE_ROCM_SMI_FUNCTIONS(JOULE_CHECK_SYMBOL)
#undef JOULE_CHECK_SYMBOL
  dlclose(handle);
#else
  GTEST_SKIP() << "librocm_smi64.so.1 is not installed";
#endif
}

}  // namespace
}  // namespace joule::device
