// SPDX-License-Identifier: Apache-2.0
// `joule infer govern`'s machinery on simulated GPUs and a virtual clock: each engine's metric names, the
// windows between scrapes, a fake vLLM whose latency follows the GPUs' clock, and every bad input refused
// with its message and no change to any GPU.
#include "joule/govern/governor.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/device/discovery.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/govern/engine.hpp"
#include "joule/govern/sidecar.hpp"
#include "joule/metrics/registry.hpp"

#include "mocks/mock_gpu.hpp"

namespace joule::govern {
namespace {

using namespace std::chrono_literals;

// A vLLM engine's /metrics whose latency follows the clock its GPUs run at: each second it serves `rate`
// requests, each with TTFT = base_ttft_s × (max clock / clock) and TPOT likewise.
struct FakeVllm {
  double running = 0, waiting = 0, prompt_tokens = 0, generation_tokens = 0, success = 0;
  std::vector<double> bounds{0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0};
  std::vector<double> ttft_counts = std::vector<double>(12, 0);  // cumulative per bucket, the last +Inf
  std::vector<double> tpot_counts = std::vector<double>(12, 0);
  std::vector<double> itl_counts = std::vector<double>(12, 0);
  double ttft_sum = 0, tpot_sum = 0, itl_sum = 0;
  bool reachable = true;
  bool per_request_tpot = false;  // export vLLM V1's per-request TPOT beside the inter-token latency

  void observe(std::vector<double>& counts, double& sum, double value, double n) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (value <= bounds[i])
        counts[i] += n;
    }
    counts.back() += n;
    sum += value * n;
  }

  // `itl_s`: the inter-token latency of the second's steps (by default the TPOT of its requests).
  void serve_second(double requests, double ttft_s, double tpot_s, std::optional<double> itl_s = {}) {
    running = requests;
    success += requests;
    prompt_tokens += 400 * requests;
    generation_tokens += 150 * requests;
    observe(ttft_counts, ttft_sum, ttft_s, requests);
    observe(tpot_counts, tpot_sum, tpot_s, requests);
    observe(itl_counts, itl_sum, itl_s.value_or(tpot_s), requests);
  }

  std::string histogram(const std::string& name, const std::vector<double>& counts, double sum) const {
    std::string text = fmt::format("# TYPE {} histogram\n", name);
    for (size_t i = 0; i < bounds.size(); ++i) {
      text += fmt::format("{}_bucket{{le=\"{}\",model_name=\"m\"}} {}\n", name, bounds[i], counts[i]);
    }
    text += fmt::format("{}_bucket{{le=\"+Inf\",model_name=\"m\"}} {}\n", name, counts.back());
    text += fmt::format("{}_count{{model_name=\"m\"}} {}\n{}_sum{{model_name=\"m\"}} {}\n", name,
                        counts.back(), name, sum);
    return text;
  }

  std::string render() const {
    return fmt::format(
               "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {}\n"
               "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} {}\n"
               "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{model_name=\"m\"}} {}\n"
               "# TYPE vllm:generation_tokens_total "
               "counter\nvllm:generation_tokens_total{{model_name=\"m\"}} {}\n"
               "# TYPE vllm:request_success_total counter\nvllm:request_success_total{{model_name=\"m\"}} "
               "{}\n",
               running, waiting, prompt_tokens, generation_tokens, success) +
           histogram("vllm:time_to_first_token_seconds", ttft_counts, ttft_sum) +
           (per_request_tpot ? histogram("vllm:request_time_per_output_token_seconds", tpot_counts, tpot_sum)
                             : std::string()) +
           histogram("vllm:inter_token_latency_seconds", per_request_tpot ? itl_counts : tpot_counts,
                     per_request_tpot ? itl_sum : tpot_sum);
  }

  Scraper scraper() {
    return [this](const std::string& url, double, size_t) -> Result<std::string> {
      if (!reachable) {
        return fail(ErrorCode::kIo, "GET {}: connection refused or host unreachable", url);
      }
      return render();
    };
  }
};

class GovernorTest : public testing::Test {
 protected:
  void SetUp() override {
    clock_ = std::make_shared<VirtualClock>();
    device::DiscoveryOptions options;
    options.sim_spec = "2xv100";
    options.cpus = false;
    options.clock = clock_;
    devices_ = device::discover(options).value();
    for (const auto& gpu : devices_.gpus) {
      gpus_.push_back(gpu.get());
    }
    options_.slo = {.ttft_s = 1.0, .tpot_s = 0.1, .attainment = 0.99};
    options_.interval_s = 1;
    options_.scrape_timeout_s = 0.5;
  }

  EngineTarget target() {
    EngineTarget target;
    target.metrics_url = "http://127.0.0.1:8000";
    target.gpus = gpus_;
    return target;
  }

  uint32_t max_clock() { return gpus_[0]->supported_sm_clocks_mhz().value().front(); }

  size_t settings_made() {
    size_t count = 0;
    for (device::Gpu* gpu : gpus_) {
      count += dynamic_cast<device::sim::SimulatedGpu&>(*gpu).settings_log().size();
    }
    return count;
  }

  std::shared_ptr<VirtualClock> clock_;
  device::DeviceSet devices_;
  std::vector<device::Gpu*> gpus_;
  GovernOptions options_;
  FakeVllm engine_;
};

TEST(EngineNames, DetectsEachEngineAndRefusesWhatIsNone) {
  const auto vllm = metrics::parse_exposition("vllm:num_requests_running 1\n", "u").value();
  EXPECT_EQ(detect_engine(vllm, "u").value(), EngineKind::kVllm);
  const auto sglang = metrics::parse_exposition("sglang:num_running_reqs 1\n", "u").value();
  EXPECT_EQ(detect_engine(sglang, "u").value(), EngineKind::kSglang);
  const auto tgi = metrics::parse_exposition("tgi_queue_size 1\n", "u").value();
  EXPECT_EQ(detect_engine(tgi, "u").value(), EngineKind::kTgi);
  const auto node =
      metrics::parse_exposition("node_cpu_seconds_total 1\ngo_goroutines 7\n", "http://h:9100/metrics")
          .value();
  const auto none = detect_engine(node, "http://h:9100/metrics");
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(
      none.error().message(),
      "http://h:9100/metrics is not a vLLM, SGLang or TGI metrics endpoint: none of "
      "vllm:num_requests_running, "
      "vllm:num_requests_waiting, sglang:num_running_reqs, sglang:num_queue_reqs, tgi_queue_size, "
      "tgi_batch_current_size is there (it exports 2 series, e.g. node_cpu_seconds_total, go_goroutines)");
  const auto both = metrics::parse_exposition("vllm:num_requests_running 1\ntgi_queue_size 1\n", "u").value();
  EXPECT_EQ(detect_engine(both, "u").error().message(),
            "u exports the series of vLLM and TGI at once: name the engine with --engine-kind");
  EXPECT_EQ(parse_engine_kind("TensorRT").error().message(),
            "unknown engine \"TensorRT\": expected vllm, sglang or tgi");
}

// What each engine really exports (tests/data/engine-metrics: captured from examples/serve_llm.py under each
// engine's names, plus the series the real engine has that the example lacks, from the engines' sources).
TEST(EngineNames, ReadsEachEnginesOwnExposition) {
  for (const EngineKind kind : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kTgi}) {
    const std::string path =
        fmt::format("{}/tests/data/engine-metrics/{}.prom", JOULE_SOURCE_DIR, to_string(kind));
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto exposition = metrics::parse_exposition(text, path);
    ASSERT_TRUE(exposition.has_value()) << exposition.error().message();
    ASSERT_EQ(detect_engine(*exposition, path).value(), kind) << path;
    const auto snapshot = read_snapshot(*exposition, engine_metric_names(kind), 1);
    ASSERT_TRUE(snapshot.has_value()) << snapshot.error().message();
    EXPECT_GT(snapshot->prompt_tokens, 0) << path;
    EXPECT_GT(snapshot->generation_tokens, 0) << path;
    EXPECT_TRUE(snapshot->finished.has_value()) << path;
    EXPECT_TRUE(snapshot->tpot.has_value()) << path;
    EngineWindow window;
    window.ttft = snapshot->ttft;
    window.tpot = snapshot->tpot;
    window.queue_time = snapshot->queue_time;
    window.prefill_time = snapshot->prefill_time;
    EXPECT_TRUE(window.ttft_quantile_s(0.99).has_value()) << path;
    EXPECT_TRUE(window.tpot_quantile_s(0.99).has_value()) << path;
    if (kind != EngineKind::kSglang) {
      EXPECT_TRUE(snapshot->steps.has_value()) << path;
    }
  }
}

TEST(EngineNames, RefusesMissingAndMistypedSeries) {
  const auto& names = engine_metric_names(EngineKind::kVllm);
  auto exposition = metrics::parse_exposition("vllm:num_requests_running 1\n", "u").value();
  EXPECT_EQ(read_snapshot(exposition, names, 0).error().message(),
            "the vLLM endpoint exports no vllm:num_requests_waiting");
  exposition = metrics::parse_exposition(
                   "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
                   "# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds 3\n",
                   "u")
                   .value();
  EXPECT_EQ(read_snapshot(exposition, names, 0).error().message(),
            "vllm:time_to_first_token_seconds: expected a histogram, got a gauge");
  exposition = metrics::parse_exposition(
                   "# TYPE vllm:num_requests_running counter\nvllm:num_requests_running "
                   "1\nvllm:num_requests_waiting 0\n",
                   "u")
                   .value();
  EXPECT_EQ(read_snapshot(exposition, names, 0).error().message(),
            "vllm:num_requests_running: expected a gauge, got a counter");
  exposition =
      metrics::parse_exposition("vllm:num_requests_running -3\nvllm:num_requests_waiting 0\n", "u").value();
  EXPECT_EQ(read_snapshot(exposition, names, 0).error().message(),
            "vllm:num_requests_running: -3 is not a count (negative or not finite)");
}

TEST(EngineNames, AWindowIsTheDifferenceAndARestartIsSaid) {
  FakeVllm engine;
  const auto& names = engine_metric_names(EngineKind::kVllm);
  engine.serve_second(10, 0.3, 0.04);
  const auto first = read_snapshot(metrics::parse_exposition(engine.render(), "u").value(), names, 1).value();
  engine.serve_second(20, 0.6, 0.04);
  const auto second =
      read_snapshot(metrics::parse_exposition(engine.render(), "u").value(), names, 2).value();
  const auto window = difference(first, second, names).value();
  EXPECT_DOUBLE_EQ(window.prompt_tokens, 8000);
  EXPECT_DOUBLE_EQ(window.generation_tokens, 3000);
  EXPECT_DOUBLE_EQ(window.finished.value(), 20);
  EXPECT_DOUBLE_EQ(window.ttft->count, 20);
  // Only the window's observations: all 20 at 0.6 s, in the (0.5, 0.75] bucket.
  EXPECT_GT(window.ttft_quantile_s(0.99).value(), 0.5);
  EXPECT_LE(window.ttft_quantile_s(0.99).value(), 0.75);
  FakeVllm restarted;
  restarted.serve_second(1, 0.3, 0.04);
  const auto after =
      read_snapshot(metrics::parse_exposition(restarted.render(), "u").value(), names, 3).value();
  const auto refused = difference(second, after, names);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code(), ErrorCode::kState);
  EXPECT_EQ(refused.error().message(),
            "the engine restarted: vllm:prompt_tokens_total went backwards (12000 → 400)");
}

TEST_F(GovernorTest, TurnsTheClockDownWhenCalmAndUpInABurst) {
  auto governor = EngineGovernor::start(target(), options_, clock_, engine_.scraper()).value();
  EXPECT_EQ(governor->kind(), EngineKind::kVllm);
  const uint32_t top = max_clock();
  uint32_t lowest_calm = top;
  std::vector<Decision> decisions;
  // Calm: latency far under the SLO even at low clocks (TTFT 0.1 s at the top, ∝ 1/clock).
  for (int second = 0; second < 90; ++second) {
    const uint32_t clock = governor->tick().knob.value_or(optimize::Knob::sm_clock_mhz(top)).value;
    const double slow = static_cast<double>(top) / clock;
    engine_.serve_second(5, 0.1 * slow, 0.02 * slow);
    clock_->advance(1s);
    lowest_calm = std::min(lowest_calm, clock);
  }
  EXPECT_LT(lowest_calm, top * 3 / 4) << "the calm period should let the clock down";
  // A burst: latency over the SLO unless the clock goes up.
  uint32_t clock = lowest_calm;
  for (int second = 0; second < 10; ++second) {
    Decision decision = governor->tick();
    clock = decision.knob.value().value;
    const double slow = static_cast<double>(top) / clock;
    engine_.serve_second(50, 0.9 * slow, 0.06 * slow);
    clock_->advance(1s);
    decisions.push_back(std::move(decision));
  }
  EXPECT_GT(clock, lowest_calm) << "a burst should bring the clock up";
  EXPECT_TRUE(std::any_of(decisions.begin(), decisions.end(),
                          [](const Decision& d) { return d.changed() && d.reason.starts_with("up: "); }));
  // Energy and work are read: the window's energy is the GPUs' counters' difference.
  EXPECT_GT(decisions.back().energy_j, 0);
  EXPECT_NEAR(decisions.back().prefill_energy_j + decisions.back().decode_energy_j, decisions.back().energy_j,
              1e-9);
  EXPECT_NEAR(decisions.back().j_per_output_token.value(),
              decisions.back().energy_j / decisions.back().output_tokens, 1e-12);
}

// Requests end seconds after the steps that set their pace: when the engine's steps lengthen, the TPOTs of
// the requests finishing still show the old pace. The governor judges TPOT by the window's steps too.
TEST_F(GovernorTest, GoesUpWhenTheStepsLengthenBeforeFinishedRequestsShowIt) {
  engine_.per_request_tpot = true;
  options_.slo = {.ttft_s = 1.0, .tpot_s = 0.05, .attainment = 0.99};
  auto governor = EngineGovernor::start(target(), options_, clock_, engine_.scraper()).value();
  const uint32_t top = max_clock();
  uint32_t clock = top;
  for (int second = 0; second < 90; ++second) {
    clock = governor->tick().knob.value_or(optimize::Knob::sm_clock_mhz(top)).value;
    const double slow = static_cast<double>(top) / clock;
    engine_.serve_second(5, 0.02 * slow, 0.002 * slow);
    clock_->advance(1s);
  }
  const uint32_t calm = clock;
  ASSERT_LT(calm, top * 3 / 4);
  // Steps 3× as long at the same clock; the requests finishing report the pace they had.
  const double stale_tpot_s = 0.002 * static_cast<double>(top) / calm;
  for (int second = 0; second < 4; ++second) {
    clock = governor->tick().knob.value().value;
    engine_.serve_second(5, 0.02, stale_tpot_s, 3 * 0.002 * static_cast<double>(top) / clock);
    clock_->advance(1s);
  }
  EXPECT_GT(clock, calm);
}

TEST_F(GovernorTest, AnEngineThatGoesAwayOrRestartsGetsItsGpusBack) {
  auto governor = EngineGovernor::start(target(), options_, clock_, engine_.scraper()).value();
  (void)governor->tick();
  engine_.serve_second(5, 0.1, 0.02);
  clock_->advance(1s);
  ASSERT_TRUE(governor->tick().knob.has_value());
  auto& sim = dynamic_cast<device::sim::SimulatedGpu&>(*gpus_[0]);
  engine_.reachable = false;
  clock_->advance(1s);
  Decision gone = governor->tick();
  EXPECT_EQ(gone.state, GovernState::kWaiting);
  EXPECT_FALSE(gone.knob.has_value());
  EXPECT_THAT(gone.reason,
              testing::StartsWith("engine unreachable: GET http://127.0.0.1:8000/metrics: connection "
                                  "refused or host unreachable; the GPUs are back at their own settings"));
  EXPECT_EQ(sim.settings_log().back().setting, "sm_clocks_reset");
  // It comes back, then restarts (its counters start again from zero).
  engine_.reachable = true;
  clock_->advance(1s);
  EXPECT_EQ(governor->tick().state, GovernState::kGoverning);
  clock_->advance(1s);
  engine_.serve_second(5, 0.1, 0.02);
  EXPECT_TRUE(governor->tick().knob.has_value());
  engine_ = FakeVllm();
  engine_.serve_second(1, 0.1, 0.02);
  clock_->advance(1s);
  Decision restarted = governor->tick();
  EXPECT_EQ(restarted.state, GovernState::kWaiting);
  EXPECT_THAT(restarted.reason,
              testing::StartsWith("the engine restarted: vllm:prompt_tokens_total went backwards"));
  EXPECT_EQ(sim.settings_log().back().setting, "sm_clocks_reset");
}

TEST_F(GovernorTest, BadInputChangesNoGpu) {
  const auto refused = [&](EngineTarget t, const GovernOptions& options, Scraper scraper) {
    auto governor = EngineGovernor::start(std::move(t), options, clock_, std::move(scraper));
    EXPECT_FALSE(governor.has_value());
    return governor ? std::string() : governor.error().message();
  };
  EngineTarget partial = target();
  partial.tensor_parallel = 4;
  EXPECT_EQ(
      refused(partial, options_, engine_.scraper()),
      "127.0.0.1:8000: the engine's tensor-parallel group has 4 GPUs but 2 are given: a group is governed "
      "together (its slowest GPU sets the pace), so give all of them");
  EngineTarget none = target();
  none.gpus.clear();
  EXPECT_EQ(refused(none, options_, engine_.scraper()),
            "127.0.0.1:8000: no GPU given: name every GPU of the engine's tensor-parallel group");
  EngineTarget twice = target();
  twice.gpus = {gpus_[0], gpus_[0]};
  EXPECT_EQ(refused(twice, options_, engine_.scraper()), "127.0.0.1:8000: GPU 0 given twice");
  const Scraper not_engine = [](const std::string&, double, size_t) -> Result<std::string> {
    return std::string("# TYPE node_load1 gauge\nnode_load1 0.5\n");
  };
  EXPECT_THAT(
      refused(target(), options_, not_engine),
      testing::StartsWith("http://127.0.0.1:8000/metrics is not a vLLM, SGLang or TGI metrics endpoint"));
  const Scraper html = [](const std::string&, double, size_t) -> Result<std::string> {
    return std::string("<html><body>vLLM</body></html>\n");
  };
  EXPECT_EQ(refused(target(), options_, html),
            "http://127.0.0.1:8000/metrics:1: not a sample, comment or TYPE line: "
            "\"<html><body>vLLM</body></html>\"");
  EngineTarget wrong_kind = target();
  wrong_kind.kind = EngineKind::kTgi;
  EXPECT_EQ(refused(wrong_kind, options_, engine_.scraper()),
            "http://127.0.0.1:8000/metrics is a vLLM endpoint, not TGI (--engine-kind tgi)");
  GovernOptions bad = options_;
  bad.slo.ttft_s = -1;
  EXPECT_EQ(refused(target(), bad, engine_.scraper()),
            "the TTFT SLO must be a positive number of seconds, got -1");
  bad = options_;
  bad.scrape_timeout_s = 2;
  EXPECT_EQ(refused(target(), bad, engine_.scraper()),
            "the scrape timeout must be in (0, 1] s (the interval), got 2");
  EngineTarget bad_url = target();
  bad_url.metrics_url = "ftp://x";
  EXPECT_EQ(refused(bad_url, options_, engine_.scraper()),
            "the metrics URL \"ftp://x\" must start with http:// or https://");
  EXPECT_EQ(settings_made(), 0u);
}

TEST(GovernorLocks, AGpuGovernedByAnotherProcessIsRefused) {
  const auto folder =
      std::filesystem::temp_directory_path() / fmt::format("joule-govern-test-{}", ::getpid());
  std::filesystem::create_directories(folder);
  device::GpuInfo info = test::mock_gpu_info(0);
  info.backend = "nvml";
  info.uuid = "GPU-1234";
  testing::NiceMock<test::MockGpu> gpu(info);
  ON_CALL(gpu, do_supported_sm_clocks_mhz())
      .WillByDefault(testing::Return(std::vector<uint32_t>{1410, 1200, 900}));
  FakeVllm engine;
  GovernOptions options;
  options.slo = {.ttft_s = 1, .tpot_s = 0.1};
  options.lock_dir = folder.string();
  EngineTarget target;
  target.metrics_url = "http://127.0.0.1:8000/metrics";
  target.gpus = {&gpu};
  auto clock = std::make_shared<VirtualClock>();
  auto first = EngineGovernor::start(target, options, clock, engine.scraper());
  ASSERT_TRUE(first.has_value()) << first.error().message();
  auto second = EngineGovernor::start(target, options, clock, engine.scraper());
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code(), ErrorCode::kState);
  EXPECT_EQ(second.error().message(), fmt::format("GPU 0 ({}) is already governed by another joule process "
                                                  "(pid {}; lock {}/joule-govern-GPU-1234.lock)",
                                                  info.name, ::getpid(), folder.string()));
  first->reset();
  EXPECT_TRUE(EngineGovernor::start(target, options, clock, engine.scraper()).has_value());
  std::filesystem::remove_all(folder);
}

TEST_F(GovernorTest, TheSidecarExportsWhatItDoes) {
  std::vector<std::unique_ptr<EngineGovernor>> governors;
  governors.push_back(EngineGovernor::start(target(), options_, clock_, engine_.scraper()).value());
  metrics::MetricsRegistry registry;
  registry.set_identity_labels({});
  Sidecar sidecar(std::move(governors), options_, clock_, registry);
  std::vector<TickReport> reports;
  int ticks = 0;
  sidecar.run(
      5,
      [&](Nanos wait) {
        clock_->advance(wait);
        engine_.serve_second(5, 0.1, 0.02);
        return false;
      },
      [&](const TickReport& report) {
        ++ticks;
        reports.push_back(report);
      });
  EXPECT_EQ(ticks, 5);
  const std::string text = registry.render();
  EXPECT_THAT(text, testing::HasSubstr("joule_govern_knob{engine=\"127.0.0.1:8000\",knob=\"sm_clock_mhz\"}"));
  EXPECT_THAT(
      text, testing::HasSubstr("joule_govern_slo_target_seconds{engine=\"127.0.0.1:8000\",slo=\"ttft\"} 1"));
  EXPECT_THAT(text, testing::HasSubstr(
                        "joule_govern_energy_joules_total{engine=\"127.0.0.1:8000\",phase=\"decode\"}"));
  EXPECT_THAT(text, testing::HasSubstr("joule_govern_decision_seconds_count{engine=\"127.0.0.1:8000\"} 5"));
  const std::string line = to_json_line(reports.back());
  EXPECT_THAT(line, testing::HasSubstr("\"engine\":\"127.0.0.1:8000\""));
  EXPECT_THAT(line, testing::HasSubstr("\"knob\":{\"kind\":\"sm_clock_mhz\""));
  // The run restores the GPUs when it ends.
  EXPECT_EQ(dynamic_cast<device::sim::SimulatedGpu&>(*gpus_[0]).settings_log().back().setting,
            "sm_clocks_reset");
}

}  // namespace
}  // namespace joule::govern
