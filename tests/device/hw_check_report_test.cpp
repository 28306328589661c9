// SPDX-License-Identifier: Apache-2.0
// The forms of the hardware check and of the backends tried (joule/device/hw_check_report.hpp), on a
// hand-made check: what scripts/hw-check and `joule devices --check` print.
#include "joule/device/hw_check_report.hpp"

#include <gtest/gtest.h>

namespace joule::device {
namespace {

DeviceSet two_backends() {
  DeviceSet devices;
  devices.reports.push_back(
      {.backend = "nvml", .kind = "gpu", .devices = 0, .ok = false, .detail = "not found"});
  devices.reports.push_back({.backend = "sim", .kind = "gpu", .devices = 1, .ok = true, .detail = "v100"});
  return devices;
}

TEST(HwCheckReport, BackendsAsTextAndJson) {
  const DeviceSet devices = two_backends();
  EXPECT_EQ(backends_text(devices), "  nvml    unavailable  not found\n  sim     1 device  v100\n");
  const nlohmann::json json = backends_json(devices);
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[1],
            nlohmann::json(
                {{"backend", "sim"}, {"kind", "gpu"}, {"ok", true}, {"devices", 1}, {"detail", "v100"}}));
}

TEST(HwCheckReport, ChecksAndTheSummaryInBothForms) {
  const DeviceSet devices = two_backends();
  GpuCheck check;
  check.info.index = 0;
  check.info.backend = "sim";
  check.info.name = "Tesla V100";
  check.items = {{"energy counter", CheckStatus::kPass, "12.0 J vs 12.1 J"},
                 {"clocks", CheckStatus::kSkip, "not supported"}};
  check.counter_energy_j = 12.0;
  const HwCheckReport report{
      .joule_version = "9.9", .time = "2026-01-01T00:00:00Z", .fallback_note = "no GPU"};
  const std::string text = hw_check_text(devices, {check}, report);
  EXPECT_EQ(text.rfind("joule hardware check: joule 9.9, 2026-01-01T00:00:00Z, " + kernel_description() +
                           "\nno GPU\nbackends:\n",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("GPU 0 [sim] Tesla V100\n  PASS energy counter   12.0 J vs 12.1 J\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("summary: 1 pass, 0 warn, 0 fail, 1 skipped; no setting was changed\n"),
            std::string::npos);
  const nlohmann::json json = nlohmann::json::parse(hw_check_json(devices, {check}, report));
  EXPECT_EQ(json["simulated_fallback"], true);
  EXPECT_EQ(json["gpus"][0]["counter_energy_j"], 12.0);
  EXPECT_TRUE(json["gpus"][0]["integrated_energy_j"].is_null());
  EXPECT_EQ(json["summary"]["skip"], 1);
  EXPECT_EQ(json["settings_changed"], false);
}

}  // namespace
}  // namespace joule::device
