// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/llm.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/device/settings_guard.hpp"

#include "test_util.hpp"

namespace joule::sim {
namespace {

LlmCostModel model_of(const char* gpu, const char* model, int tensor_parallel) {
  return LlmCostModel(*find_llm_gpu(gpu).value(), *find_llm_model(model).value(), tensor_parallel);
}

IterationBatch decode_batch(int requests, int64_t context) {
  IterationBatch batch;
  for (int i = 0; i < requests; ++i)
    batch.add_decode(context);
  return batch;
}

IterationBatch prefill_batch(int64_t tokens) {
  IterationBatch batch;
  batch.add_prefill(tokens, 0);
  return batch;
}

TEST(LlmSpecs, BuiltInsAndNames) {
  EXPECT_EQ(find_llm_gpu("H100").value()->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(find_llm_gpu("a100").value()->key, "a100-80gb");
  EXPECT_EQ(find_llm_gpu("h100-sxm5-80gb").value()->key, "h100");
  EXPECT_EQ(find_llm_model("Llama-3-70B").value()->layers, 80);
  JOULE_EXPECT_ERROR(find_llm_gpu("v100"), ErrorCode::kNotFound,
                     "unknown GPU 'v100': known GPUs are a100-40gb, a100-80gb, h100 (or a JSON file, see "
                     "docs/inference.md)");
  JOULE_EXPECT_ERROR(
      find_llm_model("gpt-4"), ErrorCode::kNotFound,
      "unknown model 'gpt-4': known models are llama-3-8b, llama-3-70b, llama-2-70b (or a JSON file, "
      "see docs/inference.md)");
  // Meta's configs: 8.03 B and 70.6 B parameters; 128 KiB and 320 KiB of KV cache per token in BF16.
  EXPECT_DOUBLE_EQ(find_llm_model("llama-3-8b").value()->kv_bytes_per_token(), 131072);
  EXPECT_DOUBLE_EQ(find_llm_model("llama-3-70b").value()->kv_bytes_per_token(), 327680);
  for (const LlmGpuSpec& gpu : llm_gpus()) {
    EXPECT_FALSE(gpu.source.empty()) << gpu.key;
    EXPECT_LT(gpu.idle_power_w, gpu.tdp_w) << gpu.key;
  }
  for (const LlmModelSpec& model : llm_models())
    EXPECT_FALSE(model.source.empty()) << model.key;
}

TEST(LlmSpecs, UserJson) {
  const LlmGpuSpec slower =
      parse_llm_gpu_json(R"({"base": "h100", "key": "h100-pcie", "hbm_bandwidth_bps": 2.0e12, "tdp_w": 350,
                             "min_power_limit_w": 200})",
                         "gpu.json")
          .value();
  EXPECT_EQ(slower.key, "h100-pcie");
  EXPECT_DOUBLE_EQ(slower.hbm_bandwidth_bps, 2.0e12);
  EXPECT_DOUBLE_EQ(slower.peak_bf16_flops, 989.4e12);  // from the base
  const LlmModelSpec tiny = parse_llm_model_json(R"({"key": "tiny", "layers": 2, "hidden_size": 256,
      "attention_heads": 4, "kv_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "parameters": 2000000})",
                                                 "model.json")
                                .value();
  EXPECT_EQ(tiny.layers, 2);
  JOULE_EXPECT_ERROR(
      parse_llm_gpu_json(R"({"base": "h100", "tdp": 300})", "gpu.json"), ErrorCode::kParse,
      "gpu.json: tdp: unknown field (known: base, key, name, peak_bf16_flops, hbm_bandwidth_bps, "
      "memory_bytes, nvlink_bandwidth_bps, min_sm_clock_mhz, max_sm_clock_mhz, sm_clock_step_mhz, "
      "tdp_w, min_power_limit_w, idle_power_w, compute_efficiency, memory_efficiency, sm_power_w, "
      "sm_busy_share, memory_power_w, iteration_overhead_s, source)");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json(R"({"base": "h100", "memory_efficiency": 1.5})", "gpu.json"),
                     ErrorCode::kParse, "gpu.json.memory_efficiency: must be in (0, 1], got 1.5");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json(R"({"base": "h100", "tdp_w": "lots"})", "gpu.json"),
                     ErrorCode::kParse, "gpu.json.tdp_w: value is not a valid float");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json(R"({"name": "x"})", "gpu.json"), ErrorCode::kParse,
                     "gpu.json.peak_bf16_flops: field required");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json("[1]", "gpu.json"), ErrorCode::kParse,
                     "gpu.json: expected a JSON object");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json("{", "gpu.json"), ErrorCode::kParse, "gpu.json: not valid JSON");
  JOULE_EXPECT_ERROR(parse_llm_gpu_json(R"({"base": "b200"})", "gpu.json"), ErrorCode::kNotFound,
                     "unknown GPU 'b200': known GPUs are a100-40gb, a100-80gb, h100 (or a JSON file, see "
                     "docs/inference.md)");
  JOULE_EXPECT_ERROR(parse_llm_model_json(R"({"base": "llama-3-8b", "layers": 0})", "model.json"),
                     ErrorCode::kParse, "model.json.layers: must be an integer in [1, 1000000], got 0");
  JOULE_EXPECT_ERROR(
      parse_llm_model_json(R"({"base": "llama-3-8b", "attention_heads": 3})", "model.json"),
      ErrorCode::kParse,
      "model.json: hidden_size 4096 must be a multiple of attention_heads 3, and kv_heads 8 at most "
      "attention_heads");
  JOULE_EXPECT_ERROR(load_llm_gpu("/nonexistent/gpu.json"), ErrorCode::kNotFound,
                     read_text_file("/nonexistent/gpu.json").error().message());
}

TEST(LlmCostModel, WeightsMustFit) {
  JOULE_EXPECT_THROW_MESSAGE(
      model_of("a100-40gb", "llama-3-70b", 2), ErrorCode::kInvalidArgument,
      "llama-3-70b's weights (141.1 GB) do not fit 2 × a100-40gb (36 GB usable each): use a "
      "tensor parallel degree of at least 4");
  JOULE_EXPECT_THROW_MESSAGE(model_of("h100", "llama-3-8b", 0), ErrorCode::kInvalidArgument,
                             "tensor parallel degree must be in [1, 64], got 0");
  EXPECT_GT(model_of("a100-40gb", "llama-3-70b", 8).kv_cache_tokens(), 0);
}

TEST(LlmCostModel, DecodeIsMemoryBoundAndPrefillComputeBound) {
  const LlmCostModel cost = model_of("h100", "llama-3-8b", 1);
  const IterationBatch decode = decode_batch(8, 1000);
  const IterationBatch prefill = prefill_batch(4096);
  const IterationCost decode_top = cost.at_clock(decode, 1980);
  const IterationCost decode_half = cost.at_clock(decode, 990);
  const IterationCost prefill_top = cost.at_clock(prefill, 1980);
  const IterationCost prefill_half = cost.at_clock(prefill, 990);
  // Decode barely slows at half the clock; prefill takes twice as long.
  EXPECT_LT(decode_half.time_s / decode_top.time_s, 1.05);
  EXPECT_NEAR(prefill_half.time_s / prefill_top.time_s, 2.0, 0.01);
  // …and decode draws far less power at the lower clock: the energy to save.
  EXPECT_LT(decode_half.power_w * decode_half.time_s, 0.75 * decode_top.power_w * decode_top.time_s);
  // Compute dominates decode at large batches and low clocks.
  const IterationCost big_batch_low = cost.at_clock(decode_batch(256, 500), 600);
  EXPECT_GT(big_batch_low.compute_s, big_batch_low.memory_s);
  // Clocks outside the range are clamped; the supported list is the NVML-like one.
  EXPECT_DOUBLE_EQ(cost.at_clock(decode, 5000).clock_mhz, 1980);
  const std::vector<uint32_t> clocks = cost.supported_clocks_mhz();
  EXPECT_EQ(clocks.front(), 1980u);
  EXPECT_EQ(clocks.back(), 345u);
  EXPECT_EQ(clocks[1], 1965u);
  EXPECT_EQ(cost.at_clock(IterationBatch{}, 1980).time_s, 0);
}

TEST(LlmCostModel, PowerLimitFallbackLowersTheClock) {
  const LlmCostModel cost = model_of("h100", "llama-3-8b", 1);
  const IterationBatch prefill = prefill_batch(4096);
  const IterationCost capped = cost.at_power_limit(prefill, 400);
  EXPECT_LE(capped.power_w, 400);
  EXPECT_LT(capped.clock_mhz, 1980);
  // One clock step higher would exceed the limit.
  EXPECT_GT(cost.at_clock(prefill, capped.clock_mhz + 15).power_w, 400);
  // A limit nothing meets: the lowest clock.
  EXPECT_DOUBLE_EQ(cost.at_power_limit(prefill, 50).clock_mhz, 345);
  // An SM clock lock below the limit's clock wins.
  EXPECT_DOUBLE_EQ(cost.at_power_limit(prefill, 700, 1200).clock_mhz, 1200);
}

// The model against Splitwise's measured Llama-2-70B (TP 2) iterations on DGX-A100 and DGX-H100
// (github.com/Mutinifni/splitwise-sim data/perf_model.csv; Patel et al., ISCA 2024): decode iteration time
// by batch size (prompt 512, so a context of ~576 mid-generation) and prefill time by prompt length. The
// errors bounded here are the ones docs/inference.md states.
TEST(LlmCostModel, MatchesSplitwiseMeasurements) {
  struct Point {
    const char* gpu;
    int decode_batch;  // 0: a prefill point
    int64_t prompt_tokens;
    double measured_ms;
    double max_error;
  };
  const Point points[] = {
      {"a100-80gb", 1, 0, 54.9, 0.02},  {"a100-80gb", 8, 0, 61.6, 0.12},   {"a100-80gb", 32, 0, 72.2, 0.22},
      {"a100-80gb", 0, 512, 196, 0.12}, {"a100-80gb", 0, 2048, 687, 0.05}, {"a100-80gb", 0, 8192, 2990, 0.02},
      {"h100", 1, 0, 37.0, 0.02},       {"h100", 8, 0, 40.4, 0.09},        {"h100", 32, 0, 52.3, 0.28},
      {"h100", 0, 512, 84, 0.07},       {"h100", 0, 2048, 307, 0.05},      {"h100", 0, 8192, 1339, 0.02},
  };
  for (const Point& point : points) {
    const LlmCostModel cost = model_of(point.gpu, "llama-2-70b", 2);
    const IterationBatch batch =
        point.decode_batch > 0 ? decode_batch(point.decode_batch, 576) : prefill_batch(point.prompt_tokens);
    const double model_ms = cost.at_clock(batch, cost.gpu().max_sm_clock_mhz).time_s * 1e3;
    EXPECT_NEAR(model_ms / point.measured_ms, 1.0, point.max_error)
        << point.gpu << " batch " << point.decode_batch << " prompt " << point.prompt_tokens << ": model "
        << model_ms << " ms, measured " << point.measured_ms << " ms";
  }
  // Power: Splitwise's per-GPU power model puts prefill at the TDP and decode at 250 W (A100) / 380 W (H100).
  const LlmCostModel a100 = model_of("a100-80gb", "llama-2-70b", 2);
  const LlmCostModel h100 = model_of("h100", "llama-2-70b", 2);
  EXPECT_NEAR(a100.at_power_limit(prefill_batch(2048), 400).power_w, 400, 10);
  EXPECT_NEAR(h100.at_power_limit(prefill_batch(2048), 700).power_w, 700, 15);
  EXPECT_NEAR(a100.at_clock(decode_batch(16, 576), 1410).power_w, 250, 15);
  EXPECT_NEAR(h100.at_clock(decode_batch(16, 576), 1980).power_w, 380, 25);
}

TEST(LlmDevice, EnergyCounterIntegratesTheIterations) {
  LlmDevice device(*find_llm_gpu("a100-80gb").value(), *find_llm_model("llama-3-70b").value(), 4);
  ASSERT_EQ(device.gpus().size(), 4u);
  const auto energy_mj = [&] {
    double total = 0;
    for (auto* gpu : device.gpus())
      total += gpu->exact_energy_mj();
    return total;
  };
  IterationBatch batch = decode_batch(32, 800);
  batch.add_prefill(1000, 0);
  const IterationCost first = device.run_iteration(batch);
  EXPECT_NEAR(energy_mj() / 1e3, first.energy_j(4), 1e-6);
  EXPECT_NEAR(device.now_s(), first.time_s, 1e-12);
  // Idle: each GPU at the datasheet idle power.
  device.idle_until(device.now_s() + 2.0);
  EXPECT_NEAR(energy_mj() / 1e3, first.energy_j(4) + 4 * 63 * 2.0, 1e-6);
  // A clock locked through the device layer (and restored by its guard) applies to the next iteration.
  {
    device::SettingsGuard guard({.owner = "test", .restore_on_signals = false});
    for (auto* gpu : device.gpus())
      ASSERT_TRUE(guard.lock_sm_clocks(*gpu, 900, 900));
    const IterationCost locked = device.run_iteration(batch);
    EXPECT_DOUBLE_EQ(locked.clock_mhz, 900);
    EXPECT_GT(locked.time_s, first.time_s);
  }
  for (auto* gpu : device.gpus()) {
    const auto log = gpu->settings_log();
    ASSERT_EQ(log.size(), 2u);
    EXPECT_EQ(log.back().setting, "sm_clocks_reset");
  }
  EXPECT_DOUBLE_EQ(device.run_iteration(batch).clock_mhz, 1410);
}

}  // namespace
}  // namespace joule::sim
