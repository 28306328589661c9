// SPDX-License-Identifier: Apache-2.0
// The Jetson backend against fake sysfs trees of an AGX Orin and an Orin NX (INA3221 hwmon, L4T 34+), a Nano
// and an AGX Xavier (INA3221 iio, L4T 32), and broken trees.
#include "joule/device/jetson.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "joule/core/clock.hpp"
#include "joule/device/discovery.hpp"
#include "joule/device/settings_guard.hpp"

#include "fakes/jetson/fake_jetson.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

constexpr const char* kOrinDevfreq = "17000000.ga10b";
constexpr const char* kOrinModel = "NVIDIA Jetson AGX Orin Developer Kit";
constexpr const char* kOrinGpu = "GPU 0 (NVIDIA Jetson AGX Orin Developer Kit)";

// AGX Orin: the GPU shares VDD_GPU_SOC with the SoC, and the board has no module input rail.
void make_agx_orin(const test::FakeJetson& board) {
  board.set_device_tree(kOrinModel, {"nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234"});
  board.add_hwmon_rail("1-0040", 1, "VDD_GPU_SOC", 5072, 1200);  // 6086 mW
  board.add_hwmon_rail("1-0040", 2, "VDD_CPU_CV", 5072, 400);
  board.add_hwmon_rail("1-0040", 3, "VIN_SYS_5V0", 5000, 600);
  board.add_hwmon_rail("1-0041", 1, "NC", 0, 0);
  board.add_hwmon_rail("1-0041", 2, "VDDQ_VDD2_1V8AO", 5000, 100);
  board.add_devfreq(kOrinDevfreq,
                    {306000000, 408000000, 612000000, 816000000, 1020000000, 1224000000, 1300500000},
                    1300500000);
  board.write(test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/device/load", "587\n");
  board.add_thermal(0, "cpu-thermal", 40000);
  board.add_thermal(1, "gpu-thermal", 41500);
}

// Nano on L4T 32: iio channels in mW, the load under /sys/devices/gpu.0.
void make_nano(const test::FakeJetson& board) {
  board.set_device_tree("NVIDIA Jetson Nano Developer Kit",
                        {"nvidia,p3450-0000", "nvidia,jetson-nano", "nvidia,tegra210"});
  board.add_iio_rail("6-0040", 0, "POM_5V_IN", 4000);
  board.add_iio_rail("6-0040", 1, "POM_5V_GPU", 1500);
  board.add_iio_rail("6-0040", 2, "POM_5V_CPU", 800);
  board.add_devfreq("57000000.gpu", {76800000, 153600000, 921600000}, 921600000);
  board.write("sys/devices/gpu.0/load", "1000\n");
  board.add_thermal(2, "GPU-therm", 38500);
}

class JetsonTest : public ::testing::Test {
 protected:
  JetsonTest() { options.sampling_period_s = 0; }  // integrate at each energy read: no thread, no sleep

  Result<JetsonGpus> open() {
    options.sysfs_root = board.root();
    return open_jetson_gpus(options);
  }
  JetsonGpus open_ok() {
    auto opened = open();
    if (!opened) {
      ADD_FAILURE() << opened.error().message();
      return {};
    }
    return std::move(*opened);
  }
  std::string path(const std::string& relative) const { return board.root() + "/" + relative; }

  test::FakeJetson board;
  JetsonOptions options;
};

// --- Boards
// -------------------------------------------------------------------------------------------------

TEST_F(JetsonTest, AgxOrinHwmonRailsAndTheirScope) {
  make_agx_orin(board);
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  const Gpu& gpu = *opened.gpus[0];
  EXPECT_EQ(gpu.info().backend, "jetson");
  EXPECT_EQ(gpu.info().name, kOrinModel);
  EXPECT_TRUE(gpu.info().has_energy_counter);
  EXPECT_EQ(opened.board.layout, "hwmon");
  ASSERT_EQ(opened.board.rails.size(), 4u);  // the NC channel is left out
  EXPECT_EQ(opened.board.rails[0].name, "VDD_GPU_SOC");
  EXPECT_EQ(opened.board.rails[0].scope, JetsonRailScope::kGpu);
  EXPECT_EQ(opened.board.rails[0].shares_with, "SoC");
  EXPECT_EQ(opened.board.rails[0].power_mw, 6086u);  // 5072 mV × 1200 mA
  EXPECT_EQ(opened.board.rails[3].name, "VDDQ_VDD2_1V8AO");
  EXPECT_EQ(opened.board.rails[3].scope, JetsonRailScope::kOther);
  EXPECT_FALSE(opened.board.module_rail.has_value());
  EXPECT_EQ(
      opened.detail,
      "NVIDIA Jetson AGX Orin Developer Kit (hwmon rails): GPU power from rail VDD_GPU_SOC (shared with the "
      "SoC); no module rail; energy integrated in software from the GPU rail's power, sampled at each energy "
      "read");
  EXPECT_EQ(opened.gpus[0]->power_mw().value(), 6086u);
}

TEST_F(JetsonTest, OrinNxModuleRailIsLabelledSoNobodyAddsItToTheGpu) {
  board.set_device_tree("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", {"nvidia,tegra234"});
  board.add_hwmon_rail("1-0040", 1, "VDD_IN", 5000, 2000);
  board.add_hwmon_rail("1-0040", 2, "VDD_CPU_GPU_CV", 5000, 800);
  board.add_hwmon_rail("1-0040", 3, "VDD_SOC", 5000, 300);
  options.sampling_period_s = 0.1;  // the background sampler starts and stops with the GPU
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  ASSERT_TRUE(opened.board.module_rail.has_value());
  EXPECT_EQ(opened.board.rails[*opened.board.module_rail].name, "VDD_IN");
  EXPECT_EQ(opened.board.rails[*opened.board.module_rail].scope, JetsonRailScope::kModule);
  EXPECT_EQ(opened.board.rails[*opened.board.module_rail].power_mw, 10'000u);
  EXPECT_EQ(
      opened.detail,
      "NVIDIA Jetson Orin NX Engineering Reference Developer Kit (hwmon rails): GPU power from rail "
      "VDD_CPU_GPU_CV (shared with the CPU and CV engines); module power on VDD_IN (the whole module, GPU "
      "included: never add the two); energy integrated in software from the GPU rail's power, sampled "
      "every 100 ms");
  EXPECT_EQ(opened.gpus[0]->power_mw().value(), 4000u);
  // No devfreq node on this tree: clocks are refused with the reason, telemetry says what is missing.
  JOULE_EXPECT_ERROR(
      opened.gpus[0]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
      "GPU 0 (NVIDIA Jetson Orin NX Engineering Reference Developer Kit) has no GPU devfreq node: "
      "its clocks cannot be listed or set");
  JOULE_EXPECT_ERROR(opened.gpus[0]->temperature_c(), ErrorCode::kNotSupported,
                     "GPU 0 (NVIDIA Jetson Orin NX Engineering Reference Developer Kit) does not report "
                     "temperature (jetson backend): no thermal zone of type GPU-therm or gpu-thermal");
}

TEST_F(JetsonTest, NanoIioLayoutAndTelemetry) {
  make_nano(board);
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  Gpu& gpu = *opened.gpus[0];
  EXPECT_EQ(opened.board.layout, "iio");
  EXPECT_EQ(opened.board.rails[*opened.board.module_rail].name, "POM_5V_IN");
  EXPECT_EQ(opened.board.rails[*opened.board.gpu_rail].name, "POM_5V_GPU");
  EXPECT_EQ(gpu.power_mw().value(), 1500u);
  EXPECT_EQ(gpu.supported_sm_clocks_mhz().value(), (std::vector<uint32_t>{921, 153, 76}));
  const GpuTelemetry telemetry = gpu.telemetry();
  EXPECT_EQ(telemetry.temperature_c, 38.5);
  EXPECT_EQ(telemetry.sm_clock_mhz, 921u);
  EXPECT_EQ(telemetry.gpu_utilization_pct, 100u);
  ASSERT_NE(telemetry.error(TelemetryField::kMemoryClock), nullptr);
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryClock)->code(), ErrorCode::kNotSupported);
}

TEST_F(JetsonTest, XavierIioRailNamedGpu) {
  board.set_device_tree("Jetson-AGX", {"nvidia,p2972-0000", "nvidia,tegra194"});
  board.add_iio_rail("1-0040", 0, "GPU", 2300);
  board.add_iio_rail("1-0040", 1, "CPU", 900);
  board.add_iio_rail("1-0040", 2, "SOC", 1200);
  board.add_devfreq("17000000.gv11b", {114750000, 1377000000}, 1377000000);
  board.write(test::FakeJetson::devfreq_dir("17000000.gv11b") + "/device/load", "123\n");
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  EXPECT_EQ(opened.gpus[0]->power_mw().value(), 2300u);
  EXPECT_EQ(opened.gpus[0]->gpu_utilization_pct().value(), 12u);
  EXPECT_EQ(opened.gpus[0]->sm_clock_mhz().value(), 1377u);
  EXPECT_EQ(opened.board.rails[*opened.board.gpu_rail].shares_with, "");
  EXPECT_FALSE(opened.board.module_rail.has_value());
}

// --- Energy
// -------------------------------------------------------------------------------------------------

TEST_F(JetsonTest, EnergyIsTheTrapezoidIntegralOfGpuRailPower) {
  make_agx_orin(board);
  auto clock = std::make_shared<VirtualClock>();
  options.clock = clock;
  const JetsonGpus opened = open_ok();  // first sample: 6086 mW at t = 0
  ASSERT_EQ(opened.gpus.size(), 1u);
  Gpu& gpu = *opened.gpus[0];
  clock->advance(std::chrono::seconds(2));
  board.set_hwmon_reading("1-0040", 1, 5000, 2000);  // 10 W
  EXPECT_EQ(gpu.energy_mj().value(), 16'086u);       // (6086 + 10000) / 2 mW × 2 s
  clock->advance(std::chrono::seconds(1));
  EXPECT_EQ(gpu.energy_mj().value(), 26'086u);
  EXPECT_EQ(gpu.energy_mj().value(), 26'086u);  // no time, no energy
}

TEST_F(JetsonTest, ARailThatDisappearsIsNamed) {
  make_agx_orin(board);
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  const std::string current = path(test::FakeJetson::hwmon_dir("1-0040") + "/curr1_input");
  board.remove(test::FakeJetson::hwmon_dir("1-0040") + "/curr1_input");
  const std::string message = fmt::format(
      "the GPU rail VDD_GPU_SOC of {} has disappeared: cannot open {}: No such file or directory (was the "
      "INA3221 driver unbound, or the sysfs tree unmounted?)",
      kOrinGpu, current);
  JOULE_EXPECT_ERROR(opened.gpus[0]->power_mw(), ErrorCode::kNotFound, message);
  JOULE_EXPECT_ERROR(opened.gpus[0]->energy_mj(), ErrorCode::kNotFound, message);
}

// --- Clocks and power limits
// --------------------------------------------------------------------------------

TEST_F(JetsonTest, LockWritesDevfreqAndResetRestoresTheRangeBefore) {
  make_agx_orin(board);
  const std::string dir = test::FakeJetson::devfreq_dir(kOrinDevfreq);
  board.write(dir + "/min_freq", "612000000\n");  // an administrator's range, kept by the reset
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  Gpu& gpu = *opened.gpus[0];
  EXPECT_EQ(gpu.supported_sm_clocks_mhz().value(),
            (std::vector<uint32_t>{1300, 1224, 1020, 816, 612, 408, 306}));
  ASSERT_TRUE(gpu.lock_sm_clocks(408, 1020).has_value());
  EXPECT_EQ(board.read(dir + "/min_freq"), "408000000");
  EXPECT_EQ(board.read(dir + "/max_freq"), "1020000000");
  ASSERT_TRUE(gpu.lock_sm_clocks(816, 816).has_value());  // a second lock keeps the first original
  ASSERT_TRUE(gpu.reset_sm_clocks().has_value());
  EXPECT_EQ(board.read(dir + "/min_freq"), "612000000");
  EXPECT_EQ(board.read(dir + "/max_freq"), "1300500000");
  JOULE_EXPECT_ERROR(
      gpu.lock_sm_clocks(100, 500), ErrorCode::kOutOfRange,
      fmt::format("SM clock range 100-500 MHz is outside {}'s supported 306-1300 MHz", kOrinGpu));
}

TEST_F(JetsonTest, TheSettingsGuardPutsTheClockRangeBack) {
  make_agx_orin(board);
  const std::string dir = test::FakeJetson::devfreq_dir(kOrinDevfreq);
  board.write(dir + "/max_freq", "1224000000\n");  // a range in force before joule
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  {
    SettingsGuard guard({.owner = "jetson test", .restore_on_signals = false});
    ASSERT_TRUE(guard.lock_sm_clocks(*opened.gpus[0], 612, 816).has_value());
    EXPECT_EQ(board.read(dir + "/max_freq"), "816000000");
  }
  EXPECT_EQ(board.read(dir + "/min_freq"), "306000000");
  EXPECT_EQ(board.read(dir + "/max_freq"), "1224000000");
}

TEST_F(JetsonTest, LockWithoutPermissionSaysHowToFix) {
  if (geteuid() == 0) {
    GTEST_SKIP() << "root writes read-only files";
  }
  make_agx_orin(board);
  const std::string max_freq = path(test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/max_freq");
  std::filesystem::permissions(max_freq, std::filesystem::perms::owner_read);
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  JOULE_EXPECT_ERROR(opened.gpus[0]->lock_sm_clocks(408, 1020), ErrorCode::kPermissionDenied,
                     fmt::format("cannot lock the SM clock of {} to 408-1020 MHz: cannot open {}: Permission "
                                 "denied. Changing a Jetson's GPU clocks needs root: run joule as root (e.g. "
                                 "with sudo)",
                                 kOrinGpu, max_freq));
}

TEST_F(JetsonTest, AFailedDevfreqWriteNamesTheFile) {
  make_agx_orin(board);
  const std::string max_freq = test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/max_freq";
  board.remove(max_freq);
  std::filesystem::create_directory(path(max_freq));  // not a file the kernel would write
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  JOULE_EXPECT_ERROR(opened.gpus[0]->reset_sm_clocks(), ErrorCode::kIo,
                     fmt::format("cannot reset the SM clock of {}: cannot open {}: Is a directory", kOrinGpu,
                                 path(max_freq)));
}

TEST_F(JetsonTest, PowerLimitsAreNotSupportedWithTheReason) {
  make_agx_orin(board);
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  const std::string message = fmt::format(
      "{} has no power limit joule can set: a Jetson's power budget is its nvpmodel power mode (nvpmodel -q "
      "shows it, sudo nvpmodel -m N changes it)",
      kOrinGpu);
  JOULE_EXPECT_ERROR(opened.gpus[0]->power_limit_mw(), ErrorCode::kNotSupported, message);
  JOULE_EXPECT_ERROR(opened.gpus[0]->power_limit_constraints(), ErrorCode::kNotSupported, message);
}

// --- Bad trees
// ----------------------------------------------------------------------------------------------

TEST_F(JetsonTest, MissingGpuRailLabelNamesTheRailsFound) {
  make_agx_orin(board);
  board.remove(test::FakeJetson::hwmon_dir("1-0040") + "/in1_label");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kNotFound,
                     "the Jetson board's power monitors have no GPU rail (one of VDD_GPU, GPU, POM_5V_GPU, "
                     "VDD_SYS_GPU, VDD_GPU_SOC, VDD_CPU_GPU_CV); the rails found: VDD_CPU_CV, VIN_SYS_5V0, "
                     "VDDQ_VDD2_1V8AO");
}

TEST_F(JetsonTest, EmptyRailLabelIsRefused) {
  make_nano(board);
  const std::string label = test::FakeJetson::iio_dir("6-0040") + "/rail_name_1";
  board.write(label, " \n");
  JOULE_EXPECT_ERROR(open(), ErrorCode::kParse,
                     fmt::format("{} is empty: the rail has no name", path(label)));
}

TEST_F(JetsonTest, NonNumericReadingsNameTheFile) {
  make_agx_orin(board);
  const std::string current = test::FakeJetson::hwmon_dir("1-0040") + "/curr1_input";
  board.write(current, "1.2A\n");
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kParse,
      fmt::format("cannot read the rail VDD_GPU_SOC: cannot parse {}: expected a whole number of "
                  "milliamperes, got \"1.2A\"",
                  path(current)));
  board.write(current, "1200\n");
  const std::string load = test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/device/load";
  board.write(load, "1500\n");
  board.write("sys/class/thermal/thermal_zone1/temp", "hot\n");
  const JetsonGpus opened = open_ok();
  ASSERT_EQ(opened.gpus.size(), 1u);
  JOULE_EXPECT_ERROR(opened.gpus[0]->gpu_utilization_pct(), ErrorCode::kParse,
                     fmt::format("{} holds 1500, more than 1000 (100 %)", path(load)));
  JOULE_EXPECT_ERROR(
      opened.gpus[0]->temperature_c(), ErrorCode::kParse,
      fmt::format("cannot parse {}: expected a whole number of millidegrees Celsius, got \"hot\"",
                  path("sys/class/thermal/thermal_zone1/temp")));
  board.write(test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/available_frequencies", "306000000 fast\n");
  JOULE_EXPECT_ERROR(
      opened.gpus[0]->supported_sm_clocks_mhz(), ErrorCode::kParse,
      fmt::format("cannot parse {}: expected frequencies in hertz, got \"fast\"",
                  path(test::FakeJetson::devfreq_dir(kOrinDevfreq) + "/available_frequencies")));
}

TEST_F(JetsonTest, NoMonitorAndNotAJetson) {
  board.set_device_tree("NVIDIA Jetson AGX Orin", {"nvidia,tegra234"});
  JOULE_EXPECT_ERROR(
      open(), ErrorCode::kNotFound,
      fmt::format("no INA3221 power monitor under {}/sys/bus/i2c/drivers/ina3221*: the board's "
                  "rails cannot be read (is the ina3221 driver loaded, and is /sys mounted in this "
                  "container?)",
                  board.root()));
  test::FakeJetson laptop;
  laptop.write("proc/device-tree/compatible", std::string("raspberrypi,4-model-b\0brcm,bcm2711", 33));
  options.sysfs_root = laptop.root();
  JOULE_EXPECT_ERROR(
      open_jetson_gpus(options), ErrorCode::kNotFound,
      fmt::format("not a Jetson board: {0}/proc/device-tree/compatible does not name nvidia,tegra "
                  "and {0}/sys/class/devfreq has no Tegra GPU node",
                  laptop.root()));
  EXPECT_FALSE(looks_like_jetson(laptop.root()));
  EXPECT_FALSE(looks_like_jetson("/nonexistent/root"));
}

TEST_F(JetsonTest, DevfreqGpuNodeAloneMarksAJetsonOnlyWithATegraName) {
  test::FakeJetson rockchip;
  rockchip.add_devfreq("ff9a0000.gpu", {200000000, 800000000}, 800000000);  // a Mali GPU
  EXPECT_FALSE(looks_like_jetson(rockchip.root()));
  board.add_devfreq("57000000.gpu", {76800000, 921600000}, 921600000);
  EXPECT_TRUE(looks_like_jetson(board.root()));
}

TEST_F(JetsonTest, CudaVisibleDevicesHidesOrKeepsTheGpu) {
  make_agx_orin(board);
  options.sysfs_root = board.root();
  EXPECT_EQ(
      open_jetson_gpus(options, parse_visible_devices("CUDA_VISIBLE_DEVICES", "0").value())->gpus.size(), 1u);
  EXPECT_TRUE(
      open_jetson_gpus(options, parse_visible_devices("CUDA_VISIBLE_DEVICES", "").value())->gpus.empty());
  JOULE_EXPECT_ERROR(open_jetson_gpus(options, parse_visible_devices("CUDA_VISIBLE_DEVICES", "1").value()),
                     ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 1, but this machine has 1 GPU (indices 0 to 0)");
}

TEST_F(JetsonTest, NegativeSamplingPeriodIsRejected) {
  make_agx_orin(board);
  options.sampling_period_s = -0.1;
  JOULE_EXPECT_ERROR(open(), ErrorCode::kInvalidArgument,
                     "the Jetson energy sampling period must be a non-negative number of seconds, not -0.1");
}

// --- Discovery
// ----------------------------------------------------------------------------------------------

TEST_F(JetsonTest, DiscoveryReportsTheRailsAndTheIntegration) {
  make_agx_orin(board);
  const test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", nullptr);
  const test::ScopedEnv hip("HIP_VISIBLE_DEVICES", nullptr);
  DiscoveryOptions discovery;
  discovery.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  discovery.rocm_library = "/nonexistent/librocm_smi64.so.1";
  discovery.amd_smi_library = "/nonexistent/libamd_smi.so";
  discovery.cpus = false;
  discovery.jetson_sysfs_root = board.root();
  auto devices = discover(discovery);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 1u);
  EXPECT_EQ(devices->gpus[0]->info().backend, "jetson");
  const BackendReport& report = devices->reports.back();
  EXPECT_EQ(report.backend, "jetson");
  EXPECT_TRUE(report.ok);
  EXPECT_EQ(
      report.detail,
      "NVIDIA Jetson AGX Orin Developer Kit (hwmon rails): GPU power from rail VDD_GPU_SOC (shared with the "
      "SoC); no module rail; energy integrated in software from the GPU rail's power, sampled every 100 ms");
  // A root given but not a Jetson: reported, not silent.
  test::FakeJetson empty;
  discovery.jetson_sysfs_root = empty.root();
  devices = discover(discovery);
  ASSERT_TRUE(devices) << devices.error().message();
  EXPECT_TRUE(devices->gpus.empty());
  EXPECT_FALSE(devices->reports.back().ok);
  EXPECT_EQ(devices->reports.back().detail.rfind("not a Jetson board: ", 0), 0u);
}

TEST(JetsonEnvironment, RootFromTheEnvironment) {
  const test::ScopedEnv root("JOULE_JETSON_SYSFS_ROOT", "/x/jetson");
  const auto options = DiscoveryOptions::from_environment();
  ASSERT_TRUE(options) << options.error().message();
  EXPECT_EQ(options->jetson_sysfs_root, "/x/jetson");
}

}  // namespace
}  // namespace joule::device
