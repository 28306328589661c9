// SPDX-License-Identifier: Apache-2.0
// /metrics from the three entry points as users run them (`joule power --serve`, `joule serve`,
// `joule daemon --metrics`): Debian's `promtool check metrics` accepts each, bad addresses are refused with a
// clear message, and a real `prometheus` scrapes `joule power --serve` on loopback.
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include "fakes/rapl/fake_powercap.hpp"
#include "integration/run_process.hpp"
#include "metrics/metrics_text.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// @return the full path of `program` on $PATH, if it is there.
std::optional<std::string> find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string rest = path != nullptr ? path : "";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

/// @return a TCP port that was free a moment ago on 127.0.0.1.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// A socket listening on 127.0.0.1 (a port in use), closed on destruction.
class TakenPort {
 public:
  TakenPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address);
    ::listen(fd_, 1);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~TakenPort() { ::close(fd_); }
  TakenPort(const TakenPort&) = delete;
  TakenPort& operator=(const TakenPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

/// Waits until the child's stdout matches `pattern` (group 1: the port). @throws with its stderr otherwise.
int wait_for_port(Process& process, const std::regex& pattern, std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    const std::string out = process.out_so_far();
    if (std::regex_search(out, match, pattern)) {
      return std::stoi(match[1].str());
    }
    int status = 0;
    if (::waitpid(process.pid(), &status, WNOHANG) == process.pid()) {
      throw std::runtime_error("exited early: " + process.err_so_far());
    }
    std::this_thread::sleep_for(10ms);
  }
  throw std::runtime_error("did not start: " + process.err_so_far());
}

std::string scrape(int port, const std::string& path = "/metrics") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto response = client.Get(path.c_str());
  if (!response) {
    throw std::runtime_error("no answer from 127.0.0.1:" + std::to_string(port) + path);
  }
  EXPECT_EQ(response->status, 200) << response->body;
  if (path == "/metrics") {
    EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  }
  return response->body;
}

class MetricsIntegration : public ::testing::Test {
 protected:
  /// Runs `promtool check metrics` on `text`; fails the test with promtool's output if it objects.
  void expect_promtool_accepts(const std::string& text, const std::string& what) {
    const auto promtool = find_on_path("promtool");
    if (!promtool) {
      GTEST_SKIP()
          << "promtool is not on PATH (Debian package `prometheus`; scripts/install-deps installs it)";
    }
    const std::string file = dir.write(what + ".prom", text);
    const auto result = run({"/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", *promtool, file});
    EXPECT_EQ(result.exit_code, 0) << what << ": promtool check metrics:\n"
                                   << result.out << result.err << "\n--- input ---\n"
                                   << text;
    // promtool prints lint findings (e.g. a counter without _total) even when it exits 0.
    EXPECT_EQ(result.out + result.err, "") << what;
  }

  TempDir dir;
};

const std::regex kPowerServing(R"(serving metrics of \d+ GPUs? on http://127\.0\.0\.1:(\d+)/metrics)");

TEST_F(MetricsIntegration, PowerServeIsValidExpositionAndStopsCleanlyOnSigterm) {
  Process power({JOULE_BINARY, "power", "--sim", "2xv100", "--serve", "127.0.0.1:0", "--carbon-intensity",
                 "400", "--interval-ms", "100"});
  const int port = wait_for_port(power, kPowerServing);
  const std::string text = scrape(port);
  const auto parsed = parse_exposition(text);
  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 2u);
  EXPECT_EQ(parsed.value("joule_gpu_power_limit_watts", {{"gpu", "1"}}), 250.0);
  EXPECT_EQ(parsed.value("joule_grid_carbon_intensity_grams_per_kwh"), 400.0);
  EXPECT_EQ(parsed.count("joule_gpu_carbon_grams_total"), 2u);
  EXPECT_EQ(parsed.value("joule_gpu_info", {{"gpu", "0"}, {"backend", "sim"}, {"energy_source", "counter"}}),
            1.0);
  EXPECT_NE(scrape(port, "/").find("/metrics"), std::string::npos);
  expect_promtool_accepts(text, "power");

  power.signal(SIGTERM);
  const auto result = power.wait();
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // With --serve no reading lines are printed: the port line, then the summary.
  EXPECT_EQ(result.out.find("Z  gpu0"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("sampled every 100 ms"), std::string::npos) << result.out;
}

TEST_F(MetricsIntegration, PowerServeWithoutCounterGpusIntegratesPower) {
  Process power({JOULE_BINARY, "power", "--sim", "p100", "--serve", "127.0.0.1:0", "--duration-s", "30"});
  const int port = wait_for_port(power, kPowerServing);
  const auto parsed = parse_exposition(scrape(port));
  EXPECT_EQ(parsed.value("joule_gpu_info", {{"energy_source", "power"}}), 1.0);
  EXPECT_TRUE(parsed.value("joule_gpu_energy_joules_total"));
  expect_promtool_accepts(scrape(port), "power-p100");
  power.signal(SIGINT);
  EXPECT_EQ(power.wait().exit_code, 0);
}

// The intensity can come from a trace (or a live provider) read at the current time.
TEST_F(MetricsIntegration, PowerServeTakesTheIntensityFromATraceAtTheCurrentTime) {
  const std::string trace = dir.path() + "/now.csv";
  {
    // Hourly values around now, so that the current hour is covered whenever the test runs.
    std::ofstream out(trace);
    out << "timestamp,carbon_intensity_g_per_kwh\n";
    const auto now_s =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    const int64_t hour_start = now_s.count() / 3600 * 3600;
    for (int64_t hour = -3; hour <= 3; ++hour) {
      const std::time_t at = static_cast<std::time_t>(hour_start + hour * 3600);
      std::tm utc{};
      ::gmtime_r(&at, &utc);
      char text[32];
      std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
      out << text << "," << 321.5 << "\n";
    }
  }
  Process power({JOULE_BINARY, "power", "--sim", "v100", "--serve", "127.0.0.1:0", "--carbon-trace", trace,
                 "--interval-ms", "100"});
  const int port = wait_for_port(power, kPowerServing);
  const auto parsed = parse_exposition(scrape(port));
  EXPECT_EQ(parsed.value("joule_grid_carbon_intensity_grams_per_kwh"), 321.5);
  power.signal(SIGTERM);
  EXPECT_EQ(power.wait().exit_code, 0);

  // A trace that does not cover now is refused at the start, with the reason.
  const auto old = run({JOULE_BINARY, "power", "--sim", "v100", "--serve", "127.0.0.1:0", "--carbon-trace",
                        JOULE_SOURCE_DIR "/data/carbon/synthetic_us_solar_14d.csv", "--duration-s", "1"});
  EXPECT_NE(old.exit_code, 0);
  EXPECT_NE(old.err.find("joule: error: power: "), std::string::npos) << old.err;
  EXPECT_NE(old.err.find("2024-06-03T00:00:00Z"), std::string::npos) << old.err;
}

TEST_F(MetricsIntegration, PowerRefusesBadServeAddressesAndIntensities) {
  TakenPort taken;
  const std::string in_use = "127.0.0.1:" + std::to_string(taken.port());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--serve", "localhost"},
       "joule: error: power: --serve 'localhost' is not HOST:PORT (e.g. 127.0.0.1:9400, or :0 for any "
       "port)\n"},
      {{"--serve", "127.0.0.1:99999"},
       "joule: error: power: --serve '127.0.0.1:99999': port '99999' is not a number in [0, 65535]\n"},
      {{"--serve", in_use},
       "joule: error: power: --serve " + in_use + ": cannot listen on " + in_use +
           ": Address already in use\n"},
      {{"--carbon-intensity", "300"},
       "joule: error: power: --carbon-intensity, --carbon-trace, --zone and --country are only used by the "
       "metrics: add --serve HOST:PORT\n"},
      {{"--serve", "127.0.0.1:0", "--carbon-intensity", "300", "--carbon-refresh-s", "0"},
       "joule: error: --carbon-refresh-s must be a finite number > 0, got 0 (see 'joule power --help')\n"},
      {{"--serve", "127.0.0.1:0", "--carbon-intensity", "-5"},
       "joule: error: --carbon-intensity must be a finite number ≥ 0, got -5 (see 'joule power --help')\n"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {JOULE_BINARY, "power", "--sim", "v100", "--duration-s", "1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto result = run(argv);
    // A port in use is an I/O failure (exit 1); malformed input is a usage error (exit 2).
    EXPECT_EQ(result.exit_code, message.find("in use") != std::string::npos ? 1 : 2) << flags[0];
    EXPECT_EQ(result.err, message);
    EXPECT_EQ(result.out, "");
  }
}

TEST_F(MetricsIntegration, ServeAnswersMetricsOnItsListener) {
  Process serve({JOULE_BINARY, "serve", "--db", "memory:", "--listen", "127.0.0.1:0", "--threads", "4"});
  const int port = wait_for_port(serve, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"));
  httplib::Client client("127.0.0.1", port);
  const json spec = {{"job_id_prefix", "mnist"}, {"batch_sizes", {32, 64}}, {"default_batch_size", 32},
                     {"max_power", 300},         {"number_of_gpus", 1},     {"gpu_model", "V100"}};
  auto registered = client.Post("/jobs", spec.dump(), "application/json");
  ASSERT_TRUE(registered);
  ASSERT_EQ(registered->status, 201) << registered->body;
  const std::string job = json::parse(registered->body)["job_id"];
  auto trial = client.Get(("/jobs/batch_size?job_id=" + job).c_str());
  ASSERT_TRUE(trial);
  const json id = json::parse(trial->body);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const json report = {
        {"job_id", job},         {"batch_size", id["batch_size"]}, {"trial_number", id["trial_number"]},
        {"time", 10.0 * epoch},  {"energy", 3000.0 * epoch},       {"metric", 0.1},
        {"current_epoch", epoch}};
    auto reported = client.Post("/report", report.dump(), "application/json");
    ASSERT_TRUE(reported);
    ASSERT_EQ(reported->status, 200) << reported->body;
  }
  ASSERT_TRUE(client.Get("/nope"));
  const std::string text = scrape(port);
  const auto parsed = parse_exposition(text);
  EXPECT_EQ(parsed.value("joule_server_requests_total",
                         {{"route", "/report"}, {"method", "POST"}, {"status", "200"}}),
            2.0);
  EXPECT_EQ(parsed.value("joule_server_requests_total", {{"route", "other"}, {"status", "404"}}), 1.0);
  EXPECT_EQ(parsed.value("joule_server_reports_accepted_total"), 2.0);
  EXPECT_EQ(parsed.value("joule_server_jobs_registered_total"), 1.0);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_count", {{"window", "epoch"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_window_duration_seconds_sum", {{"window", "epoch"}}), 20.0);
  EXPECT_EQ(parsed.value("joule_window_energy_joules_sum", {{"window", "epoch"}}), 6000.0);
  expect_promtool_accepts(text, "serve");
  auto post = client.Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait().exit_code, 0);
}

TEST_F(MetricsIntegration, DaemonServesItsGpusAndItsOwnMetrics) {
  const std::string socket = dir.path() + "/joule.sock";
  test::FakePowercap powercap;  // the RAPL counters the daemon reads as root, exported beside the GPUs
  powercap.add_package(0, "package-0", 7'000'000, 262143328850, test::FakeDram{2'000'000});
  Process daemon({JOULE_BINARY, "daemon", "--sim", "2xv100", "--socket", socket, "--audit-log",
                  dir.path() + "/audit.log", "--metrics", "127.0.0.1:0", "--carbon-intensity", "250"},
                 {{"JOULE_POWERCAP_ROOT", powercap.root()}});
  const int port = wait_for_port(daemon, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)"));
  const auto devices =
      run({JOULE_BINARY, "devices"}, {{"JOULE_DAEMON_SOCKET", socket}, {"JOULE_SIM", Process::kUnset}});
  ASSERT_EQ(devices.exit_code, 0) << devices.err;
  const std::string text = scrape(port);
  const auto parsed = parse_exposition(text);
  EXPECT_EQ(parsed.count("joule_gpu_energy_joules_total"), 2u);
  EXPECT_EQ(parsed.count("joule_gpu_temperature_celsius"), 2u);
  EXPECT_EQ(parsed.value("joule_cpu_package_energy_joules_total", {{"cpu", "0"}}), 7.0);
  EXPECT_EQ(parsed.value("joule_cpu_dram_energy_joules_total", {{"cpu", "0"}}), 2.0);
  EXPECT_EQ(parsed.value("joule_grid_carbon_intensity_grams_per_kwh"), 250.0);
  EXPECT_GE(*parsed.value("joule_daemon_connections_accepted_total"), 1.0);
  EXPECT_GE(*parsed.value("joule_daemon_requests_total"), 1.0);
  EXPECT_EQ(parsed.type.at("joule_daemon_connections_open"), "gauge");
  expect_promtool_accepts(text, "daemon");
  daemon.signal(SIGTERM);
  const auto result = daemon.wait();
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("joule daemon: stopped by SIGTERM"), std::string::npos) << result.out;
}

TEST_F(MetricsIntegration, DaemonRefusesBadMetricsAddresses) {
  TakenPort taken;
  const std::string in_use = "127.0.0.1:" + std::to_string(taken.port());
  const std::string socket = dir.path() + "/joule.sock";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--metrics", "9400"},
       "joule: error: daemon: --metrics '9400' is not HOST:PORT (e.g. 127.0.0.1:9400, or :0 for any port)\n"},
      {{"--metrics", in_use},
       "joule: error: daemon: --metrics " + in_use + ": cannot listen on " + in_use +
           ": Address already in use\n"},
      {{"--carbon-intensity", "100"},
       "joule: error: daemon: --carbon-intensity is only used by the metrics: add --metrics HOST:PORT\n"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {JOULE_BINARY, "daemon", "--sim", "v100", "--socket", socket};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto result = run(argv);
    EXPECT_EQ(result.exit_code, message.find("in use") != std::string::npos ? 1 : 2) << flags[0];
    EXPECT_EQ(result.err, message);
    EXPECT_FALSE(std::filesystem::exists(socket)) << "the socket must not be left behind";
  }
}

// A real Prometheus server scrapes `joule power --serve` every second on loopback; the query API returns the
// energy counter once a scrape has been stored.
TEST_F(MetricsIntegration, PrometheusScrapesPowerServe) {
  const auto prometheus = find_on_path("prometheus");
  if (!prometheus) {
    GTEST_SKIP()
        << "prometheus is not on PATH (Debian package `prometheus`; scripts/install-deps installs it)";
  }
  const auto started = std::chrono::steady_clock::now();
  Process power({JOULE_BINARY, "power", "--sim", "2xv100", "--serve", "127.0.0.1:0"});
  const int joule_port = wait_for_port(power, kPowerServing);
  const std::string config = dir.write("prometheus.yml",
                                       "global:\n"
                                       "  scrape_interval: 1s\n"
                                       "  evaluation_interval: 1s\n"
                                       "scrape_configs:\n"
                                       "  - job_name: joule\n"
                                       "    static_configs:\n"
                                       "      - targets: ['127.0.0.1:" +
                                           std::to_string(joule_port) + "']\n");
  const int prometheus_port = free_port();
  Process server({*prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                  "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port), "--log.level=warn"});
  httplib::Client client("127.0.0.1", prometheus_port);
  client.set_connection_timeout(1, 0);
  json answer;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  bool found = false;
  while (!found && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    auto response = client.Get("/api/v1/query?query=joule_gpu_energy_joules_total");
    if (!response || response->status != 200) {
      continue;
    }
    answer = json::parse(response->body);
    found = answer["status"] == "success" && answer["data"]["result"].size() == 2;
  }
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(found) << "no sample within 30 s; last answer: " << answer.dump()
                     << "\nprometheus: " << server.err_so_far();
  RecordProperty("scrape_seen_after_s", std::to_string(took_s));
  std::cout << "prometheus stored the first scrape " << took_s << " s after joule power started\n";
  const auto& sample = answer["data"]["result"][0];
  EXPECT_EQ(sample["metric"]["job"], "joule");
  EXPECT_EQ(sample["metric"]["instance"], "127.0.0.1:" + std::to_string(joule_port));
  EXPECT_GT(std::stod(sample["value"][1].get<std::string>()), 0);
  // The target is healthy in Prometheus's own view.
  auto up = client.Get("/api/v1/query?query=up");
  ASSERT_TRUE(up);
  EXPECT_EQ(json::parse(up->body)["data"]["result"][0]["value"][1], "1");
  server.signal(SIGTERM);
  server.wait();
  power.signal(SIGTERM);
  EXPECT_EQ(power.wait().exit_code, 0);
}

TEST_F(MetricsIntegration, InferenceMetricsAreValidExposition) {
  std::string trace = "arrival_s,prompt_tokens,output_tokens\n";
  for (int i = 0; i < 200; ++i) {
    trace += std::to_string(i * 0.25) + "," + std::to_string(100 + (i * 37) % 800) + "," +
             std::to_string(1 + (i * 53) % 300) + "\n";
  }
  const std::string trace_file = dir.write("trace.csv", trace);
  const std::string metrics_file = dir.path() + "/inference.prom";
  const auto result = run({JOULE_BINARY, "infer", "replay", "--trace", trace_file, "--slo-ttft-s", "1",
                           "--slo-tpot-s", "0.1", "--format", "json", "--metrics-out", metrics_file});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::ifstream in(metrics_file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* name :
       {"joule_inference_request_energy_joules_bucket{gpu=\"h100\",model=\"llama-3-8b\",le=\"1\"}",
        "joule_inference_energy_per_output_token_joules_count{gpu=\"h100\",model=\"llama-3-8b\"} 200",
        "joule_inference_time_to_first_token_seconds_sum",
        "joule_inference_time_per_output_token_seconds_sum",
        "joule_inference_energy_joules_total{gpu=\"h100\",model=\"llama-3-8b\",phase=\"idle\"}",
        "joule_inference_requests_total{gpu=\"h100\",model=\"llama-3-8b\",slo=\"met\"}",
        "joule_inference_slo_attainment_ratio{gpu=\"h100\",model=\"llama-3-8b\"}",
        "joule_inference_sm_clock_hertz{gpu=\"h100\",model=\"llama-3-8b\"}",
        "joule_inference_iterations_total{gpu=\"h100\",model=\"llama-3-8b\"}",
        "joule_inference_slo_target_seconds{gpu=\"h100\",model=\"llama-3-8b\",slo=\"tpot\"} 0.1"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  expect_promtool_accepts(text, "inference");
}

}  // namespace
}  // namespace joule::test
