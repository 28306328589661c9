// SPDX-License-Identifier: Apache-2.0
// The Level Zero backend through its real dlopen path, against the fake libze_loader.so.1
// (tests/fakes/levelzero). Most tests run the fake on its virtual clock (clock_step_us): each counter read
// advances it, so rates are exact and nothing sleeps longer than the 1 ms sample window.
#include "joule/device/levelzero.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/device/discovery.hpp"
#include "joule/device/settings_guard.hpp"

#include "device/levelzero/levelzero_library.hpp"
#include "fakes/fake_library_fixture.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using LevelZeroGpuList = std::vector<std::unique_ptr<Gpu>>;

constexpr const char* kFakeLevelZero = JOULE_FAKE_LEVEL_ZERO_LIBRARY;
constexpr const char* kFakeLevelZeroNoZesInit = JOULE_FAKE_LEVEL_ZERO_NO_ZES_INIT_LIBRARY;
constexpr const char* kFakeLevelZeroNoEnergy = JOULE_FAKE_LEVEL_ZERO_NO_ENERGY_LIBRARY;
// 100 ms of the fake's virtual time per counter read.
constexpr const char* kLevelZeroVirtualClock = "clock_step_us=100000\n";

class LevelZeroTest : public ::testing::Test, protected test::FakeLibraryConfig {
 protected:
  LevelZeroTest() : FakeLibraryConfig("JOULE_FAKE_LEVEL_ZERO_CONFIG", "fake-levelzero.conf") {}

  Result<LevelZeroGpuList> open(const std::string& library = kFakeLevelZero,
                                const VisibleDevices& visible = {}, double window_s = 0.001) {
    return open_levelzero_gpus(LevelZeroOptions{library, window_s}, visible);
  }

  LevelZeroGpuList open_ok(const VisibleDevices& visible = {}) {
    return test::value_or_add_failure(open(kFakeLevelZero, visible));
  }
};

// --- Opening and identity ---------------------------------------------------------------------------------

TEST_F(LevelZeroTest, DiscoversTwoGpusWithNameAndUuid) {
  configure(
      "devices=2\n"
      "device.0.name=Intel(R) Data Center GPU Max 1550\n"
      "device.0.uuid=8680bd0b08000000000300000000000a\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(called("zesInit 0"));
  EXPECT_EQ(gpus[0]->info().backend, "levelzero");
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 0);
  EXPECT_EQ(gpus[0]->info().name, "Intel(R) Data Center GPU Max 1550");
  EXPECT_EQ(gpus[0]->info().uuid, "GPU-8680bd0b-0800-0000-0003-00000000000a");
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-8680e20b-0800-0000-0001-000000000001");
  EXPECT_EQ(gpus[1]->label(), "GPU 1 (Fake Intel Data Center GPU Max 1)");
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
}

TEST_F(LevelZeroTest, NameFallsBackToTheCoreNameThenThePciAddress) {
  configure(
      "devices=3\ndevice.*.name=unknown\ndevice.1.core_name=\ndevice.2.core_name=\ndevice.2.pci_bus=0x3a\n"
      "device.1.fail.zesDevicePciGetProperties=ERROR_UNSUPPORTED_FEATURE\ndevice.0.uuid=\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0]->info().name, "Intel(R) Fake GPU 0");
  EXPECT_EQ(gpus[0]->info().uuid, "");  // an all-zero UUID: selectable by index only
  EXPECT_EQ(gpus[1]->info().name, "Intel GPU 1");
  EXPECT_EQ(gpus[2]->info().name, "Intel GPU 0000:3a:00.0");
}

TEST_F(LevelZeroTest, DevicesThatAreNotGpusAreSkipped) {
  configure("devices=2\ndevice.0.type=cpu\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->info().name, "Fake Intel Data Center GPU Max 1");
  EXPECT_EQ(gpus[0]->info().physical_index, 0);
}

TEST_F(LevelZeroTest, VisibleListReordersAndCommandsGoToThePhysicalGpu) {
  configure("devices=3\n");
  const auto gpus = open_ok(parse_visible_devices("ZE_AFFINITY_MASK", "2,0").value());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().physical_index, 2);
  EXPECT_EQ(gpus[0]->info().name, "Fake Intel Data Center GPU Max 2");
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(150'000).has_value());
  EXPECT_TRUE(called("zesPowerSetLimitsExt 2 150000"));  // mW on the wire, physical GPU 2
  JOULE_EXPECT_ERROR(open(kFakeLevelZero, parse_visible_devices("ZE_AFFINITY_MASK", "0,5").value()),
                     ErrorCode::kNotFound,
                     "ZE_AFFINITY_MASK names GPU 5, but this machine has 3 GPUs (indices 0 to 2)");
}

TEST_F(LevelZeroTest, BadSampleWindowIsRejected) {
  configure("");
  for (const double window_s : {0.0, -1.0, 2.0}) {
    JOULE_EXPECT_ERROR(
        open(kFakeLevelZero, {}, window_s), ErrorCode::kInvalidArgument,
        fmt::format("the Level Zero sample window must be more than 0 and at most 1 second, not {}",
                    window_s));
  }
}

// --- Loading failures -------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, AbsentLibraryExplainsTheFix) {
  configure("");
  JOULE_EXPECT_ERROR(
      open("/nonexistent/libze_loader.so.1"), ErrorCode::kLibraryMissing,
      "cannot load the Level Zero loader '/nonexistent/libze_loader.so.1': /nonexistent/libze_loader.so.1: "
      "cannot open shared object file: No such file or directory. Install Intel's Level Zero loader (libze1) "
      "and GPU driver (libze-intel-gpu1, formerly intel-level-zero-gpu), or set JOULE_LEVEL_ZERO_LIBRARY to "
      "the full path of libze_loader.so.1");
}

TEST_F(LevelZeroTest, MissingSymbolIsNamed) {
  configure("");
  JOULE_EXPECT_ERROR(
      open(kFakeLevelZeroNoEnergy), ErrorCode::kLibraryMissing,
      fmt::format(
          "the Level Zero loader '{}' has no function zesPowerGetEnergyCounter; it is not a Level Zero "
          "1.4 or newer loader. Install Intel's Level Zero loader (libze1) and GPU driver "
          "(libze-intel-gpu1, formerly intel-level-zero-gpu), or set JOULE_LEVEL_ZERO_LIBRARY to the "
          "full path of libze_loader.so.1",
          kFakeLevelZeroNoEnergy));
}

TEST_F(LevelZeroTest, InitFailureNamesTheResult) {
  configure("fail.zesInit=ZE_RESULT_ERROR_UNINITIALIZED\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kDevice,
      fmt::format("cannot initialise Level Zero Sysman (zesInit, '{}'): ZE_RESULT_ERROR_UNINITIALIZED",
                  kFakeLevelZero));
  configure("fail.zesInit=ERROR_DEPENDENCY_UNAVAILABLE\n");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kLibraryMissing,
                     fmt::format("cannot initialise Level Zero Sysman (zesInit, '{}'): "
                                 "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
                                 kFakeLevelZero));
}

TEST_F(LevelZeroTest, UnknownApiVersionIsRefusedNamingBoth) {
  configure("api_version=2.3\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kNotSupported,
      fmt::format("the Level Zero loader of '{}' speaks API version 2.3, but joule reads only Level "
                  "Zero 1.x, whose data layouts it knows",
                  kFakeLevelZero));
  test::ScopedEnv sysman("ZES_ENABLE_SYSMAN", nullptr);
  JOULE_EXPECT_ERROR(
      open(kFakeLevelZeroNoZesInit), ErrorCode::kNotSupported,
      fmt::format("the Level Zero driver of '{}' speaks API version 2.3, but joule reads only Level "
                  "Zero 1.x, whose data layouts it knows",
                  kFakeLevelZeroNoZesInit));
}

TEST_F(LevelZeroTest, OldLoaderInitialisesSysmanThroughZeInit) {
  configure(std::string(kLevelZeroVirtualClock) + "device.0.power_w=80\n");
  test::ScopedEnv sysman("ZES_ENABLE_SYSMAN", nullptr);
  const auto gpus = test::value_or_add_failure(open(kFakeLevelZeroNoZesInit));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_TRUE(called("zeInit 1"));  // ZE_INIT_FLAG_GPU_ONLY
  ASSERT_NE(std::getenv("ZES_ENABLE_SYSMAN"), nullptr);
  EXPECT_STREQ(std::getenv("ZES_ENABLE_SYSMAN"), "1");
  EXPECT_EQ(gpus[0]->power_mw().value(), 80'000u);
}

TEST_F(LevelZeroTest, SysmanOffOnTheOldPathSaysHowToTurnItOn) {
  configure("fail.zesDeviceEnumPowerDomains=ERROR_UNINITIALIZED\n");
  test::ScopedEnv sysman("ZES_ENABLE_SYSMAN", nullptr);
  JOULE_EXPECT_ERROR(open(kFakeLevelZeroNoZesInit), ErrorCode::kDevice,
                     "cannot list the power domains of GPU 0 (Fake Intel Data Center GPU Max 0): "
                     "ZE_RESULT_ERROR_UNINITIALIZED. "
                     "Sysman is off: set ZES_ENABLE_SYSMAN=1 before anything in the process initialises "
                     "Level Zero, or install "
                     "a Level Zero 1.5+ loader (zesInit)");
}

TEST_F(LevelZeroTest, DeviceListingFailure) {
  configure("fail.zesDeviceGet=ERROR_DEVICE_LOST\n");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kDevice,
                     "cannot count the devices of Level Zero driver 0: ZE_RESULT_ERROR_DEVICE_LOST");
}

// --- Energy and power -------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, EnergyCounterInMillijoules) {
  configure(std::string(kLevelZeroVirtualClock) + "device.0.power_w=150\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  const uint64_t first_mj = gpus[0]->energy_mj().value();
  const uint64_t second_mj = gpus[0]->energy_mj().value();
  EXPECT_EQ(second_mj - first_mj, 15'000u);  // 150 W × 0.1 s
}

TEST_F(LevelZeroTest, PowerIsDerivedFromTheEnergyCounter) {
  configure(std::string(kLevelZeroVirtualClock) + "devices=2\ndevice.0.power_w=150\ndevice.1.power_w=400\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->power_mw().value(), 150'000u);  // a fresh pair of readings
  EXPECT_EQ(gpus[0]->power_mw().value(), 150'000u);  // since the previous reading
  EXPECT_EQ(gpus[1]->power_mw().value(), 300'000u);  // held at its 300 W limit
}

TEST_F(LevelZeroTest, ACounterResetAddsNoEnergy) {
  configure(std::string(kLevelZeroVirtualClock) + "device.0.power_w=150\ndevice.0.energy_reset_at_read=2\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->energy_mj().value(), 15'000u);
  // The counter drops to 0 at the next read: no power across the reset (a fresh pair is read), no energy.
  EXPECT_EQ(gpus[0]->power_mw().value(), 150'000u);
  EXPECT_EQ(gpus[0]->energy_mj().value(), 45'000u);  // 15 J, nothing for the reset, 15 J, 15 J
  EXPECT_EQ(gpus[0]->power_mw().value(), 150'000u);  // since the energy reading
}

TEST_F(LevelZeroTest, ACounterResetBetweenThePairIsNamed) {
  configure(std::string(kLevelZeroVirtualClock) + "device.0.power_w=150\ndevice.0.energy_reset_at_read=2\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  // Virtual time: 1.1 s after the configuration is read, 1.2 s at the first read, 1.3 s at the second.
  JOULE_EXPECT_ERROR(
      gpus[0]->power_mw(), ErrorCode::kDevice,
      "cannot derive a rate for GPU 0 (Fake Intel Data Center GPU Max 0): Level Zero's counter "
      "went from 15000000 at 1200000 us to 0 at 1300000 us");
  EXPECT_EQ(gpus[0]->power_mw().value(), 150'000u);  // the next call measures again
}

TEST_F(LevelZeroTest, NoCardOrPackageDomainMeansNoCounter) {
  configure("devices=2\ndevice.0.power_domain=none\ndevice.1.power_domain=stack\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  for (const auto& gpu : gpus) {
    EXPECT_FALSE(gpu->info().has_energy_counter);
  }
  JOULE_EXPECT_ERROR(
      gpus[0]->power_mw(), ErrorCode::kNotSupported,
      "cannot read the power of GPU 0 (Fake Intel Data Center GPU Max 0): Level Zero lists no card or "
      "package power domain for it");
  JOULE_EXPECT_ERROR(
      gpus[1]->power_limit_mw(), ErrorCode::kNotSupported,
      "cannot read the power limit of GPU 1 (Fake Intel Data Center GPU Max 1): Level Zero lists no "
      "card or package power domain for it");
  JOULE_EXPECT_ERROR(gpus[1]->energy_mj(), ErrorCode::kNotSupported,
                     "GPU 1 (Fake Intel Data Center GPU Max 1) has no energy counter; its energy is "
                     "estimated from power samples");
}

TEST_F(LevelZeroTest, PackageDomainAndDriversWithoutExtensionPropertiesWork) {
  configure(std::string(kLevelZeroVirtualClock) +
            "devices=2\ndevice.0.power_domain=package\ndevice.1.ext_properties=false\ndevice.*.power_w=90\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  for (const auto& gpu : gpus) {
    EXPECT_TRUE(gpu->info().has_energy_counter);
    EXPECT_EQ(gpu->power_mw().value(), 90'000u);
  }
}

TEST_F(LevelZeroTest, EnergyReadFailureNamesTheResult) {
  configure("fail.zesPowerGetEnergyCounter=ERROR_DEVICE_LOST\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->energy_mj(), ErrorCode::kDevice,
                     "cannot read the energy counter of GPU 0 (Fake Intel Data Center GPU Max 0): "
                     "ZE_RESULT_ERROR_DEVICE_LOST");
}

// --- Power limits -----------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, PowerLimitsInMilliwattsSetAndReset) {
  configure(
      "device.0.limit_min_w=100.5\ndevice.0.limit_max_w=350\ndevice.0.limit_default_w=300\n"
      "device.0.limit_w=350\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  const auto constraints = gpus[0]->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 100'500u);
  EXPECT_EQ(constraints.max_mw, 350'000u);
  EXPECT_EQ(constraints.default_mw, 300'000u);
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 350'000u);  // the sustained limit, not the peak one
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(200'000).has_value());
  EXPECT_TRUE(called("zesPowerSetLimitsExt 0 200000"));
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 200'000u);
  ASSERT_TRUE(gpus[0]->reset_power_limit().has_value());
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 300'000u);
}

TEST_F(LevelZeroTest, UnknownLimitsFallBack) {
  configure(
      "devices=2\ndevice.*.limit_min_w=-1\ndevice.0.limit_max_w=-1\ndevice.1.limit_max_w=-1\n"
      "device.1.limit_default_w=-1\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  const auto constraints = gpus[0]->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 0u);
  EXPECT_EQ(constraints.max_mw, 250'000u);  // the default stands in for the unknown maximum
  JOULE_EXPECT_ERROR(
      gpus[1]->power_limit_constraints(), ErrorCode::kNotSupported,
      "cannot read the power limit range of GPU 1 (Fake Intel Data Center GPU Max 1): Level Zero "
      "reports neither a maximum nor a default power limit for it");
}

TEST_F(LevelZeroTest, SettingsGuardRestoresThePowerLimitAndClocks) {
  configure("device.0.limit_w=280\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  {
    SettingsGuard guard({.owner = "test", .restore_on_signals = false});
    ASSERT_TRUE(guard.set_power_limit_mw(*gpus[0], 150'000).has_value());
    ASSERT_TRUE(guard.lock_sm_clocks(*gpus[0], 300, 800).has_value());
    EXPECT_EQ(gpus[0]->power_limit_mw().value(), 150'000u);
    EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 800u);
  }
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 280'000u);  // the recorded limit
  EXPECT_TRUE(called("zesPowerSetLimitsExt 0 280000"));
  EXPECT_TRUE(called("zesFrequencySetRange 0 300 1600"));  // the hardware range
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 1600u);
}

TEST_F(LevelZeroTest, PowerLimitOutsideRange) {
  configure("device.0.limit_min_w=100\ndevice.0.limit_max_w=300\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->set_power_limit_mw(350'000), ErrorCode::kOutOfRange,
      "power limit 350 W is outside GPU 0 (Fake Intel Data Center GPU Max 0)'s range 100 W to 300 W");
}

TEST_F(LevelZeroTest, SetPowerLimitWithoutPermissionSaysHowToFix) {
  configure("fail.zesPowerSetLimitsExt=ERROR_INSUFFICIENT_PERMISSIONS\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->set_power_limit_mw(200'000), ErrorCode::kPermissionDenied,
                     "cannot set the power limit of GPU 0 (Fake Intel Data Center GPU Max 0) to 200 W: "
                     "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS. Changing Intel GPU settings needs root: run "
                     "joule as root (e.g. "
                     "with sudo)");
}

TEST_F(LevelZeroTest, LimitsThatCannotBeSet) {
  configure(
      "devices=3\ndevice.0.can_control=false\ndevice.1.limit_locked=true\ndevice.2.limit_unit=current\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 3u);
  JOULE_EXPECT_ERROR(
      gpus[0]->set_power_limit_mw(200'000), ErrorCode::kNotSupported,
      "cannot set the power limit of GPU 0 (Fake Intel Data Center GPU Max 0) to 200 W: Level Zero "
      "says its power limits cannot be changed");
  JOULE_EXPECT_ERROR(
      gpus[1]->set_power_limit_mw(200'000), ErrorCode::kNotSupported,
      "cannot set the power limit of GPU 1 (Fake Intel Data Center GPU Max 1) to 200 W: its sustained "
      "power limit is locked by the firmware");
  JOULE_EXPECT_ERROR(
      gpus[2]->power_limit_mw(), ErrorCode::kNotSupported,
      "cannot read the power limit of GPU 2 (Fake Intel Data Center GPU Max 2): its sustained limit "
      "is in mA of current, not in mW");
  JOULE_EXPECT_ERROR(gpus[2]->set_power_limit_mw(200'000), ErrorCode::kNotSupported,
                     "cannot set the power limit of GPU 2 (Fake Intel Data Center GPU Max 2) to 200 W: its "
                     "sustained limit is in mA of current, not in mW");
}

TEST_F(LevelZeroTest, UnknownResultIsADeviceError) {
  configure("fail.zesPowerGetLimitsExt=0x12345\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->power_limit_mw(), ErrorCode::kDevice,
      "cannot read the power limit of GPU 0 (Fake Intel Data Center GPU Max 0): Level Zero result "
      "0x12345");
}

// --- Clocks -----------------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, SupportedClocksHighestFirstLockAndReset) {
  configure("device.0.gpu_clocks_mhz=300,300,850,1300,2100\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->supported_sm_clocks_mhz().value(), (std::vector<uint32_t>{2100, 1300, 850, 300}));
  ASSERT_TRUE(gpus[0]->lock_sm_clocks(850, 1600).has_value());
  EXPECT_TRUE(called("zesFrequencySetRange 0 850 1600"));
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 1300u);
  ASSERT_TRUE(gpus[0]->reset_sm_clocks().has_value());
  EXPECT_TRUE(called("zesFrequencySetRange 0 300 2100"));
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 2100u);
}

TEST_F(LevelZeroTest, LockClocksOutsideTheRangeOrUncontrollable) {
  configure("devices=3\ndevice.1.gpu_freq_can_control=false\ndevice.2.gpu_clocks_mhz=none\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 3u);
  JOULE_EXPECT_ERROR(gpus[0]->lock_sm_clocks(200, 1200), ErrorCode::kOutOfRange,
                     "SM clock range 200-1200 MHz is outside GPU 0 (Fake Intel Data Center GPU Max 0)'s "
                     "supported 300-1600 MHz");
  JOULE_EXPECT_ERROR(
      gpus[1]->lock_sm_clocks(300, 800), ErrorCode::kNotSupported,
      "cannot lock the SM clock of GPU 1 (Fake Intel Data Center GPU Max 1) to 300-800 MHz: Level "
      "Zero says its GPU frequency cannot be changed");
  JOULE_EXPECT_ERROR(
      gpus[2]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
      "cannot read the supported SM clocks of GPU 2 (Fake Intel Data Center GPU Max 2): Level Zero "
      "lists no GPU frequency domain for it");
}

TEST_F(LevelZeroTest, ResetClocksWithoutPermission) {
  configure("fail.zesFrequencySetRange=ERROR_INSUFFICIENT_PERMISSIONS\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->reset_sm_clocks(), ErrorCode::kPermissionDenied,
      "cannot reset the SM clock of GPU 0 (Fake Intel Data Center GPU Max 0) (to its hardware range "
      "300-1600 MHz): ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS. Changing Intel GPU settings needs "
      "root: run joule as root (e.g. with sudo)");
}

// --- Telemetry --------------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, TelemetryValues) {
  configure(std::string(kLevelZeroVirtualClock) +
            "device.0.temperature_gpu_c=57.5\ndevice.0.memory_clock_mhz=3200\ndevice.0.busy_pct=64\n"
            "device.0.throttle_reasons=9\n");  // AVE_PWR_CAP | THERMAL_LIMIT
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  const GpuTelemetry telemetry = gpus[0]->telemetry();
  EXPECT_EQ(telemetry.temperature_c, 57.5);  // the GPU sensor, though the global one is listed first
  EXPECT_EQ(telemetry.sm_clock_mhz, 1600u);
  EXPECT_EQ(telemetry.memory_clock_mhz, 3200u);
  EXPECT_EQ(telemetry.gpu_utilization_pct, 64u);
  EXPECT_EQ(telemetry.clock_event_reasons, clock_event::kSwPowerCap | clock_event::kHwThermalSlowdown);
  ASSERT_NE(telemetry.error(TelemetryField::kMemoryUtilization), nullptr);
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryUtilization)->code(), ErrorCode::kNotSupported);
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryUtilization)->message(),
            "GPU 0 (Fake Intel Data Center GPU Max 0) does not report memory utilisation (levelzero "
            "backend): Level "
            "Zero reports memory bandwidth counters, not the share of time memory was busy");
  ASSERT_NE(telemetry.error(TelemetryField::kMemoryPower), nullptr);
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryPower)->code(), ErrorCode::kNotSupported);
}

TEST_F(LevelZeroTest, TemperatureFallsBackToTheGlobalSensor) {
  configure(
      "devices=2\ndevice.*.temperature_gpu_c=none\ndevice.0.temperature_global_c=66\n"
      "device.1.temperature_global_c=none\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->temperature_c().value(), 66.0);
  JOULE_EXPECT_ERROR(
      gpus[1]->temperature_c(), ErrorCode::kNotSupported,
      "GPU 1 (Fake Intel Data Center GPU Max 1) does not report temperature (levelzero backend): "
      "Level Zero lists no GPU or global temperature sensor");
}

TEST_F(LevelZeroTest, TelemetryNotSupportedNamesTheReading) {
  configure(
      "device.0.memory_clock_mhz=none\ndevice.0.busy_pct=none\n"
      "fail.zesFrequencyGetState=ERROR_UNSUPPORTED_FEATURE\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->memory_clock_mhz(), ErrorCode::kNotSupported,
      "GPU 0 (Fake Intel Data Center GPU Max 0) does not report the memory clock (levelzero backend): "
      "Level Zero lists no such frequency domain for it");
  JOULE_EXPECT_ERROR(
      gpus[0]->sm_clock_mhz(), ErrorCode::kNotSupported,
      "GPU 0 (Fake Intel Data Center GPU Max 0) does not report the SM clock (levelzero backend): "
      "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE");
  JOULE_EXPECT_ERROR(
      gpus[0]->gpu_utilization_pct(), ErrorCode::kNotSupported,
      "GPU 0 (Fake Intel Data Center GPU Max 0) does not report GPU utilisation (levelzero backend): "
      "Level Zero lists no engine group for it");
}

TEST_F(LevelZeroTest, TelemetryDeviceErrorsAreNotDisguisedAsUnsupported) {
  configure("fail.zesTemperatureGetState=ERROR_DEVICE_LOST\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->temperature_c(), ErrorCode::kDevice,
                     "cannot read the temperature of GPU 0 (Fake Intel Data Center GPU Max 0): "
                     "ZE_RESULT_ERROR_DEVICE_LOST");
}

// --- Discovery --------------------------------------------------------------------------------------------

TEST_F(LevelZeroTest, DiscoveryListsIntelGpusBesideTheOthers) {
  configure("devices=2\n");
  test::TempDir dir;
  test::ScopedEnv amdsmi("JOULE_FAKE_AMDSMI_CONFIG", dir.write("amdsmi.conf", "devices=1\n").c_str());
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", nullptr);
  test::ScopedEnv hip("HIP_VISIBLE_DEVICES", nullptr);
  DiscoveryOptions options;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  options.rocm_library = "/nonexistent/librocm_smi64.so.1";
  options.amd_smi_library = JOULE_FAKE_AMDSMI_LIBRARY;
  options.rocm_counter_validation_s = 0;
  options.cpus = false;
  options.level_zero_library = kFakeLevelZero;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 3u);
  EXPECT_EQ(devices->gpus[0]->info().backend, "levelzero");
  EXPECT_EQ(devices->gpus[1]->info().index, 1);
  EXPECT_EQ(devices->gpus[2]->info().backend, "amdsmi");
  ASSERT_GE(devices->reports.size(), 2u);
  EXPECT_EQ(devices->reports[1].backend, "levelzero");
  EXPECT_TRUE(devices->reports[1].ok);
  EXPECT_EQ(devices->reports[1].devices, 2u);

  // A loader joule cannot use is reported; the other backends still work.
  options.level_zero_library = kFakeLevelZeroNoEnergy;
  devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 1u);
  EXPECT_EQ(devices->gpus[0]->info().backend, "amdsmi");
  EXPECT_FALSE(devices->reports[1].ok);
  EXPECT_EQ(devices->reports[1].detail.rfind(fmt::format("the Level Zero loader '{}' has no function "
                                                         "zesPowerGetEnergyCounter",
                                                         kFakeLevelZeroNoEnergy),
                                             0),
            0u);
}

TEST(LevelZeroDiscoveryOptions, LibraryFromTheEnvironment) {
  test::ScopedEnv library("JOULE_LEVEL_ZERO_LIBRARY", "/x/libze_loader.so.1");
  const auto options = DiscoveryOptions::from_environment();
  ASSERT_TRUE(options);
  EXPECT_EQ(options->level_zero_library, "/x/libze_loader.so.1");
  test::ScopedEnv unset("JOULE_LEVEL_ZERO_LIBRARY", nullptr);
  EXPECT_EQ(DiscoveryOptions::from_environment()->level_zero_library, "libze_loader.so.1");
}

// --- Helpers ----------------------------------------------------------------------------------------------

TEST(LevelZeroHelpers, ResultsMapToErrorCodes) {
  using level_zero::ZeResult;
  using levelzero_detail::error_code;
  EXPECT_EQ(error_code(ZeResult::kErrorUnsupportedFeature), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(ZeResult::kErrorUnsupportedVersion), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(ZeResult::kErrorInsufficientPermissions), ErrorCode::kPermissionDenied);
  EXPECT_EQ(error_code(ZeResult::kErrorInvalidArgument), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code(ZeResult::kErrorInvalidNullHandle), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code(ZeResult::kErrorDependencyUnavailable), ErrorCode::kLibraryMissing);
  EXPECT_EQ(error_code(ZeResult::kErrorDeviceLost), ErrorCode::kDevice);
  EXPECT_EQ(error_code(ZeResult::kErrorUninitialized), ErrorCode::kDevice);
  EXPECT_EQ(error_code(static_cast<ZeResult>(0x12345)), ErrorCode::kDevice);
  EXPECT_EQ(error_code(ZeResult::kSuccess), ErrorCode::kInternal);
  EXPECT_STREQ(level_zero::result_name(ZeResult::kErrorNotAvailable), "ZE_RESULT_ERROR_NOT_AVAILABLE");
  EXPECT_STREQ(level_zero::result_name(static_cast<ZeResult>(0x12345)), "");
}

TEST(LevelZeroHelpers, UuidFormat) {
  const uint8_t uuid[16] = {0x86, 0x80, 0xbd, 0x0b, 0x08, 0, 0, 0, 0, 0x03, 0, 0, 0, 0, 0, 0xff};
  EXPECT_EQ(levelzero_detail::format_uuid(uuid), "GPU-8680bd0b-0800-0000-0003-0000000000ff");
  const uint8_t zero[16] = {};
  EXPECT_EQ(levelzero_detail::format_uuid(zero), "");
  EXPECT_EQ(level_zero::api_major((2u << 16) | 3u), 2u);
  EXPECT_EQ(level_zero::api_minor((2u << 16) | 3u), 3u);
}

}  // namespace
}  // namespace joule::device
