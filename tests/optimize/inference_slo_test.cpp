// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/inference_slo.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::optimize {
namespace {

std::vector<uint32_t> clocks() {
  std::vector<uint32_t> result;
  for (uint32_t mhz = 1980; mhz >= 345; mhz -= 15)
    result.push_back(mhz);
  return result;
}

TEST(ServingSlo, Validates) {
  EXPECT_TRUE(validate(ServingSlo{0.5, 0.05}));
  JOULE_EXPECT_ERROR(validate(ServingSlo{-1, 0.05}), ErrorCode::kInvalidArgument,
                     "the TTFT SLO must be a positive number of seconds, got -1");
  JOULE_EXPECT_ERROR(validate(ServingSlo{0.5, 0}), ErrorCode::kInvalidArgument,
                     "the TPOT SLO must be a positive number of seconds, got 0");
  JOULE_EXPECT_ERROR(validate(ServingSlo{0.5, 0.05, 1.5}), ErrorCode::kInvalidArgument,
                     "the SLO attainment target must be in (0, 1], got 1.5");
  JOULE_EXPECT_THROW_MESSAGE(SloClockController({0.5, 0.05}, {}), ErrorCode::kInvalidArgument,
                             "the SLO clock controller needs at least one clock");
  JOULE_EXPECT_THROW_MESSAGE(
      SloClockController({0.5, 0.05}, clocks(), {.interval_s = 0}), ErrorCode::kInvalidArgument,
      "SLO controller options: need interval_s > 0, window_s >= interval_s, 0 < min_margin <= "
      "margin <= 1, min_samples >= 1, max_step_down >= 1, candidate_levels >= 2");
}

TEST(ServingSamples, Validate) {
  EXPECT_TRUE(validate(IterationSample{.start_s = 1, .end_s = 1.5, .energy_j = 3}));
  JOULE_EXPECT_ERROR(validate(IterationSample{.start_s = 1, .end_s = 0.5}), ErrorCode::kInvalidArgument,
                     "end_s must be a finite number ≥ 1, got 0.5");
  JOULE_EXPECT_ERROR(validate(IterationSample{.end_s = 1, .energy_j = -1}), ErrorCode::kInvalidArgument,
                     "energy_j must be a finite number ≥ 0, got -1");
  JOULE_EXPECT_ERROR(validate(IterationSample{.end_s = 1, .waiting_requests = -2}),
                     ErrorCode::kInvalidArgument, "waiting_requests must be a finite number ≥ 0, got -2");
  EXPECT_TRUE(validate(RequestSample{.finish_s = 2, .ttft_s = 0.1, .tpot_s = std::nullopt}));
  JOULE_EXPECT_ERROR(validate(RequestSample{.finish_s = 2, .ttft_s = 0.1, .tpot_s = -0.5}),
                     ErrorCode::kInvalidArgument, "tpot_s must be a finite number ≥ 0, got -0.5");
}

TEST(UtilizationGovernor, FollowsTheBusyShare) {
  UtilizationGovernor governor(clocks(), {.interval_s = 1, .target_utilization = 0.8});
  EXPECT_EQ(governor.clock_mhz(), 1980u);
  // 40% busy: the decision comes with the first event a second or more after the start, the iteration
  // ending at 1.04 s: 0.44 s busy of 1.04 s, so 1980 × 0.423 / 0.8 = 1047 MHz, rounded up to 1050.
  double time_s = 0;
  for (int i = 0; i < 11; ++i) {
    governor.on_iteration({.start_s = time_s, .end_s = time_s + 0.04, .knob = governor.knob()});
    governor.on_idle(time_s + 0.04, time_s + 0.1, 1.0);
    time_s += 0.1;
  }
  EXPECT_EQ(governor.clock_mhz(), 1050u);
  // Then fully busy: 1.0 s busy of 1.06 s, 1050 × 0.943 / 0.8 = 1238, rounded up to 1245.
  for (int i = 0; i < 11; ++i) {
    governor.on_iteration({.start_s = time_s, .end_s = time_s + 0.1, .knob = governor.knob()});
    time_s += 0.1;
  }
  EXPECT_EQ(governor.clock_mhz(), 1245u);
}

// A memory-bound replica: iterations take 20 ms whatever the clock, power falls with it. With requests well
// inside the SLO the controller walks down, measuring each level it visits.
// The margin is a function of the error budget's use (not its integral, which swung between its bounds):
// the ends and the target are where the header says, and it never rises with the use nor jumps.
TEST(PaceMarginAt, IsAContinuousNonIncreasingFunctionOfTheBudgetUse) {
  EXPECT_DOUBLE_EQ(pace_margin_at(0, 0.5, 2), 2);
  EXPECT_DOUBLE_EQ(pace_margin_at(-1, 0.5, 2), 2);
  EXPECT_NEAR(pace_margin_at(kPaceTargetBudgetUse, 0.5, 2), 1, 1e-12);
  EXPECT_NEAR(pace_margin_at(1, 0.5, 2), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(pace_margin_at(7, 0.5, 2), 0.5);
  // Halfway to the target in use is halfway in log-margin: √2.
  EXPECT_NEAR(pace_margin_at(kPaceTargetBudgetUse / 2, 0.5, 2), std::sqrt(2.0), 1e-12);
  double previous = pace_margin_at(0, 0.5, 2);
  for (double use = 0.001; use <= 1.5; use += 0.001) {
    const double margin = pace_margin_at(use, 0.5, 2);
    EXPECT_LE(margin, previous) << "use " << use;
    EXPECT_LT(previous - margin, 0.01) << "a jump at use " << use;
    previous = margin;
  }
  // Bounds that exclude 1 clamp it.
  EXPECT_DOUBLE_EQ(pace_margin_at(kPaceTargetBudgetUse, 0.5, 0.9), 0.9);
}

TEST(SloClockController, WalksDownWhileTheSloHoldsAndJumpsUpOnAQueue) {
  SloClockController controller({1.0, 0.1}, clocks());
  EXPECT_EQ(controller.clock_mhz(), 1980u);
  double time_s = 0;
  const auto run = [&](double seconds, double oldest_waiting_s) {
    for (const double end = time_s + seconds; time_s < end;) {
      const double clock = controller.clock_mhz();
      const double power_w = 100 + 300 * (clock / 1980) * (clock / 1980) * (clock / 1980);
      controller.on_iteration({.start_s = time_s,
                               .end_s = time_s + 0.02,
                               .energy_j = power_w * 0.02,
                               .knob = Knob::sm_clock_mhz(static_cast<uint32_t>(clock)),
                               .decode_requests = 20,
                               .prefill_tokens = 50,
                               .oldest_waiting_s = oldest_waiting_s});
      time_s += 0.02;
      controller.on_request_done({.finish_s = time_s, .ttft_s = 0.05, .tpot_s = 0.02, .prompt_tokens = 100});
    }
  };
  run(30, 0);
  EXPECT_LT(controller.clock_mhz(), 1000u);
  const auto models = controller.models();
  EXPECT_EQ(models.front().knob, Knob::sm_clock_mhz(1980));
  EXPECT_TRUE(models.front().measured);
  EXPECT_NEAR(models.front().predicted_time_s, 0.02, 1e-6);
  EXPECT_NEAR(models.front().predicted_power_w, 400, 1e-3);
  EXPECT_FALSE(controller.slo_unattainable());
  EXPECT_DOUBLE_EQ(controller.window_attainment(), 1.0);
  // A request waiting half its TTFT budget: straight to the top.
  run(0.02, 0.6);
  EXPECT_EQ(controller.clock_mhz(), 1980u);
}

// A compute-bound replica (iteration time ∝ 1/clock) whose requests take seconds: their TPOT is known only
// when they end. When its iterations lengthen (a burst of long prompts), the controller goes up on the
// iterations' time now, before any request that saw them has finished.
TEST(SloClockController, GoesUpWhenIterationsLengthenBeforeRequestsShowIt) {
  SloClockController controller({1.0, 0.05}, clocks());
  double time_s = 0;
  double base_s = 0.01;  // at the top clock
  double finished_tpot_s = 0.01;
  const auto run = [&](double seconds, bool finish_requests) {
    for (const double end = time_s + seconds; time_s < end;) {
      const double clock = controller.clock_mhz();
      const double iteration_s = base_s * 1980 / clock;
      controller.on_iteration({.start_s = time_s,
                               .end_s = time_s + iteration_s,
                               .energy_j = (50 + 250 * (clock / 1980) * (clock / 1980)) * iteration_s,
                               .knob = Knob::sm_clock_mhz(static_cast<uint32_t>(clock)),
                               .decode_requests = 8});
      time_s += iteration_s;
      if (finish_requests) {
        controller.on_request_done({.finish_s = time_s, .ttft_s = 0.05, .tpot_s = finished_tpot_s});
        finished_tpot_s = iteration_s;  // the next to finish ran at this pace
      }
    }
  };
  run(60, true);
  const uint32_t calm = controller.clock_mhz();
  EXPECT_LT(calm, 1500u) << "a light load at 10 ms per iteration should let the clock down";
  // Iterations now take 2.5× as long at the same clock; the requests finishing still show the old pace.
  base_s = 0.025;
  run(3, false);
  EXPECT_GT(controller.clock_mhz(), calm) << "iterations over the TPOT SLO's margin must bring the clock up";
}

// After violations send it to the top, it stays there until requests finished since show the latencies there:
// without them it would judge every lower clock by the predicted iteration time alone.
TEST(SloClockController, AfterAnEmergencyWaitsForRequestsBeforeGoingDown) {
  SloClockController controller({1.0, 0.1}, clocks());
  double time_s = 0;
  const auto run = [&](double seconds, double oldest_waiting_s, bool finish_requests) {
    for (const double end = time_s + seconds; time_s < end;) {
      const double clock = controller.clock_mhz();
      controller.on_iteration({.start_s = time_s,
                               .end_s = time_s + 0.02,
                               .energy_j = (100 + 300 * (clock / 1980) * (clock / 1980)) * 0.02,
                               .knob = Knob::sm_clock_mhz(static_cast<uint32_t>(clock)),
                               .decode_requests = 20,
                               .oldest_waiting_s = oldest_waiting_s});
      time_s += 0.02;
      if (finish_requests) {
        controller.on_request_done({.finish_s = time_s, .ttft_s = 0.05, .tpot_s = 0.02});
      }
    }
  };
  run(30, 0, true);
  ASSERT_LT(controller.clock_mhz(), 1500u);
  run(0.02, 0.6, false);  // a request waiting half its TTFT budget: the top
  ASSERT_EQ(controller.clock_mhz(), 1980u);
  run(5, 0, false);
  EXPECT_EQ(controller.clock_mhz(), 1980u)
      << "no request has finished since: nothing to judge a lower clock by";
  run(5, 0, true);
  EXPECT_LT(controller.clock_mhz(), 1980u);
}

TEST(SloClockController, SaysWhenEvenTheTopClockMisses) {
  SloClockController controller({0.1, 0.01}, clocks(), {.window_s = 5});
  double time_s = 0;
  for (int i = 0; i < 1000; ++i) {
    controller.on_iteration({.start_s = time_s,
                             .end_s = time_s + 0.02,
                             .energy_j = 8,
                             .knob = Knob::sm_clock_mhz(1980),
                             .decode_requests = 20});
    time_s += 0.02;
    controller.on_request_done({.finish_s = time_s, .ttft_s = 0.5, .tpot_s = 0.02});
  }
  EXPECT_TRUE(controller.slo_unattainable());
  EXPECT_EQ(controller.clock_mhz(), 1980u);
  EXPECT_LT(controller.window_attainment(), 0.01);
}

// The same controller over power limits: its knob says so, and it never answers in MHz.
TEST(SloClockController, TurnsAPowerLimitAsAKnobOfItsKind) {
  EXPECT_EQ(knob_unit(KnobKind::kSmClockMhz), "MHz");
  EXPECT_EQ(knob_unit(KnobKind::kPowerLimitW), "W");
  EXPECT_EQ(knob_field(KnobKind::kSmClockMhz), "sm_clock_mhz");
  EXPECT_EQ(knob_field(KnobKind::kPowerLimitW), "power_limit_w");
  SloClockController controller({1.0, 0.1}, KnobKind::kPowerLimitW, {200, 700, 450});
  EXPECT_EQ(controller.knob(), Knob::power_limit_w(700));
  EXPECT_EQ(controller.power_limit_w(), 700u);
  JOULE_EXPECT_THROW_MESSAGE(controller.clock_mhz(), ErrorCode::kState,
                             "joule turns the power limit, not the SM clock: it has no clock_mhz");
  const auto models = controller.models();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models.back().knob, Knob::power_limit_w(200));
  // A sample at a clock is of another kind: not learned from.
  for (int i = 0; i < 20; ++i) {
    controller.on_iteration({.start_s = i * 0.02,
                             .end_s = (i + 1) * 0.02,
                             .energy_j = 8,
                             .knob = Knob::sm_clock_mhz(700),
                             .decode_requests = 20});
  }
  EXPECT_EQ(controller.models().front().samples, 0);
  controller.on_iteration({.start_s = 1, .end_s = 1.02, .energy_j = 8, .knob = Knob::power_limit_w(700)});
  EXPECT_EQ(controller.models().front().samples, 1);
  JOULE_EXPECT_THROW_MESSAGE(SloClockController({0.5, 0.05}, KnobKind::kPowerLimitW, {}),
                             ErrorCode::kInvalidArgument,
                             "the SLO clock controller needs at least one power limit");

  UtilizationGovernor governor(KnobKind::kPowerLimitW, {300, 700});
  EXPECT_EQ(governor.knob(), Knob::power_limit_w(700));
  FixedKnobPolicy fixed("fixed", Knob::sm_clock_mhz(1410));
  EXPECT_EQ(fixed.clock_mhz(), 1410u);
  JOULE_EXPECT_THROW_MESSAGE(fixed.power_limit_w(), ErrorCode::kState,
                             "fixed turns the SM clock, not the power limit: it has no power_limit_w");
}

// A memory-bound replica under a power limit (700 W down to 200 W in 5 W steps): it draws 380 W, so every
// limit above that changes nothing; below it, the clock (and the iteration) slows until it draws the limit.
// On a light load the controller walks down through the limits that cost nothing and below them while the SLO
// holds; a burst of pending prompts sends it back up at once.
TEST(SloClockController, PowerLimitGoesDownOnALightLoadAndBackUpOnABurst) {
  std::vector<uint32_t> limits;
  for (uint32_t watts = 700; watts >= 200; watts -= 5)
    limits.push_back(watts);
  SloClockController controller({1.0, 0.1}, KnobKind::kPowerLimitW, limits, {.knob_gpus = 2});
  EXPECT_EQ(controller.power_limit_w(), 700u);
  double time_s = 0;
  const auto iterate = [&](int64_t pending_prompt_tokens, double oldest_pending_s) {
    const double limit_w = 2.0 * controller.power_limit_w();  // two GPUs
    const double power_w = std::min(760.0, limit_w);
    const double iteration_s = 0.02 / std::sqrt(std::min(1.0, (power_w - 150) / (760.0 - 150)));
    controller.on_iteration({.start_s = time_s,
                             .end_s = time_s + iteration_s,
                             .energy_j = power_w * iteration_s,
                             .knob = controller.knob(),
                             .decode_requests = 20,
                             .prefill_tokens = 50,
                             .pending_prompt_tokens = pending_prompt_tokens,
                             .oldest_pending_s = oldest_pending_s});
    time_s += iteration_s;
    controller.on_request_done(
        {.finish_s = time_s, .ttft_s = 0.05, .tpot_s = iteration_s, .prompt_tokens = 100});
  };
  while (time_s < 40) {
    iterate(0, 0);
  }
  const uint32_t calm_w = controller.power_limit_w();
  EXPECT_LT(calm_w, 380u);  // below what the GPUs draw at the top: the limit bites
  EXPECT_FALSE(controller.slo_unattainable());
  // A burst: prompts pending that this limit would prefill past the TTFT SLO.
  iterate(400'000, 0.3);
  EXPECT_GT(controller.power_limit_w(), calm_w);
}

// A replica whose limits barely bite (it runs 0.025 s per iteration at 400 W, 0.03 s at 100 W), where 300 W
// was measured for ten iterations only, in a moment that made them slow (0.15 s). The levels below 300 W are
// measured well. From the top, the controller must still reach the lowest limit: the ten samples are pooled
// with the well-measured levels (weighted by evidence), not taken as a floor for every level below them
// (which held real runs at 325 W through a diurnal peak where a fixed 110 W held the SLO).
TEST(SloClockController, ALevelMeasuredBrieflyDoesNotHoldTheLevelsBelowItUp) {
  SloClockController controller({1.0, 0.1}, KnobKind::kPowerLimitW, {400, 300, 200, 100});
  double time_s = 0;
  const auto iterate = [&](uint32_t limit_w, double iteration_s, double power_w,
                           double oldest_waiting_s = 0) {
    controller.on_iteration({.start_s = time_s,
                             .end_s = time_s + iteration_s,
                             .energy_j = power_w * iteration_s,
                             .knob = Knob::power_limit_w(limit_w),
                             .decode_requests = 20 + static_cast<int64_t>(time_s * 7) % 5,
                             .prefill_tokens = 50 + static_cast<int64_t>(time_s * 13) % 40,
                             .waiting_requests = oldest_waiting_s > 0 ? 1 : 0,
                             .oldest_waiting_s = oldest_waiting_s});
    time_s += iteration_s;
    controller.on_request_done(
        {.finish_s = time_s, .ttft_s = 0.05, .tpot_s = iteration_s, .prompt_tokens = 60});
  };
  const auto at_limit = [&](uint32_t limit_w) {
    // Time and power at each limit: a memory-bound replica, slowed a little by the lower limits.
    const double iteration_s = 0.025 + (400.0 - limit_w) / 300.0 * 0.005;
    iterate(limit_w, iteration_s, std::min(250.0, static_cast<double>(limit_w)));
  };
  for (int i = 0; i < 300; ++i) {
    at_limit(400);
    at_limit(200);
    at_limit(100);
  }
  for (int i = 0; i < 10; ++i) {
    iterate(300, 0.15, 240);
  }
  // A request waiting in the queue sends the controller to the top at once.
  iterate(100, 0.03, 100, /*oldest_waiting_s=*/0.6);
  ASSERT_EQ(controller.power_limit_w(), 400u);
  EXPECT_EQ(controller.models()[1].samples, 10);
  const double calm_from_s = time_s;
  while (time_s < calm_from_s + 40) {
    at_limit(controller.power_limit_w());
  }
  EXPECT_EQ(controller.power_limit_w(), 100u);
  EXPECT_EQ(controller.models()[1].samples, 10);  // it went past 300 W without measuring it again
  EXPECT_FALSE(controller.slo_unattainable());
}

TEST(SloClockController, RefusesBadPowerLimitOptionsAndSamples) {
  JOULE_EXPECT_THROW_MESSAGE(
      SloClockController({0.5, 0.05}, KnobKind::kPowerLimitW, {300, 200}, {.knob_gpus = 0}),
      ErrorCode::kInvalidArgument, "SLO controller options: knob_gpus must be at least 1, got 0");
  JOULE_EXPECT_THROW_MESSAGE(SloClockController({0.5, 0.05}, clocks(), {.margin = 0.9, .max_margin = 0.8}),
                             ErrorCode::kInvalidArgument,
                             "SLO controller options: max_margin must be at least margin (0.9), got 0.8");
  JOULE_EXPECT_ERROR(validate(IterationSample{.end_s = 1, .pending_prompt_tokens = -3}),
                     ErrorCode::kInvalidArgument,
                     "pending_prompt_tokens must be a finite number ≥ 0, got -3");
  JOULE_EXPECT_ERROR(validate(IterationSample{.end_s = 1, .oldest_pending_s = -0.5}),
                     ErrorCode::kInvalidArgument, "oldest_pending_s must be a finite number ≥ 0, got -0.5");
}

}  // namespace
}  // namespace joule::optimize
