// SPDX-License-Identifier: Apache-2.0
// `joule infer govern` as users run it (build/joule on simulated GPUs) against a fake vLLM endpoint served
// here: a short governed run with its decision log and metrics, and every bad input refused before any GPU
// changes.
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

// A /metrics endpoint on loopback whose body the test sets.
class FakeMetricsServer {
 public:
  FakeMetricsServer() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      std::lock_guard lock(mutex_);
      response.set_content(body_(), "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~FakeMetricsServer() {
    server_.stop();
    thread_.join();
  }
  void serve(std::function<std::string()> body) {
    std::lock_guard lock(mutex_);
    body_ = std::move(body);
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::mutex mutex_;
  std::function<std::string()> body_ = [] { return std::string("# nothing\n"); };
  int port_ = 0;
};

// vLLM's series for a steady load: each scrape has served `step` more requests.
std::string vllm_body(int served) {
  return fmt::format(
      "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} 4\n"
      "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} 0\n"
      "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{model_name=\"m\"}} {}\n"
      "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name=\"m\"}} {}\n"
      "# TYPE vllm:request_success_total counter\nvllm:request_success_total{{model_name=\"m\"}} {}\n"
      "# TYPE vllm:time_to_first_token_seconds histogram\n"
      "vllm:time_to_first_token_seconds_bucket{{le=\"0.1\",model_name=\"m\"}} {}\n"
      "vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {}\n"
      "vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} "
      "{}\nvllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {}\n"
      "# TYPE vllm:inter_token_latency_seconds histogram\n"
      "vllm:inter_token_latency_seconds_bucket{{le=\"0.02\",model_name=\"m\"}} {}\n"
      "vllm:inter_token_latency_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {}\n"
      "vllm:inter_token_latency_seconds_count{{model_name=\"m\"}} "
      "{}\nvllm:inter_token_latency_seconds_sum{{model_name=\"m\"}} {}\n",
      served * 400, served * 150, served, served, served, served, served * 0.05, served, served, served,
      served * 0.01);
}

ProcessResult joule(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {JOULE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {{"JOULE_GOVERN_LOCK_DIR", "/tmp"}});
}

TEST(CliGovern, GovernsAFakeVllmAndLogsEachDecision) {
  TempDir dir;
  FakeMetricsServer engine;
  std::atomic<int> scrapes{0};
  engine.serve([&] { return vllm_body(5 * ++scrapes); });
  const std::string decisions = dir.path() + "/decisions.jsonl";
  const ProcessResult result =
      joule({"--sim",           "2xv100", "infer",        "govern", "--engine",     engine.url(),
             "--gpus",          "0,1",    "--tp",         "2",      "--slo-ttft-s", "1",
             "--slo-tpot-s",    "0.1",    "--interval-s", "0.1",    "--duration-s", "1",
             "--decisions-out", decisions});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(fmt::format("governing 127.0.0.1:{0} (vLLM at {1}/metrics) on GPU 0,1",
                                        engine.url().substr(17), engine.url())),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("own settings → 1380 MHz: start: the maximum until the controller has measured"),
            std::string::npos)
      << result.out;
  std::ifstream in(decisions);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto json = nlohmann::json::parse(line);
    EXPECT_EQ(json["state"], "governing") << line;
    EXPECT_EQ(json["knob"]["kind"], "sm_clock_mhz") << line;
    if (lines > 0) {
      EXPECT_GT(json["energy_j"].get<double>(), 0) << line;
      EXPECT_GT(json["output_tokens"].get<double>(), 0) << line;
    }
    ++lines;
  }
  EXPECT_GE(lines, 5);
}

// With the GPUs' card the controller starts from it, and the log says so once.
TEST(CliGovern, StartsFromTheGpusCard) {
  FakeMetricsServer engine;
  std::atomic<int> scrapes{0};
  engine.serve([&] { return vllm_body(5 * ++scrapes); });
  const ProcessResult result =
      joule({"--sim", "v100", "infer", "govern", "--engine", engine.url(), "--slo-ttft-s", "1",
             "--slo-tpot-s", "0.1", "--interval-s", "0.1", "--duration-s", "0.5", "--card",
             JOULE_SOURCE_DIR "/data/cards/sim-v100.json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(": starting from the card: clocks not yet measured are predicted by its sm_clock "
                            "curves, fitted to the measured ones\n"),
            std::string::npos)
      << result.out;
}

TEST(CliGovern, BadInputIsRefusedBeforeAnyGpuChanges) {
  FakeMetricsServer engine;
  engine.serve([] { return vllm_body(1); });
  FakeMetricsServer node_exporter;
  node_exporter.serve([] { return std::string("# TYPE node_load1 gauge\nnode_load1 0.5\n"); });
  std::string closed;
  {
    FakeMetricsServer gone;
    closed = gone.url();
  }
  const auto expect_error = [](const ProcessResult& result, const std::string& message, int exit_code) {
    EXPECT_EQ(result.exit_code, exit_code) << message << "\n" << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  };
  const auto govern = [](std::vector<std::string> args) {
    std::vector<std::string> all = {"--sim",        "2xv100", "infer",        "govern",
                                    "--slo-ttft-s", "1",      "--slo-tpot-s", "0.1"};
    all.insert(all.end(), args.begin(), args.end());
    return joule(all);
  };
  expect_error(
      govern({"--engine", node_exporter.url()}),
      fmt::format("joule: error: infer govern: {}/metrics is not a vLLM, SGLang or TGI metrics endpoint",
                  node_exporter.url()),
      2);
  expect_error(
      govern({"--engine", closed}),
      fmt::format("joule: error: infer govern: GET {}/metrics: connection refused or host unreachable",
                  closed),
      1);
  expect_error(govern({"--engine", engine.url(), "--gpus", "0", "--tp", "2"}),
               "the engine's tensor-parallel group has 2 GPUs but 1 is given", 2);
  expect_error(govern({"--engine", engine.url(), "--engine-kind", "tgi"}),
               fmt::format("{}/metrics is a vLLM endpoint, not TGI (--engine-kind tgi)", engine.url()), 2);
  expect_error(govern({"--engine", engine.url(), "--engine-kind", "trt"}),
               "unknown engine \"trt\": expected vllm, sglang or tgi", 2);
  expect_error(govern({"--engine", engine.url(), "--gpus", "0", "--engine", engine.url(), "--gpus", "0"}),
               "GPU 0 is given to two engines", 2);
  expect_error(govern({"--engine", engine.url(), "--engine", engine.url()}),
               "several engines: give --gpus once per --engine", 2);
  expect_error(govern({"--engine", engine.url(), "--gpus", "0", "--engine", engine.url(), "--gpus", "1",
                       "--tp", "1", "--tp", "1", "--tp", "1"}),
               "--tp is given 3 times for 2 engines", 2);
  expect_error(govern({"--engine", engine.url(), "--gpus", "7"}), "unknown GPU index 7: 2 GPUs are visible",
               1);
  expect_error(govern({"--engine", engine.url(), "--interval-s", "1", "--scrape-timeout-s", "2"}),
               "the scrape timeout must be in (0, 1] s (the interval), got 2", 2);
  expect_error(govern({"--engine", "ftp://x"}),
               "the metrics URL \"ftp://x\" must start with http:// or https://", 2);
  // A card for another GPU model, or of a newer schema: refused naming both, before any change.
  const std::string a40_card = JOULE_SOURCE_DIR "/data/cards/sim-a40.json";
  expect_error(
      govern({"--engine", engine.url(), "--card", a40_card}),
      fmt::format(
          "joule: error: infer govern: 127.0.0.1:{}: --card: {} is for NVIDIA A40 (simulated) "
          "(driver sim), not Tesla V100-PCIE-32GB (simulated) (driver sim): make a card for this device "
          "with 'joule probe'",
          engine.url().substr(17), a40_card),
      2);
  TempDir dir;
  std::ifstream v100(JOULE_SOURCE_DIR "/data/cards/sim-v100.json");
  std::string newer((std::istreambuf_iterator<char>(v100)), std::istreambuf_iterator<char>());
  newer.replace(newer.find("\"schema_version\": 1"), 19, "\"schema_version\": 2");
  const std::string newer_path = dir.write("newer.json", newer);
  expect_error(
      govern({"--engine", engine.url(), "--card", newer_path}),
      fmt::format("{}: card schema version 2 is newer than this joule reads (1): upgrade joule to read it",
                  newer_path),
      1);
  // A GPU without an energy counter: what each setting costs cannot be measured.
  expect_error(joule({"--sim", "p100", "infer", "govern", "--engine", engine.url(), "--slo-ttft-s", "1",
                      "--slo-tpot-s", "0.1"}),
               "has no energy counter", 1);
}

}  // namespace
}  // namespace joule::test
