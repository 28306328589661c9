// SPDX-License-Identifier: Apache-2.0
// The JSON forms of the optimizers' records (joule/optimize/json_forms.hpp).
#include "joule/optimize/json_forms.hpp"

#include <gtest/gtest.h>

namespace joule::optimize {
namespace {

std::vector<std::string> optimize_json_keys(const nlohmann::ordered_json& json) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) {
    keys.push_back(key);
  }
  return keys;
}

TEST(OptimizeJsonForms, MeasurementAndDecision) {
  const auto measured =
      to_json(PowerLimitMeasurement{.power_limit_mw = 175000, .energy_j = 10, .time_s = 4, .steps = 2});
  EXPECT_EQ(optimize_json_keys(measured),
            (std::vector<std::string>{"power_limit_w", "energy_j", "time_s", "steps", "energy_per_step_j",
                                      "time_per_step_s"}));
  EXPECT_EQ(measured["power_limit_w"], 175.0);
  EXPECT_TRUE(measured["steps"].is_number_integer());
  EXPECT_EQ(measured["energy_per_step_j"], 5.0);
  EXPECT_EQ(measured["time_per_step_s"], 2.0);

  const auto decision = to_json(ChaseDecision{.time_unix_s = 60,
                                              .previous_g_per_kwh = 1,
                                              .forecast_g_per_kwh = 2,
                                              .effective_eta = 0.5,
                                              .power_limit_mw = 200000});
  EXPECT_EQ(optimize_json_keys(decision),
            (std::vector<std::string>{"time_unix_s", "previous_g_per_kwh", "forecast_g_per_kwh",
                                      "effective_eta", "power_limit_w"}));
  EXPECT_TRUE(decision["time_unix_s"].is_number_integer());
  EXPECT_EQ(decision["power_limit_w"], 200.0);
}

TEST(OptimizeJsonForms, SloAndKnobModel) {
  EXPECT_STREQ(knob_json_key(KnobKind::kSmClockMhz), "clock_mhz");
  EXPECT_STREQ(knob_json_key(KnobKind::kPowerLimitW), "power_limit_w");
  const auto slo = to_json(ServingSlo{.ttft_s = 0.5, .tpot_s = 0.05, .attainment = 0.9});
  EXPECT_EQ(optimize_json_keys(slo), (std::vector<std::string>{"ttft_s", "tpot_s", "attainment"}));
  const auto model = to_json(KnobModel{.knob = Knob::power_limit_w(300),
                                       .samples = 3,
                                       .predicted_time_s = 0.1,
                                       .predicted_power_w = 250,
                                       .measured = true});
  EXPECT_EQ(optimize_json_keys(model),
            (std::vector<std::string>{"power_limit_w", "samples", "predicted_time_s", "predicted_power_w",
                                      "measured"}));
  EXPECT_TRUE(model["power_limit_w"].is_number_integer());
  EXPECT_EQ(model["power_limit_w"], 300);
  EXPECT_EQ(to_json(KnobModel{.knob = Knob::sm_clock_mhz(1410),
                              .samples = 0,
                              .predicted_time_s = 0,
                              .predicted_power_w = 0,
                              .measured = false})
                .begin()
                .key(),
            "clock_mhz");
}

}  // namespace
}  // namespace joule::optimize
