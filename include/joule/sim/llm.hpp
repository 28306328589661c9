// SPDX-License-Identifier: Apache-2.0
// joule/sim/llm.hpp — how long one iteration of LLM serving takes on a GPU, and what power it draws, as a
// function of the batch and the SM clock: a roofline model of prefill (compute-bound: time ∝ 1/clock) and
// decode (memory-bound: time flat in the clock until compute dominates), with power following clock and
// utilisation. Every constant's source is in docs/inference.md.
//
//   const LlmGpuSpec& gpu = *find_llm_gpu("h100").value();
//   const LlmModelSpec& model = *find_llm_model("llama-3-8b").value();
//   LlmCostModel cost(gpu, model, /*tensor_parallel=*/1);
//   IterationBatch batch;
//   batch.add_decode(/*context_tokens=*/1200);
//   batch.add_prefill(/*tokens=*/512, /*context_before=*/0);
//   IterationCost at_1410 = cost.at_clock(batch, 1410);   // time_s, power_w per GPU, …
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::sim {

/// A GPU as the serving model sees it. Datasheet values unless marked fitted (see docs/inference.md).
struct LlmGpuSpec {
  std::string key;                  ///< "h100", "a100-80gb", …: what --gpu takes
  std::string name;                 ///< the device name reported, e.g. "NVIDIA H100 80GB HBM3"
  double peak_bf16_flops = 0;       ///< dense BF16 tensor FLOP/s at the maximum SM clock
  double hbm_bandwidth_bps = 0;     ///< HBM bandwidth, bytes/s
  double memory_bytes = 0;          ///< HBM capacity, bytes
  double nvlink_bandwidth_bps = 0;  ///< NVLink bandwidth per GPU per direction, bytes/s (tensor parallel)
  uint32_t min_sm_clock_mhz = 0;    ///< lowest supported SM clock
  uint32_t max_sm_clock_mhz = 0;    ///< highest supported SM clock (the boost clock)
  uint32_t sm_clock_step_mhz = 15;
  double tdp_w = 0;              ///< the maximum (and default) power limit, W
  double min_power_limit_w = 0;  ///< the lowest power limit the driver accepts, W
  double idle_power_w = 0;       ///< power with nothing running, W
  // Fitted to published measurements (docs/inference.md says which):
  double compute_efficiency = 0.6;  ///< achieved share of peak FLOP/s in large matrix products (MFU)
  double memory_efficiency = 0.8;   ///< achieved share of HBM bandwidth in streaming reads (MBU)
  double sm_power_w = 0;            ///< SM power at the maximum clock, fully compute-bound, W
  double sm_busy_share = 0.35;      ///< share of sm_power_w drawn by a busy GPU whatever its compute load
  double memory_power_w = 0;        ///< HBM and memory-system power at full bandwidth, W
  double iteration_overhead_s = 0;  ///< fixed per-iteration time (kernel launches, scheduling), s
  std::string source;               ///< one line: where the figures come from
};

/// A decoder-only transformer as the serving model sees it (Llama-style: grouped-query attention, gated
/// MLP).
struct LlmModelSpec {
  std::string key;   ///< "llama-3-8b": what --model takes
  std::string name;  ///< "Meta-Llama-3-8B"
  int layers = 0;
  int hidden_size = 0;
  int attention_heads = 0;
  int kv_heads = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  double parameters = 0;            ///< total parameter count
  double bytes_per_parameter = 2;   ///< 2 for BF16/FP16 weights
  int default_tensor_parallel = 1;  ///< GPUs per replica when --tp is not given
  std::string source;

  /// @return the bytes of K and V cached per token (all layers), at bytes_per_parameter each.
  double kv_bytes_per_token() const;
  /// @return the parameters taking part in matrix products per token (every weight but the embedding).
  double matmul_parameters() const;
};

/// @return the built-in GPUs, in a stable order. @return the one called `key` (case-insensitive, also its
/// aliases "a100" = a100-80gb, "h100-sxm" = h100), or kNotFound listing the known ones.
const std::vector<LlmGpuSpec>& llm_gpus();
Result<const LlmGpuSpec*> find_llm_gpu(std::string_view key);
/// @return the built-in models; the one called `key` (case-insensitive), or kNotFound listing them.
const std::vector<LlmModelSpec>& llm_models();
Result<const LlmModelSpec*> find_llm_model(std::string_view key);

/// Parses a user-supplied GPU or model spec (a JSON object with the struct's field names; a "base" field
/// names a built-in to start from, so a file may give only what differs). @param source names the text in
/// errors. @return kParse / kInvalidArgument naming the field and what was expected.
Result<LlmGpuSpec> parse_llm_gpu_json(std::string_view text, const std::string& source);
Result<LlmModelSpec> parse_llm_model_json(std::string_view text, const std::string& source);
/// @return the built-in spec called `name_or_path`, or the spec in that JSON file if it ends in ".json".
Result<LlmGpuSpec> load_llm_gpu(std::string_view name_or_path);
Result<LlmModelSpec> load_llm_model(std::string_view name_or_path);

/// The work of one serving iteration (all requests in the batch), in sums the cost model needs. Add
/// requests one by one, or fill the sums directly.
struct IterationBatch {
  int64_t decode_requests = 0;         ///< requests generating one token each
  int64_t decode_context_tokens = 0;   ///< sum of their context lengths (KV entries read)
  int64_t prefill_tokens = 0;          ///< prompt tokens processed
  double prefill_attention_pairs = 0;  ///< sum over prompt tokens of the context each attends to
  int64_t prefill_context_tokens = 0;  ///< KV entries the prefill chunks read (context before + chunk)

  void add_decode(int64_t context_tokens);
  /// A prompt chunk of `tokens` tokens after `context_before` tokens already in the KV cache.
  void add_prefill(int64_t tokens, int64_t context_before);
  bool empty() const { return decode_requests == 0 && prefill_tokens == 0; }
  /// @return tokens processed: prefill tokens + decode requests.
  int64_t tokens() const { return prefill_tokens + decode_requests; }
};

/// One iteration on one GPU of the replica.
struct IterationCost {
  double time_s = 0;     ///< iteration time
  double power_w = 0;    ///< power of each GPU of the replica during it
  double compute_s = 0;  ///< the roofline's compute time (at the clock)
  double memory_s = 0;   ///< the roofline's memory time
  double comm_s = 0;     ///< tensor-parallel all-reduce time
  double clock_mhz = 0;  ///< the SM clock it ran at
  /// @return energy of the whole replica (all tensor-parallel GPUs), J.
  double energy_j(int tensor_parallel) const { return time_s * power_w * tensor_parallel; }
};

/// The serving cost model of one model replica on `tensor_parallel` GPUs of one kind.
///
/// Per GPU (weights and KV heads sharded over the tensor-parallel group):
///   compute_s = FLOPs / (peak · clock/max_clock · compute_efficiency), FLOPs = 2·matmul_parameters·tokens
///               + 4·layers·hidden·(attended context, summed over tokens), all / tp;
///   memory_s  = bytes / (hbm_bandwidth · memory_efficiency), bytes = weights + KV read + KV written, / tp;
///   comm_s    = 2 all-reduces per layer of tokens·hidden·2 bytes, ring over NVLink (0 without tp);
///   time_s    = max(compute_s, memory_s) + comm_s + iteration_overhead_s;
///   power_w   = idle + sm_power·(busy_share + (1 − busy_share)·compute_s/time_s)·(clock/max)³
///               + memory_power·memory_s/time_s, at most tdp.
/// Immutable and thread-safe; at_clock() costs a few dozen floating-point operations.
class LlmCostModel {
 public:
  /// @throws joule::Exception (kInvalidArgument) for tensor_parallel < 1, more than the model's KV heads,
  /// or weights that do not fit the group's memory (the message says how much is needed).
  LlmCostModel(LlmGpuSpec gpu, LlmModelSpec model, int tensor_parallel);

  const LlmGpuSpec& gpu() const { return gpu_; }
  const LlmModelSpec& model() const { return model_; }
  int tensor_parallel() const { return tensor_parallel_; }

  /// @return the iteration at SM clock `clock_mhz` (clamped to the GPU's range).
  IterationCost at_clock(const IterationBatch& batch, double clock_mhz) const;
  /// @return the iteration under a power limit with clocks unlocked (or capped at `max_clock_mhz`): the
  /// highest supported clock whose power stays within the limit (the lowest clock if none does).
  IterationCost at_power_limit(const IterationBatch& batch, double power_limit_w,
                               std::optional<double> max_clock_mhz = std::nullopt) const;
  /// @return the supported SM clocks, highest first.
  std::vector<uint32_t> supported_clocks_mhz() const;
  /// @return tokens that fit the KV cache of the group: (memory · kv_memory_share − weights) / KV bytes.
  int64_t kv_cache_tokens(double kv_memory_share = 0.9) const;

 private:
  LlmGpuSpec gpu_;
  LlmModelSpec model_;
  int tensor_parallel_;
  double matmul_flops_per_token_;    // per GPU
  double weight_bytes_;              // per GPU
  double kv_bytes_per_token_;        // per GPU
  double attention_flops_per_pair_;  // per GPU
  double comm_bytes_per_token_;      // per GPU, both all-reduces of all layers, ring factor included
};

/// The device::sim::GpuModel of a serving GPU (limits, clocks, idle power), for SimulatedGpu.
device::sim::GpuModel llm_gpu_model(const LlmGpuSpec& gpu);

/// One model replica on simulated GPUs (real device::sim::SimulatedGpu objects: energy counters, clock
/// locks, power limits, settings log) sharing one VirtualClock: what a serving loop with no GPU charges its
/// iterations to. run_iteration() runs the batch at whatever clock or power limit is set on GPU 0 (set the
/// same on all, e.g. through a SettingsGuard per GPU) and advances the clock by its time; idle_until()
/// idles.
///
/// **Thread-safety**: one serving loop calls run_iteration()/idle_until(); settings may be changed from
/// other threads; they apply to the next iteration.
class LlmDevice {
 public:
  /// @param index_base the framework index of GPU 0. @throws as LlmCostModel does.
  LlmDevice(const LlmGpuSpec& gpu, const LlmModelSpec& model, int tensor_parallel, int index_base = 0);
  ~LlmDevice();
  LlmDevice(const LlmDevice&) = delete;
  LlmDevice& operator=(const LlmDevice&) = delete;

  const LlmCostModel& cost_model() const { return cost_; }
  /// @return the replica's GPUs (tensor_parallel of them).
  std::vector<device::sim::SimulatedGpu*> gpus();
  VirtualClock& clock() { return *clock_; }
  /// @return the virtual time, s (starts at 0). Kept exactly in seconds; if the clock is advanced from
  /// outside, the device counts the time as idle.
  double now_s() const;

  /// Runs one iteration. @return its cost, as the GPUs ran it; an empty batch runs nothing and costs
  /// IterationCost{} (all zero).
  IterationCost run_iteration(const IterationBatch& batch);
  /// Idles until `time_s` (nothing if not later than now).
  void idle_until(double time_s);

 private:
  void catch_up();

  LlmCostModel cost_;
  std::unique_ptr<device::sim::GpuModel> model_;
  std::shared_ptr<VirtualClock> clock_;
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus_;
  double now_s_ = 0;
};

}  // namespace joule::sim
