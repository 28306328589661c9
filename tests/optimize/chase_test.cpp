// SPDX-License-Identifier: Apache-2.0
// Forecasters, the Chase controller and the carbon replay.
#include "joule/optimize/chase.hpp"

#include <cmath>
#include <csignal>
#include <numbers>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/chase_forecast.hpp"
#include "joule/optimize/chase_optimizer.hpp"

#include "device/settings_guard_helper.hpp"
#include "test_util.hpp"

namespace joule::optimize {
namespace {

constexpr int64_t kStart = 1'717'372'800;  // 2024-06-03T00:00:00Z

// A half-hourly series with a daily cycle: 400 − 150·cos(2π·time of day) + a small deterministic wobble.
carbon::CarbonTrace daily_trace(size_t points, double wobble = 5) {
  std::vector<carbon::IntensityPoint> series;
  for (size_t i = 0; i < points; ++i) {
    const int64_t t = kStart + static_cast<int64_t>(i) * 1800;
    const double day = static_cast<double>(t % 86400) / 86400.0;
    series.push_back(
        {t,
         400 - 150 * std::cos(2 * std::numbers::pi * day) + wobble * std::sin(0.7 * static_cast<double>(i)),
         false});
  }
  return *carbon::CarbonTrace::from_points(std::move(series), "daily");
}

TEST(Forecasters, FactoryAndNames) {
  for (const auto& name : forecaster_names()) {
    const auto forecaster = make_forecaster(name);
    ASSERT_TRUE(forecaster) << name;
    EXPECT_EQ((*forecaster)->name(), name);
  }
  const auto unknown = make_forecaster("prophet");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message(), "unknown forecaster 'prophet' (known: svr, ridge, last)");
}

TEST(Forecasters, NeedTrainingData) {
  for (const auto& name : forecaster_names()) {
    auto forecaster = *make_forecaster(name);
    const auto fit = forecaster->fit({{kStart, 1, false}});
    ASSERT_FALSE(fit) << name;
    EXPECT_NE(fit.error().message().find("needs at least 3 training points"), std::string::npos);
  }
}

TEST(Forecasters, RidgeRecoversALinearProcess) {
  // y_k = 50 + 0.8·y_{k−1} exactly: ridge must find it (up to its tiny penalty).
  std::vector<carbon::IntensityPoint> points;
  double y = 300;
  for (int i = 0; i < 48; ++i) {
    points.push_back({kStart + i * 1800, y, false});
    y = 50 + 0.8 * y;
  }
  RidgeForecaster ridge;
  ASSERT_TRUE(ridge.fit(points));
  EXPECT_NEAR(ridge.predict(kStart + 48 * 1800, 200), 50 + 0.8 * 200, 0.5);
  const auto path = ridge.predict_steps(kStart, 1800, 200, 3);
  ASSERT_EQ(path.size(), 3u);
  EXPECT_NEAR(path[1], 50 + 0.8 * path[0], 0.5);  // fed back recursively
}

TEST(Forecasters, LearnedModelsBeatNaiveOnADailyCycleMultiStep) {
  const auto trace = daily_trace(48 * 6);
  LastValueForecaster naive;
  const auto naive_eval = evaluate_forecaster(naive, trace, {.training_samples = 96, .horizon_steps = 4});
  ASSERT_TRUE(naive_eval) << naive_eval.error().message();
  for (const char* name : {"ridge", "svr"}) {
    auto model = *make_forecaster(name);
    const auto eval = evaluate_forecaster(*model, trace, {.training_samples = 96, .horizon_steps = 4});
    ASSERT_TRUE(eval) << eval.error().message();
    EXPECT_EQ(eval->predictions, naive_eval->predictions);
    EXPECT_LT(eval->mape_percent, naive_eval->mape_percent) << name;
  }
}

TEST(Forecasters, EvaluationIsDeterministicAndChecksItsInput) {
  const auto trace = daily_trace(100);
  SvrForecaster a;
  SvrForecaster b;
  const auto first = evaluate_forecaster(a, trace, {.refit_every = 10});
  const auto second = evaluate_forecaster(b, trace, {.refit_every = 10});
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->predicted_g_per_kwh, second->predicted_g_per_kwh);
  LastValueForecaster naive;
  const auto too_short = evaluate_forecaster(naive, daily_trace(40));
  ASSERT_FALSE(too_short);
  EXPECT_NE(too_short.error().message().find("too few to train on 48"), std::string::npos);
  const auto horizon = evaluate_forecaster(naive, trace, {.horizon_steps = 0});
  ASSERT_FALSE(horizon);
  EXPECT_NE(horizon.error().message().find("at least 1 step"), std::string::npos);
}

// A V100-like per-iteration frontier: 250 W fastest, 150 W least energy.
Frontier<uint32_t> v100_frontier() {
  return Frontier<uint32_t>::from_points({{250'000, 0.70, 154.0},
                                          {225'000, 0.715, 147.0},
                                          {200'000, 0.74, 137.0},
                                          {175'000, 0.77, 128.0},
                                          {150'000, 0.83, 120.0}});
}

TEST(ChaseController, DirtierGridLowerLimit) {
  LastValueForecaster forecaster;
  ChaseController chase(v100_frontier(), {}, forecaster, {.eta = 0.6});
  uint32_t previous_mw = UINT32_MAX;
  for (double intensity = 0; intensity <= 900; intensity += 50) {
    const auto index = chase.choose(intensity);
    ASSERT_TRUE(index);
    const uint32_t limit = chase.frontier().points()[*index].knob;
    EXPECT_LE(limit, previous_mw) << intensity;
    previous_mw = limit;
  }
  EXPECT_EQ(chase.frontier().points()[*chase.choose(0)].knob, 250'000u);
  // At the maximum intensity Chase's cost is Zeus's cost with the same eta.
  const auto zeus = select(chase.frontier(), ZeusCost{0.6, 250});
  EXPECT_EQ(*chase.choose(750), *zeus);
  EXPECT_EQ(*chase.choose(900), *chase.choose(750));  // clamped
  EXPECT_NEAR(chase.cost_at(300).effective_eta(), 0.6 * 300 / (0.6 * 300 + 0.4 * 750), 1e-12);
}

TEST(ChaseController, ThePriceVariantUsesTheSameSelector) {
  // zeus#53: $/kWh for the intensity and the highest price of the tariff for the maximum.
  const auto frontier = v100_frontier();
  const double max_price_usd_per_kwh = 0.40;
  const auto cheap = select(frontier, CarbonCost{0.8, 0.05, max_price_usd_per_kwh, 250});
  const auto dear = select(frontier, CarbonCost{0.8, 0.40, max_price_usd_per_kwh, 250});
  ASSERT_TRUE(cheap && dear);
  EXPECT_GT(frontier.points()[*cheap].knob, frontier.points()[*dear].knob);
  EXPECT_EQ(*dear, *select(frontier, ZeusCost{0.8, 250}));
}

TEST(ChaseController, TickSetsTheLimitOnEveryGpu) {
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100:imagenet"), clock));
  LastValueForecaster forecaster;
  ChaseController chase(v100_frontier(), {gpus[0].get(), gpus[1].get()}, forecaster, {.eta = 0.9});
  const auto decision = chase.tick(kStart, 700, 1800);
  ASSERT_TRUE(decision) << decision.error().message();
  EXPECT_DOUBLE_EQ(decision->forecast_g_per_kwh, 700);
  for (auto& gpu : gpus) {
    EXPECT_EQ(*gpu->power_limit_mw(), decision->power_limit_mw);
  }
  EXPECT_LT(decision->power_limit_mw, 250'000u);
  EXPECT_EQ(chase.decisions().size(), 1u);

  ChaseController watch(v100_frontier(), {gpus[0].get()}, forecaster, {.eta = 0.9, .monitor_only = true});
  ASSERT_TRUE(gpus[0]->set_power_limit_mw(250'000));
  ASSERT_TRUE(watch.tick(kStart, 700, 1800));
  EXPECT_EQ(*gpus[0]->power_limit_mw(), 250'000u);
}

TEST(ChaseController, RejectsBadOptions) {
  LastValueForecaster forecaster;
  EXPECT_THROW(ChaseController(v100_frontier(), {}, forecaster, {.eta = 1.5}), Exception);
  EXPECT_THROW(ChaseController(Frontier<uint32_t>{}, {}, forecaster, {}), Exception);
  const auto bad = validate(ChaseOptions{.max_intensity_g_per_kwh = 0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("maximum intensity must be positive"), std::string::npos);
  EXPECT_FALSE(validate(ChaseOptions{.period_s = 0}));
}

TEST(ChaseController, RestoresTheLimitsItChangedOnDestruction) {
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100:imagenet"), clock));
  for (auto& gpu : gpus) {
    ASSERT_TRUE(gpu->set_power_limit_mw(230'000));  // e.g. a site-wide cap, not the default
  }
  LastValueForecaster forecaster;
  {
    ChaseController chase(v100_frontier(), {gpus[0].get(), gpus[1].get()}, forecaster,
                          {.eta = 0.9, .restore_on_signals = false});
    ASSERT_TRUE(chase.tick(kStart, 700, 1800));
    ASSERT_LT(*gpus[0]->power_limit_mw(), 230'000u);
  }
  for (auto& gpu : gpus) {
    EXPECT_EQ(*gpu->power_limit_mw(), 230'000u);
  }
}

// The helper's GPU starts at 220 W; Chase lowers it at a dirty grid.
void expect_chase_changed_and_restored(const std::vector<std::string>& lines) {
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0], "limit 220000");
  EXPECT_EQ(lines[1], "limit 220000");
}

TEST(ChaseControllerChild, SigtermRestoresTheLimit) {
  test::SettingsGuardHelper helper;
  const auto result = helper.end_with_signal("chase", SIGTERM);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 128 + SIGTERM) << result->err;
  expect_chase_changed_and_restored(helper.lines());
}

TEST(ChaseControllerChild, ExitRestoresTheLimit) {
  test::SettingsGuardHelper helper;
  const auto result = test::run(helper.argv("chase", "exit"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  expect_chase_changed_and_restored(helper.lines());
}

CarbonReplayOptions small_replay() {
  CarbonReplayOptions options;
  options.gpu = "v100";
  options.workload = "imagenet";
  options.work_iterations = 20'000;  // about 4 h at the maximum limit
  options.chase.eta = 0.6;
  options.step_w = 25;
  return options;
}

TEST(CarbonReplay, DeterministicAndConsistent) {
  const auto trace = daily_trace(48 * 3, 20);
  const auto first = replay_carbon(trace, small_replay());
  ASSERT_TRUE(first) << first.error().message();
  const auto second = replay_carbon(trace, small_replay());
  ASSERT_TRUE(second);
  ASSERT_EQ(first->strategies.size(), 3u);
  EXPECT_EQ(first->strategies[0].name, "max_power_limit");
  EXPECT_EQ(first->strategies[1].name, "zeus");
  EXPECT_EQ(first->strategies[2].name, "chase");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first->strategies[i].carbon_g, second->strategies[i].carbon_g);
    EXPECT_EQ(first->strategies[i].energy_j, second->strategies[i].energy_j);
    EXPECT_EQ(first->strategies[i].time_s, second->strategies[i].time_s);
  }
  const auto& max = first->strategies[0];
  const auto& zeus = first->strategies[1];
  const auto& chase = first->strategies[2];
  // The maximum limit is fastest; Chase never picks below Zeus's (its effective eta is at most eta).
  EXPECT_LE(max.time_s, chase.time_s);
  EXPECT_LE(chase.time_s, zeus.time_s + 1e-6);
  EXPECT_GE(max.energy_j, chase.energy_j);
  // Every strategy's carbon is its energy at some intensity of the trace.
  for (const auto& s : first->strategies) {
    const double intensity = s.carbon_g / (s.energy_j / 3.6e6);
    EXPECT_GT(intensity, 200);
    EXPECT_LT(intensity, 600);
    EXPECT_FALSE(s.timeline.empty());
  }
  // Chase decides every 30 min of training time from a forecast, not the actual value.
  EXPECT_GE(chase.timeline.size(), static_cast<size_t>(chase.time_s / 1800));
  bool forecast_differs = false;
  for (const auto& tick : chase.timeline) {
    forecast_differs = forecast_differs || tick.forecast_g_per_kwh != tick.intensity_g_per_kwh;
  }
  EXPECT_TRUE(forecast_differs);
  // At max: energy = work × the profiled energy per iteration at 250 W.
  const auto& fastest = first->frontier.fastest();
  EXPECT_EQ(fastest.knob, 250'000u);
  EXPECT_NEAR(max.energy_j, fastest.energy_j * 20'000, max.energy_j * 1e-3);
}

TEST(CarbonReplay, BadInput) {
  const auto trace = daily_trace(60);
  auto options = small_replay();
  options.work_iterations = 0;
  const auto no_work = replay_carbon(trace, options);
  ASSERT_FALSE(no_work);
  EXPECT_NE(no_work.error().message().find("at least 1 iteration"), std::string::npos);

  options = small_replay();
  const auto too_short = replay_carbon(daily_trace(52), options);  // 2 h after the training window
  ASSERT_FALSE(too_short);
  EXPECT_EQ(too_short.error().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(too_short.error().message().find("use a longer trace"), std::string::npos);

  options.start_unix_s = kStart + 3600;
  const auto early = replay_carbon(daily_trace(48 * 3), options);
  ASSERT_FALSE(early);
  EXPECT_NE(early.error().message().find("trains on the 48 periods before the start"), std::string::npos);

  options = small_replay();
  options.gpu = "h100";
  EXPECT_FALSE(replay_carbon(trace, options));
  options = small_replay();
  options.forecaster = "oracle";
  const auto forecaster = replay_carbon(trace, options);
  ASSERT_FALSE(forecaster);
  EXPECT_NE(forecaster.error().message().find("unknown forecaster 'oracle'"), std::string::npos);
}

// ---- ChaseOptimizer: the profile, then a decision every period, through the profile's guard.

struct ChaseBench {
  std::shared_ptr<VirtualClock> clock =
      std::make_shared<VirtualClock>(kStart * 1'000'000'000LL + 60'000'000'000LL);
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus =
      std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100:imagenet"), clock));
  measure::EnergyMonitor monitor{{gpus[0].get()}, {}, *clock};
  device::sim::TrainingJob job{{gpus[0].get()}, *clock};

  static ChaseOptimizerOptions fast(double eta) {
    ChaseOptimizerOptions options;
    options.profile.wait_steps = 1;
    options.profile.warmup_steps = 1;
    options.profile.profile_steps = 2;
    options.profile.restore_on_signals = false;
    options.chase.eta = eta;
    options.forecaster = "last";
    return options;
  }
  void steps(ChaseOptimizer& chase, int count, int64_t iterations = 1) {
    for (int i = 0; i < count; ++i) {
      chase.on_step_begin();
      job.run_iterations(iterations);
      chase.on_step_end();
    }
  }
};

TEST(ChaseOptimizer, ProfilesOnceThenDecidesEveryPeriod) {
  ChaseBench bench;
  // Alternating clean and dirty half hours from kStart on; the clock starts a minute into the first.
  std::vector<carbon::IntensityPoint> points;
  for (int i = 0; i < 24; ++i) {
    points.push_back({kStart + i * 1800, i % 2 == 0 ? 50.0 : 750.0, false});
  }
  carbon::TraceSignal signal(*carbon::CarbonTrace::from_points(std::move(points), "alternating"),
                             *bench.clock);
  {
    ChaseOptimizer chase(bench.monitor, signal, ChaseBench::fast(0.9));
    EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), 250'000u);
    bench.steps(chase, 1 + 7 * 3 + 1);
    ASSERT_EQ(chase.profiler().state(), PowerLimitState::kDone);
    EXPECT_EQ(chase.profiler().measurements().size(), 7u);
    ASSERT_EQ(chase.decisions().size(), 1u);
    // The trace starts at the clock's first period: no previous period, so latest() stands in (50 g/kWh).
    EXPECT_DOUBLE_EQ(chase.decisions()[0].previous_g_per_kwh, 50);
    EXPECT_EQ(chase.forecaster_name(), "last");
    const double first_unix_s = *chase.next_decision_unix_s() - 1800;
    while (static_cast<double>(bench.clock->to_unix_ns(bench.clock->now())) / 1e9 < first_unix_s + 3 * 3600) {
      bench.steps(chase, 1, 100);
    }
    EXPECT_EQ(chase.profiler().measurements().size(), 7u);
    const auto& decisions = chase.decisions();
    ASSERT_GE(decisions.size(), 6u);
    for (size_t i = 1; i < decisions.size(); ++i) {
      EXPECT_GE(decisions[i].time_unix_s - decisions[i - 1].time_unix_s, 1800);
      EXPECT_LE(decisions[i].time_unix_s - decisions[i - 1].time_unix_s, 1800 + 60);
      // The previous half hour's intensity, forecast as is ("last"); dirtier gets a lower limit.
      const double previous = decisions[i].previous_g_per_kwh;
      EXPECT_TRUE(previous == 50 || previous == 750) << previous;
      EXPECT_DOUBLE_EQ(decisions[i].forecast_g_per_kwh, previous);
    }
    EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), decisions.back().power_limit_mw);
    EXPECT_EQ(chase.profiler().current_power_limit_mw(), decisions.back().power_limit_mw);
    EXPECT_DOUBLE_EQ(chase.options().chase.max_power_w, 250);
  }
  EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), 250'000u);  // the profile's restore_to: the default
}

TEST(ChaseOptimizer, ASignalFailureKeepsTheLimit) {
  ChaseBench bench;
  // A trace that ended before the clock's time: no intensity at all.
  std::vector<carbon::IntensityPoint> points = {{kStart - 7200, 100, false}, {kStart - 5400, 100, false}};
  carbon::TraceSignal signal(*carbon::CarbonTrace::from_points(std::move(points), "old"), *bench.clock);
  ChaseOptimizer chase(bench.monitor, signal, ChaseBench::fast(0.5));
  bench.steps(chase, 1 + 7 * 3 + 1);
  ASSERT_EQ(chase.profiler().state(), PowerLimitState::kDone);
  EXPECT_TRUE(chase.decisions().empty());
  EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), *chase.profiler().chosen_power_limit_mw());
  ASSERT_TRUE(chase.next_decision_unix_s());  // retried a period later
}

TEST(ChaseOptimizer, RejectsBadOptions) {
  ChaseBench bench;
  carbon::ConstantSignal signal(100, "constant", *bench.clock);
  auto options = ChaseBench::fast(0.5);
  options.forecaster = "arima";
  const auto forecaster = validate(options);
  ASSERT_FALSE(forecaster);
  EXPECT_EQ(forecaster.error().message(), "chase: unknown forecaster 'arima' (known: svr, ridge, last)");
  EXPECT_THROW(ChaseOptimizer(bench.monitor, signal, options), Exception);
  options = ChaseBench::fast(0.5);
  options.training_samples = 2;
  EXPECT_EQ(validate(options).error().message(),
            "chase: the forecaster needs at least 3 training samples, got 2");
  options = ChaseBench::fast(1.5);
  EXPECT_NE(validate(options).error().message().find("eta must be in [0, 1]"), std::string::npos);
}

TEST(PowerLimitOptimizer, OverrideNeedsADoneProfileAndACandidate) {
  ChaseBench bench;
  PowerLimitOptions options = ChaseBench::fast(0.5).profile;
  PowerLimitOptimizer optimizer(bench.monitor, options);
  try {
    optimizer.override_power_limit_mw(200'000);
    FAIL() << "no exception";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kState);
    EXPECT_NE(std::string(error.what())
                  .find("the limit can be replaced only once profiling is done (state: ready)"),
              std::string::npos)
        << error.what();
  }
  for (int i = 0; i < 1 + 7 * 3 + 1; ++i) {
    optimizer.on_step_begin();
    bench.job.run_iterations(1);
  }
  ASSERT_EQ(optimizer.state(), PowerLimitState::kDone);
  try {
    optimizer.override_power_limit_mw(212'000);
    FAIL() << "no exception";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("212 W is not one of the profiled limits"), std::string::npos)
        << error.what();
  }
  optimizer.override_power_limit_mw(150'000);
  EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), 150'000u);
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), 150'000u);
}

TEST(PowerLimitOptimizer, OverrideAcceptsTheLimitsOfAStoredProfileWithAnotherStep) {
  test::TempDir store;
  ChaseBench bench;
  PowerLimitOptions options = ChaseBench::fast(0.5).profile;
  options.profile_dir = store.path();
  options.job_key = "chase-step";
  options.step_w = 10;
  {
    PowerLimitOptimizer first(bench.monitor, options);
    for (int i = 0; i < 200 && first.state() != PowerLimitState::kDone; ++i) {
      first.on_step_begin();
      bench.job.run_iterations(1);
    }
    ASSERT_EQ(first.state(), PowerLimitState::kDone);
  }
  options.step_w = 25;  // today's grid has no 240 W; the stored profile (10 W apart) has
  PowerLimitOptimizer second(bench.monitor, options);
  ASSERT_TRUE(second.loaded_from_profile());
  second.override_power_limit_mw(240'000);
  EXPECT_EQ(*bench.gpus[0]->power_limit_mw(), 240'000u);
}

}  // namespace
}  // namespace joule::optimize
