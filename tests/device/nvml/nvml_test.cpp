// SPDX-License-Identifier: Apache-2.0
// The NVML backend loaded through its real dlopen path from the fake libnvidia-ml.so.1 builds
// (tests/fakes/nvml), scripted per test by a JOULE_FAKE_NVML_CONFIG file.
#include "joule/device/nvml.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::device {
namespace {

constexpr const char* kFakeNvml = JOULE_FAKE_NVML_PATH;
constexpr const char* kFakeNvmlNoInit = JOULE_FAKE_NVML_NO_INIT_PATH;
constexpr const char* kFakeNvmlNoEnergy = JOULE_FAKE_NVML_NO_ENERGY_PATH;
constexpr const char* kFakeNvmlNoArchFields = JOULE_FAKE_NVML_NO_ARCH_FIELDS_PATH;

using Gpus = std::vector<std::unique_ptr<Gpu>>;

// A V100 and an A100 with distinct, easily checked values.
constexpr const char* kTwoGpus = R"(# two GPUs
gpu0.name=Tesla V100-SXM2-32GB
gpu0.uuid=GPU-11111111-2222-3333-4444-555555555555
gpu0.architecture=volta
gpu0.power_mw=150000
gpu0.power_instant_mw=153250
gpu0.energy_start_mj=1000000
gpu0.energy_step_mj=15000
gpu0.min_power_limit_mw=150000
gpu0.max_power_limit_mw=300000
gpu0.default_power_limit_mw=300000
gpu0.memory_clocks_mhz=810,877
gpu0.graphics_clocks_mhz.877=1380,1530,1455
gpu0.graphics_clocks_mhz.810=1005
gpu1.name=NVIDIA A100-SXM4-40GB
gpu1.uuid=GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
gpu1.architecture=ampere
gpu1.power_mw=60000
gpu1.min_power_limit_mw=100000
gpu1.max_power_limit_mw=400000
gpu1.default_power_limit_mw=400000
gpu1.power_limit_mw=250000
)";

constexpr const char* kThreeGpus = R"(gpu0.name=GPU Zero
gpu0.uuid=GPU-00000000-aaaa-4000-8000-000000000000
gpu1.name=GPU One
gpu1.uuid=GPU-11111111-aaaa-4000-8000-000000000001
gpu2.name=GPU Two
gpu2.uuid=GPU-11112222-aaaa-4000-8000-000000000002
gpu2.get_power=gpu_is_lost
gpu2.get_power_instant=gpu_is_lost
)";

// The fake's test-only exports, read through a second reference to the same loaded library.
class FakeControl {
 public:
  explicit FakeControl(const char* library) : handle_(dlopen(library, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      throw std::runtime_error(dlerror());
    }
    init_count_ = reinterpret_cast<int (*)()>(dlsym(handle_, "joule_fake_nvml_init_count"));
    locked_clocks_ = reinterpret_cast<int (*)(unsigned int, unsigned int*, unsigned int*)>(
        dlsym(handle_, "joule_fake_nvml_locked_clocks"));
    locked_memory_clocks_ = reinterpret_cast<int (*)(unsigned int, unsigned int*, unsigned int*)>(
        dlsym(handle_, "joule_fake_nvml_locked_memory_clocks"));
    if (init_count_ == nullptr || locked_clocks_ == nullptr || locked_memory_clocks_ == nullptr) {
      throw std::runtime_error("the fake NVML lacks its test exports");
    }
  }
  ~FakeControl() { dlclose(handle_); }
  FakeControl(const FakeControl&) = delete;
  FakeControl& operator=(const FakeControl&) = delete;

  /// nvmlInit_v2 calls not yet matched by nvmlShutdown.
  int init_count() const { return init_count_(); }

  /// The SM clock lock of physical GPU `index`, {0, 0} when unlocked.
  std::pair<unsigned int, unsigned int> locked_clocks(unsigned int index) const {
    std::pair<unsigned int, unsigned int> clocks_mhz{};
    EXPECT_EQ(locked_clocks_(index, &clocks_mhz.first, &clocks_mhz.second), 0);
    return clocks_mhz;
  }

  /// The memory clock lock of physical GPU `index`, {0, 0} when unlocked.
  std::pair<unsigned int, unsigned int> locked_memory_clocks(unsigned int index) const {
    std::pair<unsigned int, unsigned int> clocks_mhz{};
    EXPECT_EQ(locked_memory_clocks_(index, &clocks_mhz.first, &clocks_mhz.second), 0);
    return clocks_mhz;
  }

 private:
  void* handle_;
  int (*init_count_)() = nullptr;
  int (*locked_clocks_)(unsigned int, unsigned int*, unsigned int*) = nullptr;
  int (*locked_memory_clocks_)(unsigned int, unsigned int*, unsigned int*) = nullptr;
};

class NvmlTest : public ::testing::Test {
 protected:
  /// Opens the GPUs of `library` scripted by `config`, honouring CUDA_VISIBLE_DEVICES as set now.
  Result<Gpus> open(const std::string& config, const char* library = kFakeNvml) {
    const std::string path = dir_.write("nvml.conf", config);
    const test::ScopedEnv script("JOULE_FAKE_NVML_CONFIG", path.c_str());
    auto visible = JOULE_TRY(visible_devices_from_environment("nvml"));
    return open_nvml_gpus(NvmlOptions{library}, visible);
  }

  /// Like open(), for tests that expect success.
  Gpus open_ok(const std::string& config, const char* library = kFakeNvml) {
    auto gpus = open(config, library);
    if (!gpus) {
      ADD_FAILURE() << gpus.error().message();
      return {};
    }
    return std::move(*gpus);
  }

  test::TempDir dir_;
  test::ScopedEnv visible_{"CUDA_VISIBLE_DEVICES", nullptr};
};

TEST_F(NvmlTest, OpensEveryGpuInPhysicalOrder) {
  const Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  const GpuInfo& v100 = gpus[0]->info();
  EXPECT_EQ(v100.backend, "nvml");
  EXPECT_EQ(v100.index, 0);
  EXPECT_EQ(v100.physical_index, 0);
  EXPECT_EQ(v100.name, "Tesla V100-SXM2-32GB");
  EXPECT_EQ(v100.uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_TRUE(v100.has_energy_counter);
  const GpuInfo& a100 = gpus[1]->info();
  EXPECT_EQ(a100.index, 1);
  EXPECT_EQ(a100.physical_index, 1);
  EXPECT_EQ(a100.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(a100.uuid, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  EXPECT_TRUE(a100.has_energy_counter);
  EXPECT_EQ(gpus[1]->label(), "GPU 1 (NVIDIA A100-SXM4-40GB)");
}

TEST_F(NvmlTest, ReadsEnergyCounterAndInstantPower) {
  const Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  // The fake's counter advances one step per read; opening probed it once (read 0).
  EXPECT_EQ(gpus[0]->energy_mj(), 1015000u);
  EXPECT_EQ(gpus[0]->energy_mj(), 1030000u);
  // NVML_FI_DEV_POWER_INSTANT, not nvmlDeviceGetPowerUsage's average.
  EXPECT_EQ(gpus[0]->power_mw(), 153250u);
  // Without power_instant_mw the fake's instant power equals power_mw; the default step is power_mw / 10.
  EXPECT_EQ(gpus[1]->power_mw(), 60000u);
  EXPECT_EQ(gpus[1]->energy_mj(), 6000u);
}

TEST_F(NvmlTest, FallsBackToAveragePowerWithoutInstantField) {
  const Gpus gpus = open_ok(std::string(kTwoGpus) + "gpu0.get_power_instant=not_supported\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->power_mw(), 150000u);
  EXPECT_EQ(gpus[1]->power_mw(), 60000u);
}

TEST_F(NvmlTest, GetsAndSetsPowerLimits) {
  const Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  Gpu& v100 = *gpus[0];
  const auto constraints = v100.power_limit_constraints();
  ASSERT_TRUE(constraints.has_value()) << constraints.error().message();
  EXPECT_EQ(constraints->min_mw, 150000u);
  EXPECT_EQ(constraints->max_mw, 300000u);
  EXPECT_EQ(constraints->default_mw, 300000u);
  EXPECT_EQ(v100.power_limit_mw(), 300000u);
  ASSERT_TRUE(v100.set_power_limit_mw(200000).has_value());
  EXPECT_EQ(v100.power_limit_mw(), 200000u);
  JOULE_EXPECT_ERROR(v100.set_power_limit_mw(100000), ErrorCode::kOutOfRange,
                     "power limit 100 W is outside GPU 0 (Tesla V100-SXM2-32GB)'s range 150 W to 300 W");
  EXPECT_EQ(v100.power_limit_mw(), 200000u);
  ASSERT_TRUE(v100.reset_power_limit().has_value());
  EXPECT_EQ(v100.power_limit_mw(), 300000u);
  // Each GPU has its own state.
  EXPECT_EQ(gpus[1]->power_limit_mw(), 250000u);
}

TEST_F(NvmlTest, ListsSmClocksAtHighestMemoryClockAndLocksThem) {
  const FakeControl fake(kFakeNvml);
  const Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  Gpu& v100 = *gpus[0];
  EXPECT_EQ(v100.supported_sm_clocks_mhz(), (std::vector<uint32_t>{1530, 1455, 1380}));
  EXPECT_EQ(gpus[1]->supported_sm_clocks_mhz(),
            (std::vector<uint32_t>{1530, 1455, 1380, 1305, 1230, 1155, 1080, 1005}));
  ASSERT_TRUE(v100.lock_sm_clocks(1005, 1380).has_value());
  EXPECT_EQ(fake.locked_clocks(0), std::make_pair(1005u, 1380u));
  EXPECT_EQ(fake.locked_clocks(1), std::make_pair(0u, 0u));
  ASSERT_TRUE(v100.reset_sm_clocks().has_value());
  EXPECT_EQ(fake.locked_clocks(0), std::make_pair(0u, 0u));
}

TEST_F(NvmlTest, ShutsNvmlDownWhenTheLastGpuIsDestroyed) {
  const FakeControl fake(kFakeNvml);
  EXPECT_EQ(fake.init_count(), 0);
  Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(fake.init_count(), 1);
  gpus.erase(gpus.begin());
  EXPECT_EQ(fake.init_count(), 1);
  EXPECT_EQ(gpus[0]->power_mw(), 60000u);
  gpus.clear();
  EXPECT_EQ(fake.init_count(), 0);
}

TEST_F(NvmlTest, EnergyNotSupportedMeansNoCounter) {
  const Gpus gpus = open_ok(std::string(kTwoGpus) + "gpu1.get_energy=not_supported\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
  EXPECT_FALSE(gpus[1]->info().has_energy_counter);
  JOULE_EXPECT_ERROR(
      gpus[1]->energy_mj(), ErrorCode::kNotSupported,
      "GPU 1 (NVIDIA A100-SXM4-40GB) has no energy counter; its energy is estimated from power samples");
  EXPECT_EQ(gpus[1]->power_mw(), 60000u);
}

TEST_F(NvmlTest, EnergyCounterNeedsVolta) {
  // Even when the call answers, a pre-Volta counter is not trusted (Zeus's rule); an architecture NVML cannot
  // name is decided by the probe.
  const Gpus gpus = open_ok(
      "gpu0.architecture=pascal\ngpu0.get_energy=ok\n"
      "gpu1.architecture=unknown\n"
      "gpu2.architecture=hopper\ngpu2.get_energy=no_permission\n"
      "gpu3.architecture=volta\ngpu3.get_architecture=not_supported\n");
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
  EXPECT_TRUE(gpus[1]->info().has_energy_counter);
  EXPECT_FALSE(gpus[2]->info().has_energy_counter);
  EXPECT_TRUE(gpus[3]->info().has_energy_counter);
}

TEST_F(NvmlTest, UnsupportedClocksAreReportedWithNvmlText) {
  const Gpus gpus = open_ok(
      "gpu0.get_memory_clocks=not_supported\n"
      "gpu1.get_graphics_clocks=not_supported\ngpu1.lock_clocks=not_supported\n"
      "gpu2.memory_clocks_mhz=\n");
  ASSERT_EQ(gpus.size(), 3u);
  JOULE_EXPECT_ERROR(gpus[0]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
                     "reading the supported memory clocks on GPU 0 (Tesla V100-SXM2-32GB): Not Supported "
                     "(NVML_ERROR_NOT_SUPPORTED)");
  JOULE_EXPECT_ERROR(
      gpus[1]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
      "reading the supported SM clocks at memory clock 877 MHz on GPU 1 (Tesla V100-SXM2-32GB): Not "
      "Supported (NVML_ERROR_NOT_SUPPORTED)");
  JOULE_EXPECT_ERROR(gpus[1]->lock_sm_clocks(1005, 1380), ErrorCode::kNotSupported,
                     "locking the SM clock to 1005-1380 MHz on GPU 1 (Tesla V100-SXM2-32GB): Not Supported "
                     "(NVML_ERROR_NOT_SUPPORTED)");
  JOULE_EXPECT_ERROR(
      gpus[2]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
      "GPU 2 (Tesla V100-SXM2-32GB) lists no supported memory clocks, so its SM clocks are unknown");
}

TEST_F(NvmlTest, ControlWithoutPermissionSaysHowToFix) {
  const Gpus gpus =
      open_ok(std::string(kTwoGpus) + "set_power_limit=no_permission\nreset_clocks=no_permission\n");
  ASSERT_EQ(gpus.size(), 2u);
  JOULE_EXPECT_ERROR(
      gpus[0]->set_power_limit_mw(200000), ErrorCode::kPermissionDenied,
      "setting the power limit to 200 W on GPU 0 (Tesla V100-SXM2-32GB): Insufficient Permissions "
      "(NVML_ERROR_NO_PERMISSION). Changing power limits and clocks needs root or CAP_SYS_ADMIN: run "
      "as root, or give the program that capability");
  EXPECT_EQ(gpus[0]->power_limit_mw(), 300000u);
  JOULE_EXPECT_ERROR(
      gpus[1]->reset_sm_clocks(), ErrorCode::kPermissionDenied,
      "resetting the SM clock lock on GPU 1 (NVIDIA A100-SXM4-40GB): Insufficient Permissions "
      "(NVML_ERROR_NO_PERMISSION). Changing power limits and clocks needs root or CAP_SYS_ADMIN: run "
      "as root, or give the program that capability");
  // Reading still works.
  EXPECT_EQ(gpus[1]->power_limit_mw(), 250000u);
}

TEST_F(NvmlTest, MapsNvmlReturnCodesToErrorCodes) {
  const Gpus gpus = open_ok(
      "gpu0.get_power_limit=invalid_argument\n"
      "gpu1.get_power_limit=function_not_found\n"
      "gpu2.get_power_limit=gpu_is_lost\n"
      "gpu3.get_constraints=no_permission\n"
      "gpu4.get_default_limit=unknown\n");
  ASSERT_EQ(gpus.size(), 5u);
  JOULE_EXPECT_ERROR(gpus[0]->power_limit_mw(), ErrorCode::kInvalidArgument,
                     "reading the power limit on GPU 0 (Tesla V100-SXM2-32GB): Invalid Argument "
                     "(NVML_ERROR_INVALID_ARGUMENT)");
  JOULE_EXPECT_ERROR(gpus[1]->power_limit_mw(), ErrorCode::kLibraryMissing,
                     "reading the power limit on GPU 1 (Tesla V100-SXM2-32GB): Function Not Found "
                     "(NVML_ERROR_FUNCTION_NOT_FOUND)");
  JOULE_EXPECT_ERROR(
      gpus[2]->power_limit_mw(), ErrorCode::kDevice,
      "reading the power limit on GPU 2 (Tesla V100-SXM2-32GB): GPU is lost (NVML_ERROR_GPU_IS_LOST)");
  JOULE_EXPECT_ERROR(
      gpus[3]->power_limit_constraints(), ErrorCode::kPermissionDenied,
      "reading the power-limit range on GPU 3 (Tesla V100-SXM2-32GB): Insufficient Permissions "
      "(NVML_ERROR_NO_PERMISSION). The process may not use the NVIDIA device files (/dev/nvidia*): "
      "run as root or as a user allowed to open them");
  JOULE_EXPECT_ERROR(gpus[4]->power_limit_constraints(), ErrorCode::kDevice,
                     "reading the default power limit on GPU 4 (Tesla V100-SXM2-32GB): Unknown Error "
                     "(NVML_ERROR_UNKNOWN)");
}

TEST_F(NvmlTest, InitWithoutPermissionFails) {
  const FakeControl fake(kFakeNvml);
  JOULE_EXPECT_ERROR(
      open("init=no_permission\n"), ErrorCode::kPermissionDenied,
      fmt::format("initializing NVML on this machine ({}): Insufficient Permissions "
                  "(NVML_ERROR_NO_PERMISSION). The process may not use the NVIDIA device files "
                  "(/dev/nvidia*): run as root or as a user allowed to open them",
                  kFakeNvml));
  EXPECT_EQ(fake.init_count(), 0);
}

TEST_F(NvmlTest, InitWithoutDriverFails) {
  JOULE_EXPECT_ERROR(
      open("init=driver_not_loaded\n"), ErrorCode::kLibraryMissing,
      fmt::format("initializing NVML on this machine ({}): Driver Not Loaded "
                  "(NVML_ERROR_DRIVER_NOT_LOADED). Install the NVIDIA driver, or load its kernel module "
                  "(nvidia-smi checks both)",
                  kFakeNvml));
}

TEST_F(NvmlTest, CountFailureShutsNvmlDown) {
  const FakeControl fake(kFakeNvml);
  JOULE_EXPECT_ERROR(
      open("get_count=unknown\n"), ErrorCode::kDevice,
      fmt::format("counting GPUs on this machine ({}): Unknown Error (NVML_ERROR_UNKNOWN)", kFakeNvml));
  EXPECT_EQ(fake.init_count(), 0);
}

TEST_F(NvmlTest, MissingRequiredSymbol) {
  JOULE_EXPECT_ERROR(
      open(kTwoGpus, kFakeNvmlNoInit), ErrorCode::kLibraryMissing,
      fmt::format("{} lacks the required symbol nvmlInit_v2: the NVIDIA driver is probably too old "
                  "for joule; upgrade it, or set JOULE_NVML_LIBRARY to a newer libnvidia-ml.so.1",
                  kFakeNvmlNoInit));
}

TEST_F(NvmlTest, MissingEnergySymbolMeansNoCounter) {
  const Gpus gpus = open_ok(kTwoGpus, kFakeNvmlNoEnergy);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_FALSE(gpus[0]->info().has_energy_counter);
  JOULE_EXPECT_ERROR(
      gpus[0]->energy_mj(), ErrorCode::kNotSupported,
      "GPU 0 (Tesla V100-SXM2-32GB) has no energy counter; its energy is estimated from power samples");
  EXPECT_EQ(gpus[0]->power_mw(), 153250u);
  EXPECT_EQ(gpus[0]->power_limit_mw(), 300000u);
}

TEST_F(NvmlTest, MissingArchitectureAndFieldSymbols) {
  // Without nvmlDeviceGetArchitecture the probe decides; without field values power is the average.
  const Gpus gpus = open_ok(std::string(kTwoGpus) + "gpu1.get_energy=not_supported\n", kFakeNvmlNoArchFields);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus[0]->info().has_energy_counter);
  EXPECT_FALSE(gpus[1]->info().has_energy_counter);
  EXPECT_EQ(gpus[0]->power_mw(), 150000u);
  EXPECT_EQ(gpus[0]->energy_mj(), 1015000u);
}

// ---- Telemetry ----

constexpr const char* kTelemetry = R"(gpu0.temperature_c=67
gpu0.sm_clock_mhz=1410
gpu0.memory_clock_mhz=1215
gpu0.gpu_utilization_pct=97
gpu0.memory_utilization_pct=41
gpu0.clocks_event_reasons=0x24
gpu1.name=NVIDIA A100-SXM4-40GB
)";

TEST_F(NvmlTest, ReadsTelemetry) {
  const Gpus gpus = open_ok(kTelemetry);
  ASSERT_EQ(gpus.size(), 2u);
  Gpu& gpu = *gpus[0];
  EXPECT_EQ(gpu.temperature_c(), 67.0);
  EXPECT_EQ(gpu.sm_clock_mhz(), 1410u);
  EXPECT_EQ(gpu.memory_clock_mhz(), 1215u);
  EXPECT_EQ(gpu.gpu_utilization_pct(), 97u);
  EXPECT_EQ(gpu.memory_utilization_pct(), 41u);
  // NVML's bits are joule's: software power cap and software thermal slowdown.
  EXPECT_EQ(gpu.clock_event_reasons(), clock_event::kSwPowerCap | clock_event::kSwThermalSlowdown);
  // NVML has no documented memory-power reading.
  JOULE_EXPECT_ERROR(gpu.memory_power_mw(), ErrorCode::kNotSupported,
                     "GPU 0 (Tesla V100-SXM2-32GB) does not report memory power (nvml backend)");

  const GpuTelemetry telemetry = gpus[1]->telemetry();
  EXPECT_EQ(telemetry.temperature_c, 45.0);  // the fake's defaults
  EXPECT_EQ(telemetry.sm_clock_mhz, 1530u);
  EXPECT_EQ(telemetry.memory_clock_mhz, 877u);
  EXPECT_EQ(telemetry.gpu_utilization_pct, 0u);
  EXPECT_EQ(telemetry.memory_utilization_pct, 0u);
  EXPECT_EQ(telemetry.clock_event_reasons, 0u);
  EXPECT_FALSE(telemetry.memory_power_mw.has_value());
  ASSERT_EQ(telemetry.errors.size(), 1u);
  EXPECT_EQ(telemetry.errors[0].first, TelemetryField::kMemoryPower);
}

TEST_F(NvmlTest, SmClockFollowsTheLock) {
  const Gpus gpus = open_ok(kTelemetry);
  ASSERT_EQ(gpus.size(), 2u);
  ASSERT_TRUE(gpus[0]->lock_sm_clocks(1005, 1230).has_value());
  EXPECT_EQ(gpus[0]->sm_clock_mhz(), 1230u);
  ASSERT_TRUE(gpus[0]->reset_sm_clocks().has_value());
  EXPECT_EQ(gpus[0]->sm_clock_mhz(), 1410u);
}

// Memory clock locks (nvmlDeviceSetMemoryLockedClocks): listed highest first, set and reset on the device,
// the reading follows the lock; a range with no supported clock is the driver's refusal; a driver without the
// calls says so instead.
TEST_F(NvmlTest, MemoryClockLocksReachTheDriverAndSayWhenTheyCannot) {
  FakeControl fake(kFakeNvml);
  const Gpus gpus = open_ok(kTwoGpus);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(*gpus[0]->supported_memory_clocks_mhz(), (std::vector<uint32_t>{877, 810}));
  ASSERT_TRUE(gpus[0]->lock_memory_clocks(810, 810));
  EXPECT_EQ(fake.locked_memory_clocks(0), std::make_pair(810u, 810u));
  EXPECT_EQ(*gpus[0]->memory_clock_mhz(), 810u);
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_memory_clocks(900, 1000), ErrorCode::kInvalidArgument,
      "locking the memory clock to 900-1000 MHz on GPU 0 (Tesla V100-SXM2-32GB): Invalid Argument "
      "(NVML_ERROR_INVALID_ARGUMENT)");
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_memory_clocks(1000, 900), ErrorCode::kInvalidArgument,
      "cannot lock GPU 0 (Tesla V100-SXM2-32GB)'s memory clock: minimum 1000 MHz is above maximum "
      "900 MHz");
  ASSERT_TRUE(gpus[0]->reset_memory_clocks());
  EXPECT_EQ(fake.locked_memory_clocks(0), std::make_pair(0u, 0u));
  EXPECT_EQ(*gpus[0]->memory_clock_mhz(), 877u);

  const Gpus old = open_ok(kTwoGpus, kFakeNvmlNoArchFields);
  ASSERT_EQ(old.size(), 2u);
  JOULE_EXPECT_ERROR(
      old[0]->lock_memory_clocks(810, 810), ErrorCode::kNotSupported,
      "locking the memory clock to 810-810 MHz on GPU 0 (Tesla V100-SXM2-32GB): the NVML library "
      "lacks nvmlDeviceSetMemoryLockedClocks (driver R470 or later)");
  JOULE_EXPECT_ERROR(
      old[0]->supported_memory_clocks_mhz(), ErrorCode::kNotSupported,
      "listing the memory clocks to lock on GPU 0 (Tesla V100-SXM2-32GB): the NVML library lacks "
      "nvmlDeviceSetMemoryLockedClocks (driver R470 or later)");
}

TEST_F(NvmlTest, UnsupportedTelemetryIsAnErrorNotZero) {
  const Gpus gpus = open_ok(std::string(kTelemetry) +
                            "gpu0.get_temperature=not_supported\n"
                            "gpu0.get_utilization=not_supported\n"
                            "gpu0.get_clocks_event_reasons=deprecated\n"
                            "gpu0.get_memory_clock=gpu_is_lost\n"
                            "gpu1.get_sm_clock=no_permission\n");
  ASSERT_EQ(gpus.size(), 2u);
  const GpuTelemetry telemetry = gpus[0]->telemetry();
  EXPECT_FALSE(telemetry.temperature_c.has_value());
  EXPECT_EQ(telemetry.sm_clock_mhz, 1410u);
  EXPECT_FALSE(telemetry.memory_clock_mhz.has_value());
  EXPECT_FALSE(telemetry.gpu_utilization_pct.has_value());
  EXPECT_FALSE(telemetry.memory_utilization_pct.has_value());
  EXPECT_FALSE(telemetry.clock_event_reasons.has_value());
  EXPECT_FALSE(telemetry.memory_power_mw.has_value());
  EXPECT_TRUE(telemetry.has(TelemetryField::kSmClock));
  ASSERT_EQ(telemetry.errors.size(), 6u);

  const auto expect_error = [&](TelemetryField field, ErrorCode code, const std::string& message) {
    const Error* error = telemetry.error(field);
    ASSERT_NE(error, nullptr) << telemetry_field_name(field);
    EXPECT_EQ(error->code(), code) << telemetry_field_name(field);
    EXPECT_EQ(error->message(), message);
  };
  expect_error(TelemetryField::kTemperature, ErrorCode::kNotSupported,
               "GPU 0 (Tesla V100-SXM2-32GB) does not report temperature (nvml backend): "
               "nvmlDeviceGetTemperature returned Not Supported (NVML_ERROR_NOT_SUPPORTED)");
  expect_error(TelemetryField::kGpuUtilization, ErrorCode::kNotSupported,
               "GPU 0 (Tesla V100-SXM2-32GB) does not report GPU utilisation (nvml backend): "
               "nvmlDeviceGetUtilizationRates returned Not Supported (NVML_ERROR_NOT_SUPPORTED)");
  expect_error(TelemetryField::kMemoryUtilization, ErrorCode::kNotSupported,
               "GPU 0 (Tesla V100-SXM2-32GB) does not report memory utilisation (nvml backend): "
               "nvmlDeviceGetUtilizationRates returned Not Supported (NVML_ERROR_NOT_SUPPORTED)");
  // What NVML answers from a call it has removed.
  expect_error(TelemetryField::kClockEventReasons, ErrorCode::kNotSupported,
               "GPU 0 (Tesla V100-SXM2-32GB) does not report clock event (throttle) reasons (nvml backend): "
               "nvmlDeviceGetCurrentClocksEventReasons returned (fake) Deprecated (NVML_ERROR_DEPRECATED)");
  // Other failures stay what they are.
  expect_error(
      TelemetryField::kMemoryClock, ErrorCode::kDevice,
      "reading the memory clock on GPU 0 (Tesla V100-SXM2-32GB): GPU is lost (NVML_ERROR_GPU_IS_LOST)");
  JOULE_EXPECT_ERROR(
      gpus[1]->sm_clock_mhz(), ErrorCode::kPermissionDenied,
      "reading the SM clock on GPU 1 (NVIDIA A100-SXM4-40GB): Insufficient Permissions "
      "(NVML_ERROR_NO_PERMISSION). The process may not use the NVIDIA device files (/dev/nvidia*): run as "
      "root or as a user allowed to open them");
  EXPECT_EQ(gpus[1]->temperature_c(), 45.0);
}

TEST_F(NvmlTest, MissingTelemetrySymbolsMeanNotSupported) {
  // A driver without any telemetry call still loads; each reading says which symbol is missing.
  const Gpus gpus = open_ok(kTelemetry, kFakeNvmlNoArchFields);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->power_mw(), 100000u);  // nvmlDeviceGetPowerUsage still works
  const GpuTelemetry telemetry = gpus[0]->telemetry();
  ASSERT_EQ(telemetry.errors.size(), telemetry_fields().size());
  for (const auto& [field, error] : telemetry.errors) {
    EXPECT_EQ(error.code(), ErrorCode::kNotSupported) << telemetry_field_name(field);
  }
  const std::string prefix = "GPU 0 (Tesla V100-SXM2-32GB) does not report ";
  EXPECT_EQ(telemetry.error(TelemetryField::kTemperature)->message(),
            fmt::format("{}temperature (nvml backend): {} lacks nvmlDeviceGetTemperature; a newer NVIDIA "
                        "driver may provide it",
                        prefix, kFakeNvmlNoArchFields));
  EXPECT_EQ(telemetry.error(TelemetryField::kMemoryClock)->message(),
            fmt::format("{}the memory clock (nvml backend): {} lacks nvmlDeviceGetClockInfo; a newer NVIDIA "
                        "driver may provide it",
                        prefix, kFakeNvmlNoArchFields));
  EXPECT_EQ(telemetry.error(TelemetryField::kGpuUtilization)->message(),
            fmt::format("{}GPU utilisation (nvml backend): {} lacks nvmlDeviceGetUtilizationRates; a newer "
                        "NVIDIA driver may provide it",
                        prefix, kFakeNvmlNoArchFields));
  EXPECT_EQ(
      telemetry.error(TelemetryField::kClockEventReasons)->message(),
      fmt::format("{}clock event (throttle) reasons (nvml backend): {} lacks "
                  "nvmlDeviceGetCurrentClocksEventReasons and nvmlDeviceGetCurrentClocksThrottleReasons; "
                  "a newer NVIDIA driver may provide it",
                  prefix, kFakeNvmlNoArchFields));
}

TEST_F(NvmlTest, ClockEventReasonsFallBackToTheOldName) {
  // This build exports only nvmlDeviceGetCurrentClocksThrottleReasons, as drivers before the rename do.
  const Gpus gpus =
      open_ok(std::string(kTelemetry) + "gpu1.get_clocks_event_reasons=not_supported\n", kFakeNvmlNoEnergy);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->clock_event_reasons(), 0x24u);
  JOULE_EXPECT_ERROR(gpus[1]->clock_event_reasons(), ErrorCode::kNotSupported,
                     "GPU 1 (NVIDIA A100-SXM4-40GB) does not report clock event (throttle) reasons (nvml "
                     "backend): nvmlDeviceGetCurrentClocksThrottleReasons returned Not Supported "
                     "(NVML_ERROR_NOT_SUPPORTED)");
}

TEST_F(NvmlTest, AbsentLibrary) {
  JOULE_EXPECT_ERROR(
      open(kTwoGpus, "/nonexistent/libnvidia-ml.so.1"), ErrorCode::kLibraryMissing,
      "cannot load NVML: /nonexistent/libnvidia-ml.so.1: cannot open shared object file: No such file "
      "or directory. Install the NVIDIA driver, or set JOULE_NVML_LIBRARY to the path of "
      "libnvidia-ml.so.1");
}

TEST_F(NvmlTest, VisibleDevicesByIndex) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "2,0");
  const Gpus gpus = open_ok(kThreeGpus);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[0]->info().physical_index, 2);
  EXPECT_EQ(gpus[0]->info().name, "GPU Two");
  EXPECT_EQ(gpus[1]->info().index, 1);
  EXPECT_EQ(gpus[1]->info().physical_index, 0);
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-00000000-aaaa-4000-8000-000000000000");
  // Messages name the framework index.
  JOULE_EXPECT_ERROR(gpus[0]->power_mw(), ErrorCode::kDevice,
                     "reading the power draw on GPU 0 (GPU Two): GPU is lost (NVML_ERROR_GPU_IS_LOST)");
}

TEST_F(NvmlTest, VisibleDevicesByUuidPrefix) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "GPU-11112,GPU-00000000-aaaa");
  const Gpus gpus = open_ok(kThreeGpus);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().physical_index, 2);
  EXPECT_EQ(gpus[0]->info().name, "GPU Two");
  EXPECT_EQ(gpus[1]->info().physical_index, 0);
}

TEST_F(NvmlTest, VisibleDevicesEmptyOpensNone) {
  const FakeControl fake(kFakeNvml);
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "");
  EXPECT_TRUE(open_ok(kThreeGpus).empty());
  EXPECT_EQ(fake.init_count(), 0);
}

TEST_F(NvmlTest, VisibleDevicesIndexOutOfRange) {
  const FakeControl fake(kFakeNvml);
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,5");
  JOULE_EXPECT_ERROR(open(kThreeGpus), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 5, but this machine has 3 GPUs (indices 0 to 2)");
  EXPECT_EQ(fake.init_count(), 0);
}

TEST_F(NvmlTest, VisibleDevicesUnknownUuid) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "GPU-ffff");
  JOULE_EXPECT_ERROR(open(kThreeGpus), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU-ffff, which matches no GPU's UUID");
}

TEST_F(NvmlTest, VisibleDevicesAmbiguousUuidPrefix) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "GPU-1111");
  JOULE_EXPECT_ERROR(open(kThreeGpus), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES entry 'GPU-1111' matches more than one GPU (GPU 1 and GPU 2)");
}

}  // namespace
}  // namespace joule::device
