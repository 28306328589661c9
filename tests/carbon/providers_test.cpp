// SPDX-License-Identifier: Apache-2.0
// The live carbon providers against loopback fakes of their HTTP APIs, serving the documented JSON shapes
// (spec chase.md §8), error bodies and gaps.
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/carbon/monitor.hpp"

namespace joule::carbon {
namespace {

constexpr int64_t kNs = 1'000'000'000;

// A loopback HTTP server on an ephemeral port. Each route answers with a fixed status and body; every
// request is recorded.
class FakeApi {
 public:
  struct Reply {
    int status = 200;
    std::string body;
  };
  using Handler = std::function<Reply(const httplib::Request&)>;

  FakeApi() {
    server_.Get(".*", [this](const httplib::Request& request, httplib::Response& response) {
      Handler handler;
      {
        const std::lock_guard lock(mutex_);
        requests_.push_back(request);
        const auto it = routes_.find(request.path);
        if (it != routes_.end()) {
          handler = it->second;
        }
      }
      const Reply reply = handler ? handler(request) : Reply{404, R"({"error":"no such route"})"};
      response.status = reply.status;
      response.set_content(reply.body, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~FakeApi() {
    server_.stop();
    thread_.join();
  }
  void route(const std::string& path, Handler handler) {
    const std::lock_guard lock(mutex_);
    routes_[path] = std::move(handler);
  }
  void route(const std::string& path, int status, std::string body) {
    route(path, [status, body](const httplib::Request&) { return Reply{status, body}; });
  }
  std::string url(const std::string& prefix = "") const {
    return fmt::format("http://127.0.0.1:{}{}", port_, prefix);
  }
  std::vector<httplib::Request> requests() const {
    const std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::map<std::string, Handler> routes_;
  std::vector<httplib::Request> requests_;
};

// ---- Electricity Maps ----------------------------------------------------------------------------------

constexpr const char* kEmLatest =
    R"({"zone":"US-MIDW-MISO","carbonIntensity":466,"datetime":"2024-09-24T03:00:00.000Z",
        "updatedAt":"2024-09-24T02:47:02.408Z","createdAt":"2024-09-21T03:45:20.860Z",
        "emissionFactorType":"lifecycle","isEstimated":true,"estimationMethod":"TIME_SLICER_AVERAGE"})";

// 24 hourly points ending at 2024-12-01T05:00Z; the hour 2024-11-30T10:00Z has no value (null).
std::string em_history() {
  std::string points;
  const int64_t first = *parse_utc_time("2024-11-30T06:00:00Z");
  for (int h = 0; h < 24; ++h) {
    const int64_t t = first + h * 3600;
    const std::string value = h == 4 ? "null" : std::to_string(400 + h);
    points += fmt::format(
        R"({}{{"zone":"US-MIDW-MISO","carbonIntensity":{},"datetime":"{}","isEstimated":{},"estimationMethod":{}}})",
        h == 0 ? "" : ",", value, format_utc_time(t), h % 2 == 0 ? "true" : "false",
        h % 2 == 0 ? "\"TIME_SLICER_AVERAGE\"" : "null");
  }
  return R"({"zone":"US-MIDW-MISO","history":[)" + points + "]}";
}

ElectricityMapsOptions em_options(const FakeApi& api) {
  ElectricityMapsOptions options;
  options.base_url = api.url("/v3");
  options.token = "secret-token";
  options.zone = "US-MIDW-MISO";
  options.timeout_s = 5;
  return options;
}

TEST(ElectricityMaps, LatestSendsTheTokenAndParses) {
  FakeApi api;
  api.route("/v3/carbon-intensity/latest", 200, kEmLatest);
  ElectricityMapsSignal signal(em_options(api));
  const auto latest = signal.latest();
  ASSERT_TRUE(latest) << latest.error().message();
  EXPECT_DOUBLE_EQ(latest->intensity_g_per_kwh, 466);
  EXPECT_EQ(latest->time_unix_s, *parse_utc_time("2024-09-24T03:00:00Z"));
  EXPECT_TRUE(latest->estimated);
  const auto requests = api.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].get_header_value("auth-token"), "secret-token");
  EXPECT_EQ(requests[0].get_param_value("zone"), "US-MIDW-MISO");
  EXPECT_EQ(requests[0].get_param_value("emissionFactorType"), "lifecycle");
}

TEST(ElectricityMaps, ErrorBodiesAreClearErrors) {
  FakeApi api;
  api.route("/v3/carbon-intensity/latest", 200, R"({"error":"No recent data for zone \"US-MIDW-MISO\""})");
  ElectricityMapsSignal signal(em_options(api));
  const auto no_data = signal.latest();
  ASSERT_FALSE(no_data);
  EXPECT_EQ(no_data.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(no_data.error().message().find("No recent data for zone"), std::string::npos);

  api.route("/v3/carbon-intensity/latest", 401, R"({"message":"Invalid authentication credentials"})");
  const auto refused = signal.latest();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(refused.error().message().find("HTTP 401: Invalid authentication credentials"),
            std::string::npos);
  EXPECT_NE(refused.error().message().find("JOULE_ELECTRICITYMAPS_TOKEN"), std::string::npos);
  EXPECT_EQ(refused.error().message().find("secret-token"), std::string::npos);

  api.route("/v3/carbon-intensity/latest", 500, "<html>oops</html>");
  const auto server_error = signal.latest();
  ASSERT_FALSE(server_error);
  EXPECT_EQ(server_error.error().code(), ErrorCode::kIo);
  EXPECT_NE(server_error.error().message().find("HTTP 500: <html>oops</html>"), std::string::npos);

  api.route("/v3/carbon-intensity/latest", 200, "not json");
  const auto not_json = signal.latest();
  ASSERT_FALSE(not_json);
  EXPECT_EQ(not_json.error().code(), ErrorCode::kParse);
  EXPECT_NE(not_json.error().message().find("not JSON"), std::string::npos);

  api.route("/v3/carbon-intensity/latest", 200, R"({"zone":"DE","datetime":"2024-09-24T03:00:00Z"})");
  const auto no_field = signal.latest();
  ASSERT_FALSE(no_field);
  EXPECT_NE(no_field.error().message().find("no 'carbonIntensity'"), std::string::npos);

  api.route("/v3/carbon-intensity/latest", 200,
            R"({"carbonIntensity":-3,"datetime":"2024-09-24T03:00:00Z"})");
  const auto negative = signal.latest();
  ASSERT_FALSE(negative);
  EXPECT_NE(negative.error().message().find("must be non-negative"), std::string::npos);
}

TEST(ElectricityMaps, HistoryGapIsAnErrorForThatHourOnly) {
  FakeApi api;
  api.route("/v3/carbon-intensity/history", 200, em_history());
  VirtualClock clock(*parse_utc_time("2024-12-01T05:30:00Z") * kNs);
  ElectricityMapsSignal signal(em_options(api), clock);
  const int64_t from = *parse_utc_time("2024-11-30T06:00:00Z");
  const auto history = signal.history(from, from + 24 * 3600);
  ASSERT_TRUE(history) << history.error().message();
  EXPECT_EQ(history->size(), 23u);  // the null hour is absent, not zero
  EXPECT_DOUBLE_EQ(history->front().intensity_g_per_kwh, 400);
  EXPECT_TRUE(history->front().estimated);
  EXPECT_FALSE((*history)[1].estimated);

  BucketedMeasurement measured;
  measured.bucket_s = 3600;
  for (int h = 3; h <= 5; ++h) {
    BucketEnergy bucket;
    bucket.start_unix_s = from + h * 3600;
    bucket.gpu_energy_j = {3.6e6};
    measured.buckets.push_back(bucket);
  }
  const auto carbon = carbon_of(measured, signal);
  ASSERT_FALSE(carbon);
  EXPECT_EQ(carbon.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(
      carbon.error().message().find("no carbon intensity for 2024-11-30T10:00:00Z from electricitymaps"),
      std::string::npos);
  measured.buckets.erase(measured.buckets.begin() + 1);
  const auto ok = carbon_of(measured, signal);
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_DOUBLE_EQ(ok->carbon_g, 403 + 405);
}

// Zeus's CarbonEmissionMonitor test recipe (spec chase.md §9.2), end to end: three GPUs measured over three
// UTC hours on a virtual clock, the intensities from the Electricity Maps fake's history.
TEST(ElectricityMaps, CarbonMonitorEndToEnd) {
  FakeApi api;
  api.route("/v3/carbon-intensity/history", 200, em_history());
  const int64_t start = *parse_utc_time("2024-11-30T18:20:00Z");
  auto clock = std::make_shared<VirtualClock>(start * kNs);
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("3xv100:imagenet"), clock));
  std::vector<device::Gpu*> raw;
  for (auto& gpu : gpus) {
    raw.push_back(gpu.get());
  }
  ASSERT_TRUE(gpus[1]->set_power_limit_mw(150'000));
  measure::EnergyMonitor energy(raw, {}, *clock);
  ElectricityMapsSignal signal(em_options(api), *clock);
  CarbonMonitor carbon(energy, signal, {.bucket_s = 3600, .background_checkpoints = false});
  carbon.begin_window("train");
  clock->advance(std::chrono::seconds(2 * 3600));  // 18:20 to 20:20
  const auto m = carbon.end_window("train");
  ASSERT_TRUE(m.carbon) << m.carbon.error().message();
  ASSERT_EQ(m.carbon->gpu_carbon_g.size(), 3u);
  // Hours 18, 19, 20 are history points 12, 13, 14: 412, 413, 414 g/kWh; 40, 60 and 20 minutes of them.
  for (size_t i = 0; i < 3; ++i) {
    const double power_w = gpus[i]->operating_point().power_w;
    const double expected = power_w * (2400 * 412.0 + 3600 * 413.0 + 1200 * 414.0) / 3.6e6;
    EXPECT_NEAR(m.carbon->gpu_carbon_g[i], expected, expected * 1e-6) << i;
  }
  EXPECT_LT(m.carbon->gpu_carbon_g[1], m.carbon->gpu_carbon_g[0]);  // the 150 W GPU emits less
  EXPECT_EQ(m.carbon->buckets.size(), 3u);
}

TEST(ElectricityMaps, OlderRangesUsePastRangeAndForecastParses) {
  FakeApi api;
  api.route("/v3/carbon-intensity/past-range", 200,
            R"({"zone":"DE","data":[{"carbonIntensity":300,"datetime":"2024-01-01T00:00:00Z"},
                                      {"carbonIntensity":310,"datetime":"2024-01-01T01:00:00Z"}]})");
  api.route("/v3/carbon-intensity/forecast", 200,
            R"({"zone":"DE","forecast":[{"carbonIntensity":322,"datetime":"2026-10-09T00:00:00.000Z"},
                                          {"carbonIntensity":318,"datetime":"2026-10-09T01:00:00.000Z"}],
                "updatedAt":"2026-10-09T00:00:00Z"})");
  VirtualClock clock(*parse_utc_time("2024-06-01T00:00:00Z") * kNs);
  ElectricityMapsSignal signal(em_options(api), clock);
  const int64_t from = *parse_utc_time("2024-01-01T00:00:00Z");
  const auto history = signal.history(from, from + 7200);
  ASSERT_TRUE(history) << history.error().message();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ(api.requests().back().get_param_value("start"), "2024-01-01T00:00:00Z");
  const auto forecast = signal.forecast(6 * 3600);
  ASSERT_TRUE(forecast) << forecast.error().message();
  ASSERT_EQ(forecast->size(), 2u);
  EXPECT_TRUE(forecast->front().estimated);
  EXPECT_EQ(api.requests().back().get_param_value("horizonHours"), "6");
}

TEST(ElectricityMaps, ConfigurationErrors) {
  ElectricityMapsOptions options;
  options.zone = "DE";
  try {
    ElectricityMapsSignal signal(options);
    FAIL() << "no token accepted";
  } catch (const Exception& error) {
    EXPECT_NE(std::string(error.what()).find("JOULE_ELECTRICITYMAPS_TOKEN"), std::string::npos);
  }
  options.token = "t";
  options.base_url = "ftp://example.org";
  EXPECT_THROW(ElectricityMapsSignal{options}, Exception);
  options.base_url = "http://127.0.0.1:1";  // nothing listens on port 1
  options.timeout_s = 2;
  ElectricityMapsSignal unreachable(options);
  const auto latest = unreachable.latest();
  ASSERT_FALSE(latest);
  EXPECT_EQ(latest.error().code(), ErrorCode::kIo);
  EXPECT_NE(latest.error().message().find("cannot reach http://127.0.0.1:1"), std::string::npos);
}

// ---- WattTime ------------------------------------------------------------------------------------------

constexpr const char* kWtForecast =
    R"({"data":[{"point_time":"2022-07-15T00:00:00+00:00","value":1048.41},
                {"point_time":"2022-07-15T00:05:00+00:00","value":1051.09}],
        "meta":{"data_point_period_seconds":300,"region":"CAISO_NORTH",
                "warnings":[{"type":"EXAMPLE_WARNING","message":"This is just an example"}],
                "signal_type":"co2_moer","model":{"date":"2023-03-01"},
                "units":"lbs_co2_per_mwh","generated_at_period_seconds":300,
                "generated_at":"2022-07-15T00:00:00+00:00"}})";

WattTimeOptions wt_options(const FakeApi& api) {
  WattTimeOptions options;
  options.base_url = api.url();
  options.username = "user";
  options.password = "pass";
  options.region = "CAISO_NORTH";
  options.timeout_s = 5;
  return options;
}

TEST(WattTime, LogsInAndConvertsPoundsPerMegawattHour) {
  FakeApi api;
  api.route("/login", [](const httplib::Request& request) {
    // "user:pass" in base64
    return FakeApi::Reply{request.get_header_value("Authorization") == "Basic dXNlcjpwYXNz" ? 200 : 401,
                          R"({"token":"session-1"})"};
  });
  api.route("/v3/forecast", [](const httplib::Request& request) {
    return FakeApi::Reply{request.get_header_value("Authorization") == "Bearer session-1" ? 200 : 401,
                          kWtForecast};
  });
  WattTimeSignal signal(wt_options(api));
  const auto latest = signal.latest();
  ASSERT_TRUE(latest) << latest.error().message();
  EXPECT_NEAR(latest->intensity_g_per_kwh, 1048.41 * 0.453592, 1e-9);
  EXPECT_EQ(signal.period_s(), 300);
  EXPECT_EQ(api.requests().back().get_param_value("horizon_hours"), "0");
  const auto forecast = signal.forecast(3600);
  ASSERT_TRUE(forecast);
  ASSERT_EQ(forecast->size(), 2u);
  EXPECT_TRUE(forecast->back().estimated);
  EXPECT_NEAR(forecast->back().intensity_g_per_kwh, 1051.09 * 0.453592, 1e-9);
  size_t logins = 0;
  for (const auto& request : api.requests()) {
    logins += request.path == "/login" ? 1 : 0;
  }
  EXPECT_EQ(logins, 1u);  // the session token is reused
}

TEST(WattTime, HistoryGapsAndErrors) {
  FakeApi api;
  api.route("/login", 200, R"({"token":"session-1"})");
  api.route("/v3/historical", 200,
            R"({"data":[{"point_time":"2022-07-15T00:00:00+00:00","value":1000},
                        {"point_time":"2022-07-15T00:05:00+00:00","value":null}],
                "meta":{"units":"lbs_co2_per_mwh","data_point_period_seconds":300}})");
  WattTimeSignal signal(wt_options(api));
  const int64_t from = *parse_utc_time("2022-07-15T00:00:00Z");
  const auto history = signal.history(from, from + 600);
  ASSERT_TRUE(history) << history.error().message();
  ASSERT_EQ(history->size(), 1u);
  const auto gap = intensity_for(*history, 300, from + 300, 300, signal.describe());
  ASSERT_FALSE(gap);
  EXPECT_NE(gap.error().message().find("no carbon intensity for 2022-07-15T00:05:00Z"), std::string::npos);

  api.route("/v3/historical", 200, R"({"data":[],"meta":{"units":"furlongs"}})");
  const auto units = signal.history(from, from + 600);
  ASSERT_FALSE(units);
  EXPECT_NE(units.error().message().find("unknown units 'furlongs'"), std::string::npos);

  api.route("/v3/historical", 200, R"({"meta":{"units":"lbs_co2_per_mwh"}})");
  const auto no_data = signal.history(from, from + 600);
  ASSERT_FALSE(no_data);
  EXPECT_NE(no_data.error().message().find("no 'data' list"), std::string::npos);

  api.route("/v3/historical", 403, R"({"error":"region not in plan"})");
  const auto refused = signal.history(from, from + 600);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(refused.error().message().find("region not in plan"), std::string::npos);
  EXPECT_NE(refused.error().message().find("CAISO_NORTH"), std::string::npos);
}

TEST(WattTime, BadLogin) {
  FakeApi api;
  api.route("/login", 401, R"({"error":"invalid credentials"})");
  WattTimeSignal signal(wt_options(api));
  const auto latest = signal.latest();
  ASSERT_FALSE(latest);
  EXPECT_EQ(latest.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(latest.error().message().find("JOULE_WATTTIME_USERNAME"), std::string::npos);
  EXPECT_EQ(latest.error().message().find("pass"), std::string::npos);  // never the password
  WattTimeOptions no_region = wt_options(api);
  no_region.region.clear();
  EXPECT_THROW(WattTimeSignal{no_region}, Exception);
}

// ---- UK Carbon Intensity -------------------------------------------------------------------------------

TEST(UkCarbonIntensity, ActualElseForecast) {
  FakeApi api;
  api.route("/intensity", 200,
            R"({"data":[{"from":"2020-05-24T20:30Z","to":"2020-05-24T21:00Z",
                         "intensity":{"forecast":146,"actual":null,"index":"low"}}]})");
  api.route(
      "/intensity/2020-05-24T20:00Z/2020-05-24T22:00Z", 200,
      R"({"data":[{"from":"2020-05-24T20:00Z","to":"2020-05-24T20:30Z","intensity":{"forecast":150,"actual":140,"index":"low"}},
                        {"from":"2020-05-24T20:30Z","to":"2020-05-24T21:00Z","intensity":{"forecast":146,"actual":null,"index":"low"}},
                        {"from":"2020-05-24T21:00Z","to":"2020-05-24T21:30Z","intensity":{"forecast":null,"actual":null,"index":null}}]})");
  VirtualClock clock(*parse_utc_time("2020-05-24T20:40:00Z") * kNs);
  UkCarbonIntensitySignal signal({.base_url = api.url(), .timeout_s = 5}, clock);
  const auto latest = signal.latest();
  ASSERT_TRUE(latest) << latest.error().message();
  EXPECT_DOUBLE_EQ(latest->intensity_g_per_kwh, 146);
  EXPECT_TRUE(latest->estimated);
  const int64_t from = *parse_utc_time("2020-05-24T20:00:00Z");
  const auto history = signal.history(from, from + 7200);
  ASSERT_TRUE(history) << history.error().message();
  ASSERT_EQ(history->size(), 2u);  // the slot with neither value is absent
  EXPECT_DOUBLE_EQ((*history)[0].intensity_g_per_kwh, 140);
  EXPECT_FALSE((*history)[0].estimated);
  const auto missing = intensity_for(*history, 1800, from + 3600, 1800, signal.describe());
  ASSERT_FALSE(missing);

  api.route("/intensity", 200, R"({"data":[{"from":"2020-05-24T20:30Z"}]})");
  const auto shape = signal.latest();
  ASSERT_FALSE(shape);
  EXPECT_EQ(shape.error().code(), ErrorCode::kParse);
  EXPECT_NE(shape.error().message().find("has no 'intensity'"), std::string::npos);

  api.route("/intensity", 200, R"({"data":[]})");
  const auto empty = signal.latest();
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("no carbon intensity for the current half hour"), std::string::npos);
}

TEST(UkCarbonIntensity, ForecastPath) {
  FakeApi api;
  api.route(
      "/intensity/2020-05-24T20:30Z/fw24h", 200,
      R"({"data":[{"from":"2020-05-24T20:30Z","to":"2020-05-24T21:00Z","intensity":{"forecast":146,"actual":150,"index":"low"}},
                        {"from":"2020-05-24T21:00Z","to":"2020-05-24T21:30Z","intensity":{"forecast":139,"actual":null,"index":"low"}}]})");
  VirtualClock clock(*parse_utc_time("2020-05-24T20:40:00Z") * kNs);
  UkCarbonIntensitySignal signal({.base_url = api.url(), .timeout_s = 5}, clock);
  const auto forecast = signal.forecast(3600);
  ASSERT_TRUE(forecast) << forecast.error().message();
  ASSERT_EQ(forecast->size(), 2u);
  EXPECT_DOUBLE_EQ(forecast->front().intensity_g_per_kwh, 146);  // a forecast uses the forecast values
  EXPECT_TRUE(forecast->front().estimated);
}

}  // namespace
}  // namespace joule::carbon
