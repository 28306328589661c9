// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/settings_guard_helper.hpp"
#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::plan {
namespace {

using device::sim::GpuModel;
using device::sim::OperatingPoint;
using device::sim::SettingRecord;
using device::sim::SimulatedGpu;
using ::testing::Return;

constexpr auto kF = Instruction::kForward;
constexpr auto kB = Instruction::kBackward;

const std::string kProfilePath = std::string(JOULE_PERSEUS_DATA_DIR) + "/example_s4_m8_profile.csv";
constexpr double kExampleBlockingW = 75;

// The controller does not care what the GPU computes; this keeps its power constant.
class ConstantWorkload final : public device::sim::Workload {
 public:
  std::string description() const override { return "constant"; }
  OperatingPoint at(double, std::optional<double>) const override { return {200, 1, 1410}; }
};

GpuModel controller_test_model() {
  GpuModel model;
  model.key = "test";
  model.name = "Test GPU";
  model.min_power_limit_mw = 100'000;
  model.max_power_limit_mw = 400'000;
  model.default_power_limit_mw = 400'000;
  model.min_sm_clock_mhz = 810;
  model.max_sm_clock_mhz = 1410;
  model.sm_clock_step_mhz = 15;
  model.idle_power_w = 50;
  return model;
}

// A simulated GPU with its model and clock kept alive alongside.
struct SimRig {
  GpuModel model = controller_test_model();
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  SimulatedGpu gpu{model, std::make_shared<ConstantWorkload>(), clock, 0};

  std::vector<SettingRecord> clock_settings() const {
    std::vector<SettingRecord> settings;
    for (const SettingRecord& record : gpu.settings_log()) {
      if (record.setting.rfind("sm_clocks", 0) == 0) {
        settings.push_back(record);
      }
    }
    return settings;
  }
};

// Stage 0 of a 2-stage, 3-microbatch 1F1B pipeline: F0 F1 B0 F2 B1 B2.
StageSchedule stage0_schedule(uint32_t a = 1410, uint32_t b = 1200) {
  return {{kF, 0, a}, {kF, 1, a}, {kB, 0, b}, {kF, 2, b}, {kB, 1, a}, {kB, 2, a}};
}

void run_schedule(FrequencyController& controller) {
  for (const PlannedComputation& planned : controller.schedule()) {
    ASSERT_TRUE(controller.begin(planned.instruction, planned.microbatch));
  }
  ASSERT_TRUE(controller.end_iteration());
}

std::vector<uint32_t> locked_clocks(const std::vector<SettingRecord>& settings) {
  std::vector<uint32_t> clocks;
  for (const SettingRecord& record : settings) {
    clocks.push_back(record.setting == "sm_clocks_locked_mhz" ? record.value : 0);
  }
  return clocks;
}

// ---------------------------------------------------------------------------------------------------------
// FrequencyController

TEST(FrequencyController, LocksTheClockOnlyWhenTheFrequencyChanges) {
  SimRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, stage0_schedule());
    ASSERT_TRUE(controller) << controller.error().message();
    EXPECT_TRUE(rig.clock_settings().empty()) << "creating a controller must not touch the clock";
    run_schedule(*controller);
    EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1410, 1200, 1410}));
    // The next iteration starts at 1410 MHz, where the last one ended: no call for it.
    run_schedule(*controller);
    EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1410, 1200, 1410, 1200, 1410}));
    EXPECT_EQ(controller->lock_count(), 5u);
    EXPECT_EQ(controller->locked_clock_mhz(), 1410u);
    for (const SettingRecord& record : rig.clock_settings()) {
      EXPECT_EQ(record.value_min, record.value) << "the lock pins one clock";
    }
  }
  const auto settings = rig.clock_settings();
  ASSERT_EQ(settings.size(), 6u);
  EXPECT_EQ(settings.back().setting, "sm_clocks_reset");
}

TEST(FrequencyController, KeepClockMakesNoDeviceCall) {
  SimRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, {{kF, 0, kKeepClockMhz}, {kB, 0, kKeepClockMhz}});
    ASSERT_TRUE(controller);
    run_schedule(*controller);
    EXPECT_EQ(controller->lock_count(), 0u);
  }
  EXPECT_TRUE(rig.clock_settings().empty()) << "never locked, so nothing to reset";
}

TEST(FrequencyController, RejectsACallOutOfStepWithThePlan) {
  SimRig rig;
  auto controller = FrequencyController::create(rig.gpu, stage0_schedule());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kF, 0));
  JOULE_EXPECT_ERROR(
      controller->begin(kB, 0), ErrorCode::kState,
      "GPU 0 (Test GPU): the training loop is out of step with its frequency schedule: instruction 2 of "
      "6 should be 'forward' of microbatch 1, got 'backward' of microbatch 0");
  JOULE_EXPECT_ERROR(
      controller->begin(kF, 2), ErrorCode::kState,
      "GPU 0 (Test GPU): the training loop is out of step with its frequency schedule: instruction 2 of "
      "6 should be 'forward' of microbatch 1, got 'forward' of microbatch 2");
  // A rejected call neither advances the plan nor changes the clock.
  EXPECT_EQ(controller->position(), 1u);
  EXPECT_EQ(controller->locked_clock_mhz(), 1410u);
  EXPECT_TRUE(controller->begin(kF, 1));
  EXPECT_EQ(controller->position(), 2u);
}

TEST(FrequencyController, RejectsACallAfterThePlanIsUsedUp) {
  SimRig rig;
  auto controller = FrequencyController::create(rig.gpu, {{kF, 0, 1410}, {kB, 0, 1410}});
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kF, 0));
  ASSERT_TRUE(controller->begin(kB, 0));
  JOULE_EXPECT_ERROR(
      controller->begin(kF, 1), ErrorCode::kState,
      "GPU 0 (Test GPU): the training loop is out of step with its frequency schedule: got 'forward' of "
      "microbatch 1 after all 2 instructions of the iteration (end_iteration() was not called)");
  EXPECT_TRUE(controller->end_iteration());
  EXPECT_TRUE(controller->begin(kF, 0));
}

TEST(FrequencyController, EndIterationChecksThePlanWasUsedUpAndRewinds) {
  SimRig rig;
  auto controller = FrequencyController::create(rig.gpu, stage0_schedule());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kF, 0));
  ASSERT_TRUE(controller->begin(kF, 1));
  JOULE_EXPECT_ERROR(
      controller->end_iteration(), ErrorCode::kState,
      "GPU 0 (Test GPU): the iteration ended after 2 of 6 instructions of its frequency schedule; the "
      "next would have been 'backward' of microbatch 0");
  EXPECT_EQ(controller->position(), 0u);
  // Rewound: the next iteration starts in step.
  run_schedule(*controller);
}

TEST(FrequencyController, ResetsTheClockOnDestructionOnlyIfItLocked) {
  SimRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, stage0_schedule());
    ASSERT_TRUE(controller);
  }
  EXPECT_TRUE(rig.clock_settings().empty());
  {
    auto controller = FrequencyController::create(rig.gpu, stage0_schedule());
    ASSERT_TRUE(controller);
    ASSERT_TRUE(controller->begin(kF, 0));
    // Moving transfers the duty to reset: exactly one reset follows.
    FrequencyController moved(std::move(*controller));
    EXPECT_EQ(moved.position(), 1u);
  }
  const auto settings = rig.clock_settings();
  ASSERT_EQ(settings.size(), 2u);
  EXPECT_EQ(settings[0].setting, "sm_clocks_locked_mhz");
  EXPECT_EQ(settings[1].setting, "sm_clocks_reset");
}

TEST(FrequencyController, ExplicitResetRelocksOnTheNextComputation) {
  SimRig rig;
  auto controller = FrequencyController::create(rig.gpu, {{kF, 0, 1200}, {kB, 0, 1200}});
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kF, 0));
  ASSERT_TRUE(controller->reset_clocks());
  EXPECT_EQ(controller->locked_clock_mhz(), std::nullopt);
  ASSERT_TRUE(controller->begin(kB, 0));
  EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1200, 0, 1200}));
}

std::atomic<int> g_hangups{0};
void count_hangup(int) {
  g_hangups.fetch_add(1);
}

TEST(FrequencyController, ASignalResetsTheClockAndTheNextComputationLocksAgain) {
  struct sigaction mine {};
  struct sigaction before {};
  mine.sa_handler = &count_hangup;  // the process lives on after the signal
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGHUP, &mine, &before), 0);
  g_hangups = 0;
  SimRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, {{kF, 0, 1200}, {kB, 0, 1200}});
    ASSERT_TRUE(controller);
    ASSERT_TRUE(controller->begin(kF, 0));
    ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
    for (int i = 0; i < 2000 && g_hangups.load() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(g_hangups.load(), 1);
    EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1200, 0}));
    ASSERT_TRUE(controller->begin(kB, 0));
    EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1200, 0, 1200}));
  }
  EXPECT_EQ(locked_clocks(rig.clock_settings()), (std::vector<uint32_t>{1200, 0, 1200, 0}));
  ::sigaction(SIGHUP, &before, nullptr);
}

// The helper's controller locks 1200 MHz for a forward, then the process ends.
std::vector<std::string> locked_then_reset() {
  return {"lock 1200 1200", "reset-clocks"};
}

TEST(FrequencyControllerChild, SigtermResetsTheClock) {
  test::SettingsGuardHelper helper;
  const auto result = helper.end_with_signal("frequency", SIGTERM);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->exit_code, 128 + SIGTERM) << result->err;
  EXPECT_EQ(helper.lines(), locked_then_reset());
}

TEST(FrequencyControllerChild, ExitResetsTheClock) {
  test::SettingsGuardHelper helper;
  const auto result = test::run(helper.argv("frequency", "exit"));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(helper.lines(), locked_then_reset());
}

TEST(FrequencyController, UnsupportedFrequencyFailsAtCreation) {
  SimRig rig;
  JOULE_EXPECT_ERROR(
      FrequencyController::create(rig.gpu, {{kF, 0, 1410}, {kF, 1, 1412}, {kB, 0, 1}}),
      ErrorCode::kOutOfRange,
      "GPU 0 (Test GPU) does not support the SM clock 1412 MHz planned for computation 2 (forward "
      "of microbatch 1); nearest supported: 1410 MHz");
  JOULE_EXPECT_ERROR(
      FrequencyController::create(rig.gpu, {{kB, 3, 1000}}), ErrorCode::kOutOfRange,
      "GPU 0 (Test GPU) does not support the SM clock 1000 MHz planned for computation 1 (backward "
      "of microbatch 3); nearest supported: 990 and 1005 MHz");
  JOULE_EXPECT_ERROR(
      FrequencyController::create(rig.gpu, {{kB, 0, 600}}), ErrorCode::kOutOfRange,
      "GPU 0 (Test GPU) does not support the SM clock 600 MHz planned for computation 1 (backward "
      "of microbatch 0); nearest supported: 810 MHz");
  EXPECT_TRUE(rig.clock_settings().empty());
}

TEST(FrequencyController, PassesDeviceErrorsThrough) {
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_supported_sm_clocks_mhz())
      .WillRepeatedly(Return(Result<std::vector<uint32_t>>(std::vector<uint32_t>{1410, 1200})));
  EXPECT_CALL(gpu, do_lock_sm_clocks(1410u, 1410u))
      .WillOnce(Return(fail(ErrorCode::kPermissionDenied,
                            "locking the SM clocks of GPU 0 (Mock GPU) needs root or CAP_SYS_ADMIN")))
      .WillOnce(Return(Result<void>()));
  EXPECT_CALL(gpu, do_reset_sm_clocks())
      .WillOnce(Return(fail(ErrorCode::kDevice, "the driver is gone")))
      .WillOnce(Return(Result<void>()));
  {
    auto controller = FrequencyController::create(gpu, {{kF, 0, 1410}, {kB, 0, 1410}});
    ASSERT_TRUE(controller);
    JOULE_EXPECT_ERROR(controller->begin(kF, 0), ErrorCode::kPermissionDenied,
                       "locking the SM clocks of GPU 0 (Mock GPU) needs root or CAP_SYS_ADMIN");
    EXPECT_EQ(controller->position(), 0u) << "a failed lock does not advance the plan";
    EXPECT_EQ(controller->locked_clock_mhz(), std::nullopt);
    EXPECT_TRUE(controller->begin(kF, 0));
    EXPECT_TRUE(controller->begin(kB, 0));
    JOULE_EXPECT_ERROR(controller->reset_clocks(), ErrorCode::kDevice, "the driver is gone");
    // The failed reset left the lock on record, so destruction tries again (and succeeds).
  }
}

TEST(FrequencyController, NoResetAfterOnlyFailedLocks) {
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_supported_sm_clocks_mhz())
      .WillOnce(Return(Result<std::vector<uint32_t>>(std::vector<uint32_t>{1410})));
  EXPECT_CALL(gpu, do_lock_sm_clocks(1410u, 1410u))
      .WillOnce(Return(fail(ErrorCode::kNotSupported, "GPU 0 (Mock GPU) cannot lock its SM clocks")));
  EXPECT_CALL(gpu, do_reset_sm_clocks()).Times(0);
  auto controller = FrequencyController::create(gpu, {{kF, 0, 1410}});
  ASSERT_TRUE(controller);
  JOULE_EXPECT_ERROR(controller->begin(kF, 0), ErrorCode::kNotSupported,
                     "GPU 0 (Mock GPU) cannot lock its SM clocks");
}

TEST(FrequencyController, ClockListErrorFailsCreation) {
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_supported_sm_clocks_mhz())
      .WillOnce(Return(fail(ErrorCode::kNotSupported, "GPU 0 (Mock GPU) cannot list its SM clocks")));
  JOULE_EXPECT_ERROR(FrequencyController::create(gpu, {{kF, 0, 1410}}), ErrorCode::kNotSupported,
                     "GPU 0 (Mock GPU) cannot list its SM clocks");
}

TEST(FrequencyController, StageSchedulesFollowTheDagOrder) {
  const PipelineDag dag = value_or_throw(build_pipeline(4, 8, Schedule::k1F1B));
  FrequencyPlan plan(dag.computations.size());
  for (size_t node = 0; node < plan.size(); ++node) {
    plan[node] = 810 + 15 * static_cast<uint32_t>(node % 41);
  }
  const auto schedules = stage_schedules(dag, plan);
  ASSERT_TRUE(schedules);
  ASSERT_EQ(schedules->size(), 4u);
  for (size_t stage = 0; stage < 4; ++stage) {
    const StageSchedule& schedule = (*schedules)[stage];
    ASSERT_EQ(schedule.size(), dag.stage_order[stage].size());
    for (size_t i = 0; i < schedule.size(); ++i) {
      const auto node = static_cast<size_t>(dag.stage_order[stage][i]);
      EXPECT_EQ(schedule[i].instruction, dag.computations[node].instruction);
      EXPECT_EQ(schedule[i].microbatch, dag.computations[node].microbatch);
      EXPECT_EQ(schedule[i].frequency_mhz, plan[node]);
    }
  }
  // Stage 0 of 1F1B with S=4, M=8: F0 F1 F2 F3 B0 F4 …
  EXPECT_EQ((*schedules)[0][4].instruction, kB);
  EXPECT_EQ((*schedules)[0][4].microbatch, 0);
  plan.pop_back();
  JOULE_EXPECT_ERROR(stage_schedules(dag, plan), ErrorCode::kInvalidArgument,
                     "the frequency plan has 63 entries but the pipeline has 64 computations");
}

// ---------------------------------------------------------------------------------------------------------
// PipelineExecutor

// 2 stages × {forward, backward} × {1000, 500} MHz, in whole seconds and joules so that the expected
// timelines can be worked out by hand. Powers (W): s0 F 100/40, s0 B 150/…, s1 F 150/60, s1 B 200/….
Profile toy_profile() {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(2);
  options[0][0] = {{1000, 1, 100}, {500, 2, 80}};
  options[0][1] = {{1000, 2, 300}, {500, 4, 280}};
  options[1][0] = {{1000, 2, 300}, {500, 4, 240}};
  options[1][1] = {{1000, 3, 600}, {500, 6, 540}};
  return value_or_throw(Profile::from_options(std::move(options)));
}

constexpr double kToyBlockingW = 50;

struct ExpectedRun {
  double time_s;
  std::vector<double> stage_energy_j;
};

void expect_toy_run(const PipelineDag& dag, const FrequencyPlan& plan, const ExpectedRun& expected,
                    const std::vector<std::pair<double, double>>& expected_spans) {
  const auto measured = run_iteration(dag, toy_profile(), plan, kToyBlockingW);
  ASSERT_TRUE(measured) << measured.error().message();
  // Whole seconds and joules: exact on the nanosecond clock and the millijoule counter.
  EXPECT_DOUBLE_EQ(measured->time_s, expected.time_s);
  EXPECT_DOUBLE_EQ(measured->predicted.time_s, expected.time_s);
  double total_j = 0;
  for (size_t stage = 0; stage < 2; ++stage) {
    EXPECT_NEAR(measured->stage_energy_j[stage], expected.stage_energy_j[stage], 1e-3) << "stage " << stage;
    EXPECT_NEAR(measured->stage_exact_energy_j[stage], expected.stage_energy_j[stage], 1e-9)
        << "stage " << stage;
    EXPECT_NEAR(measured->predicted_stage_energy_j[stage], expected.stage_energy_j[stage], 1e-9);
    total_j += expected.stage_energy_j[stage];
  }
  EXPECT_NEAR(measured->energy_j, total_j, 2e-3);
  EXPECT_NEAR(measured->predicted.energy_j, total_j, 1e-9);
  ASSERT_EQ(expected_spans.size(), dag.computations.size());
  for (size_t node = 0; node < expected_spans.size(); ++node) {
    EXPECT_DOUBLE_EQ(measured->timeline.start_s[node], expected_spans[node].first) << "node " << node;
    EXPECT_DOUBLE_EQ(measured->timeline.end_s[node], expected_spans[node].second) << "node " << node;
  }
}

// Lists (start, end) in node-id order from spans given per (stage, instruction, microbatch).
std::vector<std::pair<double, double>> spans_by_node(
    const PipelineDag& dag, const std::vector<std::tuple<int, Instruction, int, double, double>>& spans) {
  std::vector<std::pair<double, double>> by_node(dag.computations.size(), {-1, -1});
  for (const auto& [stage, instruction, microbatch, start_s, end_s] : spans) {
    by_node[static_cast<size_t>(dag.node(stage, instruction, microbatch))] = {start_s, end_s};
  }
  return by_node;
}

TEST(PipelineExecutor, ToyOneFOneBAtFullClockByHand) {
  // Stage 0: F0 F1 B0 F2 B1 B2; stage 1: F0 B0 F1 B1 F2 B2.
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::k1F1B));
  const auto spans = spans_by_node(dag, {{0, kF, 0, 0, 1},
                                         {0, kF, 1, 1, 2},
                                         {1, kF, 0, 1, 3},
                                         {1, kB, 0, 3, 6},
                                         {0, kB, 0, 6, 8},
                                         {0, kF, 2, 8, 9},
                                         {1, kF, 1, 6, 8},
                                         {1, kB, 1, 8, 11},
                                         {1, kF, 2, 11, 13},
                                         {1, kB, 2, 13, 16},
                                         {0, kB, 1, 11, 13},
                                         {0, kB, 2, 16, 18}});
  // Stage 0 computes 3·100 + 3·300 J in 9 s, blocks 9 s at 50 W; stage 1 3·300 + 3·600 J in 15 s, blocks 3 s.
  expect_toy_run(dag, uniform_plan(dag, 1000), {18, {1650, 2850}}, spans);
}

TEST(PipelineExecutor, ToyOneFOneBSlowingOffTheCriticalPathSavesEnergy) {
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::k1F1B));
  FrequencyPlan plan = uniform_plan(dag, 1000);
  // F(0,2) has 2 s of slack (it ends at 9, F(1,2) waits for B(1,1) until 11): at 500 MHz it ends at 10.
  plan[static_cast<size_t>(dag.node(0, kF, 2))] = 500;
  const auto spans = spans_by_node(dag, {{0, kF, 0, 0, 1},
                                         {0, kF, 1, 1, 2},
                                         {1, kF, 0, 1, 3},
                                         {1, kB, 0, 3, 6},
                                         {0, kB, 0, 6, 8},
                                         {0, kF, 2, 8, 10},
                                         {1, kF, 1, 6, 8},
                                         {1, kB, 1, 8, 11},
                                         {1, kF, 2, 11, 13},
                                         {1, kB, 2, 13, 16},
                                         {0, kB, 1, 11, 13},
                                         {0, kB, 2, 16, 18}});
  // Stage 0: 2·100 + 80 + 3·300 J, busy 10 s, blocked 8 s: 1180 + 400.
  expect_toy_run(dag, plan, {18, {1580, 2850}}, spans);
}

TEST(PipelineExecutor, ToyOneFOneBSlowingTheCriticalPathStretchesTheIteration) {
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::k1F1B));
  FrequencyPlan plan = uniform_plan(dag, 1000);
  plan[static_cast<size_t>(dag.node(1, kF, 0))] = 500;  // 4 s instead of 2, on the critical path
  const auto spans = spans_by_node(dag, {{0, kF, 0, 0, 1},
                                         {0, kF, 1, 1, 2},
                                         {1, kF, 0, 1, 5},
                                         {1, kB, 0, 5, 8},
                                         {0, kB, 0, 8, 10},
                                         {0, kF, 2, 10, 11},
                                         {1, kF, 1, 8, 10},
                                         {1, kB, 1, 10, 13},
                                         {1, kF, 2, 13, 15},
                                         {1, kB, 2, 15, 18},
                                         {0, kB, 1, 13, 15},
                                         {0, kB, 2, 18, 20}});
  // Stage 0: 1200 J in 9 s + 11 s blocked; stage 1: 240 + 2·300 + 3·600 J in 17 s + 3 s blocked.
  expect_toy_run(dag, plan, {20, {1750, 2790}}, spans);
}

TEST(PipelineExecutor, ToyGPipeByHand) {
  // Both stages: F0 F1 F2 B2 B1 B0.
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::kGPipe));
  const auto spans = spans_by_node(dag, {{0, kF, 0, 0, 1},
                                         {0, kF, 1, 1, 2},
                                         {0, kF, 2, 2, 3},
                                         {1, kF, 0, 1, 3},
                                         {1, kF, 1, 3, 5},
                                         {1, kF, 2, 5, 7},
                                         {1, kB, 2, 7, 10},
                                         {1, kB, 1, 10, 13},
                                         {1, kB, 0, 13, 16},
                                         {0, kB, 2, 10, 12},
                                         {0, kB, 1, 13, 15},
                                         {0, kB, 0, 16, 18}});
  expect_toy_run(dag, uniform_plan(dag, 1000), {18, {1650, 2850}}, spans);
}

TEST(PipelineExecutor, GpuModelCoversTheProfileClocks) {
  const Profile profile = toy_profile();
  const GpuModel model = pipeline_gpu_model(profile, kToyBlockingW);
  EXPECT_EQ(model.min_sm_clock_mhz, 500u);
  EXPECT_EQ(model.max_sm_clock_mhz, 1000u);
  EXPECT_EQ(model.idle_power_w, kToyBlockingW);
  EXPECT_TRUE(model.has_energy_counter);
  EXPECT_EQ(model.max_power_limit_mw, 200'000u);

  const Profile example = value_or_throw(Profile::read(kProfilePath));
  const GpuModel example_model = pipeline_gpu_model(example, kExampleBlockingW);
  SimulatedGpu gpu(example_model, std::make_shared<ConstantWorkload>(), std::make_shared<VirtualClock>(), 0);
  const auto supported = gpu.supported_sm_clocks_mhz();
  ASSERT_TRUE(supported);
  for (const uint32_t frequency_mhz : example.frequencies_mhz()) {
    EXPECT_NE(std::find(supported->begin(), supported->end(), frequency_mhz), supported->end())
        << frequency_mhz;
  }
  EXPECT_EQ(supported->size(), example.frequencies_mhz().size());
}

enum class PlanKind { kAll1410, kAll810, kRandomMixed };

struct ExampleCase {
  Schedule schedule;
  PlanKind plan;
};

// Keeps gtest from printing the case as raw bytes in test names.
void PrintTo(const ExampleCase& example, std::ostream* out) {
  *out << to_string(example.schedule) << " plan " << static_cast<int>(example.plan);
}

std::string case_name(const ::testing::TestParamInfo<ExampleCase>& info) {
  const char* plan = info.param.plan == PlanKind::kAll1410  ? "all1410"
                     : info.param.plan == PlanKind::kAll810 ? "all810"
                                                            : "random_mixed";
  return std::string(info.param.schedule == Schedule::k1F1B ? "onef1b_" : "gpipe_") + plan;
}

class PipelineExecutorExample : public ::testing::TestWithParam<ExampleCase> {
 protected:
  static FrequencyPlan make_plan(const PipelineDag& dag, const Profile& profile, PlanKind kind) {
    if (kind == PlanKind::kAll1410) {
      return uniform_plan(dag, 1410);
    }
    if (kind == PlanKind::kAll810) {
      return uniform_plan(dag, 810);
    }
    std::mt19937 rng(20241104);
    const auto& frequencies = profile.frequencies_mhz();
    std::uniform_int_distribution<size_t> pick(0, frequencies.size() - 1);
    FrequencyPlan plan(dag.computations.size());
    for (uint32_t& frequency_mhz : plan) {
      frequency_mhz = frequencies[pick(rng)];
    }
    return plan;
  }
};

TEST_P(PipelineExecutorExample, MeasuredEqualsTheModel) {
  const Profile profile = value_or_throw(Profile::read(kProfilePath));
  const PipelineDag dag = value_or_throw(build_pipeline(4, 8, GetParam().schedule));
  const FrequencyPlan plan = make_plan(dag, profile, GetParam().plan);
  auto executor = PipelineExecutor::create(dag, profile, kExampleBlockingW);
  ASSERT_TRUE(executor) << executor.error().message();

  for (int iteration = 0; iteration < 2; ++iteration) {
    SCOPED_TRACE(iteration);
    const auto measured = executor->run_iteration(plan);
    ASSERT_TRUE(measured) << measured.error().message();
    const PlanCost predicted = value_or_throw(evaluate(dag, profile, plan, kExampleBlockingW));
    EXPECT_EQ(measured->predicted.time_s, predicted.time_s);
    EXPECT_EQ(measured->predicted.energy_j, predicted.energy_j);

    // Time: the clock resolves 1 ns, and event times are rounded to it without accumulating.
    EXPECT_NEAR(measured->time_s, predicted.time_s, std::max(1e-9 * predicted.time_s, 1e-9));
    // Energy: each GPU's counter resolves 1 mJ; the exact integral agrees to rounding.
    EXPECT_NEAR(measured->energy_j, predicted.energy_j, 4e-3);
    double exact_total_j = 0;
    double predicted_total_j = 0;
    for (size_t stage = 0; stage < 4; ++stage) {
      EXPECT_NEAR(measured->stage_energy_j[stage], measured->predicted_stage_energy_j[stage], 1e-3);
      EXPECT_NEAR(measured->stage_exact_energy_j[stage], measured->predicted_stage_energy_j[stage],
                  1e-9 * measured->predicted_stage_energy_j[stage]);
      exact_total_j += measured->stage_exact_energy_j[stage];
      predicted_total_j += measured->predicted_stage_energy_j[stage];
    }
    EXPECT_NEAR(exact_total_j, predicted.energy_j, 1e-9 * predicted.energy_j);
    EXPECT_NEAR(predicted_total_j, predicted.energy_j, 1e-9 * predicted.energy_j);

    // The computations ran when the model's ASAP schedule says.
    std::vector<double> times_s;
    for (size_t node = 0; node < dag.computations.size(); ++node) {
      times_s.push_back(value_or_throw(option_at(profile, dag.computations[node], plan[node])).time_s);
    }
    const Timeline model = schedule_times(dag, times_s);
    for (size_t node = 0; node < dag.computations.size(); ++node) {
      EXPECT_NEAR(measured->timeline.start_s[node], model.start_s[node], 1e-9) << "node " << node;
      EXPECT_NEAR(measured->timeline.end_s[node], model.end_s[node], 1e-9) << "node " << node;
    }

    // Clock locks: one per change of frequency along each stage's order; the second iteration saves the
    // first lock when the stage ends at the clock it starts with.
    const auto schedules = value_or_throw(stage_schedules(dag, plan));
    for (size_t stage = 0; stage < 4; ++stage) {
      const StageSchedule& schedule = schedules[stage];
      size_t changes = 0;
      for (size_t i = 1; i < schedule.size(); ++i) {
        changes += schedule[i].frequency_mhz != schedule[i - 1].frequency_mhz ? 1 : 0;
      }
      const bool relock = iteration == 0 || schedule.front().frequency_mhz != schedule.back().frequency_mhz;
      EXPECT_EQ(measured->clock_locks[stage], changes + (relock ? 1 : 0)) << "stage " << stage;
    }
  }
  if (GetParam().plan == PlanKind::kAll1410 && GetParam().schedule == Schedule::k1F1B) {
    // data/perseus/README.md: every computation at 1410 MHz takes 0.740 s and 852.27 J.
    const PlanCost predicted = value_or_throw(evaluate(dag, profile, plan, kExampleBlockingW));
    EXPECT_NEAR(predicted.time_s, 0.740, 5e-4);
    EXPECT_NEAR(predicted.energy_j, 852.27, 5e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, PipelineExecutorExample,
                         ::testing::Values(ExampleCase{Schedule::k1F1B, PlanKind::kAll1410},
                                           ExampleCase{Schedule::k1F1B, PlanKind::kAll810},
                                           ExampleCase{Schedule::k1F1B, PlanKind::kRandomMixed},
                                           ExampleCase{Schedule::kGPipe, PlanKind::kAll1410},
                                           ExampleCase{Schedule::kGPipe, PlanKind::kAll810},
                                           ExampleCase{Schedule::kGPipe, PlanKind::kRandomMixed}),
                         case_name);

TEST(PipelineExecutor, ANewPlanResetsTheClocksFirst) {
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::k1F1B));
  auto executor = PipelineExecutor::create(dag, toy_profile(), kToyBlockingW);
  ASSERT_TRUE(executor);
  ASSERT_TRUE(executor->run_iteration(uniform_plan(dag, 1000)));
  const auto slow = executor->run_iteration(uniform_plan(dag, 500));
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->clock_locks, (std::vector<size_t>{1, 1}));
  for (SimulatedGpu* gpu : executor->gpus()) {
    std::vector<std::string> settings;
    for (const SettingRecord& record : gpu->settings_log()) {
      settings.push_back(record.setting + " " + std::to_string(record.value));
    }
    EXPECT_EQ(settings, (std::vector<std::string>{"sm_clocks_locked_mhz 1000", "sm_clocks_reset 0",
                                                  "sm_clocks_locked_mhz 500"}));
  }
  // Toy at 500 MHz, stage 1 sets the pace: 36 s, hand-checkable as twice the 1000 MHz timeline.
  EXPECT_DOUBLE_EQ(slow->time_s, 36);
}

TEST(PipelineExecutor, RejectsBadInput) {
  const PipelineDag dag = value_or_throw(build_pipeline(2, 3, Schedule::k1F1B));
  JOULE_EXPECT_ERROR(PipelineExecutor::create(dag, toy_profile(), -1), ErrorCode::kInvalidArgument,
                     "the blocking power must be finite and non-negative, got -1 W");
  const PipelineDag wide = value_or_throw(build_pipeline(3, 3, Schedule::k1F1B));
  JOULE_EXPECT_ERROR(PipelineExecutor::create(wide, toy_profile(), kToyBlockingW),
                     ErrorCode::kInvalidArgument, "the profile has 2 stages but the pipeline has 3");

  auto executor = PipelineExecutor::create(dag, toy_profile(), kToyBlockingW);
  ASSERT_TRUE(executor);
  FrequencyPlan short_plan = uniform_plan(dag, 1000);
  short_plan.pop_back();
  EXPECT_EQ(executor->run_iteration(short_plan).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(executor->run_iteration(uniform_plan(dag, 750)).error().code(), ErrorCode::kNotFound);
  // Still usable after errors, and nothing ran.
  EXPECT_EQ(executor->clock().now(), Nanos(0));
  EXPECT_TRUE(executor->run_iteration(uniform_plan(dag, 1000)));
}

}  // namespace
}  // namespace joule::plan
