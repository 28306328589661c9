// SPDX-License-Identifier: Apache-2.0
// The JSON forms of the device area (joule/device/json_forms.hpp): keys in order, values, types.
#include "joule/device/json_forms.hpp"

#include <gtest/gtest.h>

namespace joule::device {
namespace {

std::vector<std::string> device_json_keys(const nlohmann::ordered_json& json) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) {
    keys.push_back(key);
  }
  return keys;
}

TEST(DeviceJsonForms, BackendReportConstraintsAndSimModel) {
  const auto report =
      to_json(BackendReport{.backend = "sim", .kind = "gpu", .devices = 2, .ok = true, .detail = "x"});
  EXPECT_EQ(device_json_keys(report),
            (std::vector<std::string>{"backend", "kind", "devices", "ok", "detail"}));
  EXPECT_TRUE(report["devices"].is_number_integer());
  EXPECT_EQ(report["devices"], 2);
  EXPECT_EQ(report["ok"], true);

  const auto constraints =
      to_json(PowerLimitConstraints{.min_mw = 100000, .max_mw = 250000, .default_mw = 250500});
  EXPECT_EQ(device_json_keys(constraints), (std::vector<std::string>{"min_w", "max_w", "default_w"}));
  EXPECT_TRUE(constraints["min_w"].is_number_float());
  EXPECT_EQ(constraints["default_w"], 250.5);

  const auto& model = sim::gpu_models().front();
  const auto json = sim::to_json(model);
  EXPECT_EQ(device_json_keys(json),
            (std::vector<std::string>{"key", "name", "min_power_limit_w", "max_power_limit_w",
                                      "has_energy_counter", "description"}));
  EXPECT_EQ(json["key"], model.key);
  EXPECT_EQ(json["max_power_limit_w"], model.max_power_limit_mw / 1000.0);
}

}  // namespace
}  // namespace joule::device
