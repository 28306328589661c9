// SPDX-License-Identifier: Apache-2.0
// A card as a prior (joule/probe/prior.hpp): a workload made as a known mix of the card's kernels is fitted
// back and predicted at every knob value; a card without the knob's curves and bad samples are refused with
// a message.
#include "joule/probe/prior.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace joule::probe {
namespace {

// Two kernels under a power limit: the compute kernel slows as the limit falls, the memory kernel only
// below 150 W.
Card two_kernel_card() {
  Card card;
  card.device = {"Sim GPU", "sim", "sim", ""};
  card.frontiers.push_back({"compute",
                            "power_limit",
                            "W",
                            {{300, 10, 1.0e-3, 0.28, 280, true},
                             {200, 10, 1.3e-3, 0.26, 200, true},
                             {100, 10, 2.2e-3, 0.22, 100, true}}});
  card.frontiers.push_back({"memory",
                            "power_limit",
                            "W",
                            {{300, 10, 1.0e-3, 0.15, 150, true},
                             {200, 10, 1.0e-3, 0.15, 150, true},
                             {100, 10, 1.4e-3, 0.14, 100, true}}});
  return card;
}

// A workload that is `share` compute kernel: 10 ms and 200 W at 300 W.
KnobSample mixed_workload(double share, double limit_w) {
  const double compute_time =
      limit_w >= 200 ? 1.0 + 0.3 * (300 - limit_w) / 100 : 1.3 + 0.9 * (200 - limit_w) / 100;
  const double memory_time = limit_w >= 200 ? 1.0 : 1.0 + 0.4 * (200 - limit_w) / 100;
  const double compute_power = limit_w >= 200 ? (280 - 80 * (300 - limit_w) / 100) / 280 : limit_w / 280;
  const double memory_power = limit_w >= 200 ? 1.0 : (150 - 50 * (200 - limit_w) / 100) / 150;
  const double time_s = 10e-3 * (share * compute_time + (1 - share) * memory_time);
  const double power_w = 200 * (share * compute_power + (1 - share) * memory_power);
  return {limit_w, time_s, time_s * power_w};
}

TEST(KnobPrior, FitsAMixOfTheKernelsFromTwoSamplesAndPredictsEveryKnobValue) {
  const auto prior = KnobPrior::from_card(two_kernel_card(), CardKnob::kPowerLimit, "card.json");
  ASSERT_TRUE(prior) << prior.error().message();
  EXPECT_EQ(prior->knob_values(), (std::vector<double>{300, 200, 100}));
  const std::vector<KnobSample> samples = {mixed_workload(0.3, 300), mixed_workload(0.3, 100)};
  const auto fit = prior->fit(samples);
  ASSERT_TRUE(fit) << fit.error().message();
  EXPECT_NEAR(fit->compute_share, 0.3, 1e-3);
  EXPECT_DOUBLE_EQ(fit->anchor.knob_value, 300);
  EXPECT_LT(fit->time_residual, 1e-3);
  for (const double limit_w : {300.0, 250.0, 200.0, 150.0, 100.0}) {
    const KnobSample predicted = prior->predict(*fit, limit_w);
    const KnobSample actual = mixed_workload(0.3, limit_w);
    EXPECT_NEAR(predicted.time_s / actual.time_s, 1, 2e-3) << limit_w;
    EXPECT_NEAR(predicted.energy_j / actual.energy_j, 1, 5e-3) << limit_w;
  }
}

TEST(KnobPrior, PlacesOneSampleByItsPowerBetweenTheKernels) {
  const auto prior = KnobPrior::from_card(two_kernel_card(), CardKnob::kPowerLimit, "card.json");
  ASSERT_TRUE(prior);
  // 280 W at 300 W is the compute kernel's power, 150 W the memory kernel's, 215 W half-way.
  for (const auto& [power_w, share] :
       std::vector<std::pair<double, double>>{{280, 1}, {150, 0}, {215, 0.5}, {400, 1}}) {
    const std::vector<KnobSample> samples = {{300, 0.01, 0.01 * power_w}};
    const auto fit = prior->fit(samples);
    ASSERT_TRUE(fit);
    EXPECT_NEAR(fit->compute_share, share, 1e-9) << power_w;
    EXPECT_EQ(fit->time_residual, 0);
  }
  // The compute kernel itself at 100 W: 2.2× its time at 300 W.
  const std::vector<KnobSample> compute = {{300, 0.01, 0.01 * 280}};
  const KnobSample predicted = prior->predict(*prior->fit(compute), 100);
  EXPECT_NEAR(predicted.time_s, 0.022, 1e-9);
  EXPECT_NEAR(predicted.energy_j, 0.022 * 100, 1e-9);
}

TEST(KnobPrior, ClampsKnobValuesOutsideTheCard) {
  const auto prior = KnobPrior::from_card(two_kernel_card(), CardKnob::kPowerLimit, "card.json");
  ASSERT_TRUE(prior);
  const std::vector<KnobSample> samples = {{350, 0.01, 2.8}};
  const auto fit = prior->fit(samples);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(prior->predict(*fit, 50).time_s, 0.022, 1e-9);
  EXPECT_EQ(prior->predict(*fit, 50).knob_value, 50);
}

TEST(KnobPrior, KernelFiguresAreRelativeToTheTopOfEachCurve) {
  Card card = two_kernel_card();
  const auto prior = KnobPrior::from_card(card, CardKnob::kPowerLimit, "card.json");
  ASSERT_TRUE(prior);
  const auto [time, power] = prior->kernel_relative(false, 250);
  EXPECT_DOUBLE_EQ(time, 1.0);
  EXPECT_DOUBLE_EQ(power, 1.0);
  EXPECT_NEAR(prior->kernel_relative(true, 150).first, 1.75, 1e-12);
}

std::string from_card_error(const Card& card, CardKnob knob) {
  const auto prior = KnobPrior::from_card(card, knob, "card.json");
  EXPECT_FALSE(prior);
  return prior ? std::string() : prior.error().message();
}

TEST(KnobPrior, RefusesACardWithoutTheKnobsCurvesSayingWhy) {
  Card read_only = two_kernel_card();
  read_only.frontiers.clear();
  read_only.read_only = true;
  EXPECT_EQ(from_card_error(read_only, CardKnob::kPowerLimit),
            "card.json: the card has no compute kernel frontier under power_limit (a --read-only card has no "
            "frontiers)");
  Card skipped = two_kernel_card();
  skipped.skipped.push_back({"sm_clock", "the GPU cannot lock its SM clock"});
  EXPECT_EQ(from_card_error(skipped, CardKnob::kSmClock),
            "card.json: the card has no compute kernel frontier under sm_clock (skipped: the GPU cannot lock "
            "its SM "
            "clock)");
  Card one_point = two_kernel_card();
  one_point.frontiers[1].points.resize(1);
  EXPECT_EQ(from_card_error(one_point, CardKnob::kPowerLimit),
            "card.json: the memory kernel's power_limit frontier has 1 point(s); a prior needs 2");
  Card repeated = two_kernel_card();
  repeated.frontiers[0].points[1].knob_value = 300;
  repeated.frontiers[0].points.resize(2);
  EXPECT_EQ(from_card_error(repeated, CardKnob::kPowerLimit),
            "card.json: the compute kernel's power_limit frontier has only one distinct knob value");
  Card zero_power = two_kernel_card();
  zero_power.frontiers[0].points[2].average_power_w = 0;
  EXPECT_EQ(from_card_error(zero_power, CardKnob::kPowerLimit),
            "card.json: the compute kernel's power_limit frontier, point 2: knob value 100, time 0.0022 s "
            "and power "
            "0 W must be positive");
}

TEST(KnobPrior, RefusesBadSamplesSayingWhich) {
  const auto prior = KnobPrior::from_card(two_kernel_card(), CardKnob::kPowerLimit, "card.json");
  ASSERT_TRUE(prior);
  EXPECT_EQ(prior->fit({}).error().message(),
            "a power_limit prior needs at least one sample of the workload");
  const std::vector<KnobSample> negative = {{300, 0.01, 2.8}, {200, -0.01, 2}};
  EXPECT_EQ(prior->fit(negative).error().message(),
            "a sample at 200 W has time -0.01 s and energy 2 J: both must be positive and finite");
  const std::vector<KnobSample> not_finite = {{300, 0.01, NAN}};
  EXPECT_EQ(prior->fit(not_finite).error().message(),
            "a sample at 300 W has time 0.01 s and energy nan J: both must be positive and finite");
}

}  // namespace
}  // namespace joule::probe
