// SPDX-License-Identifier: Apache-2.0
#include "joule/device/discovery.hpp"

#include <optional>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::device {
namespace {

DiscoveryOptions nothing_real() {
  DiscoveryOptions options;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  options.rocm_library = "/nonexistent/librocm_smi64.so.1";
  options.amd_smi_library = "/nonexistent/libamd_smi.so";
  options.level_zero_library = "/nonexistent/libze_loader.so.1";
  options.powercap_root = "/nonexistent/powercap";
  return options;
}

TEST(Discovery, SimulatedGpusReplaceVendorBackends) {
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", nullptr);
  DiscoveryOptions options = nothing_real();
  options.sim_spec = "3xa40:squad";
  options.cpus = false;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 3u);
  EXPECT_EQ(devices->gpus[2]->info().index, 2);
  ASSERT_EQ(devices->reports.size(), 1u);
  EXPECT_EQ(devices->reports[0].backend, "sim");
  EXPECT_TRUE(devices->reports[0].ok);
  EXPECT_EQ(devices->reports[0].devices, 3u);
}

TEST(Discovery, BadConfigurationIsAnError) {
  DiscoveryOptions options = nothing_real();
  options.sim_spec = "v100:nope";
  EXPECT_EQ(discover(options).error().code(), ErrorCode::kInvalidArgument);
  options.sim_spec = "2xv100";
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", "0,x");
  JOULE_EXPECT_ERROR(
      discover(options), ErrorCode::kInvalidArgument,
      "CUDA_VISIBLE_DEVICES='0,x' is malformed: 'x' is neither a GPU index (0, 1, …) nor a UUID (GPU-… or "
      "MIG-…)");
}

TEST(Discovery, MissingBackendsAreReportedWithReasons) {
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", nullptr);
  test::ScopedEnv hip("HIP_VISIBLE_DEVICES", nullptr);
  auto devices = discover(nothing_real());
  ASSERT_TRUE(devices);
  EXPECT_TRUE(devices->gpus.empty());
  EXPECT_TRUE(devices->cpus.empty());
  ASSERT_EQ(devices->reports.size(), 5u);  // nvml, levelzero, amdsmi, rocm, rapl
  for (const auto& report : devices->reports) {
    EXPECT_FALSE(report.ok) << report.backend;
    EXPECT_FALSE(report.detail.empty()) << report.backend;
  }
  EXPECT_EQ(devices->reports[0].backend, "nvml");
  EXPECT_NE(devices->reports[0].detail.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_EQ(devices->why_no_gpus().rfind("no GPU found: nvml: ", 0), 0u);
  EXPECT_NE(devices->why_no_gpus().find("; rocm: "), std::string::npos);
  EXPECT_NE(
      devices->why_no_gpus().find("; amdsmi: cannot load the AMD SMI library '/nonexistent/libamd_smi.so'"),
      std::string::npos);
  const auto selected = devices->select_gpus(std::vector<int>{0});
  ASSERT_FALSE(selected);
  EXPECT_EQ(selected.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(selected.error().message().rfind("unknown GPU index 0: no GPU found: nvml: ", 0), 0u);
}

TEST(Discovery, SelectGpus) {
  DiscoveryOptions options = nothing_real();
  options.sim_spec = "2xv100";
  options.cpus = false;
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", nullptr);
  auto devices = discover(options);
  ASSERT_TRUE(devices);
  EXPECT_EQ(devices->select_gpus(std::nullopt)->size(), 2u);
  EXPECT_EQ((*devices->select_gpus(std::vector<int>{1}))[0], devices->gpus[1].get());
  JOULE_EXPECT_ERROR(devices->select_gpus(std::vector<int>{2}), ErrorCode::kNotFound,
                     "unknown GPU index 2: 2 GPUs are visible (indices 0 to 1)");
  JOULE_EXPECT_ERROR(devices->select_gpus(std::vector<int>{1, 1}), ErrorCode::kInvalidArgument,
                     "GPU index 1 is listed twice");
  JOULE_EXPECT_ERROR(devices->select_cpus(std::vector<int>{0}), ErrorCode::kNotFound,
                     "unknown CPU index 0: no CPU energy counters found: no backend was tried");
}

// AMD GPUs through the fakes of both libraries: AMD SMI wins when it finds GPUs, ROCm SMI stands in
// otherwise.
struct AmdDiscovery : ::testing::Test {
  AmdDiscovery() {
    options = nothing_real();
    options.cpus = false;
    options.rocm_counter_validation_s = 0;  // no counter check: keeps the test fast
    amdsmi_config.emplace("JOULE_FAKE_AMDSMI_CONFIG", dir.write("amdsmi.conf", "devices=2\n").c_str());
    rocm_config.emplace("JOULE_FAKE_ROCM_CONFIG", dir.write("rocm.conf", "devices=2\n").c_str());
  }
  const BackendReport* report(const DeviceSet& set, const std::string& backend) const {
    for (const auto& candidate : set.reports) {
      if (candidate.backend == backend) {
        return &candidate;
      }
    }
    return nullptr;
  }
  test::TempDir dir;
  DiscoveryOptions options;
  test::ScopedEnv cuda{"CUDA_VISIBLE_DEVICES", nullptr};
  test::ScopedEnv hip{"HIP_VISIBLE_DEVICES", nullptr};
  std::optional<test::ScopedEnv> amdsmi_config;
  std::optional<test::ScopedEnv> rocm_config;
};

TEST_F(AmdDiscovery, BothPresentPrefersAmdSmiAndSkipsRocm) {
  options.amd_smi_library = JOULE_FAKE_AMDSMI_LIBRARY;
  options.rocm_library = JOULE_FAKE_ROCM_FOR_DISCOVERY;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 2u);  // once each, not twice
  EXPECT_EQ(devices->gpus[0]->info().backend, "amdsmi");
  EXPECT_EQ(devices->gpus[1]->info().index, 1);
  const BackendReport* amdsmi = report(*devices, "amdsmi");
  ASSERT_NE(amdsmi, nullptr);
  EXPECT_TRUE(amdsmi->ok);
  EXPECT_EQ(amdsmi->devices, 2u);
  EXPECT_EQ(amdsmi->detail, fmt::format("{} (AMD SMI 26.1.0 (ROCm 7 ABI))", JOULE_FAKE_AMDSMI_LIBRARY));
  const BackendReport* rocm = report(*devices, "rocm");
  ASSERT_NE(rocm, nullptr);
  EXPECT_EQ(rocm->devices, 0u);
  EXPECT_EQ(rocm->detail, "skipped: AMD SMI found the AMD GPUs");
}

TEST_F(AmdDiscovery, OnlyRocmSmiPresent) {
  options.rocm_library = JOULE_FAKE_ROCM_FOR_DISCOVERY;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 2u);
  EXPECT_EQ(devices->gpus[0]->info().backend, "rocm");
  const BackendReport* amdsmi = report(*devices, "amdsmi");
  ASSERT_NE(amdsmi, nullptr);
  EXPECT_FALSE(amdsmi->ok);
  EXPECT_EQ(amdsmi->detail.rfind("cannot load the AMD SMI library '/nonexistent/libamd_smi.so'", 0), 0u);
  EXPECT_EQ(report(*devices, "rocm")->devices, 2u);
}

TEST_F(AmdDiscovery, OnlyAmdSmiPresent) {
  options.amd_smi_library = JOULE_FAKE_AMDSMI_LIBRARY;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 2u);
  EXPECT_EQ(devices->gpus[1]->info().backend, "amdsmi");
  EXPECT_EQ(report(*devices, "rocm")->detail, "skipped: AMD SMI found the AMD GPUs");
}

TEST_F(AmdDiscovery, AmdSmiWithoutGpusFallsBackToRocm) {
  amdsmi_config.emplace("JOULE_FAKE_AMDSMI_CONFIG", dir.write("amdsmi-none.conf", "devices=0\n").c_str());
  options.amd_smi_library = JOULE_FAKE_AMDSMI_LIBRARY;
  options.rocm_library = JOULE_FAKE_ROCM_FOR_DISCOVERY;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 2u);
  EXPECT_EQ(devices->gpus[0]->info().backend, "rocm");
  EXPECT_EQ(report(*devices, "amdsmi")->detail,
            fmt::format("{} (AMD SMI 26.1.0 (ROCm 7 ABI)) loaded, but it reports no GPU",
                        JOULE_FAKE_AMDSMI_LIBRARY));
}

TEST_F(AmdDiscovery, TheReportNamesTheAmdSmiAbiChosen) {
  const test::ScopedEnv version("JOULE_FAKE_AMDSMI_VERSION", "24.6.3");
  options.amd_smi_library = JOULE_FAKE_AMDSMI_LIBRARY;
  auto devices = discover(options);
  ASSERT_TRUE(devices) << devices.error().message();
  ASSERT_EQ(devices->gpus.size(), 2u);
  EXPECT_EQ(report(*devices, "amdsmi")->detail,
            fmt::format("{} (AMD SMI 24.6.3 (ROCm 6.x ABI))", JOULE_FAKE_AMDSMI_LIBRARY));
}

TEST(Discovery, EnvironmentOverrides) {
  test::ScopedEnv sim("JOULE_SIM", "p100");
  test::ScopedEnv nvml("JOULE_NVML_LIBRARY", "/x/libnvidia-ml.so.1");
  test::ScopedEnv root("JOULE_POWERCAP_ROOT", "/x/powercap");
  test::ScopedEnv amdsmi("JOULE_AMD_SMI_LIBRARY", "/x/libamd_smi.so");
  test::ScopedEnv validation("JOULE_ROCM_VALIDATION_S", "0.25");
  auto options = DiscoveryOptions::from_environment();
  ASSERT_TRUE(options);
  EXPECT_EQ(*options->sim_spec, "p100");
  EXPECT_EQ(options->nvml_library, "/x/libnvidia-ml.so.1");
  EXPECT_EQ(options->powercap_root, "/x/powercap");
  EXPECT_EQ(options->amd_smi_library, "/x/libamd_smi.so");
  EXPECT_DOUBLE_EQ(options->rocm_counter_validation_s, 0.25);
  test::ScopedEnv bad("JOULE_ROCM_VALIDATION_S", "soon");
  JOULE_EXPECT_ERROR(DiscoveryOptions::from_environment(), ErrorCode::kInvalidArgument,
                     "JOULE_ROCM_VALIDATION_S='soon' is not a non-negative number of seconds");
}

}  // namespace
}  // namespace joule::device
