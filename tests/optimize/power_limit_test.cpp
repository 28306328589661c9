// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/power_limit.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/core/file.hpp"
#include "joule/core/log.hpp"
#include "joule/device/sim_gpu.hpp"

#include "captured_log.hpp"
#include "file_gpu.hpp"
#include "integration/run_process.hpp"
#include "mocks/mock_gpu.hpp"
#include "optimize/sim_training_job.hpp"
#include "test_util.hpp"

namespace joule::optimize {
namespace {

using device::sim::SimulatedGpu;
using test::CapturedLog;
using ::testing::NiceMock;
using ::testing::Return;

// One step's time and energy at a limit, straight from the simulated GPU's operating point (not measured).
struct ModelPoint {
  uint32_t power_limit_mw = 0;
  double time_s = 0;
  double energy_j = 0;
};

// The shared fixture, with what these tests read back from it.
struct Job : test::SimTrainingJob {
  using SimTrainingJob::SimTrainingJob;

  std::vector<uint32_t> power_limits_set(size_t gpu = 0) const {
    std::vector<uint32_t> limits;
    for (const auto& record : gpus[gpu]->settings_log()) {
      if (record.setting == "power_limit_mw") {
        limits.push_back(record.value);
      }
    }
    return limits;
  }

  // The model's per-step figures at each limit, on a separate GPU so that this job's GPUs stay untouched.
  std::vector<ModelPoint> model(const std::vector<uint32_t>& limits_mw, std::string_view spec) const {
    auto probe_clock = std::make_shared<VirtualClock>();
    auto probes = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec), probe_clock));
    std::vector<ModelPoint> points;
    for (const uint32_t limit_mw : limits_mw) {
      double time_s = 0;
      double power_w = 0;
      for (auto& probe : probes) {
        EXPECT_TRUE(probe->set_power_limit_mw(limit_mw));
        const auto point = probe->operating_point();
        time_s = std::max(time_s, point.iteration_time_s);
        power_w += point.power_w;
      }
      points.push_back({limit_mw, time_s, power_w * time_s});
    }
    return points;
  }
};

// Brute force, independent of joule's Frontier and select(): the policy's choice among all points.
uint32_t expected_choice(const std::vector<ModelPoint>& points, const Policy& policy) {
  const ModelPoint* best = nullptr;
  auto better = [](const ModelPoint& a, const ModelPoint* b, double key_a, double key_b) {
    return b == nullptr || key_a < key_b || (key_a == key_b && a.time_s < b->time_s);
  };
  double fastest_s = std::numeric_limits<double>::infinity();
  for (const auto& point : points) {
    fastest_s = std::min(fastest_s, point.time_s);
  }
  for (const auto& point : points) {
    if (const auto* cost = std::get_if<ZeusCost>(&policy)) {
      const double key = cost->eta * point.energy_j + (1 - cost->eta) * cost->max_power_w * point.time_s;
      const double best_key =
          best ? cost->eta * best->energy_j + (1 - cost->eta) * cost->max_power_w * best->time_s : 0;
      if (better(point, best, key, best_key)) {
        best = &point;
      }
    } else if (std::holds_alternative<MinTime>(policy)) {
      if (best == nullptr || point.time_s < best->time_s ||
          (point.time_s == best->time_s && point.energy_j < best->energy_j)) {
        best = &point;
      }
    } else {
      double bound_s = std::numeric_limits<double>::infinity();
      if (const auto* deadline = std::get_if<Deadline>(&policy)) {
        bound_s = deadline->time_s;
      } else if (const auto* slowdown = std::get_if<MaxSlowdown>(&policy)) {
        bound_s = slowdown->factor * fastest_s;
      }
      if (point.time_s <= bound_s && better(point, best, point.energy_j, best ? best->energy_j : 0)) {
        best = &point;
      }
    }
  }
  return best ? best->power_limit_mw : 0;
}

const std::vector<uint32_t> kV100Limits = {250'000, 225'000, 200'000, 175'000, 150'000, 125'000, 100'000};

// ---------------------------------------------------------------------------------------------------------

TEST(PowerLimitCandidates, GridFromMaxDownAndTheMinimum) {
  EXPECT_EQ(power_limit_candidates_mw({100'000, 250'000, 250'000}, 25'000), kV100Limits);
  EXPECT_EQ(power_limit_candidates_mw({100'000, 300'000, 300'000}, 25'000).size(), 9u);
  // RTX 6000: 260 → 110 W on the 25 W grid, then the minimum the grid skips (upstream Zeus stops at 110 W).
  EXPECT_EQ(power_limit_candidates_mw({100'000, 260'000, 260'000}, 25'000),
            (std::vector<uint32_t>{260'000, 235'000, 210'000, 185'000, 160'000, 135'000, 110'000, 100'000}));
  EXPECT_EQ(power_limit_candidates_mw({100'000, 250'000, 250'000}, 40'000),
            (std::vector<uint32_t>{250'000, 210'000, 170'000, 130'000, 100'000}));
  EXPECT_EQ(power_limit_candidates_mw({150'000, 150'000, 150'000}, 25'000), (std::vector<uint32_t>{150'000}));
  EXPECT_EQ(power_limit_candidates_mw({0, 1'000, 1'000}, 400), (std::vector<uint32_t>{1'000, 600, 200, 0}));
  EXPECT_TRUE(power_limit_candidates_mw({200'000, 100'000, 100'000}, 25'000).empty());
  EXPECT_TRUE(power_limit_candidates_mw({100'000, 250'000, 250'000}, 0).empty());
}

TEST(PowerLimitOptions, ValidationMessages) {
  const auto code = ErrorCode::kInvalidArgument;
  EXPECT_TRUE(validate(PowerLimitOptions{}));
  PowerLimitOptions options;
  options.wait_steps = -1;
  JOULE_EXPECT_ERROR(validate(options), code, "wait_steps must be at least 0, got -1");
  options = {};
  options.warmup_steps = -2;
  JOULE_EXPECT_ERROR(validate(options), code, "warmup_steps must be at least 0, got -2");
  options = {};
  options.warmup_steps = 0;  // allowed: the window opens with the limit (upstream Zeus hangs)
  EXPECT_TRUE(validate(options));
  options = {};
  options.profile_steps = 0;
  JOULE_EXPECT_ERROR(validate(options), code, "profile_steps must be at least 1, got 0");
  options = {};
  options.steady_state.window_s = 0;
  JOULE_EXPECT_ERROR(validate(options), code, "steady state: window_s must be a finite number > 0, got 0");
  options = {};
  options.steady_state.max_wait_s = 10;
  JOULE_EXPECT_ERROR(validate(options), code,
                     "steady state: max_wait_s must be a finite number ≥ window_s (20 s), got 10");
  options = {};
  options.steady_state.power_band_ratio = -1;
  JOULE_EXPECT_ERROR(validate(options), code,
                     "steady state: power_band_ratio must be a finite number > 0, got -1");
  JOULE_EXPECT_ERROR(measure::steady_state_mode_from_string("warm"), code,
                     "unknown steady-state mode 'warm' (expected off, fixed or steady)");
  options = {};
  options.step_w = 0;
  JOULE_EXPECT_ERROR(validate(options), code, "step_w must be from 0.001 W to 1000000 W, got 0 W");
  options.step_w = -25;
  JOULE_EXPECT_ERROR(validate(options), code, "step_w must be from 0.001 W to 1000000 W, got -25 W");
  options.step_w = std::numeric_limits<double>::quiet_NaN();
  JOULE_EXPECT_ERROR(validate(options), code, "step_w must be from 0.001 W to 1000000 W, got nan W");
  options = {};
  options.policy = ZeusCost{1.5, 0};
  JOULE_EXPECT_ERROR(validate(options), code, "ZeusCost eta must be in [0, 1], got 1.5");
  options.policy = ZeusCost{0.5, -250};
  JOULE_EXPECT_ERROR(validate(options), code, "ZeusCost max_power_w must be positive and finite, got -250 W");
  options.policy = MaxSlowdown{0.9};
  JOULE_EXPECT_ERROR(validate(options), code, "MaxSlowdown factor must be finite and at least 1, got 0.9");
  options.policy = Deadline{-1};
  JOULE_EXPECT_ERROR(validate(options), code, "Deadline time_s must be finite and non-negative, got -1 s");
  options = {};
  options.profile_dir = "/tmp/profiles";
  JOULE_EXPECT_ERROR(validate(options), code,
                     "job_key is required with profile_dir: it names the profile file");
  options.job_key = "../etc/passwd";
  JOULE_EXPECT_ERROR(
      validate(options), code,
      "job_key '../etc/passwd' may only contain letters, digits, '.', '_' and '-', and must not "
      "start with '.'");
  options.job_key = "resnet50-imagenet_b256.v2";
  EXPECT_TRUE(validate(options));
}

// A stand-in for a second rank: rank `rank` of 2, where the other rank measured the same energy and a
// slightly longer time. Records what this rank contributed.
class TwoRankAggregator final : public RankAggregator {
 public:
  explicit TwoRankAggregator(int rank = 0, bool other_has_profile = true)
      : rank_(rank), other_has_profile_(other_has_profile) {}
  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  std::pair<double, double> aggregate(double energy_j, double time_s) override {
    local.emplace_back(energy_j, time_s);
    return {energy_j + energy_j, std::max(time_s, time_s * 1.02)};
  }
  bool all_ranks(bool value) override {
    ++all_ranks_calls;
    return value && other_has_profile_;
  }
  std::vector<std::pair<double, double>> local;
  int all_ranks_calls = 0;

 private:
  int rank_;
  bool other_has_profile_;
};

class BadAggregator final : public RankAggregator {
 public:
  BadAggregator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::pair<double, double> aggregate(double energy_j, double time_s) override { return {energy_j, time_s}; }

 private:
  int rank_;
  int world_size_;
};

TEST(PowerLimitOptions, AggregatorValidation) {
  PowerLimitOptions options;
  options.aggregator = std::make_shared<BadAggregator>(0, 0);
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "the aggregator's world_size must be at least 1, got 0");
  options.aggregator = std::make_shared<BadAggregator>(2, 2);
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "the aggregator's rank 2 is outside 0 to 1");
}

TEST(PowerLimitOptions, DefaultAllRanksUsesAggregate) {
  // Two ranks that both say yes sum to 2; with one no the sum is 1.
  class Summing final : public RankAggregator {
   public:
    explicit Summing(double other) : other_(other) {}
    int rank() const override { return 0; }
    int world_size() const override { return 2; }
    std::pair<double, double> aggregate(double energy_j, double time_s) override {
      return {energy_j + other_, time_s};
    }

   private:
    double other_;
  };
  Summing other_yes(1);
  Summing other_no(0);
  EXPECT_TRUE(other_yes.all_ranks(true));
  EXPECT_FALSE(other_yes.all_ranks(false));
  EXPECT_FALSE(other_no.all_ranks(true));
  EXPECT_EQ(to_string(PowerLimitState::kProfiling), "profiling");
}

TEST(PowerLimitOptimizer, ConstructorErrors) {
  Job job("v100");
  PowerLimitOptions options;
  options.profile_steps = 0;
  JOULE_EXPECT_THROW_MESSAGE(PowerLimitOptimizer(*job.monitor, options), ErrorCode::kInvalidArgument,
                             "profile_steps must be at least 1, got 0");

  VirtualClock clock;
  measure::EnergyMonitor empty({}, {}, clock);
  JOULE_EXPECT_THROW_MESSAGE(PowerLimitOptimizer(empty, {}), ErrorCode::kInvalidArgument,
                             "the energy monitor has no GPUs: the power-limit optimizer needs at least one");

  // Different models.
  auto sim_clock = std::make_shared<VirtualClock>();
  auto v100 = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100"), sim_clock));
  const auto& a40_model = *device::sim::find_gpu_model("a40").value();
  SimulatedGpu a40(
      a40_model,
      device::sim::make_trace_workload(a40_model, device::sim::default_workload(), std::nullopt).value(),
      sim_clock, 1);
  measure::EnergyMonitor mixed({v100[0].get(), &a40}, {}, *sim_clock);
  JOULE_EXPECT_THROW_MESSAGE(
      PowerLimitOptimizer(mixed, {}), ErrorCode::kInvalidArgument,
      "the power-limit optimizer sets one limit for all GPUs, so they must be identical: "
      "GPU 1 (NVIDIA A40 (simulated)) is not the same model as GPU 0 (Tesla "
      "V100-PCIE-32GB (simulated))");
  EXPECT_TRUE(v100[0]->settings_log().empty());  // nothing was touched
}

TEST(PowerLimitOptimizer, ConstraintMismatchAndPermissionErrors) {
  NiceMock<test::MockGpu> first(test::mock_gpu_info(0));
  NiceMock<test::MockGpu> second(test::mock_gpu_info(1));
  for (auto* gpu : {&first, &second}) {
    ON_CALL(*gpu, do_energy_mj()).WillByDefault(Return(Result<uint64_t>(0)));
    ON_CALL(*gpu, do_power_limit_mw()).WillByDefault(Return(Result<uint32_t>(300'000)));
  }
  ON_CALL(first, do_power_limit_constraints())
      .WillByDefault(Return(Result<device::PowerLimitConstraints>({100'000, 300'000, 300'000})));
  ON_CALL(second, do_power_limit_constraints())
      .WillByDefault(Return(Result<device::PowerLimitConstraints>({100'000, 300'000, 280'000})));
  VirtualClock clock;
  {
    measure::EnergyMonitor monitor({&first, &second}, {}, clock);
    JOULE_EXPECT_THROW_MESSAGE(
        PowerLimitOptimizer(monitor, {}), ErrorCode::kInvalidArgument,
        "the power-limit optimizer sets one limit for all GPUs, so they must be identical: "
        "GPU 1 (Mock GPU) allows 100 W to 300 W (default 280 W), GPU 0 (Mock GPU) "
        "allows 100 W to 300 W (default 300 W)");
  }
  // Setting a limit needs privileges: the error says so and nothing stays registered.
  ON_CALL(first, do_set_power_limit_mw(::testing::_))
      .WillByDefault(
          Return(Result<void>(fail(ErrorCode::kPermissionDenied, "GPU 0 (Mock GPU): needs root"))));
  measure::EnergyMonitor monitor({&first}, {}, clock);
  JOULE_EXPECT_THROW_MESSAGE(PowerLimitOptimizer(monitor, {}), ErrorCode::kPermissionDenied,
                             "power-limit optimizer: cannot set the power limit to 300 W: GPU 0 (Mock GPU): "
                             "needs root");
  EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGTERM));
}

TEST(PowerLimitOptimizer, StepAccountingWithDefaults) {
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor);
  EXPECT_EQ(optimizer.candidates_mw(), kV100Limits);
  EXPECT_EQ(optimizer.state(), PowerLimitState::kReady);
  EXPECT_EQ(job.power_limits_set(), (std::vector<uint32_t>{250'000}));  // the maximum from the start
  const double iteration_at_max_s = job.training->iteration_time_s();

  int64_t step = 0;  // on_step_begin() calls so far
  auto begin_step = [&] {
    optimizer.on_step_begin();
    ++step;
  };
  auto finish_step = [&] {
    job.training->run_iterations(1);
    optimizer.on_step_end();
  };
  for (size_t k = 0; k < kV100Limits.size(); ++k) {
    const auto name = fmt::format("__joule_power_limit_{}", kV100Limits[k] / 1000);
    // Candidate k is set at step 2 + 50k, its window opens at step 12 + 50k and closes at step 52 + 50k.
    while (step < 2 + 50 * static_cast<int64_t>(k)) {
      EXPECT_NE(optimizer.state(), PowerLimitState::kWarmup) << step;
      finish_step();
      begin_step();
    }
    EXPECT_EQ(optimizer.state(), PowerLimitState::kWarmup) << "candidate " << k;
    EXPECT_EQ(optimizer.current_power_limit_mw(), kV100Limits[k]);
    EXPECT_EQ(job.gpus[0]->power_limit_mw().value(), kV100Limits[k]);
    EXPECT_EQ(optimizer.measurements().size(), k);
    while (step < 12 + 50 * static_cast<int64_t>(k)) {
      EXPECT_FALSE(job.monitor->is_open(name));
      finish_step();
      begin_step();
    }
    EXPECT_EQ(optimizer.state(), PowerLimitState::kProfiling);
    EXPECT_TRUE(job.monitor->is_open(name)) << name;
  }
  while (step < 351) {
    finish_step();
    begin_step();
  }
  finish_step();
  EXPECT_EQ(optimizer.state(), PowerLimitState::kProfiling);  // 351 steps run, the last window still open
  begin_step();
  EXPECT_EQ(optimizer.state(), PowerLimitState::kDone);  // … and closed at the next step's begin
  EXPECT_TRUE(job.monitor->open_windows().empty());
  ASSERT_EQ(optimizer.measurements().size(), 7u);
  for (size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(optimizer.measurements()[k].power_limit_mw, kV100Limits[k]);
    EXPECT_EQ(optimizer.measurements()[k].steps, 40);
  }
  EXPECT_NEAR(optimizer.measurements()[0].time_s, 40 * iteration_at_max_s, 1e-6);
  EXPECT_NEAR(optimizer.measurements()[0].time_per_step_s(), iteration_at_max_s, 1e-9);

  // Every limit was set once, in order, then the choice (skipped if it is the last one profiled).
  std::vector<uint32_t> expected = kV100Limits;
  ASSERT_TRUE(optimizer.chosen_power_limit_mw());
  if (*optimizer.chosen_power_limit_mw() != kV100Limits.back()) {
    expected.push_back(*optimizer.chosen_power_limit_mw());
  }
  EXPECT_EQ(job.power_limits_set(), expected);
  EXPECT_EQ(job.gpus[0]->power_limit_mw().value(), *optimizer.chosen_power_limit_mw());
  // Done does nothing more.
  job.step(optimizer, 100);
  optimizer.on_epoch_end();
  EXPECT_EQ(job.power_limits_set(), expected);
}

TEST(PowerLimitOptimizer, MeasurementsMatchTheSimulatedOperatingPoints) {
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor);
  EXPECT_EQ(job.run_until_done(optimizer), 352);
  const auto model = job.model(kV100Limits, "v100");
  ASSERT_EQ(optimizer.measurements().size(), model.size());
  for (size_t k = 0; k < model.size(); ++k) {
    const auto& measured = optimizer.measurements()[k];
    EXPECT_NEAR(measured.time_per_step_s(), model[k].time_s, 1e-9 * model[k].time_s) << k;
    EXPECT_NEAR(measured.energy_per_step_j(), model[k].energy_j, 1e-4 * model[k].energy_j) << k;
  }
  // The frontier holds the profiled limits, fastest first, each point a measurement.
  ASSERT_FALSE(optimizer.frontier().empty());
  for (size_t i = 1; i < optimizer.frontier().size(); ++i) {
    EXPECT_LE(optimizer.frontier().points()[i - 1].time_s, optimizer.frontier().points()[i].time_s);
    EXPECT_GE(optimizer.frontier().points()[i - 1].energy_j, optimizer.frontier().points()[i].energy_j);
  }
}

// The profile of a V100 whose power follows its temperature (leakage), started cold or warm, waiting for a
// steady state before each candidate or not. @return energy per step of each candidate.
std::vector<double> thermal_profile(bool cold, measure::SteadyStateMode mode) {
  Job job("v100");
  const auto& model = job.gpus[0]->model();
  job.gpus[0]->set_thermal({cold ? std::optional<double>(model.ambient_c) : std::nullopt, true});
  PowerLimitOptions options;
  options.steady_state.mode = mode;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  EXPECT_EQ(optimizer.steady_state_mode(), mode);
  job.run_until_done(optimizer);
  std::vector<double> energy_j;
  for (const auto& measured : optimizer.measurements()) {
    energy_j.push_back(measured.energy_per_step_j());
  }
  return energy_j;
}

TEST(PowerLimitOptimizer, SteadyStateWaitMakesAColdStartProfileLikeAWarmOne) {
  const auto warm = thermal_profile(false, measure::SteadyStateMode::kSteady);
  const auto cold_waiting = thermal_profile(true, measure::SteadyStateMode::kSteady);
  const auto cold_at_once = thermal_profile(true, measure::SteadyStateMode::kOff);
  ASSERT_EQ(warm.size(), 7u);
  ASSERT_EQ(cold_waiting.size(), 7u);
  ASSERT_EQ(cold_at_once.size(), 7u);
  for (size_t k = 0; k < warm.size(); ++k) {
    // Within the 1 °C band: leakage of 0.375 W/°C on ~200 W.
    EXPECT_NEAR(cold_waiting[k], warm[k], 0.003 * warm[k]) << k;
  }
  // Without waiting, the cold GPU's first candidate is measured about 8% low (less leakage while cold).
  EXPECT_LT(cold_at_once[0], 0.95 * warm[0]);
}

TEST(PowerLimitOptimizer, SteadyStateDefaultsAndWaits) {
  // Simulated GPUs: off by default (their power is the trace's unless leakage is switched on).
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor);
  EXPECT_EQ(optimizer.steady_state_mode(), measure::SteadyStateMode::kOff);
  // A real backend: steady by default; test doubles are not real.
  auto info = test::mock_gpu_info(0);
  NiceMock<test::MockGpu> mock(info);
  EXPECT_EQ(measure::resolve_steady_state_mode({}, {&mock}), measure::SteadyStateMode::kOff);
  info.backend = "nvml";
  NiceMock<test::MockGpu> nvml(info);
  EXPECT_EQ(measure::resolve_steady_state_mode({}, {&mock, &nvml}), measure::SteadyStateMode::kSteady);
  // A fixed wait of 60 s holds each candidate's window until 60 s after its limit was set.
  Job fixed("v100");
  PowerLimitOptions options;
  options.steady_state.mode = measure::SteadyStateMode::kFixed;
  options.steady_state.fixed_warmup_s = 60;
  PowerLimitOptimizer waiting(*fixed.monitor, options);
  fixed.step(waiting, 2);  // the first candidate is set
  const Nanos set_at = fixed.clock->now();
  while (waiting.state() == PowerLimitState::kWarmup) {
    fixed.step(waiting);
  }
  EXPECT_GE(to_seconds(fixed.clock->now() - set_at), 60.0);
  EXPECT_LT(to_seconds(fixed.clock->now() - set_at), 62.0);
}

struct PolicyCase {
  std::string name;
  Policy policy;
};

class PowerLimitPolicies : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(PowerLimitPolicies, ChoiceEqualsThePolicysPickFromTheModel) {
  for (const std::string spec : {"v100", "a40", "rtx6000", "p100:cifar100"}) {
    Job job(spec);
    PowerLimitOptions options;
    options.policy = GetParam().policy;
    options.warmup_steps = 2;
    options.profile_steps = 5;
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.run_until_done(optimizer);
    ASSERT_EQ(optimizer.state(), PowerLimitState::kDone);
    const auto model = job.model(optimizer.candidates_mw(), spec);
    Policy policy = GetParam().policy;
    if (auto* cost = std::get_if<ZeusCost>(&policy); cost && cost->max_power_w == 0) {
      cost->max_power_w = mw_to_w(optimizer.candidates_mw().front());
    }
    EXPECT_EQ(*optimizer.chosen_power_limit_mw(), expected_choice(model, policy)) << spec;
    EXPECT_EQ(job.gpus[0]->power_limit_mw().value(), *optimizer.chosen_power_limit_mw()) << spec;
  }
}

INSTANTIATE_TEST_SUITE_P(Selectors, PowerLimitPolicies,
                         ::testing::Values(PolicyCase{"ZeusCostDefault", ZeusCost{0.5, 0}},
                                           PolicyCase{"ZeusCostEnergy", ZeusCost{1, 0}},
                                           PolicyCase{"ZeusCostTime", ZeusCost{0, 0}},
                                           PolicyCase{"ZeusCostLean", ZeusCost{0.8, 0}},
                                           PolicyCase{"ZeusCostFixedPower", ZeusCost{0.5, 400}},
                                           PolicyCase{"MinEnergy", MinEnergy{}},
                                           PolicyCase{"MinTime", MinTime{}},
                                           PolicyCase{"MaxSlowdown10", MaxSlowdown{1.1}},
                                           PolicyCase{"MaxSlowdown1", MaxSlowdown{1.0}},
                                           PolicyCase{"MaxSlowdown2", MaxSlowdown{2}}),
                         [](const auto& test_info) { return test_info.param.name; });

TEST(PowerLimitOptimizer, DerivedMaxPowerIsMaxLimitTimesGpusTimesRanks) {
  Job job("2xv100");
  PowerLimitOptimizer optimizer(*job.monitor);
  ASSERT_TRUE(std::holds_alternative<ZeusCost>(optimizer.policy()));
  EXPECT_DOUBLE_EQ(std::get<ZeusCost>(optimizer.policy()).max_power_w, 500);
  EXPECT_DOUBLE_EQ(std::get<ZeusCost>(optimizer.policy()).eta, 0.5);

  Job ranked("v100");
  PowerLimitOptions options;
  options.aggregator = std::make_shared<TwoRankAggregator>();
  PowerLimitOptimizer two_ranks(*ranked.monitor, options);
  EXPECT_DOUBLE_EQ(std::get<ZeusCost>(two_ranks.policy()).max_power_w, 500);

  Job fixed("v100");
  options = {};
  options.policy = ZeusCost{0.3, 123};
  PowerLimitOptimizer given(*fixed.monitor, options);
  EXPECT_DOUBLE_EQ(std::get<ZeusCost>(given.policy()).max_power_w, 123);
}

TEST(PowerLimitOptimizer, MultiGpuEnergyIsSummed) {
  Job job("2xv100");
  Job single("v100");
  PowerLimitOptions options;
  options.warmup_steps = 3;
  options.profile_steps = 10;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  PowerLimitOptimizer reference(*single.monitor, options);
  job.run_until_done(optimizer);
  single.run_until_done(reference);
  ASSERT_EQ(optimizer.measurements().size(), 7u);
  for (size_t k = 0; k < 7; ++k) {
    EXPECT_NEAR(optimizer.measurements()[k].energy_j, 2 * reference.measurements()[k].energy_j, 1e-2);
    EXPECT_NEAR(optimizer.measurements()[k].time_s, reference.measurements()[k].time_s, 1e-9);
  }
  // Both GPUs got the same limits; per-GPU energy doubles and so does max power: the same choice.
  EXPECT_EQ(job.power_limits_set(0), job.power_limits_set(1));
  EXPECT_EQ(optimizer.chosen_power_limit_mw(), reference.chosen_power_limit_mw());
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(),
            expected_choice(job.model(kV100Limits, "2xv100"), ZeusCost{0.5, 500}));
}

TEST(PowerLimitOptimizer, TwoRankAggregation) {
  Job job("v100");
  auto aggregator = std::make_shared<TwoRankAggregator>();
  PowerLimitOptions options;
  options.aggregator = aggregator;
  options.warmup_steps = 1;
  options.profile_steps = 4;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  job.run_until_done(optimizer);
  ASSERT_EQ(aggregator->local.size(), 7u);
  EXPECT_EQ(aggregator->all_ranks_calls, 0);  // no profile store: no agreement needed
  std::vector<ModelPoint> aggregated;
  for (size_t k = 0; k < 7; ++k) {
    const auto& measured = optimizer.measurements()[k];
    EXPECT_DOUBLE_EQ(measured.energy_j, 2 * aggregator->local[k].first);
    EXPECT_DOUBLE_EQ(measured.time_s, 1.02 * aggregator->local[k].second);
    aggregated.push_back({measured.power_limit_mw, measured.time_per_step_s(), measured.energy_per_step_j()});
  }
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), expected_choice(aggregated, ZeusCost{0.5, 500}));
}

TEST(PowerLimitOptimizer, EpochEndInterruptsAndRestartsTheLimit) {
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor);
  // Step 70: candidate 1 (225 W) has been profiled since step 62.
  job.step(optimizer, 69);
  optimizer.on_step_begin();
  ASSERT_EQ(optimizer.state(), PowerLimitState::kProfiling);
  ASSERT_EQ(optimizer.current_power_limit_mw(), 225'000u);
  job.training->run_iterations(1);
  optimizer.on_epoch_end();
  EXPECT_EQ(optimizer.state(), PowerLimitState::kReady);
  EXPECT_TRUE(job.monitor->open_windows().empty());  // cancelled, not recorded
  EXPECT_EQ(optimizer.measurements().size(), 1u);
  EXPECT_EQ(job.power_limits_set().back(), 250'000u);  // full speed through the epoch boundary
  optimizer.on_epoch_end();                            // Ready: nothing
  EXPECT_EQ(optimizer.state(), PowerLimitState::kReady);

  // Step 71 sets 225 W again and warms it up for 10 steps; the window opens at step 81, closes at 121.
  optimizer.on_step_begin();
  EXPECT_EQ(optimizer.state(), PowerLimitState::kWarmup);
  EXPECT_EQ(job.power_limits_set().back(), 225'000u);
  job.training->run_iterations(1);
  // An epoch end during warmup also restarts it.
  job.step(optimizer, 4);
  optimizer.on_epoch_end();
  EXPECT_EQ(optimizer.state(), PowerLimitState::kReady);
  EXPECT_EQ(job.power_limits_set().back(), 250'000u);
  const int64_t remaining = job.run_until_done(optimizer);
  // 1 step in Ready, then 50 per remaining candidate (6), then the closing step's begin.
  EXPECT_EQ(remaining, 1 + 6 * 50);
  ASSERT_EQ(optimizer.measurements().size(), 7u);
  EXPECT_EQ(optimizer.measurements()[1].power_limit_mw, 225'000u);
  EXPECT_EQ(optimizer.measurements()[1].steps, 40);
  const auto model = job.model(kV100Limits, "v100");
  EXPECT_NEAR(optimizer.measurements()[1].time_per_step_s(), model[1].time_s, 1e-9);
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), expected_choice(model, ZeusCost{0.5, 250}));
}

TEST(PowerLimitOptimizer, ZeroWaitAndZeroWarmup) {
  Job job("v100");
  PowerLimitOptions options;
  options.wait_steps = 0;
  options.warmup_steps = 0;
  options.profile_steps = 3;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  optimizer.on_step_begin();  // sets 250 W and opens its window at once
  EXPECT_EQ(optimizer.state(), PowerLimitState::kProfiling);
  EXPECT_TRUE(job.monitor->is_open("__joule_power_limit_250"));
  job.training->run_iterations(1);
  // 1 + 7·3 steps in all.
  EXPECT_EQ(job.run_until_done(optimizer), 7 * 3);
  EXPECT_EQ(optimizer.measurements()[6].steps, 3);
}

TEST(PowerLimitOptimizer, MinimumLimitIsProfiledWhenTheGridSkipsIt) {
  Job job("rtx6000");
  PowerLimitOptions options;
  options.warmup_steps = 1;
  options.profile_steps = 2;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  ASSERT_EQ(optimizer.candidates_mw().size(), 8u);
  job.run_until_done(optimizer);
  ASSERT_EQ(optimizer.measurements().size(), 8u);
  EXPECT_EQ(optimizer.measurements().back().power_limit_mw, 100'000u);
  EXPECT_TRUE(job.monitor->is_open("__joule_power_limit_100") == false);
  const auto limits = job.power_limits_set();
  EXPECT_NE(std::find(limits.begin(), limits.end(), 100'000u), limits.end());
}

TEST(PowerLimitOptimizer, NonIntegerStepNamesWindowsInWatts) {
  Job job("v100");
  PowerLimitOptions options;
  options.step_w = 37.5;
  options.wait_steps = 0;
  options.warmup_steps = 1;
  options.profile_steps = 1;
  PowerLimitOptimizer optimizer(*job.monitor, options);
  EXPECT_EQ(optimizer.candidates_mw(), (std::vector<uint32_t>{250'000, 212'500, 175'000, 137'500, 100'000}));
  job.step(optimizer, 3);
  optimizer.on_step_begin();  // 250 W set, 250 W measured, 212.5 W set, its window opened
  EXPECT_TRUE(job.monitor->is_open("__joule_power_limit_212.5"));
}

// --- inference: profile "steps" are request batches ------------------------------------------------------

TEST(PowerLimitOptimizer, InferenceDeadlineOnPerBatchLatency) {
  const std::string spec = "a40";
  Job probe(spec);
  const auto candidates = power_limit_candidates_mw(probe.gpus[0]->power_limit_constraints().value(), 25'000);
  const auto model = probe.model(candidates, spec);
  // A latency bound between two candidates' latencies, strictly.
  std::vector<double> latencies;
  for (const auto& point : model) {
    latencies.push_back(point.time_s);
  }
  std::sort(latencies.begin(), latencies.end());
  latencies.erase(std::unique(latencies.begin(), latencies.end()), latencies.end());
  ASSERT_GE(latencies.size(), 3u);
  const double latency_bound_s = (latencies[latencies.size() / 2] + latencies[latencies.size() / 2 + 1]) / 2;

  Job job(spec);
  PowerLimitOptions options;
  options.wait_steps = 0;
  options.warmup_steps = 2;
  options.profile_steps = 8;  // the window lasts 8 batches; the bound is per batch
  options.policy = Deadline{latency_bound_s};
  PowerLimitOptimizer optimizer(*job.monitor, options);
  job.run_until_done(optimizer);  // each step = one request batch
  const uint32_t expected = expected_choice(model, Deadline{latency_bound_s});
  ASSERT_NE(expected, 0u);
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), expected);
  // It meets the bound, and every lower-energy limit misses it.
  const auto chosen =
      std::find_if(model.begin(), model.end(), [&](const auto& p) { return p.power_limit_mw == expected; });
  EXPECT_LE(chosen->time_s, latency_bound_s);
  for (const auto& point : model) {
    if (point.energy_j < chosen->energy_j) {
      EXPECT_GT(point.time_s, latency_bound_s) << point.power_limit_mw;
    }
  }
  EXPECT_NEAR(job.training->iteration_time_s(), chosen->time_s, 1e-12);
}

TEST(PowerLimitOptimizer, UnreachableDeadlineFallsBackToTheFastestLimit) {
  CapturedLog captured("[%l] %v");
  Job job("v100");
  PowerLimitOptions options;
  options.warmup_steps = 1;
  options.profile_steps = 2;
  options.policy = Deadline{1e-6};
  PowerLimitOptimizer optimizer(*job.monitor, options);
  job.run_until_done(optimizer);
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), optimizer.frontier().fastest().knob);
  EXPECT_THAT(captured.text(), ::testing::HasSubstr("choosing the fastest limit"));
}

// --- profile store --------------------------------------------------------------------------------------

PowerLimitOptions store_options(const std::string& dir) {
  PowerLimitOptions options;
  options.warmup_steps = 2;
  options.profile_steps = 5;
  options.profile_dir = dir;
  options.job_key = "resnet50";
  return options;
}

TEST(PowerLimitProfile, SecondRunSkipsProfiling) {
  test::TempDir dir;
  const std::string store = dir.path() + "/profiles/nested";
  std::vector<PowerLimitMeasurement> first_measurements;
  uint32_t first_choice = 0;
  {
    Job job("2xv100");
    PowerLimitOptimizer optimizer(*job.monitor, store_options(store));
    EXPECT_EQ(*optimizer.profile_path(), store + "/resnet50.json");
    EXPECT_FALSE(optimizer.loaded_from_profile());
    job.run_until_done(optimizer);
    first_measurements = optimizer.measurements();
    first_choice = *optimizer.chosen_power_limit_mw();
  }
  const auto text = read_text_file(store + "/resnet50.json");
  ASSERT_TRUE(text) << text.error().message();
  const auto json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["format"], "joule-power-limit-profile");
  EXPECT_EQ(json["version"], 1);
  EXPECT_EQ(json["job_key"], "resnet50");
  EXPECT_EQ(json["gpu_name"], "Tesla V100-PCIE-32GB (simulated)");
  EXPECT_EQ(json["gpu_count"], 2);
  EXPECT_EQ(json["world_size"], 1);
  EXPECT_EQ(json["profile_steps"], 5);
  EXPECT_EQ(json["constraints"]["min_w"], 100.0);
  EXPECT_EQ(json["constraints"]["max_w"], 250.0);
  EXPECT_EQ(json["constraints"]["default_w"], 250.0);
  ASSERT_EQ(json["measurements"].size(), 7u);
  EXPECT_EQ(json["measurements"][0]["power_limit_w"], 250.0);
  EXPECT_DOUBLE_EQ(json["measurements"][3]["energy_j"].get<double>(), first_measurements[3].energy_j);
  EXPECT_DOUBLE_EQ(json["measurements"][3]["time_s"].get<double>(), first_measurements[3].time_s);

  Job second("2xv100");
  PowerLimitOptions options = store_options(store);
  options.profile_steps = 40;  // the stored profile's own step count divides its windows
  PowerLimitOptimizer optimizer(*second.monitor, options);
  EXPECT_TRUE(optimizer.loaded_from_profile());
  EXPECT_EQ(optimizer.state(), PowerLimitState::kDone);
  EXPECT_EQ(*optimizer.chosen_power_limit_mw(), first_choice);
  ASSERT_EQ(optimizer.measurements().size(), 7u);
  EXPECT_EQ(optimizer.measurements()[2].steps, 5);
  EXPECT_DOUBLE_EQ(optimizer.measurements()[2].energy_j, first_measurements[2].energy_j);
  EXPECT_EQ(second.power_limits_set(), (std::vector<uint32_t>{first_choice}));
  second.step(optimizer, 10);
  EXPECT_TRUE(second.monitor->open_windows().empty());
  EXPECT_EQ(second.power_limits_set(), (std::vector<uint32_t>{first_choice}));
}

TEST(PowerLimitProfile, CorruptOrMismatchedProfileIsProfiledAgain) {
  test::TempDir dir;
  const std::string path = dir.path() + "/resnet50.json";
  {
    Job job("v100");
    PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
    job.run_until_done(optimizer);
  }
  const std::string good = read_text_file(path).value();
  auto json = nlohmann::json::parse(good);

  struct Case {
    std::string content;
    std::string warning;
  };
  auto edited = [&](auto edit) {
    auto copy = json;
    edit(copy);
    return copy.dump();
  };
  const std::vector<Case> cases = {
      {"{\"format\": ", "not valid JSON"},
      {"[]", "the profile must be a JSON object"},
      {edited([](auto& j) { j["format"] = "zeus"; }), "field 'format' must be \"joule-power-limit-profile\""},
      {edited([](auto& j) { j["version"] = 7; }), "unsupported profile version 7"},
      {edited([](auto& j) { j.erase("gpu_name"); }), "missing field 'gpu_name'"},
      {edited([](auto& j) { j["measurements"] = nlohmann::json::array(); }),
       "field 'measurements' must be a non-empty array"},
      {edited([](auto& j) { j["measurements"][1]["time_s"] = -1; }),
       "field 'measurements[1].time_s' must be a positive number, got -1"},
      {edited([](auto& j) { j["measurements"][2]["energy_j"] = "many"; }),
       "field 'measurements[2].energy_j' must be a number"},
      {edited([](auto& j) { j["measurements"][0]["power_limit_w"] = 400; }),
       "field 'measurements[0].power_limit_w' (400 W) is outside the constraints"},
      {edited([](auto& j) { j["measurements"][1]["power_limit_w"] = 250; }),
       "field 'measurements[1].power_limit_w': 250 W is measured twice"},
      {edited([](auto& j) { j["constraints"]["max_w"] = "x"; }),
       "field 'constraints.max_w' must be a number"},
      {edited([](auto& j) { j["profile_steps"] = 0; }), "field 'profile_steps' must be an integer from 1"},
      {edited([](auto& j) { j["gpu_name"] = "NVIDIA A40"; }),
       "it was measured on NVIDIA A40, this job runs on Tesla V100-PCIE-32GB (simulated)"},
      {edited([](auto& j) { j["gpu_count"] = 4; }), "it was measured with 4 GPU(s) per rank, this job has 1"},
      {edited([](auto& j) { j["world_size"] = 8; }), "it was measured with world size 8, this job has 1"},
      {edited([](auto& j) { j["job_key"] = "bert"; }), "it is the profile of job 'bert', not 'resnet50'"},
      {edited([](auto& j) { j["constraints"]["default_w"] = 200; }),
       "it was measured with power limits 100 W to 250 W (default 200 W), these GPUs allow 100 W to 250 W "
       "(default 250 W)"},
  };
  for (const auto& c : cases) {
    CapturedLog captured("[%l] %v");
    ASSERT_TRUE(write_file_atomic(path, c.content));
    Job job("v100");
    PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
    EXPECT_FALSE(optimizer.loaded_from_profile()) << c.warning;
    EXPECT_EQ(optimizer.state(), PowerLimitState::kReady) << c.warning;
    const std::string logged = captured.text();
    EXPECT_THAT(logged, ::testing::HasSubstr("[warning] power-limit optimizer: ignoring the stored profile"));
    EXPECT_THAT(logged, ::testing::HasSubstr(c.warning));
    EXPECT_THAT(logged, ::testing::HasSubstr("profiling again"));
  }
  // Profiling again rewrites a good file.
  ASSERT_TRUE(write_file_atomic(path, "garbage"));
  {
    Job job("v100");
    PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
    job.run_until_done(optimizer);
  }
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
  EXPECT_TRUE(optimizer.loaded_from_profile());
}

TEST(PowerLimitProfile, OtherGpusProfileAgain) {
  test::TempDir dir;
  {
    Job job("v100");
    PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
    job.run_until_done(optimizer);
  }
  CapturedLog captured("[%l] %v");
  Job job("a40");
  PowerLimitOptimizer optimizer(*job.monitor, store_options(dir.path()));
  EXPECT_FALSE(optimizer.loaded_from_profile());
  EXPECT_THAT(captured.text(), ::testing::HasSubstr("this job runs on NVIDIA A40 (simulated)"));
}

TEST(PowerLimitProfile, UnwritableStoreOnlyWarns) {
  test::TempDir dir;
  const std::string blocker = dir.write("not-a-folder", "x");
  CapturedLog captured("[%l] %v");
  Job job("v100");
  PowerLimitOptimizer optimizer(*job.monitor, store_options(blocker));
  job.run_until_done(optimizer);
  EXPECT_EQ(optimizer.state(), PowerLimitState::kDone);
  EXPECT_THAT(captured.text(), ::testing::HasSubstr("the profile is not saved"));
}

TEST(PowerLimitProfile, RanksAgreeBeforeUsingAProfile) {
  test::TempDir dir;
  {
    Job job("v100");
    PowerLimitOptions options = store_options(dir.path());
    options.aggregator = std::make_shared<TwoRankAggregator>(1);  // rank 1 does not save
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.run_until_done(optimizer);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/resnet50.json"));
  {
    Job job("v100");
    PowerLimitOptions options = store_options(dir.path());
    options.aggregator = std::make_shared<TwoRankAggregator>(0);
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.run_until_done(optimizer);
  }
  ASSERT_TRUE(std::filesystem::exists(dir.path() + "/resnet50.json"));
  {
    // This rank has the profile, the other does not: both profile.
    Job job("v100");
    PowerLimitOptions options = store_options(dir.path());
    auto aggregator = std::make_shared<TwoRankAggregator>(0, false);
    options.aggregator = aggregator;
    PowerLimitOptimizer optimizer(*job.monitor, options);
    EXPECT_EQ(aggregator->all_ranks_calls, 1);
    EXPECT_FALSE(optimizer.loaded_from_profile());
    EXPECT_EQ(optimizer.state(), PowerLimitState::kReady);
  }
  Job job("v100");
  PowerLimitOptions options = store_options(dir.path());
  options.aggregator = std::make_shared<TwoRankAggregator>(0, true);
  PowerLimitOptimizer optimizer(*job.monitor, options);
  EXPECT_TRUE(optimizer.loaded_from_profile());
  EXPECT_DOUBLE_EQ(std::get<ZeusCost>(optimizer.policy()).max_power_w, 500);
}

// --- restoring limits ------------------------------------------------------------------------------------

TEST(PowerLimitRestore, DefaultLimitOnDestruction) {
  Job job("v100");
  {
    PowerLimitOptions options;
    options.policy = MinEnergy{};
    options.warmup_steps = 1;
    options.profile_steps = 2;
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.run_until_done(optimizer);
    ASSERT_LT(*optimizer.chosen_power_limit_mw(), 250'000u);
    EXPECT_TRUE(device::SettingsGuard::signal_handler_installed(SIGINT));
    EXPECT_TRUE(device::SettingsGuard::signal_handler_installed(SIGTERM));
  }
  EXPECT_EQ(job.power_limits_set().back(), 250'000u);
  EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGINT));
  EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGTERM));
}

TEST(PowerLimitRestore, InitialLimitOnDestructionMidProfile) {
  Job job("2xv100");
  for (auto& gpu : job.gpus) {
    ASSERT_TRUE(gpu->set_power_limit_mw(180'000));
  }
  {
    PowerLimitOptions options;
    options.restore_to = RestoreTarget::kInitial;
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.step(optimizer, 65);  // 225 W, profiled since step 62
    ASSERT_EQ(optimizer.state(), PowerLimitState::kProfiling);
  }
  EXPECT_TRUE(job.monitor->open_windows().empty());
  for (size_t i = 0; i < 2; ++i) {
    const auto limits = job.power_limits_set(i);
    EXPECT_EQ(limits, (std::vector<uint32_t>{180'000, 250'000, 225'000, 180'000})) << i;
  }
}

TEST(PowerLimitRestore, HandlersFollowTheOptimizers) {
  Job job("v100");
  PowerLimitOptions quiet;
  quiet.restore_on_signals = false;
  {
    PowerLimitOptimizer optimizer(*job.monitor, quiet);
    EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGINT));
  }
  Job other("v100");
  auto first = std::make_unique<PowerLimitOptimizer>(*job.monitor);
  auto second = std::make_unique<PowerLimitOptimizer>(*other.monitor);
  EXPECT_TRUE(device::SettingsGuard::signal_handler_installed(SIGINT));
  first.reset();
  EXPECT_TRUE(device::SettingsGuard::signal_handler_installed(SIGINT));  // one is still alive
  second.reset();
  EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGINT));

  // An ignored signal stays ignored.
  struct sigaction ignore {};
  struct sigaction before {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &ignore, &before), 0);
  {
    PowerLimitOptimizer optimizer(*job.monitor);
    EXPECT_FALSE(device::SettingsGuard::signal_handler_installed(SIGTERM));
    EXPECT_TRUE(device::SettingsGuard::signal_handler_installed(SIGINT));
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, &before, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
}

std::atomic<int> g_previous_handler_calls{0};
void count_previous_handler(int) {
  g_previous_handler_calls.fetch_add(1);
}

TEST(PowerLimitRestore, SignalRestoresThenCallsThePreviousHandlerInProcess) {
  struct sigaction mine {};
  struct sigaction before {};
  mine.sa_handler = &count_previous_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, &before), 0);
  g_previous_handler_calls = 0;
  Job job("v100");
  {
    PowerLimitOptions options;
    options.wait_steps = 0;
    options.warmup_steps = 1;
    options.profile_steps = 1;
    PowerLimitOptimizer optimizer(*job.monitor, options);
    job.step(optimizer, 3);  // 225 W in warmup
    ASSERT_EQ(job.power_limits_set().back(), 225'000u);
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    for (int i = 0; i < 2000 && g_previous_handler_calls.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(g_previous_handler_calls.load(), 1);
    EXPECT_EQ(job.power_limits_set(), (std::vector<uint32_t>{250'000, 225'000, 250'000}));
    // The job goes on: 225 W is warmed up again from scratch.
    optimizer.on_step_begin();
    EXPECT_EQ(optimizer.state(), PowerLimitState::kWarmup);
    EXPECT_EQ(job.power_limits_set().back(), 225'000u);
    job.training->run_iterations(1);
    job.run_until_done(optimizer);
  }
  const auto limits = job.power_limits_set();
  EXPECT_EQ(limits.back(), 250'000u);
  // Restored once per change: the destructor's restore follows a change made after the signal's.
  EXPECT_EQ(std::count(limits.begin(), limits.end(), 250'000u), limits.back() == 250'000u ? 4 : 3);
  struct sigaction after {};
  ::sigaction(SIGTERM, &before, &after);
  EXPECT_EQ(after.sa_handler, &count_previous_handler);
}

// The helper lowers a 300 W-max, 250 W-default GPU to 200 W (writing 300000, 250000, 200000 to the file).
struct Helper {
  test::TempDir dir;
  std::string file = dir.path() + "/limits";

  std::vector<std::string> lines() const { return test::read_lines(file); }
};

const std::vector<std::string> kLowered = {"300000", "250000", "200000"};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class PowerLimitSignals : public ::testing::TestWithParam<int> {};

TEST_P(PowerLimitSignals, RestoreThenDieOfTheSignal) {
  const int signal_number = GetParam();
  Helper helper;
  test::Process child({JOULE_POWER_LIMIT_HELPER, helper.file, "wait"});
  ASSERT_TRUE(child.wait_for_output(std::chrono::seconds(20))) << child.err_so_far();
  child.signal(signal_number);
  const auto result = child.wait();
  EXPECT_EQ(result.exit_code, 128 + signal_number) << result.err;
  EXPECT_EQ(helper.lines(), concat(kLowered, {"250000"}));
}

INSTANTIATE_TEST_SUITE_P(IntTermAndHup, PowerLimitSignals, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& test_info) {
                           return "SIG" + std::string(sigabbrev_np(test_info.param));
                         });

TEST(PowerLimitSignalsChild, RaisedSigterm) {
  Helper helper;
  const auto result = test::run({JOULE_POWER_LIMIT_HELPER, helper.file, "raise-term"});
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_EQ(helper.lines(), concat(kLowered, {"250000"}));
}

TEST(PowerLimitSignalsChild, PreviousHandlerRunsAndTheJobGoesOn) {
  Helper helper;
  test::Process child({JOULE_POWER_LIMIT_HELPER, helper.file, "handler"});
  ASSERT_TRUE(child.wait_for_output(std::chrono::seconds(20))) << child.err_so_far();
  child.signal(SIGINT);
  const auto result = child.wait();
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // Restored, then the program's own handler; the job went on (max, then 200 W warmed up again); the
  // destructor restored once more.
  EXPECT_EQ(helper.lines(), concat(kLowered, {"250000", "handler", "300000", "200000", "250000"}));
}

TEST(PowerLimitSignalsChild, ExitWithAnOptimizerAlive) {
  Helper helper;
  const auto result = test::run({JOULE_POWER_LIMIT_HELPER, helper.file, "exit"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(helper.lines(), concat(kLowered, {"250000"}));
}

}  // namespace
}  // namespace joule::optimize
