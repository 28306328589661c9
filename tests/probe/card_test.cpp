// SPDX-License-Identifier: Apache-2.0
// Frontier cards as JSON: round trip, and every bad card refused with a message that says why and where.
#include "joule/probe/card.hpp"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace joule::probe {
namespace {

Card sample_card() {
  Card card;
  card.joule_version = "0.1.0";
  card.created_utc = "2026-11-29T06:30:00.000Z";
  card.device = {"NVIDIA A40", "nvml", "12040", "GPU-1234"};
  card.kernel_runner = "cuda";
  card.ranges.power_limit_min_w = 100;
  card.ranges.power_limit_max_w = 300;
  card.ranges.sm_clock_count = 80;
  card.counter = {true, 0.5, 1e-3, 500, 50, 0.01, 150.0, 150.3, -0.2, true};
  card.latencies.push_back({"power_limit", 20, 0.012, 0.019, 0.02});
  card.settle = SettleFigures{300, 100, 280, 100, 2e-3, 0.3, 0.015, 0.05};
  card.frontiers.push_back(
      {"compute", "power_limit", "W", {{300, 20, 1e-3, 0.28, 280, true}, {100, 20, 2e-3, 0.2, 100, true}}});
  card.skipped.push_back({"memory_clock", "not supported"});
  return card;
}

nlohmann::json sample_json() {
  return card_to_json(sample_card());
}

std::string parse_error(const std::string& text) {
  const auto card = parse_card(text, "card.json");
  EXPECT_FALSE(card) << text;
  if (card) {
    return "";
  }
  EXPECT_EQ(card.error().code(), ErrorCode::kParse);
  return card.error().message();
}

TEST(Card, RoundTrips) {
  const std::string text = render_card(sample_card());
  const auto card = parse_card(text, "card.json");
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_EQ(render_card(*card), text);
  EXPECT_EQ(card->device.model, "NVIDIA A40");
  EXPECT_EQ(card->settle->time_constant_s, 0.015);
  EXPECT_FALSE(card->ranges.temperature_c);
  EXPECT_EQ(card->frontiers[0].points[1].knob_value, 100);
}

TEST(Card, RefusesAnotherModelOrDriverNamingBoth) {
  test::TempDir dir;
  const std::string path = dir.write("card.json", render_card(sample_card()));
  EXPECT_TRUE(read_card(path, {"NVIDIA A40", "nvml", "12040", "GPU-other"}));
  EXPECT_TRUE(read_card(path, {"NVIDIA A40", "nvml", "", ""}));  // driver unknown here: any matches
  const auto model = read_card(path, {"Tesla V100-PCIE-32GB", "nvml", "12040", ""});
  ASSERT_FALSE(model);
  EXPECT_EQ(model.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(model.error().message(),
            path +
                " is for NVIDIA A40 (driver 12040), not Tesla V100-PCIE-32GB (driver "
                "12040): make a card for this device with 'joule probe'");
  const auto driver = read_card(path, {"NVIDIA A40", "nvml", "12020", ""});
  ASSERT_FALSE(driver);
  EXPECT_EQ(driver.error().message(), path +
                                          " is for NVIDIA A40 (driver 12040), not NVIDIA A40 (driver 12020): "
                                          "make a card for this device with 'joule probe'");
}

TEST(Card, RefusesANewerSchema) {
  auto json = sample_json();
  json["schema_version"] = kCardSchemaVersion + 1;
  json.erase("frontiers");  // a newer schema may have changed anything: the version is read first
  EXPECT_EQ(parse_error(json.dump()),
            "card.json: card schema version 2 is newer than this joule reads (1): "
            "upgrade joule to read it");
  json["schema_version"] = 0;
  EXPECT_EQ(parse_error(json.dump()), "card.json: schema_version: must be ≥ 1, got 0");
}

TEST(Card, RefusesMalformedTextWithWhere) {
  EXPECT_EQ(parse_error("{\n  \"schema_version\": 1,\n  oops\n}"),
            "card.json: line 3, column 3: not a card: is not JSON: \"{\\n  \\\"schema_version\\\": 1,\\n  "
            "oops\\n}\"");
  EXPECT_EQ(parse_error(std::string(100, '[') + std::string(100, ']')),
            "card.json: not a card: it is JSON nested deeper than 64 levels");
  EXPECT_EQ(parse_error("[]"), "card.json: value is not a valid dict");
  EXPECT_EQ(parse_error("{}"), "card.json: schema_version: field required");
}

TEST(Card, RefusesBadFieldsNamingThem) {
  const auto with = [](const std::function<void(nlohmann::json&)>& change) {
    auto json = sample_json();
    change(json);
    return parse_error(json.dump());
  };
  EXPECT_EQ(with([](auto& j) { j["frontiers"][0]["points"][1]["time_per_iteration_s"] = "fast"; }),
            "card.json: frontiers[0].points[1].time_per_iteration_s: value is not a valid float");
  EXPECT_EQ(with([](auto& j) { j["frontiers"][0]["points"][0]["energy_per_iteration_j"] = -1; }),
            "card.json: frontiers[0].points[0].energy_per_iteration_j: must be ≥ 0, got -1");
  EXPECT_EQ(with([](auto& j) { j["frontiers"][0]["points"][0]["iterations"] = 0; }),
            "card.json: frontiers[0].points[0].iterations: must be ≥ 1, got 0");
  EXPECT_EQ(with([](auto& j) { j["frontiers"] = 3; }), "card.json: frontiers: value is not a valid list");
  EXPECT_EQ(with([](auto& j) { j["device"].erase("model"); }), "card.json: device.model: field required");
  EXPECT_EQ(with([](auto& j) { j["ranges"]["sm_clock_count"] = 1.5; }),
            "card.json: ranges.sm_clock_count: value is not a whole number in [0, 4294967295]");
  EXPECT_EQ(with([](auto& j) { j["ranges"].erase("temperature_c"); }),
            "card.json: ranges.temperature_c: field required");
  EXPECT_EQ(with([](auto& j) { j["counter"]["under_load"] = "yes"; }),
            "card.json: counter.under_load: value could not be parsed to a boolean");
  EXPECT_EQ(with([](auto& j) { j["latencies"][0]["tries"] = 0; }),
            "card.json: latencies[0].tries: must be in [1, 1000000], got 0");
  EXPECT_EQ(with([](auto& j) { j["settle"]["window_s"] = nullptr; }),
            "card.json: settle.window_s: none is not an allowed value");
  EXPECT_EQ(with([](auto& j) { j.erase("settle"); }), "card.json: settle: field required");
  EXPECT_EQ(with([](auto& j) { j["skipped"][0] = "x"; }), "card.json: skipped[0]: value is not a valid dict");
  EXPECT_EQ(with([](auto& j) { j["counter"]["window_s"] = 1e308 * 10; }),
            "card.json: counter.window_s: none is not an allowed value");
}

TEST(Card, MissingFileSaysSo) {
  const auto card = read_card("/nonexistent/card.json", {"NVIDIA A40", "nvml", "", ""});
  ASSERT_FALSE(card);
  EXPECT_NE(card.error().message().find("/nonexistent/card.json"), std::string::npos)
      << card.error().message();
}

}  // namespace
}  // namespace joule::probe
