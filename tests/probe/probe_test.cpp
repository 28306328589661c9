// SPDX-License-Identifier: Apache-2.0
// The probe on simulated GPUs (virtual clock): every figure of the card, the settings put back, read-only and
// cancelled probes, and the shipped cards regenerated within tolerance.
#include "joule/probe/probe.hpp"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

namespace joule::probe {
namespace {

struct SimFixture {
  explicit SimFixture(const std::string& spec_text) {
    const auto spec = device::sim::parse_spec(spec_text);
    EXPECT_TRUE(spec) << spec.error().message();
    auto gpus = device::sim::open_sim_gpus(*spec, clock);
    EXPECT_TRUE(gpus) << gpus.error().message();
    gpu = std::move(gpus->front());
    runner = make_simulated_runner(*gpu);
  }
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>(1'800'000'000'000'000'000);
  std::unique_ptr<device::sim::SimulatedGpu> gpu;
  std::unique_ptr<KernelRunner> runner;
};

const FrontierCurve& curve(const Card& card, std::string_view kernel, std::string_view knob) {
  for (const auto& entry : card.frontiers) {
    if (entry.kernel == kernel && entry.knob == knob) {
      return entry;
    }
  }
  throw std::runtime_error("no such curve");
}

TEST(Probe, QuickProbeFillsEveryFigure) {
  SimFixture sim("v100");
  auto options = quick_probe_options();
  options.joule_version = "0.1.0";
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_EQ(card->schema_version, kCardSchemaVersion);
  EXPECT_EQ(card->device.model, "Tesla V100-PCIE-32GB (simulated)");
  EXPECT_EQ(card->device.backend, "sim");
  EXPECT_EQ(card->device.driver_version, "sim");
  EXPECT_EQ(card->device.uuid, sim.gpu->info().uuid);
  EXPECT_EQ(card->kernel_runner, "simulated");
  EXPECT_EQ(card->created_utc.substr(0, 4), "2027");
  EXPECT_EQ(card->ranges.power_limit_max_w, 250.0);
  EXPECT_EQ(card->ranges.sm_clock_max_mhz, 1380u);
  // The simulated counter is exact: it changes at every 1 ms poll and agrees with integrated power.
  ASSERT_TRUE(card->counter.update_period_s);
  EXPECT_NEAR(*card->counter.update_period_s, 1e-3, 1e-6);
  ASSERT_TRUE(card->counter.error_pct);
  EXPECT_LT(std::abs(*card->counter.error_pct), 0.1);
  EXPECT_TRUE(card->counter.under_load);
  ASSERT_EQ(card->latencies.size(), 2u);
  EXPECT_EQ(card->latencies[0].control, "power_limit");
  EXPECT_EQ(card->latencies[1].control, "sm_clock_lock");
  EXPECT_EQ(card->latencies[0].tries, 5);
  ASSERT_TRUE(card->settle);
  EXPECT_GT(card->settle->power_before_w, card->settle->power_after_w + 50);
  EXPECT_NEAR(card->settle->power_after_w, 100, 1);  // held at the 100 W limit
  EXPECT_FALSE(card->settle->time_constant_s);       // the simulated GPU's power steps at once
  ASSERT_EQ(card->frontiers.size(), 4u);
  for (const auto& entry : card->frontiers) {
    ASSERT_EQ(entry.points.size(), 3u) << entry.kernel << " " << entry.knob;
    EXPECT_TRUE(entry.points.front().pareto || entry.points.back().pareto);
  }
  // The compute kernel slows with the SM clock far more than the memory kernel does.
  const auto& compute = curve(*card, "compute", "sm_clock");
  const auto& memory = curve(*card, "memory", "sm_clock");
  EXPECT_EQ(compute.unit, "MHz");
  EXPECT_EQ(compute.points.front().knob_value, 1380);
  EXPECT_EQ(compute.points.back().knob_value, 135);
  const double compute_slowdown =
      compute.points.back().time_per_iteration_s / compute.points.front().time_per_iteration_s;
  const double memory_slowdown =
      memory.points.back().time_per_iteration_s / memory.points.front().time_per_iteration_s;
  EXPECT_GT(compute_slowdown, 5);
  EXPECT_LT(memory_slowdown, compute_slowdown / 2);
  // A lower power limit saves energy per iteration of the compute kernel at some cost in time.
  const auto& limits = curve(*card, "compute", "power_limit");
  EXPECT_EQ(limits.unit, "W");
  EXPECT_LT(limits.points.back().energy_per_iteration_j, limits.points.front().energy_per_iteration_j);
  EXPECT_GT(limits.points.back().time_per_iteration_s, limits.points.front().time_per_iteration_s);
  EXPECT_EQ(card->skipped.size(), 1u);
  EXPECT_EQ(card->skipped[0].what, "memory_clock");
  EXPECT_EQ(card->skipped[0].why, "the device has one memory clock (877 MHz): no frontier to measure");
  EXPECT_NE(summarize_card(*card).find("compute kernel under sm_clock: 3 values"), std::string::npos);
}

// A GDDR6 board locks several memory clocks: the memory kernel slows with them far more than the compute
// kernel, and its energy per iteration is lowest at neither end. Every lock is put back.
TEST(Probe, MeasuresTheMemoryClockFrontierWhereThereIsOne) {
  SimFixture sim("a40");
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), quick_probe_options());
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_TRUE(card->skipped.empty());
  ASSERT_EQ(card->frontiers.size(), 6u);
  const auto& compute = curve(*card, "compute", "memory_clock");
  const auto& memory = curve(*card, "memory", "memory_clock");
  EXPECT_EQ(memory.unit, "MHz");
  ASSERT_EQ(memory.points.size(), 3u);
  EXPECT_EQ(memory.points.front().knob_value, 7251);
  EXPECT_EQ(memory.points.back().knob_value, 405);
  const auto slowdown = [](const FrontierCurve& c) {
    return c.points.back().time_per_iteration_s / c.points.front().time_per_iteration_s;
  };
  EXPECT_GT(slowdown(memory), 5);
  EXPECT_LT(slowdown(compute), 2);
  EXPECT_LT(memory.points.back().average_power_w, memory.points.front().average_power_w);
  const auto log = sim.gpu->settings_log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().setting, "memory_clocks_reset");
  EXPECT_EQ(*sim.gpu->memory_clock_mhz(), 7251u);
}

TEST(Probe, PutsEverySettingBack) {
  SimFixture sim("a40");
  ASSERT_TRUE(sim.gpu->set_power_limit_mw(280'000));
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), quick_probe_options());
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_EQ(*sim.gpu->power_limit_mw(), 280'000u);
  const auto log = sim.gpu->settings_log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().setting, "memory_clocks_reset");  // the last sweep's restore (the A40 has 4)
  EXPECT_TRUE(std::any_of(log.begin(), log.end(),
                          [](const auto& record) { return record.setting == "sm_clocks_reset"; }));
  // The workload the GPU ran before is back.
  EXPECT_EQ(sim.gpu->workload()->description().find("probe"), std::string::npos);
}

TEST(Probe, CancelledProbeRestoresAndSaysSo) {
  SimFixture sim("v100");
  auto options = quick_probe_options();
  int steps = 0;
  options.progress = [&](std::string_view step) {
    if (step.find("frontier") != std::string_view::npos) {
      ++steps;
    }
  };
  options.keep_going = [&] { return steps < 2; };  // stop in the middle of the power-limit sweep
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_FALSE(card);
  EXPECT_EQ(card.error().code(), ErrorCode::kState);
  EXPECT_EQ(card.error().message(), "probe cancelled: every setting it changed was put back");
  EXPECT_EQ(*sim.gpu->power_limit_mw(), 250'000u);
  EXPECT_EQ(sim.gpu->settings_log().back().setting, "power_limit_mw");
  EXPECT_EQ(sim.gpu->settings_log().back().value, 250'000u);
}

TEST(Probe, ReadOnlyChangesNothing) {
  SimFixture sim("v100");
  auto options = quick_probe_options();
  options.read_only = true;
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_TRUE(sim.gpu->settings_log().empty());
  EXPECT_TRUE(card->read_only);
  EXPECT_TRUE(card->latencies.empty());
  EXPECT_FALSE(card->settle);
  EXPECT_TRUE(card->frontiers.empty());
  ASSERT_EQ(card->skipped.size(), 3u);
  EXPECT_EQ(card->skipped[0].why, "--read-only: it needs a setting to be changed");
  EXPECT_TRUE(card->counter.update_period_s);
}

// What scripts/hw-check runs on a busy node: no setting, and no kernel either, so the counter is read under
// whatever the GPU is doing (here: idle, so less power than under the kernel).
TEST(Probe, ReadOnlyWithoutLoadRunsNoKernel) {
  SimFixture sim("v100");
  ASSERT_TRUE(sim.gpu->set_simulated_busy(false));
  auto options = quick_probe_options();
  options.read_only = true;
  options.counter_under_load = false;
  const auto unloaded = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_TRUE(unloaded) << unloaded.error().message();
  options.counter_under_load = true;
  const auto loaded = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_TRUE(loaded->counter.under_load);
  EXPECT_FALSE(unloaded->counter.under_load);
  EXPECT_TRUE(sim.gpu->settings_log().empty());
  const auto mean_power_w = [](const Card& card) {
    return card.counter.integrated_power_energy_j / card.counter.window_s;
  };
  EXPECT_LT(mean_power_w(*unloaded), 0.8 * mean_power_w(*loaded))
      << mean_power_w(*unloaded) << " W without the kernel, " << mean_power_w(*loaded) << " W with it";
}

TEST(Probe, WithoutCounterOrRunner) {
  SimFixture sim("p100");  // no energy counter: energy is integrated from power
  const auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), quick_probe_options());
  ASSERT_TRUE(card) << card.error().message();
  EXPECT_FALSE(card->counter.has_energy_counter);
  EXPECT_FALSE(card->counter.update_period_s);
  EXPECT_FALSE(card->counter.error_pct);
  EXPECT_GT(card->counter.integrated_power_energy_j, 0);
  EXPECT_GT(curve(*card, "compute", "power_limit").points.front().energy_per_iteration_j, 0);
  // Without a kernel runner: no load, no settling, no frontier, each said.
  const auto bare = probe_gpu(*sim.gpu, *sim.clock, nullptr, quick_probe_options());
  ASSERT_TRUE(bare) << bare.error().message();
  EXPECT_FALSE(bare->counter.under_load);
  EXPECT_EQ(bare->kernel_runner, "");
  EXPECT_EQ(bare->latencies.size(), 2u);
  EXPECT_TRUE(bare->frontiers.empty());
  ASSERT_EQ(bare->skipped.size(), 2u);
  EXPECT_EQ(bare->skipped[0].what, "settle");
  EXPECT_EQ(bare->skipped[0].why, "no kernel runner for this device");
  EXPECT_EQ(bare->skipped[1].what, "frontiers");  // every knob's, the memory clock's too
}

TEST(Probe, RefusesBadOptions) {
  SimFixture sim("v100");
  auto options = quick_probe_options();
  options.run_s = 0;
  auto card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_FALSE(card);
  EXPECT_EQ(card.error().message(), "probe: every window, interval and run time must be a finite number > 0");
  options = quick_probe_options();
  options.power_limit_values = 1;
  card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_FALSE(card);
  EXPECT_EQ(card.error().message(),
            "probe: latency tries must be ≥ 1 and knob values ≥ 2, got 5 tries, 1 power limits, 3 clocks, 3 "
            "memory clocks");
  options = quick_probe_options();
  options.knob_settle_s = -1;
  card = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
  ASSERT_FALSE(card);
  EXPECT_EQ(card.error().message(),
            "probe: the settling time after a knob change must be a finite number ≥ 0");
  EXPECT_TRUE(sim.gpu->settings_log().empty());
}

TEST(Probe, OnlySimulatedGpusGetTheSimulatedRunner) {
  class NotSimulated final : public device::Gpu {
   public:
    NotSimulated() : Gpu(device::GpuInfo{"test", 0, 0, "test", "", false}) {}

   protected:
    Result<uint64_t> do_energy_mj() override { return 0; }
    Result<uint32_t> do_power_mw() override { return 0; }
    Result<device::PowerLimitConstraints> do_power_limit_constraints() override {
      return device::PowerLimitConstraints{};
    }
    Result<uint32_t> do_power_limit_mw() override { return 0; }
    Result<void> do_set_power_limit_mw(uint32_t /*mw*/) override { return {}; }
    Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override { return std::vector<uint32_t>{}; }
    Result<void> do_lock_sm_clocks(uint32_t /*min*/, uint32_t /*max*/) override { return {}; }
    Result<void> do_reset_sm_clocks() override { return {}; }
  } gpu;
  EXPECT_EQ(make_simulated_runner(gpu), nullptr);
}

// data/cards/ holds the cards `joule --sim MODEL probe` made (on the steady clock); the same probe on a
// virtual clock gives the same frontiers within 3% (sleep overshoot is the difference).
TEST(ShippedCards, RegeneratingMatchesWithinTolerance) {
  for (const char* model : {"v100", "a40", "p100", "rtx6000", "generic"}) {
    SimFixture sim(model);
    const DeviceIdentity identity{sim.gpu->info().name, "sim", "sim", ""};
    const auto shipped =
        read_card(std::string(JOULE_SOURCE_DIR) + "/data/cards/sim-" + model + ".json", identity);
    ASSERT_TRUE(shipped) << shipped.error().message();
    EXPECT_FALSE(shipped->quick);
    EXPECT_EQ(shipped->device.uuid, sim.gpu->info().uuid);
    auto options = ProbeOptions{};
    options.counter_window_s = 0.05;  // the counter's figures are not compared
    const auto fresh = probe_gpu(*sim.gpu, *sim.clock, sim.runner.get(), options);
    ASSERT_TRUE(fresh) << fresh.error().message();
    ASSERT_EQ(fresh->frontiers.size(), shipped->frontiers.size()) << model;
    for (size_t i = 0; i < fresh->frontiers.size(); ++i) {
      const auto& now = fresh->frontiers[i];
      const auto& then = shipped->frontiers[i];
      EXPECT_EQ(now.kernel, then.kernel);
      EXPECT_EQ(now.knob, then.knob);
      ASSERT_EQ(now.points.size(), then.points.size()) << model << " " << now.kernel << " " << now.knob;
      for (size_t j = 0; j < now.points.size(); ++j) {
        const auto& a = now.points[j];
        const auto& b = then.points[j];
        EXPECT_EQ(a.knob_value, b.knob_value);
        EXPECT_NEAR(a.time_per_iteration_s, b.time_per_iteration_s, 0.03 * b.time_per_iteration_s)
            << model << " " << now.kernel << " " << now.knob << " " << a.knob_value;
        EXPECT_NEAR(a.energy_per_iteration_j, b.energy_per_iteration_j, 0.03 * b.energy_per_iteration_j)
            << model << " " << now.kernel << " " << now.knob << " " << a.knob_value;
      }
    }
  }
}

}  // namespace
}  // namespace joule::probe
