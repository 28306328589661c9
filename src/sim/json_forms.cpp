// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/json_forms.hpp"

namespace joule::sim {

nlohmann::ordered_json to_json(const Job& job) {
  return {{"dataset", job.dataset},       {"network", job.network},
          {"optimizer", job.optimizer},   {"target_metric", job.target_metric},
          {"max_epochs", job.max_epochs}, {"default_batch_size", job.default_batch_size}};
}

nlohmann::ordered_json to_json(const FixedConfiguration& configuration) {
  return {{"batch_size", configuration.batch_size},
          {"power_limit_w", configuration.power_limit_w},
          {"energy_j", configuration.energy_j},
          {"time_s", configuration.time_s},
          {"cost", configuration.cost},
          {"reach_rate", configuration.reach_rate}};
}

nlohmann::ordered_json simulation_result_json(const std::string& gpu, const SimulationResult& result,
                                              const SimulationOptions& options) {
  nlohmann::ordered_json tries = nlohmann::ordered_json::array();
  for (const auto& attempt : result.tries) {
    tries.push_back({{"recurrence", attempt.recurrence},
                     {"attempt", attempt.attempt},
                     {"batch_size", attempt.batch_size},
                     {"power_limit_w", attempt.power_limit_w},
                     {"energy_j", attempt.energy_j},
                     {"time_s", attempt.time_s},
                     {"reached", attempt.reached},
                     {"cost", attempt.cost}});
  }
  nlohmann::ordered_json configurations = nlohmann::ordered_json::array();
  for (const auto& configuration : result.configurations) {
    configurations.push_back(to_json(configuration));
  }
  return {{"gpu", gpu},
          {"eta", options.eta},
          {"beta", options.beta},
          {"seed", options.seed},
          {"job", to_json(result.job)},
          {"recurrences", result.recurrences},
          {"max_power_w", result.max_power_w},
          {"tries", tries},
          {"optimizer",
           {{"energy_j", result.optimizer.energy_j},
            {"time_s", result.optimizer.time_s},
            {"cost", result.optimizer.cost}}},
          {"baseline", to_json(result.baseline)},
          {"oracle", result.oracle ? to_json(*result.oracle) : nlohmann::ordered_json(nullptr)},
          {"configurations", configurations}};
}

nlohmann::ordered_json to_json(const LlmGpuSpec& gpu) {
  return {{"key", gpu.key},
          {"name", gpu.name},
          {"peak_bf16_flops", gpu.peak_bf16_flops},
          {"hbm_bandwidth_bps", gpu.hbm_bandwidth_bps},
          {"memory_bytes", gpu.memory_bytes},
          {"nvlink_bandwidth_bps", gpu.nvlink_bandwidth_bps},
          {"min_sm_clock_mhz", gpu.min_sm_clock_mhz},
          {"max_sm_clock_mhz", gpu.max_sm_clock_mhz},
          {"sm_clock_step_mhz", gpu.sm_clock_step_mhz},
          {"tdp_w", gpu.tdp_w},
          {"min_power_limit_w", gpu.min_power_limit_w},
          {"idle_power_w", gpu.idle_power_w},
          {"compute_efficiency", gpu.compute_efficiency},
          {"memory_efficiency", gpu.memory_efficiency},
          {"sm_power_w", gpu.sm_power_w},
          {"sm_busy_share", gpu.sm_busy_share},
          {"memory_power_w", gpu.memory_power_w},
          {"iteration_overhead_s", gpu.iteration_overhead_s},
          {"source", gpu.source}};
}

nlohmann::ordered_json to_json(const LlmModelSpec& model) {
  return {{"key", model.key},
          {"name", model.name},
          {"layers", model.layers},
          {"hidden_size", model.hidden_size},
          {"attention_heads", model.attention_heads},
          {"kv_heads", model.kv_heads},
          {"intermediate_size", model.intermediate_size},
          {"vocab_size", model.vocab_size},
          {"parameters", model.parameters},
          {"bytes_per_parameter", model.bytes_per_parameter},
          {"default_tensor_parallel", model.default_tensor_parallel},
          {"source", model.source}};
}

nlohmann::ordered_json to_json(const IterationCost& cost, int tensor_parallel) {
  return {{"time_s", cost.time_s},
          {"power_w", cost.power_w},
          {"energy_j", cost.energy_j(tensor_parallel)},
          {"clock_mhz", cost.clock_mhz},
          {"compute_s", cost.compute_s},
          {"memory_s", cost.memory_s},
          {"comm_s", cost.comm_s}};
}

}  // namespace joule::sim
