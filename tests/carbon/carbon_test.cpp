// SPDX-License-Identifier: Apache-2.0
// Carbon signals without HTTP: UTC times, CSV traces and their replay, the bucketed carbon monitor, tariffs.
#include "joule/carbon/signal.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"

#include "test_util.hpp"

namespace joule::carbon {
namespace {

constexpr int64_t kNs = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 - 1'700'000'000 % 3600;  // 2023-11-14T22:00:00Z

std::string message_of(const Error& error) {
  return error.message();
}

TEST(UtcTime, ParsesTheProvidersFormats) {
  EXPECT_EQ(*parse_utc_time("2024-09-24T03:00:00.000Z"), 1727146800);
  EXPECT_EQ(*parse_utc_time("2024-09-24T03:00Z"), 1727146800);
  EXPECT_EQ(*parse_utc_time("2022-07-15T00:05:00+00:00"), 1657843500);
  EXPECT_EQ(*parse_utc_time("2022-07-15T02:05:00+02:00"), 1657843500);
  EXPECT_EQ(*parse_utc_time("2022-07-15 00:05:00"), 1657843500);
  EXPECT_EQ(format_utc_time(1727146800), "2024-09-24T03:00:00Z");
  EXPECT_EQ(floor_to_period(1727146800 + 1799, 1800), 1727146800);
  EXPECT_EQ(floor_to_period(-1, 3600), -3600);
}

TEST(UtcTime, RejectsBadText) {
  for (const char* text : {"", "2024-09-24", "2024-13-01T00:00Z", "2024-02-30T00:00Z", "2024-09-24T25:00Z",
                           "2024-09-24T03:00:00Q", "yesterday"}) {
    const auto time = parse_utc_time(text);
    ASSERT_FALSE(time) << text;
    EXPECT_EQ(time.error().code(), ErrorCode::kParse);
    EXPECT_NE(message_of(time.error()).find("is not an ISO-8601 UTC time"), std::string::npos) << text;
  }
}

// Issue 11: a trace row after 2262 overflowed the nanosecond clock silently ("387409-12-18").
TEST(UtcTime, RefusesTimesTheClockCannotHold) {
  const std::string range =
      "is outside the times joule's clocks hold (from 1678-01-01T00:00:00Z to before 2262-01-01T00:00:00Z: "
      "nanoseconds since 1970 in 64 bits)";
  JOULE_EXPECT_ERROR(parse_utc_time("2300-01-01T00:00:00Z"), ErrorCode::kParse,
                     "'2300-01-01T00:00:00Z' " + range);
  JOULE_EXPECT_ERROR(parse_utc_time("9999-12-31T23:59:59Z"), ErrorCode::kParse,
                     "'9999-12-31T23:59:59Z' " + range);
  JOULE_EXPECT_ERROR(parse_utc_time("2262-01-01T00:00:00Z"), ErrorCode::kParse,
                     "'2262-01-01T00:00:00Z' " + range);
  JOULE_EXPECT_ERROR(parse_utc_time("2261-12-31T23:30:00-01:00"), ErrorCode::kParse,
                     "'2261-12-31T23:30:00-01:00' " + range);
  JOULE_EXPECT_ERROR(parse_utc_time("1677-12-31T23:59:59Z"), ErrorCode::kParse,
                     "'1677-12-31T23:59:59Z' " + range);
  EXPECT_EQ(*parse_utc_time("2261-12-31T23:59:59Z"), kLatestUtcTimeUnixS - 1);
  EXPECT_EQ(*parse_utc_time("1678-01-01T00:00:00Z"), kEarliestUtcTimeUnixS);
  // The last accepted time still fits in nanoseconds, with room for a period after it.
  EXPECT_LT(kLatestUtcTimeUnixS, std::numeric_limits<int64_t>::max() / kNs - 86400 * 100);
  EXPECT_GT(kEarliestUtcTimeUnixS, std::numeric_limits<int64_t>::min() / kNs);
}

TEST(UtcTime, BadTextIsQuotedPrintably) {
  JOULE_EXPECT_ERROR(
      parse_utc_time(std::string("\x1b]0;pwned\x07\x00", 11)), ErrorCode::kParse,
      "'\\x1b]0;pwned\\x07\\x00' is not an ISO-8601 UTC time (expected e.g. 2024-09-24T03:00:00Z "
      "or 2024-09-24T03:00+00:00)");
}

TEST(CarbonTrace, RefusesTimesPastTheClock) {
  const std::string header = "timestamp,carbon_intensity_g_per_kwh\n";
  JOULE_EXPECT_ERROR(
      CarbonTrace::parse(header + "2024-06-03T00:00Z,1\n2300-01-01T00:00Z,2\n", "t.csv"), ErrorCode::kParse,
      "t.csv:3:1: column 'timestamp': '2300-01-01T00:00Z' is outside the times joule's clocks "
      "hold (from 1678-01-01T00:00:00Z to before 2262-01-01T00:00:00Z: nanoseconds since 1970 in "
      "64 bits)");
  // Two rows 500 years apart: each time is fine, but the last period would end in 2700.
  JOULE_EXPECT_ERROR(CarbonTrace::parse(header + "1700-01-01T00:00Z,1\n2200-01-01T00:00Z,2\n", "t.csv"),
                     ErrorCode::kParse,
                     "t.csv:3: the trace's last period (15778454400 s from 2200-01-01T00:00:00Z) ends after "
                     "2262-01-01T00:00:00Z, the last time joule's clocks hold");
  JOULE_EXPECT_ERROR(
      CarbonTrace::from_points({{0, 1, false}, {std::numeric_limits<int64_t>::max(), 2, false}}, "points"),
      ErrorCode::kInvalidArgument,
      "points: point 1: the time 9223372036854775807 (Unix) is outside the times joule's clocks "
      "hold (from 1678-01-01T00:00:00Z to before 2262-01-01T00:00:00Z)");
}

TEST(CarbonTrace, ReadIsBounded) {
  test::ScopedEnv no_override("JOULE_MAX_FILE_MIB", nullptr);
  JOULE_EXPECT_ERROR(CarbonTrace::read_file("/dev/zero"), ErrorCode::kInvalidArgument,
                     "/dev/zero: more than 128 MiB, the most joule reads from a carbon-intensity trace (real "
                     "ones are far smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  JOULE_EXPECT_ERROR(HourlyTariff::read_file("/dev/zero"), ErrorCode::kInvalidArgument,
                     "/dev/zero: more than 1 MiB, the most joule reads from a tariff (real ones are far "
                     "smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
}

TEST(CarbonTrace, ParsesARegularTrace) {
  const auto trace = CarbonTrace::parse(
      "timestamp,carbon_intensity_g_per_kwh,note\n"
      "2024-06-03T00:00:00Z,400,a\n2024-06-03T00:30:00Z,410.5,b\n2024-06-03T01:00:00Z,0,c\n",
      "t.csv");
  ASSERT_TRUE(trace) << trace.error().message();
  EXPECT_EQ(trace->period_s(), 1800);
  EXPECT_EQ(trace->points().size(), 3u);
  EXPECT_EQ(trace->end_unix_s(), *parse_utc_time("2024-06-03T01:30:00Z"));
  EXPECT_DOUBLE_EQ(trace->at(*parse_utc_time("2024-06-03T00:59:59Z"))->intensity_g_per_kwh, 410.5);
  const auto again = CarbonTrace::parse(trace->to_csv(), "again");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->points().size(), 3u);
  const auto outside = trace->at(*parse_utc_time("2024-06-03T01:30:00Z"));
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(outside.error().message().find("covers 2024-06-03T00:00:00Z to 2024-06-03T01:30:00Z"),
            std::string::npos);
}

TEST(CarbonTrace, BadInputNamesTheLine) {
  const std::string header = "timestamp,carbon_intensity_g_per_kwh\n";
  const struct {
    std::string text;
    std::string expected;
  } cases[] = {
      {"time,value\n2024-06-03T00:00Z,1\n", "timestamp"},
      {"timestamp,value\n2024-06-03T00:00Z,1\n", "carbon_intensity_g_per_kwh"},
      {header + "2024-06-03T00:00Z,1\n", "at least two rows"},
      {header + "2024-06-03T00:00Z,1\nnot-a-time,2\n", "t.csv:3"},
      {header + "2024-06-03T00:00Z,1\n2024-06-03T00:30Z,abc\n", "t.csv:3"},
      {header + "2024-06-03T00:00Z,1\n2024-06-03T00:30Z,-5\n", "non-negative"},
      {header + "2024-06-03T00:00Z,1\n2024-06-03T00:30Z,2\n2024-06-03T01:30Z,3\n",
       "missing 2024-06-03T01:00:00Z"},
      {header + "2024-06-03T00:30Z,1\n2024-06-03T00:00Z,2\n", "timestamps must increase"},
      {header + "2024-06-03T00:00Z,1\n2024-06-03T00:30Z,2\n2024-06-03T00:50Z,3\n", "t.csv:4"},
  };
  for (const auto& c : cases) {
    const auto trace = CarbonTrace::parse(c.text, "t.csv");
    ASSERT_FALSE(trace) << c.text;
    EXPECT_EQ(trace.error().code(), ErrorCode::kParse) << c.text;
    EXPECT_NE(trace.error().message().find(c.expected), std::string::npos)
        << trace.error().message() << " should contain " << c.expected;
  }
  const auto missing = CarbonTrace::read_file("/nonexistent/trace.csv");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("/nonexistent/trace.csv"), std::string::npos);
}

TEST(CarbonTrace, ShiftedKeepsTheValuesAtLaterTimes) {
  const auto trace = CarbonTrace::parse(
      "timestamp,carbon_intensity_g_per_kwh\n2024-06-03T00:00:00Z,400\n2024-06-03T00:30:00Z,410.5\n",
      "t.csv");
  ASSERT_TRUE(trace) << trace.error().message();
  const auto later = trace->shifted(kDayS);
  ASSERT_TRUE(later) << later.error().message();
  EXPECT_EQ(later->start_unix_s(), *parse_utc_time("2024-06-04T00:00:00Z"));
  EXPECT_EQ(later->period_s(), 1800);
  EXPECT_EQ(later->source(), "t.csv");
  EXPECT_DOUBLE_EQ(later->points()[1].intensity_g_per_kwh, 410.5);
  EXPECT_EQ(trace->shifted(std::numeric_limits<int64_t>::max()).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(trace->shifted(int64_t{1} << 60));  // beyond the years parse_utc_time() accepts
}

TEST(CarbonTrace, ShippedTraceIsValid) {
  const auto trace = CarbonTrace::read_file(JOULE_SOURCE_DIR "/data/carbon/synthetic_us_solar_14d.csv");
  ASSERT_TRUE(trace) << trace.error().message();
  EXPECT_EQ(trace->period_s(), 1800);
  EXPECT_EQ(trace->points().size(), 14u * 48u);
}

CarbonTrace hourly_trace(std::vector<double> values) {
  std::vector<IntensityPoint> points;
  for (size_t i = 0; i < values.size(); ++i) {
    points.push_back({kT0 + static_cast<int64_t>(i) * 3600, values[i], false});
  }
  return *CarbonTrace::from_points(std::move(points), "test trace");
}

TEST(TraceSignal, ReplaysOnTheVirtualClock) {
  VirtualClock clock(kT0 * kNs);
  TraceSignal signal(hourly_trace({100, 200, 300}), clock);
  EXPECT_DOUBLE_EQ(signal.latest()->intensity_g_per_kwh, 100);
  clock.advance(std::chrono::seconds(3600 + 5));
  EXPECT_DOUBLE_EQ(signal.latest()->intensity_g_per_kwh, 200);
  const auto history = signal.history(kT0, kT0 + 7200);
  ASSERT_TRUE(history);
  ASSERT_EQ(history->size(), 2u);
  const auto forecast = signal.forecast(3600);
  ASSERT_TRUE(forecast);
  EXPECT_TRUE(forecast->front().estimated);
  const auto beyond = signal.history(kT0, kT0 + 4 * 3600);
  ASSERT_FALSE(beyond);
  EXPECT_EQ(beyond.error().code(), ErrorCode::kOutOfRange);
  clock.advance(std::chrono::seconds(3 * 3600));
  const auto after = signal.latest();
  ASSERT_FALSE(after);
  EXPECT_NE(after.error().message().find("no carbon intensity for"), std::string::npos);
}

TEST(IntensityFor, WeightsByOverlapAndNeverInventsAZero) {
  const std::vector<IntensityPoint> five_minutes = {{kT0, 100, false}, {kT0 + 300, 200, true}};
  const auto mean = intensity_for(five_minutes, 300, kT0, 3600, "src");
  ASSERT_TRUE(mean);
  EXPECT_DOUBLE_EQ(mean->intensity_g_per_kwh, 150);
  EXPECT_TRUE(mean->estimated);
  const auto none = intensity_for(five_minutes, 300, kT0 + 7200, 3600, "src");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(none.error().message(), "no carbon intensity for " + format_utc_time(kT0 + 7200) + " from src");
}

TEST(ConstantSignal, RejectsNegative) {
  EXPECT_THROW(ConstantSignal(-1), Exception);
  EXPECT_THROW(ConstantSignal(NAN), Exception);
  ConstantSignal signal(250);
  EXPECT_DOUBLE_EQ(signal.latest()->intensity_g_per_kwh, 250);
  EXPECT_EQ(signal.history(kT0, kT0 + 7200)->size(), 2u);
}

TEST(MakeCarbonSignal, NeedsExactlyOneSource) {
  const auto none = make_carbon_signal({});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("give exactly one carbon source"), std::string::npos);
  CarbonSourceOptions two;
  two.intensity_g_per_kwh = 100;
  two.zone = "DE";
  EXPECT_FALSE(make_carbon_signal(two));
  CarbonSourceOptions unknown;
  unknown.zone = "DE";
  unknown.provider = "co2signal";
  const auto bad = make_carbon_signal(unknown);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("unknown carbon provider 'co2signal'"), std::string::npos);
  test::ScopedEnv no_token("JOULE_ELECTRICITYMAPS_TOKEN", nullptr);
  CarbonSourceOptions em;
  em.zone = "DE";
  em.provider = "electricitymaps";
  const auto token = make_carbon_signal(em);
  ASSERT_FALSE(token);
  EXPECT_NE(token.error().message().find("JOULE_ELECTRICITYMAPS_TOKEN"), std::string::npos);
  CarbonSourceOptions uk;
  uk.zone = "FR";
  uk.provider = "uk";
  const auto uk_zone = make_carbon_signal(uk);
  ASSERT_FALSE(uk_zone);
  EXPECT_NE(uk_zone.error().message().find("zone GB"), std::string::npos);
}

// One simulated V100 busy at a fixed power on a virtual clock.
struct SimBench {
  std::shared_ptr<VirtualClock> clock;
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::unique_ptr<measure::EnergyMonitor> monitor;
  explicit SimBench(int64_t start_unix_s) : clock(std::make_shared<VirtualClock>(start_unix_s * kNs)) {
    gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100:imagenet"), clock));
    monitor = std::make_unique<measure::EnergyMonitor>(std::vector<device::Gpu*>{gpus[0].get()},
                                                       std::vector<device::Cpu*>{}, *clock);
  }
  double power_w() { return gpus[0]->operating_point().power_w; }
};

TEST(BucketedEnergyMonitor, SplitsEnergyAtHourBoundaries) {
  SimBench bench(kT0 + 1800);  // half past the hour
  const double power_w = bench.power_w();
  BucketedEnergyMonitor buckets(*bench.monitor, {.bucket_s = 3600, .background_checkpoints = false});
  buckets.begin_window("train");
  bench.clock->advance(std::chrono::seconds(2 * 3600));  // 30 min, 60 min, 30 min in three hours
  const auto m = buckets.end_window("train");
  ASSERT_EQ(m.buckets.size(), 3u);
  EXPECT_EQ(m.buckets[0].start_unix_s, kT0);
  EXPECT_NEAR(m.buckets[0].gpu_energy_j[0], power_w * 1800, 1);
  EXPECT_NEAR(m.buckets[1].gpu_energy_j[0], power_w * 3600, 1);
  EXPECT_NEAR(m.buckets[2].gpu_energy_j[0], power_w * 1800, 1);
  EXPECT_NEAR(m.measurement.total_gpu_energy_j(), power_w * 7200, 1);
  EXPECT_THROW(buckets.end_window("train"), Exception);
  buckets.begin_window("again");
  EXPECT_THROW(buckets.begin_window("again"), Exception);
  buckets.cancel_window("again");
  EXPECT_THROW(BucketedEnergyMonitor(*bench.monitor, {.bucket_s = 0}), Exception);
}

TEST(BucketedEnergyMonitor, RealClockStartsAndStopsItsThread) {
  auto clock = std::make_shared<SteadyClock>();
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("v100"), clock));
  measure::EnergyMonitor monitor({gpus[0].get()}, {}, *clock);
  BucketedEnergyMonitor buckets(monitor);  // a background thread waits for the next hour boundary
  buckets.begin_window("w");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto m = buckets.end_window("w");
  ASSERT_FALSE(m.buckets.empty());
  double bucketed_j = 0;
  for (const auto& b : m.buckets) {
    bucketed_j += b.total_energy_j();
  }
  EXPECT_GT(bucketed_j, 0);
  // The bucketed energy covers the same span as the whole window (opened and closed just outside it).
  EXPECT_LE(bucketed_j, m.measurement.total_gpu_energy_j() + 1e-9);
}  // destruction stops the thread without waiting for the hour

TEST(CarbonMonitor, GramsAreEnergyTimesTheHoursIntensity) {
  SimBench bench(kT0 + 1800);
  const double power_w = bench.power_w();
  TraceSignal signal(hourly_trace({100, 200, 300, 400}), *bench.clock);
  CarbonMonitor carbon(*bench.monitor, signal, {.bucket_s = 3600, .background_checkpoints = false});
  carbon.begin_window("train");
  bench.clock->advance(std::chrono::seconds(2 * 3600));
  const auto m = carbon.end_window("train");
  ASSERT_TRUE(m.carbon) << m.carbon.error().message();
  const double expected = power_w * (1800 * 100 + 3600 * 200 + 1800 * 300) / 3.6e6;
  EXPECT_NEAR(m.carbon->carbon_g, expected, 1e-3);
  EXPECT_EQ(m.carbon->buckets.size(), 3u);
  EXPECT_NEAR(m.carbon->gpu_carbon_g[0], expected, 1e-3);
  EXPECT_NEAR(m.carbon->average_intensity_g_per_kwh(), 200, 1e-6);
}

TEST(CarbonMonitor, AMissingHourIsAnErrorAndKeepsTheEnergy) {
  SimBench bench(kT0 + 1800);
  TraceSignal signal(hourly_trace({100, 200}), *bench.clock);
  CarbonMonitor carbon(*bench.monitor, signal, {.bucket_s = 3600, .background_checkpoints = false});
  carbon.begin_window("train");
  bench.clock->advance(std::chrono::seconds(3 * 3600));  // runs past the trace's end
  const auto m = carbon.end_window("train");
  ASSERT_FALSE(m.carbon);
  EXPECT_EQ(m.carbon.error().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(m.carbon.error().message().find("test trace covers"), std::string::npos);
  EXPECT_GT(m.energy.measurement.total_gpu_energy_j(), 0);
}

TEST(CarbonMonitor, ConstantIntensity) {
  SimBench bench(kT0);
  ConstantSignal signal(500, "constant", *bench.clock);
  CarbonMonitor carbon(*bench.monitor, signal, {.bucket_s = 3600, .background_checkpoints = false});
  carbon.begin_window("w");
  bench.clock->advance(std::chrono::seconds(600));
  const auto m = carbon.end_window("w");
  ASSERT_TRUE(m.carbon);
  EXPECT_NEAR(m.carbon->carbon_g, m.energy.measurement.total_gpu_energy_j() * 500 / 3.6e6, 1e-9);
}

TEST(HourlyTariff, ParsesAndPrices) {
  std::string text = "hour,price_usd_per_kwh\n";
  for (int h = 0; h < 24; ++h) {
    text += fmt::format("{},{}\n", h, h < 12 ? 0.1 : 0.3);
  }
  const auto tariff = HourlyTariff::parse(text, "tariff.csv");
  ASSERT_TRUE(tariff) << tariff.error().message();
  EXPECT_DOUBLE_EQ(tariff->price_at(kT0 - kT0 % 86400 + 13 * 3600), 0.3);
  EXPECT_DOUBLE_EQ(tariff->max_price_usd_per_kwh(), 0.3);

  const int64_t day = kT0 - kT0 % 86400;
  SimBench bench(day + 11 * 3600);
  const double power_w = bench.power_w();
  PriceMonitor price(*bench.monitor, *tariff, {.bucket_s = 3600, .background_checkpoints = false});
  price.begin_window("w");
  bench.clock->advance(std::chrono::seconds(2 * 3600));
  const auto report = price.end_window("w");
  EXPECT_NEAR(report.cost_usd, power_w * 3600 / 3.6e6 * (0.1 + 0.3), 1e-6);
}

TEST(HourlyTariff, BadInput) {
  const struct {
    std::string text;
    std::string expected;
  } cases[] = {
      {"hour,price\n0,1\n", "price_usd_per_kwh"},
      {"hour,price_usd_per_kwh\n24,1\n", "hour must be 0 to 23"},
      {"hour,price_usd_per_kwh\n0,1\n0,2\n", "hour 0 appears twice"},
      {"hour,price_usd_per_kwh\n0,-1\n", "non-negative"},
      {"hour,price_usd_per_kwh\n0,1\n", "no price for hour 1"},
  };
  for (const auto& c : cases) {
    const auto tariff = HourlyTariff::parse(c.text, "tariff.csv");
    ASSERT_FALSE(tariff) << c.text;
    EXPECT_NE(tariff.error().message().find(c.expected), std::string::npos) << tariff.error().message();
  }
  EXPECT_THROW(HourlyTariff::flat(-1), Exception);
}

}  // namespace
}  // namespace joule::carbon
