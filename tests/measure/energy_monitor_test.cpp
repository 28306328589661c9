// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/energy_monitor.hpp"

#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "joule/device/rapl.hpp"
#include "joule/device/sim_gpu.hpp"

#include "captured_log.hpp"
#include "fakes/rapl/fake_powercap.hpp"
#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::measure {
namespace {

using ::testing::Return;

struct MonitorFixture : ::testing::Test {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::vector<device::Gpu*> open(std::string_view spec_text) {
    gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec_text), clock));
    std::vector<device::Gpu*> raw;
    for (auto& gpu : gpus) {
      raw.push_back(gpu.get());
    }
    return raw;
  }
  void advance_s(double seconds) { clock->advance(from_seconds(seconds)); }
};

TEST_F(MonitorFixture, CounterEnergyOverAWindow) {
  EnergyMonitor monitor(open("2xv100:imagenet:256"), {}, *clock);
  EXPECT_EQ(monitor.fallback_sampler(), nullptr);
  monitor.begin_window("epoch");
  advance_s(10);
  const Measurement m = monitor.end_window("epoch");
  EXPECT_EQ(m.name, "epoch");
  EXPECT_DOUBLE_EQ(m.time_s, 10.0);
  ASSERT_EQ(m.gpu_energy.size(), 2u);
  EXPECT_NEAR(m.gpu_energy[1].energy_j, 2202.5029530245453, 1e-3);
  EXPECT_EQ(m.gpu_energy[1].index, 1);
  EXPECT_EQ(m.gpu_energy[0].source, EnergySource::kCounter);
  EXPECT_FALSE(m.estimated());
  EXPECT_NEAR(m.total_gpu_energy_j(), 2 * 2202.5029530245453, 2e-3);
  EXPECT_DOUBLE_EQ(m.total_energy_j(), m.total_gpu_energy_j());
}

TEST_F(MonitorFixture, OverlappingAndNestedWindows) {
  EnergyMonitor monitor(open("v100"), {}, *clock);
  monitor.begin_window("outer");
  advance_s(1);
  monitor.begin_window("a");
  advance_s(2);
  monitor.begin_window("b");
  advance_s(3);
  const Measurement a = monitor.end_window("a");
  advance_s(4);
  const Measurement b = monitor.end_window("b");
  EXPECT_EQ(monitor.open_windows(), (std::vector<std::string>{"outer"}));
  const Measurement outer = monitor.end_window("outer");
  EXPECT_DOUBLE_EQ(a.time_s, 5);
  EXPECT_DOUBLE_EQ(b.time_s, 7);
  EXPECT_DOUBLE_EQ(outer.time_s, 10);
  EXPECT_NEAR(outer.gpu_energy[0].energy_j / 10, a.gpu_energy[0].energy_j / 5, 1e-3);
  // A name can be reused once its window has ended.
  monitor.begin_window("a");
  EXPECT_TRUE(monitor.is_open("a"));
}

TEST_F(MonitorFixture, WindowNameErrors) {
  EnergyMonitor monitor(open("v100"), {}, *clock);
  monitor.begin_window("train");
  JOULE_EXPECT_THROW_MESSAGE(monitor.begin_window("train"), ErrorCode::kState,
                             "window 'train' is already open; end or cancel it first");
  JOULE_EXPECT_THROW_MESSAGE(monitor.end_window("eval"), ErrorCode::kNotFound,
                             "no open window named 'eval' (open: train)");
  monitor.end_window("train");
  JOULE_EXPECT_THROW_MESSAGE(monitor.end_window("train"), ErrorCode::kNotFound,
                             "no open window named 'train' (no window is open)");
  monitor.begin_window("step");
  monitor.cancel_window("step");
  JOULE_EXPECT_THROW_MESSAGE(monitor.end_window("step"), ErrorCode::kNotFound,
                             "no open window named 'step' (no window is open)");
  JOULE_EXPECT_THROW_MESSAGE(monitor.cancel_window("step"), ErrorCode::kNotFound,
                             "no open window named 'step' (no window is open)");
}

TEST_F(MonitorFixture, SyncIsCalledBeforeEachReadingUnlessDisabled) {
  int syncs = 0;
  MonitorOptions options;
  options.sync = [&syncs] { ++syncs; };
  EnergyMonitor monitor(open("v100"), {}, *clock, options);
  monitor.begin_window("w");
  monitor.end_window("w");
  EXPECT_EQ(syncs, 2);
  monitor.begin_window("w", false);
  monitor.end_window("w", false);
  EXPECT_EQ(syncs, 2);
}

TEST_F(MonitorFixture, GpusWithoutCounterAreIntegratedFromPowerSamples) {
  auto raw = open("p100:imagenet:128");
  EnergyMonitor monitor(raw, {}, *clock);
  ASSERT_NE(monitor.fallback_sampler(), nullptr);
  monitor.begin_window("w");
  advance_s(2);
  // Samples on both sides of a change make the integral exact.
  monitor.fallback_sampler()->sample_now();
  ASSERT_TRUE(raw[0]->set_power_limit_mw(125'000));
  monitor.fallback_sampler()->sample_now();
  advance_s(8);
  const Measurement m = monitor.end_window("w");
  EXPECT_EQ(m.gpu_energy[0].source, EnergySource::kPowerSamples);
  EXPECT_TRUE(m.estimated());
  EXPECT_NEAR(m.gpu_energy[0].energy_j, 165.468 * 2 + 112.642 * 8, 0.01);
  EXPECT_NEAR(m.gpu_energy[0].energy_j, gpus[0]->exact_energy_mj() / 1e3, 0.01);
}

TEST_F(MonitorFixture, PollingRunsInTheBackgroundOnARealClock) {
  auto clock_ptr = std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &SteadyClock::instance());
  auto spec = *device::sim::parse_spec("p100");
  auto p100 = std::move(device::sim::open_sim_gpus(spec, clock_ptr)->front());
  MonitorOptions options;
  options.polling_period = std::chrono::milliseconds(2);
  EnergyMonitor monitor({p100.get()}, {}, SteadyClock::instance(), options);
  ASSERT_TRUE(monitor.fallback_sampler()->running());
  monitor.begin_window("w");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Measurement m = monitor.end_window("w");
  // Flat power: the integral is power × time however the samples fell.
  EXPECT_NEAR(m.gpu_energy[0].energy_j, 165.4681180501475 * m.time_s, 1e-3);
  EXPECT_GE(monitor.fallback_sampler()->reads(), 3u);
}

TEST(EnergyMonitor, ZeroCounterDeltaCanBeApproximatedByInstantPower) {
  VirtualClock clock;
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_energy_mj()).WillRepeatedly(Return(5'000u));
  EXPECT_CALL(gpu, do_power_mw()).WillRepeatedly(Return(200'000u));
  {
    EnergyMonitor exact({&gpu}, {}, clock);
    exact.begin_window("short");
    clock.advance(std::chrono::milliseconds(5));
    const Measurement m = exact.end_window("short");
    EXPECT_EQ(m.gpu_energy[0].energy_j, 0.0);
    EXPECT_EQ(m.gpu_energy[0].source, EnergySource::kCounter);
  }
  MonitorOptions options;
  options.approx_instant_energy = true;
  EnergyMonitor approx({&gpu}, {}, clock, options);
  approx.begin_window("short");
  clock.advance(std::chrono::milliseconds(5));
  const Measurement m = approx.end_window("short");
  EXPECT_DOUBLE_EQ(m.gpu_energy[0].energy_j, 1.0);  // 200 W × 5 ms
  EXPECT_EQ(m.gpu_energy[0].source, EnergySource::kInstantPower);
  EXPECT_EQ(to_string(m.gpu_energy[0].source), "instant-power");
}

TEST(EnergyMonitor, CpuPackageAndDram) {
  VirtualClock clock;
  test::MockCpu with_dram(device::CpuInfo{"mock", 0, "package-0", true});
  test::MockCpu without_dram(device::CpuInfo{"mock", 1, "package-1", false});
  EXPECT_CALL(with_dram, do_package_energy_mj())
      .WillOnce(Return(100u))
      .WillOnce(Return(1'100u))
      .WillOnce(Return(3'100u));
  EXPECT_CALL(with_dram, do_dram_energy_mj()).WillOnce(Return(10u)).WillOnce(Return(510u));
  EXPECT_CALL(without_dram, do_package_energy_mj())
      .WillOnce(Return(0u))
      .WillOnce(Return(0u))
      .WillOnce(Return(700u));
  EnergyMonitor monitor({}, {&with_dram, &without_dram}, clock);
  monitor.begin_window("w");
  clock.advance(from_seconds(1));
  const Measurement m = monitor.end_window("w");
  ASSERT_EQ(m.cpu_energy.size(), 2u);
  EXPECT_DOUBLE_EQ(m.cpu_energy[0].energy_j, 2.0);
  EXPECT_DOUBLE_EQ(m.cpu_energy[1].energy_j, 0.7);
  EXPECT_EQ(m.cpu_energy[1].index, 1);
  ASSERT_EQ(m.dram_energy.size(), 1u);
  EXPECT_DOUBLE_EQ(m.dram_energy[0].energy_j, 0.5);
  EXPECT_DOUBLE_EQ(m.total_energy_j(), 3.2);
}

TEST(EnergyMonitor, UnreadableDevicesFailLoudly) {
  VirtualClock clock;
  test::MockGpu gpu(test::mock_gpu_info());
  EXPECT_CALL(gpu, do_energy_mj())
      .WillOnce(Return(tl::make_unexpected(Error(ErrorCode::kPermissionDenied, "no permission"))))
      .WillOnce(Return(1u))
      .WillOnce(Return(2u))
      .WillOnce(Return(tl::make_unexpected(Error(ErrorCode::kDevice, "GPU is lost"))));
  JOULE_EXPECT_THROW_MESSAGE(EnergyMonitor({&gpu}, {}, clock), ErrorCode::kPermissionDenied,
                             "cannot read the energy counter of GPU 0 (Mock GPU): no permission");
  EnergyMonitor monitor({&gpu}, {}, clock);
  monitor.begin_window("w");
  JOULE_EXPECT_THROW_MESSAGE(monitor.end_window("w"), ErrorCode::kDevice,
                             "cannot read the energy counter of GPU 0 (Mock GPU): GPU is lost");
}

TEST_F(MonitorFixture, WindowsFromManyThreads) {
  EnergyMonitor monitor(open("v100"), {}, *clock);
  std::vector<std::thread> threads;
  std::atomic<int> ended{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&monitor, &ended, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string name = fmt::format("t{}-{}", t, i);
        monitor.begin_window(name);
        monitor.end_window(name);
        ++ended;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(ended.load(), 800);
  EXPECT_TRUE(monitor.open_windows().empty());
}

// ---- CPU counter resets (joule issue 23) ----------------------------------------------------------------

constexpr uint64_t kMonitorRaplRangeUj = 262143328850;  // a typical package range (2^32 × 61.035 µJ)

// A package with a DRAM domain in a fake powercap tree, read by the real RAPL backend (its wrap check thread
// idle for the test's length).
std::unique_ptr<device::Cpu> open_fake_rapl(const test::FakePowercap& powercap) {
  device::RaplOptions options;
  options.powercap_root = powercap.root();
  options.wrap_check_period = std::chrono::seconds(60);
  auto cpus = device::open_rapl_cpus(options);
  if (!cpus || cpus->size() != 1) {
    throw std::runtime_error(cpus ? "expected one package" : cpus.error().message());
  }
  return std::move(cpus->front());
}

// Before: the RAPL backend counted nothing for the step back of a reset (it is no wrap at a plausible
// power), and the window subtracted the readings: 5 J (the 2 J before the reset was read and the 3 J after
// it), reported as measured, where whatever the package drew between its last reading and the reset is
// unknown. Now the reset count differs between the window's readings: not measurable, with the reason.
TEST_F(MonitorFixture, ARaplResetInsideAWindowIsNotMeasurable) {
  test::CapturedLog log;
  test::FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, kMonitorRaplRangeUj,
                       test::FakeDram{1'000'000, kMonitorRaplRangeUj});
  const auto cpu = open_fake_rapl(powercap);
  EnergyMonitor monitor(open("v100"), {cpu.get()}, *clock);
  monitor.begin_window("train");
  powercap.set_energy(0, 7'000'000);
  ASSERT_TRUE(cpu->package_reading());  // another reader (a sampler, another window) sees the 2 J
  powercap.set_energy(0, 1'000);        // the reset
  const auto reset = cpu->package_reading();
  ASSERT_TRUE(reset);
  ASSERT_EQ(reset->resets, 1U);
  monitor.begin_window("after");
  powercap.set_energy(0, 3'001'000);
  powercap.set_dram_energy(0, 1'500'000);
  advance_s(10);
  const Measurement m = monitor.end_window("train");

  ASSERT_EQ(m.cpu_energy.size(), 1U);
  EXPECT_FALSE(m.cpu_energy[0].measurable());
  EXPECT_TRUE(std::isnan(m.cpu_energy[0].energy_j)) << m.cpu_energy[0].energy_j;
  EXPECT_EQ(
      reset->last_reset.rfind(powercap.package_energy_path(0) + " went back from 7000000 to 1000 uJ in ", 0),
      0U)
      << reset->last_reset;
  const std::string why =
      "not measurable: the energy counter was reset once between the readings (" + reset->last_reset +
      "); the energy before the reset is unknown, so none is counted rather than a wrap's worth of phantom "
      "energy";
  EXPECT_EQ(m.cpu_energy[0].not_measurable, why);
  EXPECT_FALSE(m.measurable());
  EXPECT_EQ(m.why_not_measurable(), "CPU 0: " + why);
  // The total is not silently low: it is NaN, as is every sum the package's figure enters.
  EXPECT_TRUE(std::isnan(m.total_energy_j())) << m.total_energy_j();
  // The DRAM counter (not reset) and the GPU are measured.
  ASSERT_EQ(m.dram_energy.size(), 1U);
  EXPECT_TRUE(m.dram_energy[0].measurable());
  EXPECT_DOUBLE_EQ(m.dram_energy[0].energy_j, 0.5);
  EXPECT_TRUE(m.gpu_energy[0].measurable());
  EXPECT_GT(m.total_gpu_energy_j(), 0);
  EXPECT_NE(log.text().find("warning: window 'train': the package energy of CPU 0 (package-0) is " + why),
            std::string::npos)
      << log.text();

  // A window begun after the reset is measured: 3 J.
  const Measurement after = monitor.end_window("after");
  EXPECT_TRUE(after.measurable());
  EXPECT_EQ(after.why_not_measurable(), std::nullopt);
  EXPECT_DOUBLE_EQ(after.cpu_energy[0].energy_j, 3.0);
  EXPECT_DOUBLE_EQ(after.total_energy_j(), after.total_gpu_energy_j() + 3.0 + 0.5);
}

TEST_F(MonitorFixture, ADramResetIsNotMeasurableOnItsOwn) {
  test::FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, kMonitorRaplRangeUj,
                       test::FakeDram{2'000'000, kMonitorRaplRangeUj});
  const auto cpu = open_fake_rapl(powercap);
  EnergyMonitor monitor({}, {cpu.get()}, *clock);
  monitor.begin_window("w");
  powercap.set_energy(0, 6'000'000);
  powercap.set_dram_energy(0, 0);  // the DRAM counter reset: as a wrap, 262,141 J
  advance_s(1);
  const Measurement m = monitor.end_window("w");
  EXPECT_DOUBLE_EQ(m.cpu_energy[0].energy_j, 1.0);
  EXPECT_TRUE(m.cpu_energy[0].measurable());
  ASSERT_EQ(m.dram_energy.size(), 1U);
  EXPECT_TRUE(std::isnan(m.dram_energy[0].energy_j));
  const std::string& why = m.dram_energy[0].not_measurable;
  EXPECT_EQ(why.rfind("not measurable: the energy counter was reset once between the readings (" +
                          powercap.dram_energy_path(0) + " went back from 2000000 to 0 uJ in ",
                      0),
            0U)
      << why;
  EXPECT_EQ(m.why_not_measurable(), "CPU 0 DRAM: " + why);
  EXPECT_TRUE(std::isnan(m.total_energy_j()));
}

// A step back that a wrap at a plausible power explains is a wrap: counted, measurable.
TEST_F(MonitorFixture, APlausibleRaplWrapInsideAWindowIsCounted) {
  test::FakePowercap powercap;
  powercap.add_package(0, "package-0", kMonitorRaplRangeUj - 10'000'000, kMonitorRaplRangeUj);
  const auto cpu = open_fake_rapl(powercap);
  EnergyMonitor monitor({}, {cpu.get()}, *clock);
  monitor.begin_window("w");
  // 10 J to the top, 1 µJ over it, 5 J after: 15 J, at most 150 W over the 0.1 s a step is judged over.
  powercap.set_energy(0, 5'000'000);
  advance_s(1);
  const Measurement m = monitor.end_window("w");
  ASSERT_EQ(m.cpu_energy.size(), 1U);
  EXPECT_TRUE(m.measurable());
  EXPECT_EQ(m.why_not_measurable(), std::nullopt);
  // In whole mJ of the cumulative total: (range − 10 J + 15 J + 1 µJ) / 1000 − (range − 10 J) / 1000.
  EXPECT_DOUBLE_EQ(m.cpu_energy[0].energy_j,
                   static_cast<double>((kMonitorRaplRangeUj - 10'000'000 + 15'000'001) / 1000 -
                                       (kMonitorRaplRangeUj - 10'000'000) / 1000) /
                       1000);
  EXPECT_NEAR(m.total_energy_j(), 15.0, 1e-3);
}

// A CPU counter read through `joule daemon` starts over when the daemon restarts: before, the window clamped
// the difference to 0 J and reported it as measured.
TEST(EnergyMonitor, ACpuCounterThatWentBackIsNotMeasurable) {
  VirtualClock clock;
  test::MockCpu cpu(device::CpuInfo{"mock", 1, "package-1", false});
  EXPECT_CALL(cpu, do_package_energy_mj())
      .WillOnce(Return(100u))
      .WillOnce(Return(3'100u))
      .WillOnce(Return(40u));
  EnergyMonitor monitor({}, {&cpu}, clock);
  monitor.begin_window("w");
  clock.advance(from_seconds(1));
  const Measurement m = monitor.end_window("w");
  ASSERT_EQ(m.cpu_energy.size(), 1U);
  EXPECT_TRUE(std::isnan(m.cpu_energy[0].energy_j));
  EXPECT_EQ(m.why_not_measurable(),
            "CPU 1: not measurable: the energy counter went back from 3100 mJ to 40 mJ between the readings "
            "(its origin changed: the joule daemon that serves it restarted); the energy between them is "
            "unknown");
  EXPECT_TRUE(std::isnan(m.total_energy_j()));
}

}  // namespace
}  // namespace joule::measure
