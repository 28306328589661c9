// SPDX-License-Identifier: Apache-2.0
// The JSON forms of the simulators' inputs and results (joule/sim/json_forms.hpp).
#include "joule/sim/json_forms.hpp"

#include <limits>

#include <gtest/gtest.h>

namespace joule::sim {
namespace {

std::vector<std::string> sim_json_keys(const nlohmann::ordered_json& json) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) {
    keys.push_back(key);
  }
  return keys;
}

TEST(SimJsonForms, SimulationResult) {
  SimulationResult result;
  result.job = Job{.dataset = "cifar100",
                   .network = "shufflenet",
                   .optimizer = "adadelta",
                   .target_metric = 0.6,
                   .max_epochs = 100,
                   .default_batch_size = 1024};
  result.recurrences = 2;
  result.max_power_w = 250;
  result.tries.push_back({.recurrence = 1,
                          .attempt = 1,
                          .batch_size = 128,
                          .power_limit_w = 200,
                          .energy_j = 4,
                          .time_s = 5,
                          .reached = true,
                          .cost = 6});
  result.baseline = FixedConfiguration{
      .batch_size = 1024, .power_limit_w = 250, .energy_j = 1, .time_s = 2, .cost = 3, .reach_rate = 1};
  result.configurations = {result.baseline};
  SimulationOptions options;
  options.beta = std::numeric_limits<double>::infinity();
  const auto json = simulation_result_json("v100", result, options);
  EXPECT_EQ(sim_json_keys(json),
            (std::vector<std::string>{"gpu", "eta", "beta", "seed", "job", "recurrences", "max_power_w",
                                      "tries", "optimizer", "baseline", "oracle", "configurations"}));
  EXPECT_TRUE(json["seed"].is_number_unsigned());
  EXPECT_TRUE(std::isinf(json["beta"].get<double>()));
  EXPECT_TRUE(json["oracle"].is_null());
  EXPECT_EQ(sim_json_keys(json["job"]),
            (std::vector<std::string>{"dataset", "network", "optimizer", "target_metric", "max_epochs",
                                      "default_batch_size"}));
  EXPECT_EQ(sim_json_keys(json["tries"][0]),
            (std::vector<std::string>{"recurrence", "attempt", "batch_size", "power_limit_w", "energy_j",
                                      "time_s", "reached", "cost"}));
  EXPECT_EQ(sim_json_keys(json["optimizer"]), (std::vector<std::string>{"energy_j", "time_s", "cost"}));
  EXPECT_EQ(
      sim_json_keys(json["baseline"]),
      (std::vector<std::string>{"batch_size", "power_limit_w", "energy_j", "time_s", "cost", "reach_rate"}));
  EXPECT_EQ(json["configurations"].size(), 1U);
  result.oracle = result.baseline;
  EXPECT_EQ(simulation_result_json("v100", result, options)["oracle"]["batch_size"], 1024);
}

TEST(SimJsonForms, LlmSpecsAndCost) {
  const auto& gpu = llm_gpus().front();
  const auto gpu_json = to_json(gpu);
  EXPECT_EQ(gpu_json.size(), 19U);
  EXPECT_EQ(gpu_json.begin().key(), "key");
  EXPECT_EQ(gpu_json["tdp_w"], gpu.tdp_w);
  EXPECT_EQ(gpu_json["source"], gpu.source);
  const auto& model = llm_models().front();
  const auto model_json = to_json(model);
  EXPECT_EQ(model_json.size(), 12U);
  EXPECT_EQ(model_json["layers"], model.layers);
  EXPECT_EQ(model_json["default_tensor_parallel"], model.default_tensor_parallel);

  const auto cost = to_json(
      IterationCost{
          .time_s = 0.5, .power_w = 100, .compute_s = 0.1, .memory_s = 0.2, .comm_s = 0.3, .clock_mhz = 1410},
      4);
  EXPECT_EQ(sim_json_keys(cost), (std::vector<std::string>{"time_s", "power_w", "energy_j", "clock_mhz",
                                                           "compute_s", "memory_s", "comm_s"}));
  EXPECT_EQ(cost["energy_j"], 200.0);
}

}  // namespace
}  // namespace joule::sim
