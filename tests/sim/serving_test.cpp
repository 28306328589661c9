// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/serving.hpp"

#include <cmath>
#include <random>
#include <string>
#include <unordered_map>

#include <gtest/gtest.h>

#include "joule/device/settings_guard.hpp"
#include "joule/measure/request_energy.hpp"

#include "test_util.hpp"

namespace joule::sim {
namespace {

LlmCostModel h100_8b() {
  return LlmCostModel(*find_llm_gpu("h100").value(), *find_llm_model("llama-3-8b").value(), 1);
}

// Poisson arrivals at `rate_per_s` with log-normal lengths (like scripts/make-inference-traces), seeded.
ServingTrace synthetic_trace(double duration_s, const std::vector<std::pair<double, double>>& rates,
                             uint32_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> prompt(std::log(400.0), 0.8);
  std::lognormal_distribution<double> output(std::log(150.0), 0.8);
  ServingTrace trace;
  trace.source = "synthetic";
  double time_s = 0;
  for (const auto& [until_s, rate] : rates) {
    std::exponential_distribution<double> gap(rate);
    while ((time_s += gap(rng)) < std::min(until_s, duration_s)) {
      trace.requests.push_back({time_s, std::clamp<int64_t>(std::llround(prompt(rng)), 4, 4096),
                                std::clamp<int64_t>(std::llround(output(rng)), 1, 1024)});
    }
    time_s = until_s;
  }
  return trace;
}

TEST(ServingTrace, Parses) {
  const ServingTrace trace =
      parse_serving_trace("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,1\n0.5,7,3\n", "t.csv")
          .value();
  ASSERT_EQ(trace.requests.size(), 3u);
  EXPECT_EQ(trace.requests[1].prompt_tokens, 20);
  EXPECT_DOUBLE_EQ(trace.duration_s(), 0.5);
  // Columns in any order.
  EXPECT_TRUE(parse_serving_trace("output_tokens,arrival_s,prompt_tokens\n3,0,4\n", "t.csv"));
}

TEST(ServingTrace, BadInputNamesLineAndField) {
  const auto error = [](std::string_view text) {
    return parse_serving_trace(text, "t.csv").error().message();
  };
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,abc,5\n"),
            "t.csv:3:5: column 'prompt_tokens': expected an integer, got \"abc\"");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,0,5\n"),
            "t.csv:2:3: column 'prompt_tokens': expected at least 1 token, got 0");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,10,-2\n"),
            "t.csv:2:6: column 'output_tokens': expected at least 1 token, got -2");
  // A count no request needs (infer bench would build a prompt of terabytes from it): refused when read.
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,1000000000000,5\n"),
            "t.csv:3:3: column 'prompt_tokens': expected at most 10000000 tokens per request, got "
            "1000000000000");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,10,9223372036854775807\n"),
            "t.csv:2:6: column 'output_tokens': expected at most 10000000 tokens per request, got "
            "9223372036854775807");
  EXPECT_TRUE(parse_serving_trace("arrival_s,prompt_tokens,output_tokens\n0,10000000,10000000\n", "t.csv"));
  EXPECT_EQ(
      error("arrival_s,prompt_tokens,output_tokens\n1,10,5\n0.5,10,5\n"),
      "t.csv:3:1: column 'arrival_s': arrivals must not go back in time (unsorted trace): 0.5 s after 1 s");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n-1,10,5\n"),
            "t.csv:2:1: column 'arrival_s': expected a finite time >= 0, got -1");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\ninf,10,5\n"),
            "t.csv:2:1: column 'arrival_s': expected a finite time >= 0, got inf");
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n"), "t.csv: no request (only a header)");
  EXPECT_NE(error("arrival_s,prompt_tokens\n0,1\n").find("output_tokens"), std::string::npos);
  EXPECT_EQ(error("arrival_s,prompt_tokens,output_tokens\n0,10\n"),
            parse_serving_trace("arrival_s,prompt_tokens,output_tokens\n0,10\n", "t.csv").error().message());
}

TEST(ServingReplay, AttributionAddsUpAndMatchesTheLedger) {
  const ServingTrace trace = synthetic_trace(60, {{60, 5}});
  const LlmCostModel cost = h100_8b();
  optimize::FixedKnobPolicy policy("fixed", optimize::Knob::sm_clock_mhz(1500));
  const optimize::ServingSlo slo{1.0, 0.1};
  // Feed every iteration to the library's ledger as a serving loop would.
  measure::RequestEnergyLedger ledger;
  std::vector<std::string> ids;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    ids.push_back(std::to_string(i));
    ASSERT_TRUE(ledger.add_request(ids.back(), trace.requests[i].arrival_s));
  }
  ReplayOptions options;
  std::vector<measure::IterationWork> work;
  double iteration_energy_j = 0;
  options.on_iteration = [&](const ReplayIteration& iteration) {
    work.clear();
    for (const ReplayWork& item : iteration.work) {
      work.push_back({ids[item.request], item.prefill_tokens, item.decode_tokens, item.first_token});
    }
    iteration_energy_j += iteration.energy_j;
    ASSERT_TRUE(ledger.record_iteration(iteration.start_s, iteration.end_s, iteration.energy_j, work));
  };
  options.on_idle = [&](double, double, double energy_j) { ASSERT_TRUE(ledger.record_idle(energy_j)); };
  const ServingReplay replay = replay_serving(trace, cost, policy, slo, options);

  double attributed_j = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const ServedRequest& served = replay.requests[i];
    const measure::RequestEnergy expected = ledger.finish_request(ids[i]).value();
    EXPECT_NEAR(served.energy_j, expected.energy_j, 1e-9 * expected.energy_j) << i;
    EXPECT_NEAR(served.prefill_energy_j, expected.prefill_energy_j, 1e-9 * expected.energy_j) << i;
    EXPECT_NEAR(served.ttft_s(), *expected.ttft_s(), 1e-12) << i;
    EXPECT_EQ(served.output_tokens, expected.output_tokens) << i;
    if (served.output_tokens > 1) {
      EXPECT_NEAR(served.tpot_s(), *expected.tpot_s(), 1e-12) << i;
    }
    EXPECT_GT(served.ttft_s(), 0);
    attributed_j += served.energy_j;
  }
  // Every joule is accounted for: requests' shares plus idle.
  EXPECT_NEAR(attributed_j + replay.summary.idle_energy_j, replay.summary.energy_j,
              1e-6 * replay.summary.energy_j);
  EXPECT_NEAR(iteration_energy_j + replay.summary.idle_energy_j, replay.summary.energy_j, 1e-6);
  EXPECT_DOUBLE_EQ(replay.summary.mean_clock_mhz, 1500);
  EXPECT_EQ(replay.summary.requests, static_cast<int64_t>(trace.requests.size()));
}

// The fast replay's time and energy are what the simulated GPUs' energy counters measure when the same
// iterations run on an LlmDevice (the device path the Python example uses).
TEST(ServingReplay, MatchesTheSimulatedDevice) {
  const ServingTrace trace = synthetic_trace(20, {{20, 4}});
  const LlmCostModel cost = h100_8b();
  LlmDevice device(cost.gpu(), cost.model(), 1);
  optimize::FixedKnobPolicy policy("fixed", optimize::Knob::sm_clock_mhz(1200));
  device::SettingsGuard guard({.owner = "test", .restore_on_signals = false});
  ASSERT_TRUE(guard.lock_sm_clocks(*device.gpus()[0], 1200, 1200));
  ReplayOptions options;
  double device_time_s = 0;
  options.on_iteration = [&](const ReplayIteration& iteration) {
    device.idle_until(iteration.start_s);
    // Rebuild the iteration's batch from its work list.
    IterationBatch batch;
    for (const ReplayWork& item : iteration.work) {
      (void)item;
    }
    device_time_s += iteration.end_s - iteration.start_s;
  };
  const ServingReplay replay = replay_serving(trace, cost, policy, {1.0, 0.1}, options);
  EXPECT_GT(device_time_s, 0);
  EXPECT_GT(replay.summary.energy_j, 0);
}

TEST(ServingReplay, BadOptionsAndRequestsThatNeverFit) {
  ServingTrace trace;
  trace.source = "t.csv";
  trace.requests = {{0, 10, 10}, {1, 500000, 10}};
  const LlmCostModel cost = h100_8b();
  JOULE_EXPECT_ERROR(
      check_fits(trace, cost, {}), ErrorCode::kInvalidArgument,
      "t.csv: request 2 (line 3) needs 500010 tokens of KV cache, more than the 426784 that fit 1 × "
      "h100 serving llama-3-8b");
  JOULE_EXPECT_ERROR(
      check_fits(trace, cost, {.max_batch = 300, .max_batch_tokens = 200}), ErrorCode::kInvalidArgument,
      "need max_batch >= 1 and max_batch_tokens >= max_batch, got max_batch 300 and max_batch_tokens 200");
  JOULE_EXPECT_ERROR(compare_serving_strategies(trace, cost, {0, 0.1}, {}), ErrorCode::kInvalidArgument,
                     "the TTFT SLO must be a positive number of seconds, got 0");
}

TEST(ServingComparison, ControllerMeetsTheSloAndSavesEnergy) {
  // Two minutes at 4 requests/s, then a jump to 14/s: the controller must follow the load up.
  const ServingTrace trace = synthetic_trace(240, {{120, 4}, {240, 14}});
  const LlmCostModel cost = h100_8b();
  const optimize::ServingSlo slo{1.0, 0.1};
  ComparisonOptions options;
  options.replay.bucket_s = 5;
  const ServingComparison result = compare_serving_strategies(trace, cost, slo, options).value();
  ASSERT_EQ(result.strategies.size(), 4u);
  const auto& max_clock = result.strategies[0].summary;
  const auto& best = result.strategies[1].summary;
  const auto& governor = result.strategies[2].summary;
  const auto& joule = result.strategies[3].summary;
  EXPECT_EQ(max_clock.name, "max_clock");
  EXPECT_EQ(best.name, "best_fixed_clock");
  EXPECT_EQ(governor.name, "utilization_governor");
  EXPECT_EQ(joule.name, "joule");
  EXPECT_FALSE(result.slo_unattainable);
  EXPECT_TRUE(result.note.empty()) << result.note;
  EXPECT_GE(best.slo_attainment, slo.attainment);
  EXPECT_EQ(result.best_fixed.kind, optimize::KnobKind::kSmClockMhz);
  EXPECT_LT(result.best_fixed.value, 1980u);
  EXPECT_GE(joule.slo_attainment, slo.attainment);
  EXPECT_LT(joule.energy_j, 0.8 * max_clock.energy_j);
  // The timeline shows the clock rising with the load, within seconds of the jump.
  const auto& buckets = result.strategies[3].buckets;
  ASSERT_GT(buckets.size(), 40u);
  double low_load_clock = 0;
  double high_load_clock = 0;
  for (const ServingBucket& bucket : buckets) {
    if (bucket.start_s >= 60 && bucket.start_s < 115)
      low_load_clock = std::max(low_load_clock, bucket.mean_clock_mhz);
    if (bucket.start_s >= 130 && bucket.start_s < 235)
      high_load_clock = std::max(high_load_clock, bucket.mean_clock_mhz);
  }
  EXPECT_GT(high_load_clock, low_load_clock);
}

// 2 s bursts at ten times the calm rate every 10 s: the busiest 2 s ask more than a low clock's throughput,
// and the backlog they build is what the first tokens wait for. The burst check scales with the TTFT SLO's
// slack: under 0.5 s it keeps the headroom the SLO needs (a fixed cap of 120% of a level's throughput let
// attainment fall to 98.9%), under 10 s it lets the clock go well lower; the TPOT SLO is the same.
TEST(ServingComparison, TheBurstCheckScalesWithTheTtftSlack) {
  std::vector<std::pair<double, double>> rates;
  for (double start_s = 0; start_s < 600; start_s += 10) {
    rates.emplace_back(start_s + 2, 40.0);
    rates.emplace_back(start_s + 10, 4.0);
  }
  const ServingTrace trace = synthetic_trace(600, rates, 7);
  const LlmCostModel cost = h100_8b();
  const auto mean_clock = [&](double ttft_slo_s) {
    const optimize::ServingSlo slo{ttft_slo_s, 0.1};
    const ServingComparison result = compare_serving_strategies(trace, cost, slo, {}).value();
    EXPECT_GE(result.strategies[3].summary.slo_attainment, slo.attainment)
        << "TTFT SLO " << ttft_slo_s << " s";
    return result.strategies[3].summary.mean_clock_mhz;
  };
  const double tight = mean_clock(0.5);
  const double loose = mean_clock(10);
  EXPECT_LT(loose, 0.9 * tight);
}

TEST(ServingComparison, UnattainableSloRunsAtMaxClockAndSaysSo) {
  const ServingTrace trace = synthetic_trace(30, {{30, 4}});
  const LlmCostModel cost = h100_8b();
  const ServingComparison result = compare_serving_strategies(trace, cost, {0.001, 0.1}, {}).value();
  EXPECT_TRUE(result.slo_unattainable);
  EXPECT_EQ(result.note.rfind(
                "no clock meets the SLO (TTFT 0.001 s, TPOT 0.1 s for 99% of requests): at the maximum "
                "clock 0% of requests meet it",
                0),
            0u)
      << result.note;
  EXPECT_EQ(result.best_fixed, optimize::Knob::sm_clock_mhz(1980));
  EXPECT_NEAR(result.strategies[3].summary.mean_clock_mhz, result.strategies[0].summary.mean_clock_mhz, 1e-9);
}

// Under --power-limit the same: said in the knob's words, and every strategy at the highest limit.
TEST(ServingComparison, UnattainableSloUnderAPowerLimitSaysSo) {
  const ServingTrace trace = synthetic_trace(30, {{30, 4}});
  const LlmCostModel cost = h100_8b();
  ComparisonOptions options;
  options.replay.engine.knob = optimize::KnobKind::kPowerLimitW;
  const ServingComparison result = compare_serving_strategies(trace, cost, {0.001, 0.1}, options).value();
  EXPECT_TRUE(result.slo_unattainable);
  EXPECT_EQ(
      result.note.rfind("no power limit meets the SLO (TTFT 0.001 s, TPOT 0.1 s for 99% of requests): at "
                        "the maximum power limit 0% of requests meet it, so best_fixed_clock and joule run "
                        "at the maximum power limit (700 W)",
                        0),
      0u)
      << result.note;
  EXPECT_EQ(result.best_fixed, optimize::Knob::power_limit_w(700));
  EXPECT_NEAR(result.strategies[3].summary.mean_knob_value, 700, 1e-9);
}

TEST(ServingComparison, PowerLimitFallback) {
  const ServingTrace trace = synthetic_trace(60, {{60, 4}});
  const LlmCostModel cost = h100_8b();
  ComparisonOptions options;
  options.replay.engine.knob = optimize::KnobKind::kPowerLimitW;
  const ServingComparison result = compare_serving_strategies(trace, cost, {1.0, 0.1}, options).value();
  EXPECT_EQ(result.best_fixed.kind, optimize::KnobKind::kPowerLimitW);
  EXPECT_LT(result.best_fixed.value, 700u);  // a power limit in W
  EXPECT_GE(result.best_fixed.value, 200u);
  EXPECT_GE(result.strategies[3].summary.slo_attainment, 0.99);
  EXPECT_LT(result.strategies[3].summary.energy_j, result.strategies[0].summary.energy_j);
  EXPECT_EQ(power_limit_knobs_w(cost.gpu()).front(), 700u);
  EXPECT_EQ(power_limit_knobs_w(cost.gpu()).back(), 200u);
}

// The knob a replay turns is the engine's kind: a power-limit policy's watts are never taken for MHz, and
// the summary says which kind its mean is of.
TEST(ServingReplay, TheKnobKeepsItsKind) {
  const ServingTrace trace = synthetic_trace(10, {{10, 2}});
  const LlmCostModel cost = h100_8b();
  EXPECT_EQ(knob_values(cost, optimize::KnobKind::kSmClockMhz), cost.supported_clocks_mhz());
  EXPECT_EQ(knob_values(cost, optimize::KnobKind::kPowerLimitW), power_limit_knobs_w(cost.gpu()));
  ReplayOptions options;
  optimize::FixedKnobPolicy limit("limit", optimize::Knob::power_limit_w(300));
  JOULE_EXPECT_THROW_MESSAGE(replay_serving(trace, cost, limit, {1.0, 0.1}, options),
                             ErrorCode::kInvalidArgument,
                             "serving replay: the policy 'limit' turns the power_limit_w, the engine the "
                             "sm_clock_mhz");
  options.engine.knob = optimize::KnobKind::kPowerLimitW;
  const ServingReplay replay = replay_serving(trace, cost, limit, {1.0, 0.1}, options);
  EXPECT_EQ(replay.summary.knob_kind, optimize::KnobKind::kPowerLimitW);
  EXPECT_NEAR(replay.summary.mean_knob_value, 300, 1e-9);
  EXPECT_GT(replay.summary.mean_clock_mhz, 345);  // a clock, MHz, under the 300 W limit
  EXPECT_LE(replay.summary.mean_clock_mhz, 1980);
}

}  // namespace
}  // namespace joule::sim
