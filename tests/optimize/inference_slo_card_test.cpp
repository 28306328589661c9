// SPDX-License-Identifier: Apache-2.0
// SloClockController started from a card (docs/inference.md, "Starting from a card"): the structure only
// (where it goes, when it drops the card, what it refuses), no timing.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/optimize/inference_slo.hpp"
#include "joule/probe/card.hpp"

#include "test_util.hpp"

namespace joule::optimize {
namespace {

std::vector<uint32_t> card_test_clocks() {
  std::vector<uint32_t> result;
  for (uint32_t mhz = 1980; mhz >= 345; mhz -= 15) {
    result.push_back(mhz);
  }
  return result;
}

// A card of a GPU whose two kernels take time_shape(r) ms per iteration at clock ratio r (compute: `compute`
// true) and draw idle + dynamic·(m + (1 − m)·r³) W, as joule probe's simulated runner makes them.
probe::Card make_test_card(const std::function<double(bool compute, double r)>& time_shape,
                           bool power_limit = false) {
  probe::Card card;
  card.device = {.model = "Test GPU", .backend = "sim", .driver_version = "sim", .uuid = ""};
  card.kernel_runner = "simulated";
  for (const bool compute : {true, false}) {
    probe::FrontierCurve curve{.kernel = compute ? "compute" : "memory",
                               .knob = power_limit ? "power_limit" : "sm_clock",
                               .unit = power_limit ? "W" : "MHz",
                               .points = {}};
    for (const double mhz : {1980.0, 1740.0, 1515.0, 1275.0, 1050.0, 810.0, 585.0, 345.0}) {
      const double r = mhz / 1980;
      const double m = compute ? 0.1 : 0.5;
      const double power_w = 100 + (compute ? 300 : 165) * (m + (1 - m) * r * r * r);
      const double time_s = 1e-3 * time_shape(compute, r);
      curve.points.push_back({.knob_value = mhz,
                              .iterations = 20,
                              .time_per_iteration_s = time_s,
                              .energy_per_iteration_j = time_s * power_w,
                              .average_power_w = power_w,
                              .pareto = true});
    }
    card.frontiers.push_back(curve);
  }
  return card;
}

// The probe's kernels: compute time follows the clock, memory time mostly does not.
probe::KnobPrior probe_like_prior() {
  return probe::KnobPrior::from_card(make_test_card([](bool compute, double r) {
                                       return compute ? 0.95 / r + 0.05 : 0.15 / r + 0.85;
                                     }),
                                     probe::CardKnob::kSmClock, "test card")
      .value();
}

// A replica whose iterations take time_s(clock) and draw 100 + 300·r³ W, with requests well inside the
// SLO. @return the clock after each of `seconds` of serving, sampled every iteration.
struct CardTestReplica {
  SloClockController& controller;
  std::function<double(double clock_mhz)> time_s;
  double now_s = 0;

  void run(double seconds) {
    for (const double end = now_s + seconds; now_s < end;) {
      const double clock = controller.clock_mhz();
      const double r = clock / 1980;
      const double busy_s = time_s(clock);
      controller.on_iteration({.start_s = now_s,
                               .end_s = now_s + busy_s,
                               .energy_j = (100 + 300 * r * r * r) * busy_s,
                               .knob = Knob::sm_clock_mhz(static_cast<uint32_t>(clock)),
                               .decode_requests = 20,
                               .prefill_tokens = 50});
      now_s += busy_s;
      controller.on_request_done({.finish_s = now_s, .ttft_s = 0.05, .tpot_s = busy_s, .prompt_tokens = 100});
    }
  }
};

// A memory-bound replica (20 ms whatever the clock): without a card the controller explores down a level at
// a time; with one it goes at its first decision to a level far down, and the card stays (the level it went
// to is not slower than the card said).
TEST(SloClockControllerCard, GoesToTheCardsLevelInOneStepWhenSafe) {
  SloClockController without({1.0, 0.1}, card_test_clocks());
  EXPECT_EQ(without.card_use().state, CardUse::State::kNone);
  EXPECT_EQ(without.card_use().why, "");
  CardTestReplica plain{without, [](double) { return 0.02; }};
  plain.run(1.1);  // the first decision at 1 s
  EXPECT_GT(without.clock_mhz(), 1800u);

  SloClockController with({1.0, 0.1}, card_test_clocks());
  with.start_from_card(probe_like_prior());
  EXPECT_EQ(with.card_use().state, CardUse::State::kActive);
  EXPECT_EQ(with.card_use().why,
            "starting from the card: clocks not yet measured are predicted by its sm_clock curves, fitted to "
            "the measured ones");
  CardTestReplica carded{with, [](double) { return 0.02; }};
  carded.run(1.1);
  const uint32_t first = with.clock_mhz();
  EXPECT_LT(first, 1000u);
  // The level it went to had never been measured: only the top had.
  int measured = 0;
  for (const KnobModel& model : with.models()) {
    measured += model.measured ? 1 : 0;
  }
  EXPECT_LE(measured, 2);
  carded.run(10);
  EXPECT_EQ(with.card_use().state, CardUse::State::kActive) << with.card_use().why;
  EXPECT_LE(with.clock_mhz(), first);
}

// A compute-bound replica (time ∝ 1/clock) and a card whose kernels both claim a flat time: the card sends
// the controller to the bottom, the iterations there are far slower than it predicted, and the card is
// dropped: the levels not measured are predicted pessimistically (time ∝ 1/clock) again.
TEST(SloClockControllerCard, DropsAWrongCardAndFallsBackToThePessimisticRule) {
  SloClockController controller({1.0, 0.05}, card_test_clocks());
  controller.start_from_card(probe::KnobPrior::from_card(make_test_card([](bool, double) { return 1.0; }),
                                                         probe::CardKnob::kSmClock, "wrong card")
                                 .value());
  CardTestReplica replica{controller, [](double clock) { return 0.01 * 1980 / clock; }};
  replica.run(1.1);
  EXPECT_LT(controller.clock_mhz(), 700u);  // where the card said iterations are as fast as at the top
  replica.run(3);
  const CardUse use = controller.card_use();
  ASSERT_EQ(use.state, CardUse::State::kDropped) << use.why;
  EXPECT_EQ(use.why.rfind("card dropped: at ", 0), 0u) << use.why;
  EXPECT_NE(use.why.find("the time and drew"), std::string::npos) << use.why;
  EXPECT_NE(use.why.find("(tolerance 10%"), std::string::npos) << use.why;
  EXPECT_NE(use.why.find("levels not measured are predicted pessimistically again"), std::string::npos);
  for (const KnobModel& model : controller.models()) {
    if (!model.measured) {
      EXPECT_GE(model.predicted_time_s, 0.01 * 1980 / model.knob.value * 0.999) << model.knob.value;
    }
  }
}

TEST(SloClockControllerCard, RefusesAPriorOfTheOtherKnob) {
  const probe::Card card = make_test_card([](bool, double) { return 1.0; }, /*power_limit=*/true);
  SloClockController controller({1.0, 0.05}, card_test_clocks());
  JOULE_EXPECT_THROW_MESSAGE(
      controller.start_from_card(
          probe::KnobPrior::from_card(card, probe::CardKnob::kPowerLimit, "card.json").value()),
      ErrorCode::kInvalidArgument,
      "the SLO controller turns the clock and needs a card's sm_clock prior, got its power_limit prior");
}

// read_card_prior surfaces read_card's refusals (another model, a newer schema) and the prior's (no curves
// of the knob).
TEST(SloClockControllerCard, ReadCardPriorRefusesAnotherDeviceANewerSchemaAndAMissingKnob) {
  test::TempDir dir;
  const std::string path = dir.path() + "/card.json";
  ASSERT_TRUE(write_file_atomic(path, probe::render_card(make_test_card([](bool, double) { return 1.0; }))));
  const probe::DeviceIdentity same{
      .model = "Test GPU", .backend = "sim", .driver_version = "sim", .uuid = ""};
  EXPECT_TRUE(read_card_prior(path, same, KnobKind::kSmClockMhz));
  JOULE_EXPECT_ERROR(
      read_card_prior(path, {.model = "Other GPU", .backend = "sim", .driver_version = "sim", .uuid = ""},
                      KnobKind::kSmClockMhz),
      ErrorCode::kInvalidArgument,
      path +
          " is for Test GPU (driver sim), not Other GPU (driver sim): make a card for this "
          "device with 'joule probe'");
  JOULE_EXPECT_ERROR(read_card_prior(path, same, KnobKind::kPowerLimitW), ErrorCode::kInvalidArgument,
                     fmt::format("{}: the card has no compute kernel frontier under power_limit", path));
  probe::Card newer = make_test_card([](bool, double) { return 1.0; });
  newer.schema_version = probe::kCardSchemaVersion + 1;
  ASSERT_TRUE(write_file_atomic(path, probe::render_card(newer)));
  JOULE_EXPECT_ERROR(
      read_card_prior(path, same, KnobKind::kSmClockMhz), ErrorCode::kParse,
      fmt::format("{}: card schema version {} is newer than this joule reads ({}): upgrade joule "
                  "to read it",
                  path, probe::kCardSchemaVersion + 1, probe::kCardSchemaVersion));
}

}  // namespace
}  // namespace joule::optimize
