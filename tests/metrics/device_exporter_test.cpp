// SPDX-License-Identifier: Apache-2.0
// The device exporter of `joule power --serve` and `joule daemon --metrics`: GPU and CPU collectors, the
// carbon intensity (constant, or a source refreshed on its own timer) and the endpoint, over loopback.
#include "joule/metrics/device_exporter.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/counter.h>

#include "joule/device/rapl.hpp"
#include "joule/device/sim_gpu.hpp"

#include "fakes/rapl/fake_powercap.hpp"
#include "metrics/metrics_text.hpp"

namespace joule::metrics {
namespace {

using test::Exposition;
using test::parse_exposition;

struct DeviceExporterFixture : ::testing::Test {
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
  static DeviceExporterOptions options() {
    DeviceExporterOptions out;
    out.address = "127.0.0.1:0";
    out.flag = "test: --serve";
    out.name = "test";
    return out;
  }
  static Exposition scrape(const DeviceExporter& exporter) {
    const std::string url = exporter.url();
    const int port = std::stoi(url.substr(url.rfind(':') + 1));
    httplib::Client client("127.0.0.1", port);
    const auto response = client.Get("/metrics");
    EXPECT_TRUE(response);
    EXPECT_EQ(response->status, 200);
    return parse_exposition(response->body);
  }
};

TEST_F(DeviceExporterFixture, ServesTheGpusAndCpusWithAConstantIntensity) {
  test::FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, 262143328850, test::FakeDram{2'000'000});
  device::RaplOptions rapl;
  rapl.powercap_root = powercap.root();
  rapl.wrap_check_period = std::chrono::seconds(60);
  auto cpus = device::open_rapl_cpus(rapl);
  ASSERT_TRUE(cpus) << cpus.error().message();
  auto opts = options();
  opts.carbon_intensity_g_per_kwh = 300;
  auto exporter = DeviceExporter::start(open("2xv100"), {(*cpus)[0].get()}, *clock, opts);
  ASSERT_TRUE(exporter) << exporter.error().message();
  EXPECT_EQ((*exporter)->gpu_metrics().carbon_intensity(), 300.0);
  const auto parsed = scrape(**exporter);
  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 2u);
  EXPECT_EQ(parsed.count("joule_cpu_package_energy_joules_total"), 1u);
  EXPECT_EQ(parsed.value("joule_grid_carbon_intensity_grams_per_kwh"), 300.0);
  (*exporter)->stop();
  (*exporter)->stop();  // idempotent
}

TEST_F(DeviceExporterFixture, NoCpusAndNoCarbonExportOnlyTheGpus) {
  auto exporter = DeviceExporter::start(open("v100"), {}, *clock, options());
  ASSERT_TRUE(exporter) << exporter.error().message();
  const auto parsed = scrape(**exporter);
  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 1u);
  EXPECT_EQ(parsed.count("joule_cpu_package_energy_joules_total"), 0u);
  EXPECT_EQ(parsed.count("joule_grid_carbon_intensity_grams_per_kwh"), 0u);
  // The daemon registers its own families beside the devices'.
  prometheus::BuildCounter()
      .Name("joule_test_total")
      .Help("a test")
      .Register((*exporter)->registry().registry())
      .Add({});
  EXPECT_EQ(scrape(**exporter).count("joule_test_total"), 1u);
}

TEST_F(DeviceExporterFixture, ASourceThatFailsAtTheStartIsAConfigurationError) {
  auto opts = options();
  opts.carbon = CarbonIntensitySource{
      .latest = []() -> Result<double> { return fail(ErrorCode::kNotFound, "no value at this time"); },
      .description = "a trace"};
  const auto exporter = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_FALSE(exporter);
  EXPECT_EQ(exporter.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(exporter.error().message(), "test: no value at this time");
}

TEST_F(DeviceExporterFixture, BadAddressAndBadIntensityAreRefused) {
  auto opts = options();
  opts.address = "nonsense";
  const auto bad_address = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_FALSE(bad_address);
  EXPECT_EQ(bad_address.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_address.error().message().find("test: --serve"), std::string::npos);
  opts = options();
  opts.carbon_intensity_g_per_kwh = -1;
  const auto bad_intensity = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_FALSE(bad_intensity);
  EXPECT_EQ(bad_intensity.error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(DeviceExporterFixture, AFailedRefreshKeepsTheLastValue) {
  std::vector<Result<double>> answers = {250.0, fail(ErrorCode::kIo, "provider down"), 400.0};
  size_t asked = 0;
  auto opts = options();
  opts.carbon = CarbonIntensitySource{.latest = [&]() -> Result<double> { return answers.at(asked++); },
                                      .description = "a provider"};
  opts.carbon_refresh_s = 3600;  // the timer never fires here: refreshes are called directly
  auto exporter = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_TRUE(exporter) << exporter.error().message();
  EXPECT_EQ((*exporter)->gpu_metrics().carbon_intensity(), 250.0);
  EXPECT_FALSE((*exporter)->refresh_carbon_intensity());
  EXPECT_EQ((*exporter)->gpu_metrics().carbon_intensity(), 250.0);
  EXPECT_TRUE((*exporter)->refresh_carbon_intensity());
  EXPECT_EQ((*exporter)->gpu_metrics().carbon_intensity(), 400.0);
  EXPECT_EQ(scrape(**exporter).value("joule_grid_carbon_intensity_grams_per_kwh"), 400.0);
}

TEST_F(DeviceExporterFixture, TheTimerRefreshesTheSourceOnItsOwn) {
  std::mutex mutex;
  std::condition_variable asked_again;
  int asked = 0;
  auto opts = options();
  opts.carbon = CarbonIntensitySource{.latest = [&]() -> Result<double> {
                                        const std::lock_guard lock(mutex);
                                        ++asked;
                                        asked_again.notify_all();
                                        return 100.0 * asked;
                                      },
                                      .description = "a trace"};
  opts.carbon_refresh_s = 0.001;
  auto exporter = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_TRUE(exporter) << exporter.error().message();
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(asked_again.wait_for(lock, std::chrono::seconds(10), [&] { return asked >= 3; }));
  }
  (*exporter)->stop();  // joins the timer: no call after this
  const std::lock_guard lock(mutex);
  EXPECT_GE((*exporter)->gpu_metrics().carbon_intensity().value_or(0), 200.0);
}

TEST_F(DeviceExporterFixture, AConstantSourceIsAskedOnlyAtTheStart) {
  std::atomic<int> asked = 0;
  auto opts = options();
  opts.carbon = CarbonIntensitySource{.latest = [&]() -> Result<double> { return ++asked, 120.0; },
                                      .description = "a country"};
  opts.carbon_refresh_s = 0;
  auto exporter = DeviceExporter::start(open("v100"), {}, *clock, opts);
  ASSERT_TRUE(exporter) << exporter.error().message();
  (*exporter)->stop();
  EXPECT_EQ(asked, 1);
}

}  // namespace
}  // namespace joule::metrics
