// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics: what /metrics renders for simulated and failing GPUs on a virtual clock, carbon
// accounting, window histograms, and the HTTP endpoint over loopback.
#include "joule/metrics/gpu_metrics.hpp"

#include <cmath>
#include <regex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/text_serializer.h>

#include "joule/device/rapl.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/metrics/cpu_metrics.hpp"
#include "joule/metrics/endpoint.hpp"
#include "joule/metrics/http_listener.hpp"
#include "joule/metrics/inference_metrics.hpp"

#include "fakes/rapl/fake_powercap.hpp"
#include "metrics/metrics_text.hpp"
#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::metrics {
namespace {

using test::parse_exposition;
using ::testing::Return;

struct MetricsFixture : ::testing::Test {
  std::shared_ptr<VirtualClock> clock = std::make_shared<VirtualClock>();
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> sims;
  std::vector<device::Gpu*> open(std::string_view spec_text) {
    sims = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec_text), clock));
    std::vector<device::Gpu*> raw;
    for (auto& gpu : sims) {
      raw.push_back(gpu.get());
    }
    return raw;
  }
  void advance_s(double seconds) { clock->advance(from_seconds(seconds)); }
};

std::map<std::string, std::string> gpu0(const device::Gpu& gpu) {
  return {{"gpu", std::to_string(gpu.info().index)}, {"uuid", gpu.info().uuid}, {"name", gpu.info().name}};
}

TEST_F(MetricsFixture, RendersEnergyPowerAndLimitOfEachSimulatedGpu) {
  MetricsRegistry metrics;
  auto gpus = open("2xv100");
  auto collector = std::make_shared<GpuMetrics>(gpus, *clock);
  metrics.add_collector(collector);
  advance_s(10);
  const auto text = metrics.render();
  const auto parsed = parse_exposition(text);

  EXPECT_EQ(parsed.type.at("joule_gpu_energy_joules_total"), "counter");
  EXPECT_EQ(parsed.type.at("joule_gpu_power_watts"), "gauge");
  EXPECT_EQ(parsed.type.at("joule_gpu_power_limit_watts"), "gauge");
  EXPECT_EQ(parsed.type.at("joule_gpu_read_errors_total"), "counter");
  EXPECT_EQ(parsed.type.at("joule_gpu_info"), "gauge");
  EXPECT_NE(parsed.help.at("joule_gpu_energy_joules_total").find("joules"), std::string::npos);
  EXPECT_NE(parsed.help.at("joule_gpu_power_watts").find("watts"), std::string::npos);
  EXPECT_NE(parsed.help.at("joule_gpu_power_limit_watts").find("watts"), std::string::npos);
  // No intensity set: no carbon families at all (rather than a misleading zero).
  EXPECT_EQ(parsed.type.count("joule_gpu_carbon_grams_total"), 0u);
  EXPECT_EQ(parsed.type.count("joule_grid_carbon_intensity_grams_per_kwh"), 0u);

  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 2u);
  for (auto* gpu : gpus) {
    const auto labels = gpu0(*gpu);
    // The simulated GPU draws constant power: the reading at scrape time equals one read now.
    const double energy_j = static_cast<double>(*gpu->energy_mj()) / 1000;
    EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_energy_joules_total", labels), energy_j);
    EXPECT_GT(energy_j, 0);
    EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_power_watts", labels), *gpu->power_mw() / 1000.0);
    EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_power_limit_watts", labels), *gpu->power_limit_mw() / 1000.0);
    EXPECT_NEAR(energy_j, 10 * *gpu->power_mw() / 1000.0, 0.002);
    auto info = labels;
    info["backend"] = "sim";
    info["energy_source"] = "counter";
    EXPECT_EQ(parsed.value("joule_gpu_info", info), 1.0);
    for (const char* reading : {"energy", "power", "power_limit"}) {
      auto error_labels = labels;
      error_labels["reading"] = reading;
      EXPECT_EQ(parsed.value("joule_gpu_read_errors_total", error_labels), 0.0) << reading;
    }
  }
  EXPECT_EQ(parsed.samples[0].name, "joule_gpu_info");
  EXPECT_NE(text.find("# HELP joule_gpu_energy_joules_total "), std::string::npos);
}

TEST_F(MetricsFixture, EveryFamilyHasHelpTypeAndConventionalName) {
  MetricsRegistry metrics;
  auto gpus = open("2xv100");
  auto collector = std::make_shared<GpuMetrics>(gpus, *clock);
  ASSERT_TRUE(collector->set_carbon_intensity(300));
  metrics.add_collector(collector);
  WindowMetrics windows(metrics.registry());
  windows.observe("epoch", 1.5, 300);
  const auto parsed = parse_exposition(metrics.render());
  static const std::regex kName("joule_[a-z_]+");
  for (const auto& [name, type] : parsed.type) {
    EXPECT_TRUE(std::regex_match(name, kName)) << name;
    EXPECT_FALSE(parsed.help.at(name).empty()) << name;
    if (type == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    } else {
      EXPECT_FALSE(name.ends_with("_total")) << name;
    }
    // Units in base units, in the name (info metrics are unitless).
    const bool unit = name.ends_with("_joules") || name.ends_with("_joules_total") ||
                      name.ends_with("_watts") || name.ends_with("_seconds") ||
                      name.ends_with("_grams_total") || name.ends_with("_grams_per_kwh") ||
                      name.ends_with("_celsius") || name.ends_with("_hertz") || name.ends_with("_ratio") ||
                      name.ends_with("_info") || name.ends_with("errors_total") ||
                      name.starts_with("joule_gpu_clock_event_");  // a bit set and 0/1 flags: unitless
    EXPECT_TRUE(unit) << name;
  }
  EXPECT_EQ(parsed.type.at("joule_window_duration_seconds"), "histogram");
  EXPECT_EQ(parsed.type.at("joule_window_energy_joules"), "histogram");
  EXPECT_EQ(parsed.type.at("joule_gpu_carbon_grams_total"), "counter");
  EXPECT_EQ(parsed.type.at("joule_grid_carbon_intensity_grams_per_kwh"), "gauge");
}

TEST_F(MetricsFixture, GpuWithoutCounterIntegratesPolledPower) {
  auto gpus = open("p100");
  ASSERT_FALSE(gpus[0]->info().has_energy_counter);
  GpuMetrics collector(gpus, *clock);  // the integral starts here
  advance_s(4);
  collector.update();
  advance_s(6);
  const auto families = collector.Collect();
  const auto parsed = parse_exposition(prometheus::TextSerializer().Serialize(families));
  const double power_w = *gpus[0]->power_mw() / 1000.0;
  EXPECT_NEAR(*parsed.value("joule_gpu_energy_joules_total"), 10 * power_w, 1e-9);
  EXPECT_EQ(parsed.value("joule_gpu_info", {{"energy_source", "power"}}), 1.0);
}

TEST_F(MetricsFixture, CarbonIsEnergyTimesTheIntensityInForceWhenItWasUsed) {
  auto gpus = open("v100");
  auto collector = std::make_shared<GpuMetrics>(gpus, *clock);
  MetricsRegistry metrics;
  metrics.add_collector(collector);
  const double power_w = *gpus[0]->power_mw() / 1000.0;
  advance_s(100);  // no intensity yet: not charged
  ASSERT_TRUE(collector->set_carbon_intensity(400));
  EXPECT_EQ(collector->carbon_intensity(), 400.0);
  advance_s(3600);
  ASSERT_TRUE(collector->set_carbon_intensity(100));
  advance_s(1800);
  const auto parsed = parse_exposition(metrics.render());
  const double expected_g = power_w * 3600 / 3.6e6 * 400 + power_w * 1800 / 3.6e6 * 100;
  EXPECT_NEAR(*parsed.value("joule_gpu_carbon_grams_total", gpu0(*gpus[0])), expected_g, 1e-3);
  EXPECT_EQ(parsed.value("joule_grid_carbon_intensity_grams_per_kwh"), 100.0);

  collector->clear_carbon_intensity();
  advance_s(1000);
  const auto cleared = parse_exposition(metrics.render());
  EXPECT_EQ(cleared.type.count("joule_grid_carbon_intensity_grams_per_kwh"), 0u);
  EXPECT_NEAR(*cleared.value("joule_gpu_carbon_grams_total"), expected_g, 1e-3);  // kept, not growing
}

TEST_F(MetricsFixture, BadCarbonIntensityIsRefusedWithAMessage) {
  auto gpus = open("v100");
  GpuMetrics collector(gpus, *clock);
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const auto result = collector.set_carbon_intensity(bad);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message().find("expected a finite number of at least 0"), std::string::npos)
        << result.error().message();
  }
  EXPECT_FALSE(collector.carbon_intensity());
}

TEST_F(MetricsFixture, ExportsTelemetryInBaseUnits) {
  MetricsRegistry metrics;
  auto gpus = open("2xv100");
  ASSERT_TRUE(gpus[1]->set_power_limit_mw(125'000));
  metrics.add_collector(std::make_shared<GpuMetrics>(gpus, *clock));
  const auto parsed = parse_exposition(metrics.render());
  for (const char* name : {"joule_gpu_temperature_celsius", "joule_gpu_sm_clock_hertz", "joule_gpu_memory_clock_hertz",
                           "joule_gpu_utilization_ratio", "joule_gpu_memory_utilization_ratio",
                           "joule_gpu_clock_event_reasons", "joule_gpu_memory_power_watts"}) {
    EXPECT_EQ(parsed.type.at(name), "gauge") << name;
    EXPECT_EQ(parsed.count(name), 2u) << name;
  }
  const auto labels = gpu0(*gpus[0]);
  EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_temperature_celsius", labels), *gpus[0]->temperature_c());
  EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_sm_clock_hertz", labels), *gpus[0]->sm_clock_mhz() * 1e6);
  EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_memory_clock_hertz", labels), 877e6);
  EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_utilization_ratio", labels), 0.98);
  EXPECT_DOUBLE_EQ(*parsed.value("joule_gpu_memory_utilization_ratio", labels), 0.5);
  EXPECT_EQ(parsed.value("joule_gpu_clock_event_reasons", labels), 0.0);
  auto capped = gpu0(*gpus[1]);
  EXPECT_EQ(parsed.value("joule_gpu_clock_event_reasons", capped), 4.0);
  capped["reason"] = "sw_power_cap";
  EXPECT_EQ(parsed.value("joule_gpu_clock_event_active", capped), 1.0);
  capped["reason"] = "idle";
  EXPECT_EQ(parsed.value("joule_gpu_clock_event_active", capped), 0.0);
  EXPECT_EQ(parsed.count("joule_gpu_clock_event_active"), 18u);  // 9 reasons × 2 GPUs
}

TEST(GpuMetricsTest, TelemetryADeviceDoesNotReportIsAbsentAndFailuresAreCounted) {
  VirtualClock clock;
  test::MockGpu gpu(test::mock_gpu_info(0));  // the mock keeps the default hooks: nothing supported
  EXPECT_CALL(gpu, do_energy_mj()).WillRepeatedly(Return(uint64_t{5000}));
  EXPECT_CALL(gpu, do_power_mw()).WillRepeatedly(Return(uint32_t{100000}));
  EXPECT_CALL(gpu, do_power_limit_mw()).WillRepeatedly(Return(uint32_t{250000}));
  MetricsRegistry metrics;
  metrics.add_collector(std::make_shared<GpuMetrics>(std::vector<device::Gpu*>{&gpu}, clock));
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.type.count("joule_gpu_temperature_celsius"), 0u);
  EXPECT_EQ(parsed.type.count("joule_gpu_clock_event_active"), 0u);
  EXPECT_EQ(parsed.value("joule_gpu_read_errors_total", {{"gpu", "0"}, {"reading", "telemetry"}}), 0.0);
  const auto telemetry = gpu.telemetry();
  ASSERT_EQ(telemetry.errors.size(), device::telemetry_fields().size());
  EXPECT_EQ(telemetry.error(device::TelemetryField::kTemperature)->message(),
            "GPU 0 (Mock GPU) does not report temperature (mock backend)");
}

TEST(CpuMetricsTest, ExportsPackageAndDramEnergyOfRapl) {
  test::FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, 262143328850, test::FakeDram{2'000'000});
  powercap.add_package(1, "package-1", 7'500'000, 262143328850);
  device::RaplOptions options;
  options.powercap_root = powercap.root();
  options.wrap_check_period = std::chrono::seconds(60);
  auto cpus = device::open_rapl_cpus(options);
  ASSERT_TRUE(cpus) << cpus.error().message();
  MetricsRegistry metrics;
  metrics.add_collector(std::make_shared<CpuMetrics>(std::vector<device::Cpu*>{(*cpus)[0].get(), (*cpus)[1].get()}));
  powercap.set_energy(0, 6'000'000);
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.type.at("joule_cpu_package_energy_joules_total"), "counter");
  EXPECT_EQ(parsed.type.at("joule_cpu_dram_energy_joules_total"), "counter");
  const auto first = parsed.value("joule_cpu_package_energy_joules_total", {{"cpu", "0"}, {"name", "package-0"}});
  ASSERT_TRUE(first);
  EXPECT_EQ(parsed.count("joule_cpu_package_energy_joules_total"), 2u);
  EXPECT_EQ(parsed.count("joule_cpu_dram_energy_joules_total"), 1u);  // package 1 has no DRAM domain
  EXPECT_EQ(parsed.value("joule_cpu_read_errors_total", {{"cpu", "1"}, {"reading", "package"}}), 0.0);
  powercap.set_energy(0, 9'000'000);
  const auto later = parse_exposition(metrics.render());
  EXPECT_NEAR(*later.value("joule_cpu_package_energy_joules_total", {{"cpu", "0"}}) - *first, 3.0, 1e-9);
}

TEST(GpuMetricsTest, AFailingReadSkipsThatSampleAndCountsTheError) {
  VirtualClock clock;
  test::MockGpu broken(test::mock_gpu_info(0));
  auto healthy_info = test::mock_gpu_info(1);
  healthy_info.uuid = "GPU-healthy";
  test::MockGpu healthy(healthy_info);
  EXPECT_CALL(broken, do_energy_mj()).WillRepeatedly(Return(uint64_t{5000}));
  EXPECT_CALL(broken, do_power_mw())
      .WillRepeatedly(Return(fail(ErrorCode::kDevice, "GPU 0 fell off the bus")));
  EXPECT_CALL(broken, do_power_limit_mw()).WillRepeatedly(Return(uint32_t{250000}));
  EXPECT_CALL(healthy, do_energy_mj()).WillRepeatedly(Return(uint64_t{7000}));
  EXPECT_CALL(healthy, do_power_mw()).WillRepeatedly(Return(uint32_t{123456}));
  EXPECT_CALL(healthy, do_power_limit_mw())
      .WillRepeatedly(Return(fail(ErrorCode::kNotSupported, "no power limit here")));
  MetricsRegistry metrics;
  metrics.add_collector(std::make_shared<GpuMetrics>(std::vector<device::Gpu*>{&broken, &healthy}, clock));
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.value("joule_gpu_energy_joules_total", {{"gpu", "0"}}), 5.0);
  EXPECT_FALSE(parsed.value("joule_gpu_power_watts", {{"gpu", "0"}}));  // absent, not 0
  EXPECT_EQ(parsed.value("joule_gpu_power_limit_watts", {{"gpu", "0"}}), 250.0);
  EXPECT_EQ(parsed.value("joule_gpu_energy_joules_total", {{"gpu", "1"}}), 7.0);
  EXPECT_EQ(parsed.value("joule_gpu_power_watts", {{"gpu", "1"}}), 123.456);
  EXPECT_FALSE(parsed.value("joule_gpu_power_limit_watts", {{"gpu", "1"}}));
  // Construction read once, the scrape once.
  EXPECT_EQ(parsed.value("joule_gpu_read_errors_total", {{"gpu", "0"}, {"reading", "power"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_gpu_read_errors_total", {{"gpu", "0"}, {"reading", "energy"}}), 0.0);
  EXPECT_EQ(parsed.value("joule_gpu_read_errors_total", {{"gpu", "1"}, {"reading", "power_limit"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_gpu_info", {{"gpu", "1"}, {"uuid", "GPU-healthy"}, {"name", "Mock GPU"}}),
            1.0);
}

TEST(GpuMetricsTest, AFailingEnergyReadLeavesTheEnergySampleOutOfThatScrapeOnly) {
  VirtualClock clock;
  test::MockGpu gpu(test::mock_gpu_info(0));
  EXPECT_CALL(gpu, do_power_mw()).WillRepeatedly(Return(uint32_t{100000}));
  EXPECT_CALL(gpu, do_power_limit_mw()).WillRepeatedly(Return(uint32_t{250000}));
  EXPECT_CALL(gpu, do_energy_mj())
      .WillOnce(Return(uint64_t{500}))                               // construction
      .WillOnce(Return(uint64_t{1000}))                              // set_carbon_intensity
      .WillOnce(Return(fail(ErrorCode::kDevice, "counter glitch")))  // first scrape
      .WillOnce(Return(uint64_t{3000}));                             // second scrape
  GpuMetrics collector({&gpu}, clock);
  ASSERT_TRUE(collector.set_carbon_intensity(1000));
  const auto first = parse_exposition(prometheus::TextSerializer().Serialize(collector.Collect()));
  EXPECT_FALSE(first.value("joule_gpu_energy_joules_total"));
  EXPECT_EQ(first.value("joule_gpu_power_watts"), 100.0);
  EXPECT_EQ(first.value("joule_gpu_read_errors_total", {{"reading", "energy"}}), 1.0);
  const auto second = parse_exposition(prometheus::TextSerializer().Serialize(collector.Collect()));
  EXPECT_EQ(second.value("joule_gpu_energy_joules_total"), 3.0);
  // The energy across the failed read is still charged: 2 J at 1000 g/kWh.
  EXPECT_NEAR(*second.value("joule_gpu_carbon_grams_total"), 2.0 / 3.6e6 * 1000, 1e-12);
}

TEST_F(MetricsFixture, ConcurrentScrapesUpdatesAndIntensityChangesAreSafe) {
  MetricsRegistry metrics;
  auto gpus = open("2xv100");
  auto collector = std::make_shared<GpuMetrics>(gpus, *clock);
  metrics.add_collector(collector);
  WindowMetrics windows(metrics.registry());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        switch (t) {
          case 0:
            EXPECT_EQ(parse_exposition(metrics.render()).count("joule_gpu_energy_joules_total"), 2u);
            break;
          case 1:
            ASSERT_TRUE(collector->set_carbon_intensity(100 + i));
            break;
          case 2:
            windows.observe(i % 2 == 0 ? "a" : "b", 1, 10);
            clock->advance(std::chrono::milliseconds(10));
            break;
          default:
            collector->update();
            break;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  ASSERT_EQ(collector->carbon_intensity(), 299.0);  // the last one set
  advance_s(1);  // charged after every thread ended, whatever the interleaving was
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_count", {{"window", "a"}}), 100.0);
  EXPECT_GT(*parsed.value("joule_gpu_carbon_grams_total", {{"gpu", "0"}}), 0);
}

TEST(GpuMetricsTest, ThePollingThreadOfAGpuWithoutCounterRunsBesideScrapes) {
  std::shared_ptr<Clock> clock{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
  auto sims = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("p100"), clock));
  GpuMetricsOptions options;
  options.polling_period = std::chrono::milliseconds(1);
  auto collector = std::make_shared<GpuMetrics>(std::vector<device::Gpu*>{sims[0].get()}, *clock, options);
  MetricsRegistry metrics;
  metrics.add_collector(collector);
  double previous_j = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double energy_j = *parse_exposition(metrics.render()).value("joule_gpu_energy_joules_total");
    EXPECT_GE(energy_j, previous_j);  // a counter never goes down
    previous_j = energy_j;
  }
  EXPECT_GT(previous_j, 0);
}

TEST_F(MetricsFixture, WindowHistogramsAreFedByTheEnergyMonitor) {
  MetricsRegistry metrics;
  WindowMetrics windows(metrics.registry());
  measure::MonitorOptions options;
  options.on_window_end = windows.observer();
  auto gpus = open("2xv100");
  measure::EnergyMonitor monitor(gpus, {}, *clock, options);
  double total_j = 0;
  for (const double seconds : {2.0, 20.0}) {
    monitor.begin_window("epoch");
    advance_s(seconds);
    total_j += monitor.end_window("epoch").total_gpu_energy_j();
  }
  monitor.begin_window("eval");
  advance_s(0.05);
  const double eval_j = monitor.end_window("eval").total_gpu_energy_j();
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_count", {{"window", "epoch"}}), 2.0);
  EXPECT_NEAR(*parsed.value("joule_window_duration_seconds_sum", {{"window", "epoch"}}), 22.0, 1e-9);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_bucket", {{"window", "epoch"}, {"le", "5"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_bucket", {{"window", "epoch"}, {"le", "30"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_bucket", {{"window", "epoch"}, {"le", "+Inf"}}), 2.0);
  EXPECT_NEAR(*parsed.value("joule_window_energy_joules_sum", {{"window", "epoch"}}), total_j, 1e-6);
  EXPECT_EQ(parsed.value("joule_window_energy_joules_count", {{"window", "eval"}}), 1.0);
  EXPECT_NEAR(*parsed.value("joule_window_energy_joules_sum", {{"window", "eval"}}), eval_j, 1e-6);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_bucket", {{"window", "eval"}, {"le", "0.1"}}), 1.0);
}

TEST(WindowMetricsTest, SkipsNonsenseAndRefusesBadBuckets) {
  prometheus::Registry registry;
  WindowMetrics windows(registry);
  windows.observe("w", -1, 5);
  windows.observe("w", 1, std::nan(""));
  const auto text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_EQ(text.find("window=\"w\""), std::string::npos);

  WindowMetricsOptions unsorted;
  unsorted.energy_buckets_j = {10, 5};
  prometheus::Registry other;
  try {
    WindowMetrics bad(other, unsorted);
    FAIL() << "unsorted buckets accepted";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(error.what(), "energy buckets must be finite and strictly increasing (got 10, 5)");
  }
  WindowMetricsOptions empty;
  empty.duration_buckets_s.clear();
  EXPECT_THROW(WindowMetrics(other, empty), Exception);
}

TEST(EnergyMonitorObserverTest, AThrowingObserverDoesNotBreakTheWindow) {
  auto clock = std::make_shared<VirtualClock>();
  auto sims = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100"), clock));
  measure::MonitorOptions options;
  int calls = 0;
  options.on_window_end = [&calls](const measure::Measurement&) {
    ++calls;
    throw std::runtime_error("observer broke");
  };
  measure::EnergyMonitor monitor({sims[0].get()}, {}, *clock, options);
  monitor.begin_window("w");
  clock->advance(from_seconds(1));
  EXPECT_NO_THROW(monitor.end_window("w"));
  EXPECT_EQ(calls, 1);
}

// ---- HTTP endpoint -------------------------------------------------------------------------------------

TEST(MetricsAddressTest, ParsesHostPortAndRefusesTheRest) {
  EXPECT_EQ(*parse_host_port("127.0.0.1:9400", "--serve"), std::pair(std::string("127.0.0.1"), 9400));
  EXPECT_EQ(*parse_host_port(":0", "--serve"), std::pair(std::string("0.0.0.0"), 0));
  EXPECT_EQ(*parse_host_port("[::1]:9400", "--serve"), std::pair(std::string("::1"), 9400));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"localhost", "--serve 'localhost' is not HOST:PORT (e.g. 127.0.0.1:9400, or :0 for any port)"},
      {"127.0.0.1:", "--serve '127.0.0.1:': port '' is not a number in [0, 65535]"},
      {"127.0.0.1:http", "--serve '127.0.0.1:http': port 'http' is not a number in [0, 65535]"},
      {"127.0.0.1:70000", "--serve '127.0.0.1:70000': port '70000' is not a number in [0, 65535]"},
      {"127.0.0.1:-1", "--serve '127.0.0.1:-1': port '-1' is not a number in [0, 65535]"},
      {"::1:9400", "--serve '::1:9400': write an IPv6 host in brackets, e.g. [::1]:9400"},
  };
  for (const auto& [text, message] : cases) {
    const auto parsed = parse_host_port(text, "--serve");
    ASSERT_FALSE(parsed) << text;
    EXPECT_EQ(parsed.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(parsed.error().message(), message);
  }
}

TEST_F(MetricsFixture, EndpointServesMetricsOverLoopback) {
  MetricsRegistry metrics;
  auto gpus = open("2xv100");
  metrics.add_collector(std::make_shared<GpuMetrics>(gpus, *clock));
  auto endpoint = MetricsEndpoint::start(
      "127.0.0.1:0", [&metrics] { return metrics.render(); }, "--serve");
  ASSERT_TRUE(endpoint) << endpoint.error().message();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*endpoint)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");
  httplib::Client client("127.0.0.1", port);
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("Content-Type"), kMetricsContentType);
  const auto parsed = parse_exposition(response->body);
  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 2u);

  auto index = client.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_NE(index->body.find("/metrics"), std::string::npos);
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);

  (*endpoint)->stop();
  (*endpoint)->stop();  // idempotent
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST(MetricsEndpointTest, PortInUseAndBadAddressesFailWithAMessage) {
  auto first = MetricsEndpoint::start(
      "127.0.0.1:0", [] { return std::string(); }, "--metrics");
  ASSERT_TRUE(first);
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  const auto second = MetricsEndpoint::start(
      taken, [] { return std::string(); }, "--metrics");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), ErrorCode::kIo);
  EXPECT_EQ(second.error().message(),
            "--metrics " + taken + ": cannot listen on " + taken + ": Address already in use");

  const auto malformed = MetricsEndpoint::start(
      "nowhere", [] { return std::string(); }, "--metrics");
  ASSERT_FALSE(malformed);
  EXPECT_EQ(malformed.error().message(),
            "--metrics 'nowhere' is not HOST:PORT (e.g. 127.0.0.1:9400, or :0 for any port)");

  const auto unbindable = MetricsEndpoint::start(
      "192.0.2.1:0", [] { return std::string(); }, "--metrics");
  ASSERT_FALSE(unbindable);
  EXPECT_EQ(unbindable.error().code(), ErrorCode::kIo);
  EXPECT_TRUE(unbindable.error().message().starts_with("--metrics 192.0.2.1:0: cannot listen on 192.0.2.1"))
      << unbindable.error().message();
}

TEST(MetricsEndpointTest, ARenderThatThrowsGives500AndTheServerStaysUp) {
  bool fail_next = true;
  auto endpoint = MetricsEndpoint::start("127.0.0.1:0", [&fail_next]() -> std::string {
    if (std::exchange(fail_next, false)) {
      throw std::runtime_error("collector exploded");
    }
    return "ok_total 1\n";
  });
  ASSERT_TRUE(endpoint);
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  auto failed = client.Get("/metrics");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 500);
  EXPECT_NE(failed->body.find("collector exploded"), std::string::npos);
  auto fine = client.Get("/metrics");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
  EXPECT_EQ(fine->body, "ok_total 1\n");
}

TEST(InferenceMetrics, ObservesRequestsAndSkipsBadValues) {
  MetricsRegistry metrics;
  InferenceMetrics inference(metrics.registry());
  measure::RequestEnergy request;
  request.request_id = "r1";
  request.arrival_s = 0;
  request.first_token_s = 0.2;
  request.finish_s = 1.2;
  request.output_tokens = 11;
  request.prefill_energy_j = 3;
  request.decode_energy_j = 8;
  request.energy_j = 11;
  inference.observe_request("m", request, true);
  request.energy_j = std::nan("");
  inference.observe_request("m", request, false);  // skipped
  inference.add_idle_energy("m", 2.5);
  inference.add_idle_energy("m", -1);  // skipped
  inference.set_sm_clock_mhz("m", 1200);
  inference.set_slo_attainment("m", 1.5);  // skipped
  const auto parsed = parse_exposition(metrics.render());
  EXPECT_EQ(parsed.type.at("joule_inference_request_energy_joules"), "histogram");
  const auto value = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    for (const auto& sample : parsed.samples) {
      if (sample.name == name && sample.labels == labels)
        return sample.value;
    }
    ADD_FAILURE() << name << " missing";
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(value("joule_inference_request_energy_joules_sum", {{"model", "m"}}), 11);
  EXPECT_DOUBLE_EQ(value("joule_inference_energy_per_output_token_joules_sum", {{"model", "m"}}), 1);
  EXPECT_DOUBLE_EQ(value("joule_inference_time_per_output_token_seconds_sum", {{"model", "m"}}), 0.1);
  EXPECT_DOUBLE_EQ(value("joule_inference_energy_joules_total", {{"model", "m"}, {"phase", "idle"}}), 2.5);
  EXPECT_DOUBLE_EQ(value("joule_inference_energy_joules_total", {{"model", "m"}, {"phase", "decode"}}), 8);
  EXPECT_DOUBLE_EQ(value("joule_inference_requests_total", {{"model", "m"}, {"slo", "met"}}), 1);
  EXPECT_DOUBLE_EQ(value("joule_inference_output_tokens_total", {{"model", "m"}}), 11);
  EXPECT_DOUBLE_EQ(value("joule_inference_sm_clock_hertz", {{"model", "m"}}), 1.2e9);
  // An attainment outside [0, 1] is not set: no series at all, not a wrong one.
  EXPECT_EQ(parsed.type.count("joule_inference_slo_attainment_ratio"), 0u);
  JOULE_EXPECT_THROW_MESSAGE(InferenceMetrics(metrics.registry(), {.ttft_buckets_s = {1, 0.5}}),
                             ErrorCode::kInvalidArgument,
                             "TTFT buckets must be finite and strictly increasing (got 1, 0.5)");
}

}  // namespace
}  // namespace joule::metrics
