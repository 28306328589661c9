// SPDX-License-Identifier: Apache-2.0
// `joule probe` on the fake NVML with the fake CUDA driver (tests/fakes/cuda) behind the real loaders: the
// card says its kernels ran through CUDA, and a driver that cannot be loaded is named while the rest is still
// measured.
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/run_process.hpp"

namespace joule::test {
namespace {

std::map<std::string, std::string> fake_nvidia_env(const std::string& cuda_library) {
  return {{"JOULE_SIM", Process::kUnset},
          {"CUDA_VISIBLE_DEVICES", Process::kUnset},
          {"JOULE_FAKE_NVML_CONFIG", Process::kUnset},
          {"JOULE_NVML_LIBRARY", JOULE_FAKE_NVML_PATH},
          {"JOULE_CUDA_LIBRARY", cuda_library},
          {"JOULE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.1"},
          {"JOULE_AMD_SMI_LIBRARY", "/nonexistent/libamd_smi.so"},
          {"JOULE_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1"},
          {"JOULE_POWERCAP_ROOT", "/nonexistent/powercap"}};
}

TEST(ProbeCli, KernelsRunThroughTheCudaDriver) {
  const auto result = run({JOULE_BINARY, "probe", "--quick"}, fake_nvidia_env(JOULE_FAKE_CUDA_LIBRARY));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto card = nlohmann::json::parse(result.out);
  EXPECT_EQ(card["kernel_runner"], "cuda");
  EXPECT_EQ(card["device"]["backend"], "nvml");
  EXPECT_EQ(card["device"]["driver_version"], "12.4");
  ASSERT_EQ(card["frontiers"].size(), 4u);
  EXPECT_EQ(card["frontiers"][0]["points"].size(), 3u);
  EXPECT_FALSE(card["settle"].is_null());
}

TEST(ProbeCli, AMissingCudaDriverIsNamedAndTheRestMeasured) {
  const auto result = run({JOULE_BINARY, "probe", "--quick"}, fake_nvidia_env("/nonexistent/libcuda.so.1"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find(
                "joule probe: no kernels can run: cannot load the CUDA driver: /nonexistent/libcuda.so.1"),
            std::string::npos)
      << result.err;
  const auto card = nlohmann::json::parse(result.out);
  EXPECT_EQ(card["kernel_runner"], "");
  EXPECT_EQ(card["latencies"].size(), 2u);
  EXPECT_EQ(card["frontiers"].size(), 0u);
  bool frontiers_skipped = false;
  for (const auto& skipped : card["skipped"]) {
    frontiers_skipped |=
        skipped["what"] == "frontiers" && skipped["why"] == "no kernel runner for this device";
  }
  EXPECT_TRUE(frontiers_skipped) << card["skipped"].dump();
}

// What scripts/hw-check runs: no setting and no kernel, so the CUDA driver is not even loaded (a missing one
// is not mentioned); --load runs the kernel and so needs it.
TEST(ProbeCli, ReadOnlyLoadsNoDriverUnlessAskedTo) {
  const auto env = fake_nvidia_env("/nonexistent/libcuda.so.1");
  const auto result = run({JOULE_BINARY, "probe", "--quick", "--read-only"}, env);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err.find("no kernels can run"), std::string::npos) << result.err;
  const auto card = nlohmann::json::parse(result.out);
  EXPECT_EQ(card["counter"]["under_load"], false);
  EXPECT_EQ(card["kernel_runner"], "");
  const auto loaded = run({JOULE_BINARY, "probe", "--quick", "--read-only", "--load"}, env);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.err.find("joule probe: no kernels can run: cannot load the CUDA driver"),
            std::string::npos)
      << loaded.err;
}

}  // namespace
}  // namespace joule::test
