// SPDX-License-Identifier: Apache-2.0
// Grace Hopper / Grace Blackwell module scope through the NVML backend's real dlopen path: module power and
// energy read beside the GPU's own, never mixed with them, and absent (with the reason) elsewhere.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/metric_family.h>

#include "joule/device/discovery.hpp"
#include "joule/device/inventory.hpp"
#include "joule/device/nvml.hpp"
#include "joule/metrics/gpu_metrics.hpp"

#include "test_util.hpp"

namespace joule::device {
namespace {

// A GH200 (module: 900 W, 90 J per energy read) beside an H100 PCIe without a module.
constexpr const char* kModuleConfig = R"(gpu0.name=NVIDIA GH200 480GB
gpu0.architecture=hopper
gpu0.power_mw=500000
gpu0.energy_start_mj=1000
gpu0.energy_step_mj=50000
gpu0.module_power_mw=900000
gpu0.module_energy_start_mj=5000000
gpu0.module_energy_step_mj=90000
gpu1.name=NVIDIA H100 PCIe
gpu1.architecture=hopper
)";

// Another vendor's GPU, as far as the module calls can tell.
class OtherVendorGpu final : public Gpu {
 public:
  OtherVendorGpu() : Gpu(GpuInfo{"rocm", 0, 0, "AMD Instinct MI300X", "GPU-0", true}) {}

 protected:
  Result<uint64_t> do_energy_mj() override { return 0; }
  Result<uint32_t> do_power_mw() override { return 0; }
  Result<PowerLimitConstraints> do_power_limit_constraints() override { return PowerLimitConstraints{}; }
  Result<uint32_t> do_power_limit_mw() override { return 0; }
  Result<void> do_set_power_limit_mw(uint32_t /*power_limit_mw*/) override { return {}; }
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override { return std::vector<uint32_t>{}; }
  Result<void> do_lock_sm_clocks(uint32_t /*min_mhz*/, uint32_t /*max_mhz*/) override { return {}; }
  Result<void> do_reset_sm_clocks() override { return {}; }
};

class NvmlModuleTest : public ::testing::Test {
 protected:
  std::vector<std::unique_ptr<Gpu>> open(const std::string& config,
                                         const char* library = JOULE_FAKE_NVML_PATH) {
    const std::string path = dir_.write("nvml.conf", config);
    const test::ScopedEnv script("JOULE_FAKE_NVML_CONFIG", path.c_str());
    auto gpus = open_nvml_gpus(NvmlOptions{library}, *parse_visible_devices("CUDA_VISIBLE_DEVICES", nullptr));
    if (!gpus) {
      ADD_FAILURE() << gpus.error().message();
      return {};
    }
    return std::move(*gpus);
  }

  test::TempDir dir_;
};

TEST_F(NvmlModuleTest, ModulePowerAndEnergyAreReadBesideTheGpusOwn) {
  auto gpus = open(kModuleConfig);
  ASSERT_EQ(gpus.size(), 2u);
  Gpu& gh200 = *gpus[0];
  EXPECT_EQ(nvml_module_power_mw(gh200), 900'000u);
  EXPECT_EQ(gh200.power_mw(), 500'000u);  // the GPU's own, unchanged
  EXPECT_EQ(nvml_module_energy_mj(gh200), 5'000'000u);
  EXPECT_EQ(nvml_module_energy_mj(gh200), 5'090'000u);
  // The GPU's counter advances on its own (read 0 was the probe).
  EXPECT_EQ(gh200.energy_mj(), 51'000u);
}

TEST_F(NvmlModuleTest, GpusWithoutAModuleSayWhy) {
  auto gpus = open(kModuleConfig);
  ASSERT_EQ(gpus.size(), 2u);
  JOULE_EXPECT_ERROR(nvml_module_power_mw(*gpus[1]), ErrorCode::kNotSupported,
                     "GPU 1 (NVIDIA H100 PCIe) does not report module power: NVML answers Not Supported "
                     "(NVML_ERROR_NOT_SUPPORTED) for field 186 at module scope; only Grace Hopper and Grace "
                     "Blackwell modules report it");
  JOULE_EXPECT_ERROR(nvml_module_energy_mj(*gpus[1]), ErrorCode::kNotSupported,
                     "GPU 1 (NVIDIA H100 PCIe) does not report module energy: NVML answers Not Supported "
                     "(NVML_ERROR_NOT_SUPPORTED) for field 191 at module scope; only Grace Hopper and Grace "
                     "Blackwell modules report it");
}

TEST_F(NvmlModuleTest, AFieldWithAnErrorStatusIsThatError) {
  auto gpus = open(std::string(kModuleConfig) + "gpu0.get_module_power=gpu_is_lost\n" +
                   "gpu0.get_module_energy=no_permission\n");
  ASSERT_EQ(gpus.size(), 2u);
  JOULE_EXPECT_ERROR(
      nvml_module_power_mw(*gpus[0]), ErrorCode::kDevice,
      "reading the module power (field 186 at module scope) on GPU 0 (NVIDIA GH200 480GB): GPU "
      "is lost (NVML_ERROR_GPU_IS_LOST)");
  const auto energy = nvml_module_energy_mj(*gpus[0]);
  ASSERT_FALSE(energy);
  EXPECT_EQ(energy.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(energy.error().message().find("reading the module energy (field 191 at module scope) on GPU 0 "
                                          "(NVIDIA GH200 480GB): Insufficient Permissions"),
            std::string::npos)
      << energy.error().message();
  // The GPU's own power is untouched by the module's failure.
  EXPECT_EQ(gpus[0]->power_mw(), 500'000u);
}

TEST_F(NvmlModuleTest, WithoutFieldValuesOrOnAnotherBackendTheModuleIsNotSupported) {
  auto old_driver = open(kModuleConfig, JOULE_FAKE_NVML_NO_ARCH_FIELDS_PATH);
  ASSERT_EQ(old_driver.size(), 2u);
  const auto power = nvml_module_power_mw(*old_driver[0]);
  ASSERT_FALSE(power);
  EXPECT_EQ(power.error().code(), ErrorCode::kNotSupported);
  EXPECT_NE(
      power.error().message().find(
          "GPU 0 (NVIDIA GH200 480GB) does not report module power: " JOULE_FAKE_NVML_NO_ARCH_FIELDS_PATH
          " lacks nvmlDeviceGetFieldValues"),
      std::string::npos)
      << power.error().message();
  OtherVendorGpu other;
  JOULE_EXPECT_ERROR(
      nvml_module_power_mw(other), ErrorCode::kNotSupported,
      "GPU 0 (AMD Instinct MI300X) does not report module power (rocm backend): only NVIDIA Grace "
      "Hopper and Grace Blackwell modules do, through NVML");
}

}  // namespace
}  // namespace joule::device

namespace joule::device {
namespace {

TEST_F(NvmlModuleTest, InventoryShowsTheModuleBesideTheGpu) {
  DeviceSet devices;
  for (auto& gpu : open(kModuleConfig)) {
    devices.gpus.push_back(std::move(gpu));
  }
  const auto rows = gpu_inventory(devices);
  ASSERT_EQ(rows.size(), 2u);
  const std::string text = inventory_text(devices, rows);
  EXPECT_NE(
      text.find("      module power   900 W (scope=module: the whole module, this GPU included; never add "
                "it to the GPU's)\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("module power", text.find("NVIDIA H100 PCIe")), std::string::npos) << text;
  const nlohmann::json json = gpu_inventory_json(rows);
  EXPECT_EQ(json[0]["module"]["scope"], "module");
  EXPECT_DOUBLE_EQ(json[0]["module"]["power_w"].get<double>(), 900.0);
  EXPECT_TRUE(json[1]["module"]["power_w"].is_null());
  EXPECT_NE(json[1]["module"]["error"].get<std::string>().find("only Grace Hopper and Grace Blackwell"),
            std::string::npos);
}

}  // namespace
}  // namespace joule::device

namespace joule::device {
namespace {

// The value of `family`'s sample whose labels include gpu=`gpu`, or nullopt.
std::optional<double> sample_of(const std::vector<prometheus::MetricFamily>& families,
                                const std::string& family, const std::string& gpu, const std::string& scope) {
  for (const auto& one : families) {
    if (one.name != family) {
      continue;
    }
    for (const auto& metric : one.metric) {
      bool gpu_matches = false;
      bool scope_matches = false;
      for (const auto& label : metric.label) {
        gpu_matches = gpu_matches || (label.name == "gpu" && label.value == gpu);
        scope_matches = scope_matches || (label.name == "scope" && label.value == scope);
      }
      if (gpu_matches && scope_matches) {
        return one.type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value;
      }
    }
  }
  return std::nullopt;
}

TEST_F(NvmlModuleTest, ExporterHasModuleSeriesLabelledScopeModuleOnlyWhereReported) {
  auto gpus = open(kModuleConfig);
  ASSERT_EQ(gpus.size(), 2u);
  metrics::GpuMetrics exporter({gpus[0].get(), gpus[1].get()}, SteadyClock::instance());
  const auto families = exporter.Collect();
  EXPECT_EQ(sample_of(families, "joule_gpu_module_power_watts", "0", "module"), 900.0);
  const auto energy_j = sample_of(families, "joule_gpu_module_energy_joules_total", "0", "module");
  ASSERT_TRUE(energy_j.has_value());
  EXPECT_GE(*energy_j, 5'000.0);
  // The H100 without a module has no module series (absent, never 0), and no read error for it.
  EXPECT_FALSE(sample_of(families, "joule_gpu_module_power_watts", "1", "module").has_value());
  EXPECT_FALSE(sample_of(families, "joule_gpu_module_energy_joules_total", "1", "module").has_value());
}

}  // namespace
}  // namespace joule::device
