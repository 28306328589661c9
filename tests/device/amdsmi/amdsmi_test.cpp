// SPDX-License-Identifier: Apache-2.0
// The AMD SMI backend through its real dlopen path, against the fake libamd_smi.so (tests/fakes/amdsmi).
#include "joule/device/amdsmi.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "device/amdsmi/amdsmi_library.hpp"
#include "fakes/fake_library_fixture.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using AmdSmiGpuList = std::vector<std::unique_ptr<Gpu>>;

constexpr const char* kFakeAmdSmi = JOULE_FAKE_AMDSMI_LIBRARY;

class AmdSmiTest : public ::testing::Test, protected test::FakeLibraryConfig {
 protected:
  AmdSmiTest() : FakeLibraryConfig("JOULE_FAKE_AMDSMI_CONFIG", "fake-amdsmi.conf") {}

  /// Opens with the energy-counter check off unless `validation_s` says otherwise.
  Result<AmdSmiGpuList> open(const VisibleDevices& visible = {}, double validation_s = 0,
                             const std::string& library = kFakeAmdSmi) {
    return open_amdsmi_gpus(AmdSmiOptions{library, validation_s}, visible);
  }

  AmdSmiGpuList open_ok(const VisibleDevices& visible = {}, double validation_s = 0) {
    return test::value_or_add_failure(open(visible, validation_s));
  }

  static VisibleDevices amdsmi_hip(const char* value) {
    return parse_visible_devices("HIP_VISIBLE_DEVICES", value).value();
  }
};

// --- Opening and identity ---------------------------------------------------------------------------------

TEST_F(AmdSmiTest, DiscoversTwoGpusWithNameAndUuid) {
  configure(
      "devices=2\n"
      "device.0.name=AMD Instinct MI300X\n"
      "device.0.uuid=0BFF74A1-0000-1000-8012-34567890ABCD\n"
      "device.1.name=AMD Instinct MI325X\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(called("amdsmi_init 2"));  // AMDSMI_INIT_AMD_GPUS
  EXPECT_EQ(gpus[0]->info().backend, "amdsmi");
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 0);
  EXPECT_EQ(gpus[0]->info().name, "AMD Instinct MI300X");
  EXPECT_EQ(gpus[0]->info().uuid, "GPU-0bff74a1-0000-1000-8012-34567890abcd");
  EXPECT_EQ(gpus[1]->info().index, 1);
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-a1ff74a1-0000-1000-8001-c24d1eb30c3f");
  EXPECT_EQ(gpus[1]->label(), "GPU 1 (AMD Instinct MI325X)");
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
}

TEST_F(AmdSmiTest, MissingNameAndUuidFallBack) {
  configure(
      "devices=2\ndevice.1.fail.amdsmi_get_gpu_asic_info=NOT_SUPPORTED\n"
      "device.1.fail.amdsmi_get_gpu_device_uuid=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1]->info().name, "AMD GPU 1");
  EXPECT_EQ(gpus[1]->info().uuid, "");
}

TEST_F(AmdSmiTest, ShutsDownWhenTheLastGpuGoes) {
  configure("devices=2\n");
  auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  gpus.erase(gpus.begin());
  EXPECT_FALSE(called("amdsmi_shut_down"));
  ASSERT_TRUE(gpus[0]->power_mw().has_value());
  gpus.clear();
  EXPECT_TRUE(called("amdsmi_shut_down"));
}

TEST_F(AmdSmiTest, NegativeValidationIntervalIsRejected) {
  configure("");
  JOULE_EXPECT_ERROR(
      open({}, -1), ErrorCode::kInvalidArgument,
      "the AMD SMI energy-counter check interval must be a non-negative number of seconds, not -1");
}

// --- Loading failures -------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, AbsentLibraryExplainsTheFix) {
  configure("");
  JOULE_EXPECT_ERROR(
      open({}, 0, "/nonexistent/libamd_smi.so"), ErrorCode::kLibraryMissing,
      "cannot load the AMD SMI library '/nonexistent/libamd_smi.so': /nonexistent/libamd_smi.so: "
      "cannot open shared object file: No such file or directory. Install AMD SMI (the amd-smi-lib "
      "package of ROCm 6.1 or later), or set JOULE_AMD_SMI_LIBRARY to the full path of libamd_smi.so");
}

TEST_F(AmdSmiTest, MissingSymbolIsNamed) {
  configure("");
  const std::string library = JOULE_FAKE_AMDSMI_NO_POWER_INFO_LIBRARY;
  JOULE_EXPECT_ERROR(
      open({}, 0, library), ErrorCode::kLibraryMissing,
      "the AMD SMI library '" + library +
          "' has no function amdsmi_get_power_info; it is not AMD SMI 24.x to 26.x (ROCm 6.1 to 7). "
          "Install the AMD SMI of ROCm 6.1 or later, or set JOULE_AMD_SMI_LIBRARY to the full path of "
          "another libamd_smi.so");
}

TEST_F(AmdSmiTest, InitFailureCarriesAmdSmiText) {
  configure("fail.amdsmi_init=AMDSMI_STATUS_INIT_ERROR\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kDevice,
      fmt::format("cannot initialise AMD SMI ('{}'): AMDSMI_STATUS_INIT_ERROR: (fake) An error "
                  "occurred when initializing internal data structures",
                  kFakeAmdSmi));
  EXPECT_FALSE(called("amdsmi_shut_down"));  // never shut down what did not start
}

TEST_F(AmdSmiTest, UnknownMajorVersionsAreRefusedNamingTheSupportedOnes) {
  configure("lib_major=27\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kNotSupported,
      fmt::format("the AMD SMI library '{}' is version 27.1.0, but joule reads only AMD SMI 24.x and 25.x "
                  "(ROCm 6.1 to 6.4) and 26.x (ROCm 7), whose data layouts it knows; AMD GPUs are read "
                  "through ROCm SMI instead",
                  kFakeAmdSmi));
  EXPECT_TRUE(called("amdsmi_shut_down"));
  // ROCm 6.0's AMD SMI (23.x, year first) is older than any layout joule knows.
  const test::ScopedEnv version("JOULE_FAKE_AMDSMI_VERSION", "23.4.0");
  configure("");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kNotSupported,
      fmt::format("the AMD SMI library '{}' is version 23.4.0, but joule reads only AMD SMI 24.x and 25.x "
                  "(ROCm 6.1 to 6.4) and 26.x (ROCm 7), whose data layouts it knows; AMD GPUs are read "
                  "through ROCm SMI instead",
                  kFakeAmdSmi));
}

TEST_F(AmdSmiTest, SocketListingFailure) {
  configure("fail.amdsmi_get_socket_handles=BUSY\n");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kDevice,
                     "cannot count the AMD SMI sockets: AMDSMI_STATUS_BUSY: (fake) Device busy");
}

// --- Visible devices --------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, HipVisibleDevicesReordersAndCommandsGoToThePhysicalGpu) {
  configure("devices=3\n");
  const auto gpus = open_ok(amdsmi_hip("2,0"));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 2);
  EXPECT_EQ(gpus[0]->info().name, "Fake AMD Instinct 2");
  EXPECT_EQ(gpus[1]->info().physical_index, 0);
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(150'000).has_value());
  EXPECT_TRUE(called("amdsmi_set_power_cap 2 150000000"));  // µW on the wire, physical GPU 2
}

TEST_F(AmdSmiTest, HipVisibleDevicesByUuidAndOutOfRange) {
  configure("devices=3\ndevice.1.uuid=ABCDEF00-0000-1000-8000-000000000001\n");
  const auto gpus = open_ok(amdsmi_hip("GPU-abcdef"));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->info().physical_index, 1);
  JOULE_EXPECT_ERROR(open(amdsmi_hip("0,5")), ErrorCode::kNotFound,
                     "HIP_VISIBLE_DEVICES names GPU 5, but this machine has 3 GPUs (indices 0 to 2)");
}

// --- Power and energy -------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, PowerIsConvertedFromWatts) {
  configure("devices=2\ndevice.0.power_w=251\ndevice.1.power_w=180\ndevice.1.instantaneous_power=false\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->power_mw().value(), 251'000u);
  EXPECT_EQ(gpus[1]->power_mw().value(), 180'000u);  // from average_socket_power
}

TEST_F(AmdSmiTest, PowerNotReported) {
  configure("device.0.power_w=none\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->power_mw(), ErrorCode::kNotSupported,
                     "cannot read the power of GPU 0 (Fake AMD Instinct 0): AMD SMI reports no socket power "
                     "for it");
}

TEST_F(AmdSmiTest, EnergyCounterIsTicksTimesResolutionInMillijoules) {
  configure("device.0.power_w=100\ndevice.0.energy_resolution_uj=15.259\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  ASSERT_TRUE(gpus[0]->info().has_energy_counter);
  const auto outer_start = std::chrono::steady_clock::now();
  const uint64_t start_mj = gpus[0]->energy_mj().value();
  const auto inner_start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto inner_end = std::chrono::steady_clock::now();
  const uint64_t end_mj = gpus[0]->energy_mj().value();
  const auto outer_end = std::chrono::steady_clock::now();
  // 100 W between the reads, in mJ (= 100 000 mW × s), with one tick and 1 mJ of flooring either way.
  const double inner_s = std::chrono::duration<double>(inner_end - inner_start).count();
  const double outer_s = std::chrono::duration<double>(outer_end - outer_start).count();
  const auto delta_mj = static_cast<double>(end_mj - start_mj);
  EXPECT_GE(delta_mj, 100'000 * inner_s - 2);
  EXPECT_LE(delta_mj, 100'000 * outer_s + 2);
}

TEST_F(AmdSmiTest, CounterCheckAcceptsAGoodCounterAndRejectsOneOffByAHundred) {
  configure("devices=2\ndevice.1.energy_scale=100\n");
  const auto gpus = open_ok({}, 0.05);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
  EXPECT_FALSE(gpus[1]->info().has_energy_counter);
  JOULE_EXPECT_ERROR(
      gpus[1]->energy_mj(), ErrorCode::kNotSupported,
      "GPU 1 (Fake AMD Instinct 1) has no energy counter; its energy is estimated from power samples");
}

TEST_F(AmdSmiTest, UnreadableCounterMeansNoCounter) {
  configure("fail.amdsmi_get_energy_count=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
}

// --- Power limits -----------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, PowerLimitsInMilliwattsSetAndReset) {
  configure(
      "device.0.power_cap_min_w=100.5\ndevice.0.power_cap_max_w=750\ndevice.0.power_cap_default_w=700\n"
      "device.0.power_cap_w=750\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  const auto constraints = gpus[0]->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 100'500u);
  EXPECT_EQ(constraints.max_mw, 750'000u);
  EXPECT_EQ(constraints.default_mw, 700'000u);
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 750'000u);
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(400'000).has_value());
  EXPECT_TRUE(called("amdsmi_set_power_cap 0 400000000"));  // µW on the wire
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 400'000u);
  ASSERT_TRUE(gpus[0]->reset_power_limit().has_value());
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 700'000u);
}

TEST_F(AmdSmiTest, PowerLimitOutsideRange) {
  configure("device.0.power_cap_min_w=100\ndevice.0.power_cap_max_w=300\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->set_power_limit_mw(350'000), ErrorCode::kOutOfRange,
                     "power limit 350 W is outside GPU 0 (Fake AMD Instinct 0)'s range 100 W to 300 W");
}

TEST_F(AmdSmiTest, SetPowerLimitWithoutPermissionSaysHowToFix) {
  configure("fail.amdsmi_set_power_cap=NO_PERM\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->set_power_limit_mw(200'000), ErrorCode::kPermissionDenied,
      "cannot set the power cap of GPU 0 (Fake AMD Instinct 0) to 200 W: AMDSMI_STATUS_NO_PERM: (fake) "
      "Permission Denied. Changing AMD GPU settings needs root: run joule as root (e.g. with sudo)");
}

TEST_F(AmdSmiTest, UnknownStatusIsADeviceError) {
  configure("fail.amdsmi_get_power_cap_info=99\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->power_limit_mw(), ErrorCode::kDevice,
      "cannot read the power cap of GPU 0 (Fake AMD Instinct 0): AMD SMI status 99: (fake) Some "
      "other failure");
}

// --- Clocks -----------------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, SupportedClocksHighestFirstLockAndReset) {
  configure("device.0.sclk_mhz=500,800,800,1502,2100\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->supported_sm_clocks_mhz().value(), (std::vector<uint32_t>{2100, 1502, 800, 500}));
  ASSERT_TRUE(gpus[0]->lock_sm_clocks(800, 1600).has_value());
  EXPECT_TRUE(called("amdsmi_set_gpu_clk_range 0 800 1600"));  // MHz on the wire
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 1502u);
  ASSERT_TRUE(gpus[0]->reset_sm_clocks().has_value());
  EXPECT_TRUE(called("amdsmi_set_gpu_perf_level 0 0"));  // AMDSMI_DEV_PERF_LEVEL_AUTO
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 2100u);
}

TEST_F(AmdSmiTest, LockClocksOutsideSupportedRange) {
  configure("device.0.sclk_mhz=500,1000,1500\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_sm_clocks(400, 1200), ErrorCode::kOutOfRange,
      "SM clock range 400-1200 MHz is outside GPU 0 (Fake AMD Instinct 0)'s supported 500-1500 MHz");
}

TEST_F(AmdSmiTest, ResetClocksWithoutPermission) {
  configure("fail.amdsmi_set_gpu_perf_level=NO_PERM\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->reset_sm_clocks(), ErrorCode::kPermissionDenied,
                     "cannot reset the SM clock of GPU 0 (Fake AMD Instinct 0) (performance level auto): "
                     "AMDSMI_STATUS_NO_PERM: (fake) Permission Denied. Changing AMD GPU settings needs root: "
                     "run joule as root (e.g. with sudo)");
}

// --- Telemetry --------------------------------------------------------------------------------------------

TEST_F(AmdSmiTest, TelemetryValues) {
  configure(
      "device.0.temperature_edge_c=51\ndevice.0.sclk_mhz=500,1700\ndevice.0.mclk_mhz=900,2600\n"
      "device.0.gfx_activity_pct=93\ndevice.0.umc_activity_pct=40\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  const GpuTelemetry telemetry = gpus[0]->telemetry();
  EXPECT_EQ(telemetry.temperature_c, 51.0);
  EXPECT_EQ(telemetry.sm_clock_mhz, 1700u);
  EXPECT_EQ(telemetry.memory_clock_mhz, 2600u);
  EXPECT_EQ(telemetry.gpu_utilization_pct, 93u);
  EXPECT_EQ(telemetry.memory_utilization_pct, 40u);
  // AMD SMI has no stable clock-event reasons nor memory power.
  ASSERT_NE(telemetry.error(TelemetryField::kClockEventReasons), nullptr);
  EXPECT_EQ(telemetry.error(TelemetryField::kClockEventReasons)->code(), ErrorCode::kNotSupported);
  EXPECT_EQ(telemetry.error(TelemetryField::kClockEventReasons)->message(),
            "GPU 0 (Fake AMD Instinct 0) does not report clock event (throttle) reasons (amdsmi backend)");
  ASSERT_NE(telemetry.error(TelemetryField::kMemoryPower), nullptr);
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryPower)->code(), ErrorCode::kNotSupported);
}

TEST_F(AmdSmiTest, TemperatureFallsBackToHotspotWithoutAnEdgeSensor) {
  configure("device.0.temperature_edge_c=none\ndevice.0.temperature_hotspot_c=67\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0]->temperature_c().value(), 67.0);
}

TEST_F(AmdSmiTest, TelemetryNotSupportedNamesTheReadingAndTheStatus) {
  configure(
      "device.0.temperature_edge_c=none\ndevice.0.temperature_hotspot_c=none\n"
      "device.0.umc_activity_pct=none\nfail.amdsmi_get_clk_freq=NOT_SUPPORTED\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->temperature_c(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD Instinct 0) does not report temperature (amdsmi backend): "
                     "AMDSMI_STATUS_NOT_SUPPORTED: (fake) Command not supported");
  JOULE_EXPECT_ERROR(gpus[0]->memory_utilization_pct(), ErrorCode::kNotSupported,
                     "GPU 0 (Fake AMD Instinct 0) does not report memory utilisation (amdsmi backend): AMD "
                     "SMI reports it as not available");
  EXPECT_EQ(gpus[0]->memory_clock_mhz().error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(gpus[0]->gpu_utilization_pct().value(), 87u);
}

TEST_F(AmdSmiTest, TelemetryDeviceErrorsAreNotDisguisedAsUnsupported) {
  configure("fail.amdsmi_get_gpu_activity=BUSY\n");
  const auto gpus = open_ok();
  ASSERT_EQ(gpus.size(), 1u);
  JOULE_EXPECT_ERROR(gpus[0]->gpu_utilization_pct(), ErrorCode::kDevice,
                     "cannot read the activity of GPU 0 (Fake AMD Instinct 0): AMDSMI_STATUS_BUSY: (fake) "
                     "Device busy");
}

// --- The ABIs of ROCm 6.x
// ------------------------------------------------------------------------------------

/// The fake presents the ABI of the library version in JOULE_FAKE_AMDSMI_VERSION.
class AmdSmiAbiTest : public AmdSmiTest {
 protected:
  Result<AmdSmiGpus> open_version(const char* version) {
    version_.emplace("JOULE_FAKE_AMDSMI_VERSION", version);
    return open_amdsmi(AmdSmiOptions{kFakeAmdSmi, 0}, {});
  }

 private:
  std::optional<test::ScopedEnv> version_;
};

TEST_F(AmdSmiAbiTest, EachAbiIsChosenFromTheVersionAndNamed) {
  configure("");
  EXPECT_EQ(open_version("24.6.3").value().abi, "AMD SMI 24.6.3 (ROCm 6.x ABI)");
  EXPECT_EQ(open_version("25.3.0").value().abi, "AMD SMI 25.3.0 (ROCm 6.x ABI)");
  EXPECT_EQ(open_version("26.1.0").value().abi, "AMD SMI 26.1.0 (ROCm 7 ABI)");
}

TEST_F(AmdSmiAbiTest, Rocm61To63LayoutsReadPowerCapsAndTelemetry) {
  configure(
      "devices=2\ndevice.0.power_w=251\ndevice.1.power_w=180\ndevice.1.instantaneous_power=false\n"
      "device.0.power_cap_min_w=100.5\ndevice.0.power_cap_max_w=750\ndevice.0.power_cap_default_w=700\n"
      "device.0.power_cap_w=750\ndevice.0.sclk_mhz=500,1700\ndevice.0.gfx_activity_pct=93\n");
  auto opened = open_version("24.6.3");
  ASSERT_TRUE(opened) << opened.error().message();
  const auto& gpus = opened->gpus;
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().name, "Fake AMD Instinct 0");
  EXPECT_EQ(gpus[0]->power_mw().value(), 251'000u);
  EXPECT_EQ(gpus[1]->power_mw().value(), 180'000u);  // from average_socket_power
  const auto constraints = gpus[0]->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 100'500u);
  EXPECT_EQ(constraints.max_mw, 750'000u);
  EXPECT_EQ(constraints.default_mw, 700'000u);
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(400'000).has_value());
  EXPECT_TRUE(called("amdsmi_set_power_cap 0 400000000"));  // µW on the wire in every ABI
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 400'000u);
  EXPECT_EQ(gpus[0]->sm_clock_mhz().value(), 1700u);
  EXPECT_EQ(gpus[0]->gpu_utilization_pct().value(), 93u);
  EXPECT_TRUE(gpus[0]->energy_mj().has_value());
}

TEST_F(AmdSmiAbiTest, Rocm610CapsInWattsAreConverted) {
  // AMD SMI before 24.5.2 (ROCm 6.1.0 and 6.1.1) reported power caps in W; setting one was always µW.
  configure(
      "device.0.power_cap_min_w=100\ndevice.0.power_cap_max_w=300\ndevice.0.power_cap_default_w=250\n"
      "device.0.power_cap_w=300\n");
  auto opened = open_version("24.5.1");
  ASSERT_TRUE(opened) << opened.error().message();
  const auto& gpu = opened->gpus.at(0);
  const auto constraints = gpu->power_limit_constraints().value();
  EXPECT_EQ(constraints.min_mw, 100'000u);
  EXPECT_EQ(constraints.max_mw, 300'000u);
  EXPECT_EQ(constraints.default_mw, 250'000u);
  EXPECT_EQ(gpu->power_limit_mw().value(), 300'000u);
  ASSERT_TRUE(gpu->set_power_limit_mw(200'000).has_value());
  EXPECT_TRUE(called("amdsmi_set_power_cap 0 200000000"));
}

TEST_F(AmdSmiAbiTest, Rocm64LayoutIgnoresTheHostOnlySocketPower) {
  configure("devices=2\ndevice.0.power_w=300\ndevice.1.power_w=none\n");
  auto opened = open_version("25.3.0");
  ASSERT_TRUE(opened) << opened.error().message();
  const auto& gpus = opened->gpus;
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->power_mw().value(), 300'000u);
  // 25.x's socket_power holds a host's µW reading (the fake puts one there): not board power on bare metal.
  JOULE_EXPECT_ERROR(gpus[1]->power_mw(), ErrorCode::kNotSupported,
                     "cannot read the power of GPU 1 (Fake AMD Instinct 1): AMD SMI reports no socket power "
                     "for it");
  EXPECT_EQ(gpus[0]->power_limit_mw().value(), 300'000u);
}

TEST_F(AmdSmiAbiTest, StatusesAreConvertedInEveryAbi) {
  configure("fail.amdsmi_get_power_info=NO_PERM\n");
  for (const char* version : {"24.7.1", "25.3.0"}) {
    auto opened = open_version(version);
    ASSERT_TRUE(opened) << opened.error().message();
    JOULE_EXPECT_ERROR(
        opened->gpus.at(0)->power_mw(), ErrorCode::kPermissionDenied,
        "cannot read the power of GPU 0 (Fake AMD Instinct 0): AMDSMI_STATUS_NO_PERM: (fake) "
        "Permission Denied. Changing AMD GPU settings needs root: run joule as root (e.g. with "
        "sudo)");
  }
}

// --- Helpers ----------------------------------------------------------------------------------------------

TEST(AmdSmiHelpers, ChooseAbiFromTheVersionWords) {
  using amdsmi_detail::choose_abi;
  const auto rocm61 = choose_abi(amd_smi::Version{{24, 5, 0, 0}, nullptr}, "lib").value();
  EXPECT_EQ(rocm61.lib_major, 24u);
  EXPECT_TRUE(rocm61.power_caps_in_w);
  EXPECT_EQ(rocm61.description(), "AMD SMI 24.5.0 (ROCm 6.x ABI)");
  EXPECT_FALSE(choose_abi(amd_smi::Version{{24, 5, 2, 0}, nullptr}, "lib").value().power_caps_in_w);
  EXPECT_FALSE(choose_abi(amd_smi::Version{{25, 0, 0, 0}, nullptr}, "lib").value().power_caps_in_w);
  EXPECT_EQ(choose_abi(amd_smi::Version{{26, 0, 1, 0}, nullptr}, "lib").value().description(),
            "AMD SMI 26.0.1 (ROCm 7 ABI)");
  JOULE_EXPECT_ERROR(choose_abi(amd_smi::Version{{0, 0, 0, 0}, nullptr}, "lib"), ErrorCode::kNotSupported,
                     "the AMD SMI library 'lib' is version 0.0.0, but joule reads only AMD SMI 24.x and 25.x "
                     "(ROCm 6.1 to 6.4) and 26.x (ROCm 7), whose data layouts it knows; AMD GPUs are read "
                     "through ROCm SMI instead");
}

TEST(AmdSmiHelpers, StatusCodesMapToErrorCodes) {
  using amd_smi::Status;
  using amdsmi_detail::error_code;
  EXPECT_EQ(error_code(Status::kNotSupported), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(Status::kNotYetImplemented), ErrorCode::kNotSupported);
  EXPECT_EQ(error_code(Status::kNoPerm), ErrorCode::kPermissionDenied);
  EXPECT_EQ(error_code(Status::kInval), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code(Status::kInputOutOfBounds), ErrorCode::kOutOfRange);
  EXPECT_EQ(error_code(Status::kNotFound), ErrorCode::kNotFound);
  EXPECT_EQ(error_code(Status::kFileError), ErrorCode::kIo);
  EXPECT_EQ(error_code(Status::kFailLoadModule), ErrorCode::kLibraryMissing);
  EXPECT_EQ(error_code(Status::kInitError), ErrorCode::kDevice);
  EXPECT_EQ(error_code(Status::kDriverNotLoaded), ErrorCode::kDevice);
  EXPECT_EQ(error_code(Status::kUnknownError), ErrorCode::kDevice);
  EXPECT_EQ(error_code(static_cast<Status>(1234)), ErrorCode::kDevice);
  EXPECT_EQ(error_code(Status::kSuccess), ErrorCode::kInternal);
}

TEST(AmdSmiHelpers, UuidFormatAndCounterPlausibility) {
  EXPECT_EQ(amdsmi_detail::format_uuid("AB12-CD"), "GPU-ab12-cd");
  EXPECT_EQ(amdsmi_detail::format_uuid(""), "");
  EXPECT_TRUE(amdsmi_detail::amdsmi_counter_plausible(9999, 1000));
  EXPECT_FALSE(amdsmi_detail::amdsmi_counter_plausible(10000, 1000));
  EXPECT_FALSE(amdsmi_detail::amdsmi_counter_plausible(100, 1000));
  EXPECT_FALSE(amdsmi_detail::amdsmi_counter_plausible(0.0005, 0.0009));
}

}  // namespace
}  // namespace joule::device
