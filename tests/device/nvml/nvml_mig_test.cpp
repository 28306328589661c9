// SPDX-License-Identifier: Apache-2.0
// MIG instances through the NVML backend's real dlopen path, against the fake libnvidia-ml.so.1: listed,
// selected by CUDA_VISIBLE_DEVICES, measured as their GPU's energy × their slice share (estimated, and
// marked so by the energy monitor), settings refused, and instances that vanish while measured.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "joule/core/clock.hpp"
#include "joule/device/nvml.hpp"
#include "joule/measure/energy_monitor.hpp"

#include "test_util.hpp"

namespace joule::device {
namespace {

using MigGpus = std::vector<std::unique_ptr<Gpu>>;

// An A100 in MIG mode with three instances (3, 2 and 1 of its 7 compute slices; slot 3 onwards empty)
// beside a V100 without MIG.
constexpr const char* kMigConfig = R"(gpu0.name=NVIDIA A100-SXM4-40GB
gpu0.uuid=GPU-a100a100-0000-4000-8000-000000000000
gpu0.architecture=ampere
gpu0.power_mw=350000
gpu0.energy_start_mj=1000000
gpu0.energy_step_mj=70000
gpu0.mig_mode=1
gpu0.mig_slots=7
gpu0.mig0.uuid=MIG-11111111-0000-4000-8000-000000000000
gpu0.mig0.name=NVIDIA A100-SXM4-40GB MIG 3g.20gb
gpu0.mig0.gpu_instance_id=1
gpu0.mig0.compute_slices=3
gpu0.mig1.uuid=MIG-22222222-0000-4000-8000-000000000000
gpu0.mig1.gpu_instance_id=5
gpu0.mig1.compute_slices=2
gpu0.mig2.uuid=MIG-33333333-0000-4000-8000-000000000000
gpu0.mig2.gpu_instance_id=13
gpu1.name=Tesla V100-SXM2-32GB
gpu1.uuid=GPU-v100v100-0000-4000-8000-000000000001
)";

class NvmlMigTest : public ::testing::Test {
 protected:
  Result<MigGpus> open(const std::string& config, const char* library = JOULE_FAKE_NVML_PATH) {
    const std::string path = dir_.write("nvml.conf", config);
    const test::ScopedEnv script("JOULE_FAKE_NVML_CONFIG", path.c_str());
    auto visible = JOULE_TRY(visible_devices_from_environment("nvml"));
    return open_nvml_gpus(NvmlOptions{library}, visible);
  }

  MigGpus open_ok(const std::string& config, const char* library = JOULE_FAKE_NVML_PATH) {
    auto gpus = open(config, library);
    if (!gpus) {
      ADD_FAILURE() << gpus.error().message();
      return {};
    }
    return std::move(*gpus);
  }

  // The fake's joule_fake_nvml_mig_instance: destroys (gpu_instance_id < 0) or reconfigures an instance.
  static void change_mig_instance(unsigned int gpu, unsigned int slot, int gpu_instance_id) {
    void* handle = dlopen(JOULE_FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr);
    auto* control = reinterpret_cast<int (*)(unsigned int, unsigned int, int)>(
        dlsym(handle, "joule_fake_nvml_mig_instance"));
    ASSERT_NE(control, nullptr);
    EXPECT_EQ(control(gpu, slot, gpu_instance_id), 0);
    dlclose(handle);
  }

  test::TempDir dir_;
  test::ScopedEnv visible_{"CUDA_VISIBLE_DEVICES", nullptr};
};

TEST_F(NvmlMigTest, ListsMigInstancesAfterTheWholeGpus) {
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 5u);
  EXPECT_EQ(gpus[0]->info().uuid, "GPU-a100a100-0000-4000-8000-000000000000");
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-v100v100-0000-4000-8000-000000000001");
  const GpuInfo& mig = gpus[2]->info();
  EXPECT_EQ(mig.index, 2);
  EXPECT_EQ(mig.physical_index, 0);  // the parent's
  EXPECT_EQ(mig.uuid, "MIG-11111111-0000-4000-8000-000000000000");
  EXPECT_EQ(mig.name, "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
  EXPECT_TRUE(mig.has_energy_counter);
  EXPECT_DOUBLE_EQ(mig_compute_share(*gpus[2]), 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(mig_compute_share(*gpus[3]), 2.0 / 7.0);
  EXPECT_DOUBLE_EQ(mig_compute_share(*gpus[4]), 1.0 / 7.0);  // the fake's default: one slice
  EXPECT_DOUBLE_EQ(mig_compute_share(*gpus[0]), 1.0);
}

TEST_F(NvmlMigTest, CudaVisibleDevicesSelectsAnInstance) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-2222,1");
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->info().uuid, "MIG-22222222-0000-4000-8000-000000000000");
  EXPECT_EQ(gpus[0]->info().index, 0);
  EXPECT_EQ(gpus[1]->info().uuid, "GPU-v100v100-0000-4000-8000-000000000001");
}

TEST_F(NvmlMigTest, EnergyAndPowerAreTheParentsTimesTheSliceShare) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-1111");
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 1u);
  Gpu& mig = *gpus[0];
  // The parent's counter reads 1 000 000 + k × 70 000 mJ (read 0 was the probe); 3 of 7 slices.
  const uint64_t first = *mig.energy_mj();
  const uint64_t second = *mig.energy_mj();
  EXPECT_EQ(first, static_cast<uint64_t>(std::floor(1'070'000.0 * 3 / 7)));
  EXPECT_EQ(second - first, 30'000u);   // 70 000 mJ × 3/7
  EXPECT_EQ(mig.power_mw(), 150'000u);  // 350 W × 3/7
  // Reading the parent's power limit is allowed.
  EXPECT_EQ(mig.power_limit_mw(), 300'000u);
}

TEST_F(NvmlMigTest, EnergyMonitorMarksTheInstanceEstimatedWithItsMethod) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-1111,1");
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 2u);
  measure::EnergyMonitor monitor({gpus[0].get(), gpus[1].get()}, {}, SteadyClock::instance());
  monitor.begin_window("w", false);
  const measure::Measurement m = monitor.end_window("w", false);
  ASSERT_EQ(m.gpu_energy.size(), 2u);
  EXPECT_EQ(m.gpu_energy[0].source, measure::EnergySource::kMigSliceShare);
  EXPECT_EQ(measure::to_string(m.gpu_energy[0].source), "mig-slice-share");
  EXPECT_TRUE(m.gpu_energy[0].estimated());
  EXPECT_NEAR(m.gpu_energy[0].energy_j, 30.0, 1e-3);
  EXPECT_EQ(m.gpu_energy[1].source, measure::EnergySource::kCounter);
  EXPECT_TRUE(m.estimated());
}

TEST_F(NvmlMigTest, SettingsMigForbidsAreRefusedWithTheReason) {
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 5u);
  const std::string instance =
      "GPU 2 (NVIDIA A100-SXM4-40GB MIG 3g.20gb), MIG instance MIG-11111111-0000-4000-8000-000000000000 (GPU "
      "instance 1, compute instance 0) of NVML device 0 (GPU-a100a100-0000-4000-8000-000000000000)";
  JOULE_EXPECT_ERROR(gpus[2]->set_power_limit_mw(200'000), ErrorCode::kNotSupported,
                     "setting the power limit to 200 W on " + instance +
                         ": refused, because NVML sets power limits only for the whole GPU, which every "
                         "instance on it shares. Set it on the parent GPU instead (it then holds for all its "
                         "instances)");
  JOULE_EXPECT_ERROR(
      gpus[2]->lock_sm_clocks(1005, 1005), ErrorCode::kNotSupported,
      "locking the SM clock to 1005-1005 MHz on " + instance +
          ": refused, because NVML locks clocks only for the whole GPU, and not while MIG is on");
  JOULE_EXPECT_ERROR(
      gpus[2]->supported_sm_clocks_mhz(), ErrorCode::kNotSupported,
      "listing the SM clocks to lock on " + instance +
          ": refused, because NVML locks clocks only for the whole GPU, and not while MIG is on");
  JOULE_EXPECT_ERROR(
      gpus[2]->lock_memory_clocks(1215, 1215), ErrorCode::kNotSupported,
      "locking the memory clock to 1215-1215 MHz on " + instance +
          ": refused, because NVML locks clocks only for the whole GPU, and not while MIG is on");
  // The parent in MIG mode: its power limit may change, its clocks may not be locked.
  EXPECT_TRUE(gpus[0]->set_power_limit_mw(200'000));
  JOULE_EXPECT_ERROR(
      gpus[0]->lock_sm_clocks(1005, 1005), ErrorCode::kNotSupported,
      "locking the SM clock to 1005-1005 MHz on GPU 0 (NVIDIA A100-SXM4-40GB): the GPU is in MIG "
      "mode, and NVML does not lock GPU clocks while MIG is enabled. Disable MIG mode "
      "(nvidia-smi -i 0 -mig 0, no instance running) to lock clocks");
  JOULE_EXPECT_ERROR(gpus[0]->lock_memory_clocks(1215, 1215), ErrorCode::kNotSupported,
                     "locking the memory clock to 1215-1215 MHz on GPU 0 (NVIDIA A100-SXM4-40GB): the GPU is in MIG "
                     "mode, and NVML does not lock clocks while MIG is enabled");
  // The GPU without MIG still locks.
  EXPECT_TRUE(gpus[1]->lock_sm_clocks(1005, 1005));
}

TEST_F(NvmlMigTest, AnInstanceDestroyedWhileMeasuredEndsItsMeasurementWithAMessage) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-2222,MIG-3333");
  const MigGpus gpus = open_ok(kMigConfig);
  ASSERT_EQ(gpus.size(), 2u);
  measure::EnergyMonitor monitor({gpus[0].get(), gpus[1].get()}, {}, SteadyClock::instance());
  monitor.begin_window("w", false);
  change_mig_instance(0, 1, -1);
  const std::string gone =
      "GPU 0 (NVIDIA A100-SXM4-40GB MIG 1g.5gb), MIG instance MIG-22222222-0000-4000-8000-000000000000 (GPU "
      "instance 5, compute instance 0) of NVML device 0 (GPU-a100a100-0000-4000-8000-000000000000) is gone: "
      "NVML answers Invalid Argument (NVML_ERROR_INVALID_ARGUMENT) for it. The instance was destroyed or the "
      "GPU reconfigured while joule measured it, so its measurement ends here; list the instances again "
      "(nvidia-smi -L) and measure the new ones";
  JOULE_EXPECT_ERROR(gpus[0]->energy_mj(), ErrorCode::kNotFound, gone);
  JOULE_EXPECT_ERROR(gpus[0]->power_mw(), ErrorCode::kNotFound, gone);
  // The window cannot end with a figure for a device that no longer exists: it fails, naming it.
  try {
    (void)monitor.end_window("w", false);
    ADD_FAILURE() << "end_window succeeded across a destroyed MIG instance";
  } catch (const Exception& e) {
    EXPECT_NE(std::string(e.what()).find("MIG instance MIG-22222222-0000-4000-8000-000000000000"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
  // The other instance is untouched; reconfiguring it (a new GPU instance behind the same slot) ends it too.
  EXPECT_TRUE(gpus[1]->energy_mj());
  change_mig_instance(0, 2, 9);
  JOULE_EXPECT_ERROR(
      gpus[1]->energy_mj(), ErrorCode::kNotFound,
      "GPU 1 (NVIDIA A100-SXM4-40GB MIG 1g.5gb), MIG instance "
      "MIG-33333333-0000-4000-8000-000000000000 (GPU instance 13, compute instance 0) of NVML "
      "device 0 (GPU-a100a100-0000-4000-8000-000000000000) is gone: its handle now names GPU "
      "instance 9, compute instance 0. The GPU was reconfigured while joule measured it, so its "
      "measurement ends here; list the instances again (nvidia-smi -L) and measure the new ones");
}

TEST_F(NvmlMigTest, AMigUuidThatMatchesNothingIsRefused) {
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-ffff");
  JOULE_EXPECT_ERROR(
      open(kMigConfig), ErrorCode::kNotFound,
      "CUDA_VISIBLE_DEVICES names MIG-ffff, which matches no MIG instance's UUID (this machine "
      "has 3 MIG instances: MIG mode may be off, or the instance was destroyed; `nvidia-smi -L` "
      "lists them)");
}

TEST_F(NvmlMigTest, AnInstanceWithAnImpossibleShareOrUnreadableIsLeftOut) {
  // Slot 0 claims 9 of 7 slices; slot 1's attributes cannot be read: only slot 2 is listed.
  {
    const MigGpus gpus =
        open_ok(std::string(kMigConfig) + "gpu0.mig0.compute_slices=9\ngpu0.mig1.get_attributes=unknown\n");
    ASSERT_EQ(gpus.size(), 3u);
    EXPECT_EQ(gpus[2]->info().uuid, "MIG-33333333-0000-4000-8000-000000000000");
  }  // NVML shut down: the next open reads its script afresh
  const test::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "MIG-1111");
  JOULE_EXPECT_ERROR(
      open(std::string(kMigConfig) + "gpu0.mig0.compute_slices=9\n"), ErrorCode::kNotFound,
      "CUDA_VISIBLE_DEVICES names MIG-1111, which matches no MIG instance's UUID (this machine "
      "has 2 MIG instances: MIG mode may be off, or the instance was destroyed; `nvidia-smi -L` "
      "lists them)");
}

TEST_F(NvmlMigTest, MigModeOffOrADriverWithoutMigListsWholeGpusOnly) {
  EXPECT_EQ(open_ok(std::string(kMigConfig) + "gpu0.mig_mode=0\n").size(), 2u);
  // A driver without the MIG calls (the fake built without them): the same GPUs, no instance.
  EXPECT_EQ(open_ok(kMigConfig, JOULE_FAKE_NVML_NO_ARCH_FIELDS_PATH).size(), 2u);
  // A MIG mode that cannot be read is logged, and the GPU listed whole.
  EXPECT_EQ(open_ok(std::string(kMigConfig) + "gpu0.get_mig_mode=unknown\n").size(), 2u);
}

}  // namespace
}  // namespace joule::device
