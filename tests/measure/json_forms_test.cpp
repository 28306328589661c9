// SPDX-License-Identifier: Apache-2.0
// The JSON forms of the request-energy ledger's records (joule/measure/json_forms.hpp).
#include "joule/measure/json_forms.hpp"

#include <gtest/gtest.h>

namespace joule::measure {
namespace {

std::vector<std::string> measure_json_keys(const nlohmann::ordered_json& json) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) {
    keys.push_back(key);
  }
  return keys;
}

TEST(MeasureJsonForms, RequestEnergy) {
  RequestEnergy request{.request_id = "r1",
                        .arrival_s = 1,
                        .first_token_s = 2,
                        .finish_s = 4,
                        .prompt_tokens = 8,
                        .output_tokens = 3,
                        .energy_j = 6,
                        .prefill_energy_j = 2,
                        .decode_energy_j = 4};
  const auto json = to_json(request);
  EXPECT_EQ(measure_json_keys(json),
            (std::vector<std::string>{"request_id", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
                                      "output_tokens", "energy_j", "prefill_energy_j", "decode_energy_j",
                                      "energy_per_output_token_j", "ttft_s", "tpot_s"}));
  EXPECT_TRUE(json["prompt_tokens"].is_number_integer());
  EXPECT_EQ(json["first_token_s"], 2.0);
  EXPECT_EQ(json["energy_per_output_token_j"], 2.0);
  EXPECT_EQ(json["ttft_s"], 1.0);
  EXPECT_EQ(json["tpot_s"], 1.0);

  request.first_token_s = -1;
  request.output_tokens = 0;
  const auto waiting = to_json(request);
  EXPECT_TRUE(waiting["first_token_s"].is_null());
  EXPECT_TRUE(waiting["ttft_s"].is_null());
  EXPECT_TRUE(waiting["tpot_s"].is_null());
}

TEST(MeasureJsonForms, LedgerTotals) {
  const auto json = to_json(LedgerTotals{.energy_j = 5,
                                         .attributed_energy_j = 4,
                                         .idle_energy_j = 1,
                                         .iterations = 2,
                                         .prefill_tokens = 7,
                                         .decode_tokens = 9});
  EXPECT_EQ(measure_json_keys(json),
            (std::vector<std::string>{"energy_j", "attributed_energy_j", "idle_energy_j", "iterations",
                                      "prefill_tokens", "decode_tokens"}));
  EXPECT_TRUE(json["iterations"].is_number_integer());
  EXPECT_TRUE(json["energy_j"].is_number_float());
  EXPECT_EQ(json["decode_tokens"], 9);
}

}  // namespace
}  // namespace joule::measure
