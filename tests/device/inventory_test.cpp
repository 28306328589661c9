// SPDX-License-Identifier: Apache-2.0
#include "joule/device/inventory.hpp"

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

#include "test_util.hpp"

namespace joule::device {
namespace {

DeviceSet simulated_set() {
  DeviceSet devices;
  devices.clock = std::make_shared<VirtualClock>();
  for (auto& gpu :
       value_or_throw(sim::open_sim_gpus(value_or_throw(sim::parse_spec("2xv100")), devices.clock))) {
    devices.gpus.push_back(std::move(gpu));
  }
  return devices;
}

TEST(Inventory, ReadsEveryGpuOnce) {
  const DeviceSet devices = simulated_set();
  const auto gpus = gpu_inventory(devices);
  ASSERT_EQ(gpus.size(), 2U);
  EXPECT_EQ(gpus[1].gpu, devices.gpus[1].get());
  ASSERT_TRUE(gpus[0].constraints.has_value());
  ASSERT_TRUE(gpus[0].power_limit_mw.has_value());
  EXPECT_EQ(*gpus[0].power_limit_mw, gpus[0].constraints->default_mw);
}

TEST(Inventory, TextAndJsonNameLimitsAndTelemetry) {
  const DeviceSet devices = simulated_set();
  const auto gpus = gpu_inventory(devices);
  const std::string text = inventory_text(devices, gpus);
  EXPECT_EQ(text.rfind("GPUs: 2\n", 0), 0U) << text;
  EXPECT_NE(text.find("      power limit    "), std::string::npos) << text;
  EXPECT_NE(text.find("      telemetry      "), std::string::npos) << text;
  EXPECT_NE(text.find("CPUs: 0\n"), std::string::npos) << text;
  const nlohmann::json json = gpu_inventory_json(gpus);
  ASSERT_EQ(json.size(), 2U);
  EXPECT_DOUBLE_EQ(json[0]["max_power_limit_w"].get<double>(), gpus[0].constraints->max_mw / 1e3);
  EXPECT_TRUE(json[0]["supports"].is_object());
  EXPECT_EQ(json[0]["telemetry"].size(), telemetry_fields().size());
  EXPECT_TRUE(cpu_inventory_json(devices).empty());
}

TEST(Inventory, TelemetryValuesInTheirUnits) {
  GpuTelemetry reading;
  reading.memory_power_mw = 12'500;
  EXPECT_DOUBLE_EQ(telemetry_value_json(reading, TelemetryField::kMemoryPower).get<double>(), 12.5);
  EXPECT_TRUE(telemetry_value_json(reading, TelemetryField::kTemperature).is_null());
}

}  // namespace
}  // namespace joule::device
