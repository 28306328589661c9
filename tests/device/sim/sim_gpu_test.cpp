// SPDX-License-Identifier: Apache-2.0
#include "joule/device/sim_gpu.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::device::sim {
namespace {

constexpr double kImagenetIterations = 5005;  // ceil(1,281,167 / 256)

struct SimFixture : ::testing::Test {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::unique_ptr<SimulatedGpu> open(std::string_view spec_text) {
    auto spec = parse_spec(spec_text);
    EXPECT_TRUE(spec) << (spec ? "" : spec.error().message());
    auto gpus = open_sim_gpus(*spec, clock);
    EXPECT_TRUE(gpus);
    return std::move(gpus->front());
  }
};

TEST_F(SimFixture, FollowsThePowerTraceAtMeasuredLimits) {
  auto gpu = open("v100:imagenet:256");
  EXPECT_EQ(*gpu->power_limit_mw(), 250'000u);
  OperatingPoint op = gpu->operating_point();
  EXPECT_DOUBLE_EQ(op.power_w, 220.25029530245453);
  EXPECT_DOUBLE_EQ(op.iteration_time_s, 3514.986666666666 / kImagenetIterations);
  ASSERT_TRUE(gpu->set_power_limit_mw(175'000));
  op = gpu->operating_point();
  EXPECT_DOUBLE_EQ(op.power_w, 166.37217540170334);
  EXPECT_DOUBLE_EQ(op.iteration_time_s, 3852.1800000000003 / kImagenetIterations);
  EXPECT_EQ(*gpu->power_mw(), 166'372u);
}

TEST_F(SimFixture, InterpolatesBetweenLimits) {
  auto gpu = open("v100:imagenet:256");
  ASSERT_TRUE(gpu->set_power_limit_mw(187'500));
  const OperatingPoint op = gpu->operating_point();
  EXPECT_NEAR(op.power_w, (166.37217540170334 + 184.94427296655326) / 2, 1e-9);
  EXPECT_NEAR(op.iteration_time_s, (3852.1800000000003 + 3700.973333333334) / 2 / kImagenetIterations, 1e-12);
}

TEST_F(SimFixture, EnergyCounterIntegratesPowerOverTheClock) {
  auto gpu = open("v100:imagenet:256");
  const uint64_t start_mj = *gpu->energy_mj();
  clock->advance(from_seconds(10));
  ASSERT_TRUE(gpu->set_power_limit_mw(175'000));
  clock->advance(from_seconds(4));
  const double expected_mj = (220.25029530245453 * 10 + 166.37217540170334 * 4) * 1e3;
  EXPECT_NEAR(gpu->exact_energy_mj(), expected_mj, 1e-6);
  EXPECT_EQ(*gpu->energy_mj() - start_mj, static_cast<uint64_t>(expected_mj));
}

TEST_F(SimFixture, RefusesLimitsOutsideItsRangeAndRecordsSettings) {
  auto gpu = open("v100");
  JOULE_EXPECT_ERROR(
      gpu->set_power_limit_mw(300'000), ErrorCode::kOutOfRange,
      "power limit 300 W is outside GPU 0 (Tesla V100-PCIE-32GB (simulated))'s range 100 W to 250 W");
  clock->advance(from_seconds(1));
  ASSERT_TRUE(gpu->set_power_limit_mw(150'000));
  ASSERT_TRUE(gpu->lock_sm_clocks(900, 1000));
  ASSERT_TRUE(gpu->reset_sm_clocks());
  ASSERT_TRUE(gpu->reset_power_limit());
  const auto log = gpu->settings_log();
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0].setting, "power_limit_mw");
  EXPECT_EQ(log[0].value, 150'000u);
  EXPECT_EQ(log[0].time, from_seconds(1));
  EXPECT_EQ(log[1].setting, "sm_clocks_locked_mhz");
  EXPECT_EQ(log[1].value, 1000u);
  EXPECT_EQ(log[1].value_min, 900u);
  EXPECT_EQ(log[2].setting, "sm_clocks_reset");
  EXPECT_EQ(log[3].value, 250'000u);
}

TEST_F(SimFixture, ClockLockSlowsAndSavesPowerContinuously) {
  auto gpu = open("a40:imagenet:256");
  const OperatingPoint free = gpu->operating_point();
  const auto clocks = *gpu->supported_sm_clocks_mhz();
  EXPECT_EQ(clocks.front(), 1740u);
  EXPECT_EQ(clocks.back(), 210u);
  EXPECT_TRUE(std::is_sorted(clocks.rbegin(), clocks.rend()));
  // A lock at or above the clock the limit allows changes nothing.
  ASSERT_TRUE(gpu->lock_sm_clocks(210, 1740));
  EXPECT_DOUBLE_EQ(gpu->operating_point().power_w, free.power_w);
  ASSERT_TRUE(gpu->lock_sm_clocks(210, 1000));
  const OperatingPoint locked = gpu->operating_point();
  EXPECT_LT(locked.power_w, free.power_w);
  EXPECT_GT(locked.iteration_time_s, free.iteration_time_s);
  EXPECT_EQ(locked.sm_clock_mhz, 1000);
  // Just below the limit's own clock the model joins the trace point without a jump.
  ASSERT_TRUE(gpu->lock_sm_clocks(210, static_cast<uint32_t>(free.sm_clock_mhz) - 1));
  EXPECT_NEAR(gpu->operating_point().power_w, free.power_w, 1.0);
  EXPECT_NEAR(gpu->operating_point().iteration_time_s, free.iteration_time_s, free.iteration_time_s * 0.01);
  JOULE_EXPECT_ERROR(
      gpu->lock_sm_clocks(100, 1000), ErrorCode::kOutOfRange,
      "SM clock range 100-1000 MHz is outside GPU 0 (NVIDIA A40 (simulated))'s supported 210-1740 MHz");
}

// GDDR6 boards lock several memory clocks, HBM2 boards one; a lower memory clock stretches the share of the
// work that does not follow the SM clock and lowers the same share of the dynamic power.
TEST_F(SimFixture, MemoryClockLocksSlowTheMemoryBoundShareAndSavePower) {
  // The workload whose time follows the SM clock least (ImageNet's is fully compute-bound on the A40 trace).
  const auto* model = *find_gpu_model("a40");
  std::string least_compute_bound;
  double least_share = 1;
  for (const WorkloadInfo& workload : workloads()) {
    auto trace = make_trace_workload(*model, workload, workload.default_batch_size);
    if (trace && (*trace)->compute_share() < least_share) {
      least_share = (*trace)->compute_share();
      least_compute_bound = workload.key;
    }
  }
  ASSERT_LT(least_share, 0.9);
  auto a40 = open("a40:" + least_compute_bound);
  EXPECT_EQ(*a40->supported_memory_clocks_mhz(), (std::vector<uint32_t>{7251, 5001, 810, 405}));
  const OperatingPoint free = a40->operating_point();
  ASSERT_TRUE(a40->lock_memory_clocks(7251, 7251));
  EXPECT_DOUBLE_EQ(a40->operating_point().power_w, free.power_w);
  EXPECT_DOUBLE_EQ(a40->operating_point().iteration_time_s, free.iteration_time_s);
  ASSERT_TRUE(a40->lock_memory_clocks(4000, 6000));  // the highest supported clock inside the range runs
  EXPECT_EQ(*a40->memory_clock_mhz(), 5001u);
  const OperatingPoint slower = a40->operating_point();
  EXPECT_GT(slower.iteration_time_s, free.iteration_time_s);
  EXPECT_LT(slower.power_w, free.power_w);
  JOULE_EXPECT_ERROR(a40->lock_memory_clocks(6000, 7000), ErrorCode::kOutOfRange,
                     "memory clock range 6000-7000 MHz holds none of GPU 0 (NVIDIA A40 (simulated))'s memory "
                     "clocks (7251, 5001, "
                     "810, 405 MHz)");
  ASSERT_TRUE(a40->reset_memory_clocks());
  EXPECT_EQ(*a40->memory_clock_mhz(), 7251u);
  EXPECT_DOUBLE_EQ(a40->operating_point().iteration_time_s, free.iteration_time_s);
  const auto log = a40->settings_log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].setting, "memory_clocks_locked_mhz");
  EXPECT_EQ(log[1].value_min, 4000u);
  EXPECT_EQ(log[2].setting, "memory_clocks_reset");
  auto v100 = open("v100");
  EXPECT_EQ(*v100->supported_memory_clocks_mhz(), (std::vector<uint32_t>{877}));
}

TEST_F(SimFixture, IdleGpusDrawIdlePower) {
  auto gpu = open("rtx6000");
  gpu->set_busy(false);
  EXPECT_EQ(*gpu->power_mw(), 20'000u);
  clock->advance(from_seconds(2));
  EXPECT_NEAR(gpu->exact_energy_mj(), 40'000, 1e-9);
}

TEST_F(SimFixture, P100HasNoEnergyCounterAndCapsBatchSize) {
  auto gpu = open("p100");
  EXPECT_FALSE(gpu->info().has_energy_counter);
  EXPECT_EQ(gpu->energy_mj().error().code(), ErrorCode::kNotSupported);
  // ImageNet's b0 is 256, but the P100 trace stops at 128.
  EXPECT_DOUBLE_EQ(gpu->operating_point().power_w, 165.4681180501475);
  EXPECT_EQ(gpu->power_limit_constraints()->min_mw, 125'000u);
}

TEST_F(SimFixture, GenericModelScalesTheA40Trace) {
  auto generic = open("generic:imagenet:256");
  auto a40 = open("a40:imagenet:256");
  EXPECT_EQ(*generic->power_limit_mw(), 400'000u);
  EXPECT_NEAR(generic->operating_point().power_w, a40->operating_point().power_w * 4 / 3, 1e-9);
  EXPECT_NEAR(generic->operating_point().iteration_time_s, a40->operating_point().iteration_time_s / 2,
              1e-12);
}

TEST_F(SimFixture, UuidsAreStableAndDistinct) {
  auto spec = parse_spec("2xv100");
  auto gpus = open_sim_gpus(*spec, clock);
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_NE((*gpus)[0]->info().uuid, (*gpus)[1]->info().uuid);
  EXPECT_EQ((*gpus)[1]->info().uuid, simulated_uuid(*spec->model, 1));
  EXPECT_EQ((*gpus)[0]->info().uuid.substr(0, 4), "GPU-");
}

TEST_F(SimFixture, VisibleDevicesReorderSimulatedGpus) {
  auto spec = parse_spec("4xa40");
  const auto visible = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "3,1");
  auto gpus = open_sim_gpus(*spec, clock, visible);
  ASSERT_TRUE(gpus);
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0]->info().index, 0);
  EXPECT_EQ((*gpus)[0]->info().physical_index, 3);
  EXPECT_EQ((*gpus)[1]->info().physical_index, 1);
  const auto bad = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "4");
  JOULE_EXPECT_ERROR(open_sim_gpus(*spec, clock, bad), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 4, but this machine has 4 GPUs (indices 0 to 3)");
}

TEST_F(SimFixture, TrainingJobAdvancesByTheSlowestIteration) {
  auto spec = parse_spec("2xv100:librispeech:192");
  auto gpus = open_sim_gpus(*spec, clock);
  std::vector<SimulatedGpu*> raw = {(*gpus)[0].get(), (*gpus)[1].get()};
  TrainingJob job(raw, *clock);
  const double fast_s = job.iteration_time_s();
  ASSERT_TRUE(raw[1]->set_power_limit_mw(100'000));
  const double slow_s = job.iteration_time_s();
  EXPECT_GT(slow_s, fast_s);
  EXPECT_EQ(job.run_iterations(100), from_seconds(slow_s * 100));
  EXPECT_EQ(clock->now(), from_seconds(slow_s * 100));
  EXPECT_THROW(job.run_iterations(-1), Exception);
}

TEST_F(SimFixture, ReportsLoadDependentTelemetry) {
  auto gpu = open("v100:imagenet:256");
  GpuTelemetry busy = gpu->telemetry();
  EXPECT_TRUE(busy.errors.empty());
  // Constructed busy and warm: at the steady temperature of 220 W (25 °C + 55 °C · 220/250).
  EXPECT_NEAR(*busy.temperature_c, 25 + 55.0 * 220.25029530245453 / 250, 1e-9);
  EXPECT_EQ(*busy.memory_clock_mhz, 877u);
  EXPECT_EQ(*busy.gpu_utilization_pct, 98u);
  EXPECT_EQ(*busy.memory_utilization_pct, 50u);  // the fastest setting
  EXPECT_EQ(*busy.clock_event_reasons, 0u);
  EXPECT_GT(*busy.memory_power_mw, 0u);
  ASSERT_TRUE(gpu->set_power_limit_mw(125'000));
  const GpuTelemetry capped = gpu->telemetry();
  EXPECT_LT(*capped.sm_clock_mhz, *busy.sm_clock_mhz);
  EXPECT_LT(*capped.memory_utilization_pct, 50u);
  EXPECT_EQ(clock_event_reason_names(*capped.clock_event_reasons), std::vector<std::string>{"sw_power_cap"});
  ASSERT_TRUE(gpu->lock_sm_clocks(135, 600));
  EXPECT_NE(*gpu->clock_event_reasons() & clock_event::kApplicationClocks, 0u);
  gpu->set_busy(false);
  const GpuTelemetry idle = gpu->telemetry();
  EXPECT_EQ(*idle.gpu_utilization_pct, 0u);
  EXPECT_EQ(*idle.sm_clock_mhz, 135u);
  EXPECT_NE(*idle.clock_event_reasons & clock_event::kIdle, 0u);
}

TEST_F(SimFixture, TemperatureRisesWithPowerAndSettlesWithTheTimeConstant) {
  auto gpu = open("a40:imagenet");
  gpu->set_busy(false);
  clock->advance(std::chrono::seconds(3600));
  const double idle_c = *gpu->temperature_c();
  EXPECT_NEAR(idle_c, gpu->steady_temperature_c(), 1e-6);
  gpu->set_busy(true);
  const double busy_steady_c = gpu->steady_temperature_c();
  EXPECT_GT(busy_steady_c, idle_c + 20);
  clock->advance(std::chrono::seconds(45));  // one time constant: 1 − 1/e of the way
  EXPECT_NEAR(*gpu->temperature_c(), busy_steady_c - (busy_steady_c - idle_c) / std::exp(1.0), 1e-6);
  clock->advance(std::chrono::seconds(600));
  EXPECT_NEAR(*gpu->temperature_c(), busy_steady_c, 1e-3);
}

TEST_F(SimFixture, ColdGpusWithLeakageDrawLessUntilWarm) {
  auto warm = open("v100:imagenet:256");
  auto cold = open("v100:imagenet:256");
  cold->set_thermal({cold->model().ambient_c, true});
  const double warm_w = *warm->power_mw() / 1e3;
  const double cold_w = *cold->power_mw() / 1e3;
  // 0.15% of 250 W per °C, 48.5 °C below steady state: about 18 W less.
  EXPECT_NEAR(warm_w - cold_w, 0.375 * (cold->steady_temperature_c() - cold->model().ambient_c), 0.01);
  // The energy integral is exact: P(t) = P − k·ΔT·e^(−t/τ) over 10 s.
  const double before_mj = cold->exact_energy_mj();
  clock->advance(std::chrono::seconds(10));
  const double delta_c = cold->steady_temperature_c() - cold->model().ambient_c;
  const double expected_j = warm_w * 10 - 0.375 * delta_c * 45 * (1 - std::exp(-10.0 / 45));
  EXPECT_NEAR((cold->exact_energy_mj() - before_mj) / 1e3, expected_j, 0.05);
  clock->advance(std::chrono::seconds(900));
  EXPECT_NEAR(*cold->power_mw() / 1e3, warm_w, 0.01);
  // Without leakage (the default) power is the trace's whatever the temperature.
  warm->set_thermal({20.0, false});
  EXPECT_NEAR(*warm->power_mw() / 1e3, warm_w, 1e-3);
}

TEST(SimWorkload, ComputeShareIsFittedFromTheTrace) {
  const auto* model = *find_gpu_model("v100");
  const auto workload = *make_trace_workload(*model, **find_workload("imagenet"), 256);
  EXPECT_GT(workload->compute_share(), 0.05);
  EXPECT_LE(workload->compute_share(), 1.0);
  EXPECT_EQ(workload->description(), "imagenet (resnet50, batch size 256)");
  EXPECT_EQ(workload->points().size(), 7u);
}

TEST(SimWorkload, BatchSizesAndErrors) {
  const auto* v100 = *find_gpu_model("V100");
  EXPECT_EQ(*available_batch_sizes(*v100, **find_workload("squad")),
            (std::vector<int>{8, 12, 16, 24, 32, 48, 56}));
  JOULE_EXPECT_ERROR(
      make_trace_workload(*v100, **find_workload("squad"), 33), ErrorCode::kNotFound,
      "no power trace for squad at batch size 33 on v100 (available: 8, 12, 16, 24, 32, 48, 56)");
  EXPECT_EQ((*make_trace_workload(*v100, **find_workload("movielens"), std::nullopt))->batch_size(), 1024);
}

}  // namespace
}  // namespace joule::device::sim
