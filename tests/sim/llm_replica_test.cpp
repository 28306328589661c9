// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/llm_replica.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::sim {
namespace {

// The replica's DeviceSet reaches the simulated GPUs (energy, clock locks, power limits), runs on the
// replica's virtual clock and keeps the replica alive.
TEST(LlmReplica, ItsDeviceSetReachesTheSimulatedGpus) {
  LlmReplica replica = make_llm_replica(std::make_shared<LlmDevice>(
      *find_llm_gpu("a100-80gb").value(), *find_llm_model("llama-3-70b").value(), 2, /*index_base=*/3));
  ASSERT_EQ(replica.devices->gpus.size(), 2u);
  EXPECT_EQ(replica.devices->gpus[1]->info().index, 4);
  ASSERT_EQ(replica.devices->reports.size(), 1u);
  EXPECT_EQ(replica.devices->reports[0].backend, "sim");
  EXPECT_EQ(replica.devices->reports[0].detail,
            "LLM serving replica: 2 × NVIDIA A100-SXM4-80GB, Meta-Llama-3-70B");
  const std::weak_ptr<LlmDevice> alive = replica.device;
  std::shared_ptr<device::DeviceSet> devices = replica.devices;
  std::shared_ptr<LlmDevice> device = std::move(replica.device);
  replica = {};
  const IterationBatch batch = make_iteration_batch({800, 800}, {{512, 0}}).value();
  const IterationCost cost = device->run_iteration(batch);
  EXPECT_NEAR(
      static_cast<double>(devices->gpus[0]->energy_mj().value() + devices->gpus[1]->energy_mj().value()),
      cost.energy_j(2) * 1e3, 2.0);  // whole millijoules
  EXPECT_NEAR(to_seconds(devices->clock->now()), device->now_s(), 1e-9);
  ASSERT_TRUE(devices->gpus[0]->lock_sm_clocks(900, 900));
  EXPECT_DOUBLE_EQ(device->run_iteration(batch).clock_mhz, 900);
  EXPECT_EQ(device->gpus()[0]->settings_log().back().setting, "sm_clocks_locked_mhz");
  device.reset();
  EXPECT_FALSE(alive.expired());  // the set's GPUs hold it
  devices.reset();
  EXPECT_TRUE(alive.expired());
  JOULE_EXPECT_THROW_MESSAGE(make_llm_replica(nullptr), ErrorCode::kInvalidArgument,
                             "make_llm_replica: no device");
}

TEST(LlmReplica, IterationBatchIsChecked) {
  const IterationBatch batch = make_iteration_batch({100, 200}, {{50, 10}}).value();
  EXPECT_EQ(batch.decode_requests, 2);
  EXPECT_EQ(batch.decode_context_tokens, 300);
  EXPECT_EQ(batch.prefill_tokens, 50);
  EXPECT_EQ(batch.prefill_context_tokens, 60);
  EXPECT_TRUE(make_iteration_batch({}, {}).value().empty());
  JOULE_EXPECT_ERROR(make_iteration_batch({5, 0}, {}), ErrorCode::kInvalidArgument,
                     "decode_contexts[1] must be ≥ 1 (the tokens in the request's context), got 0");
  JOULE_EXPECT_ERROR(make_iteration_batch({}, {{0, 0}}), ErrorCode::kInvalidArgument,
                     "prefill[0] tokens must be ≥ 1, got 0");
  JOULE_EXPECT_ERROR(make_iteration_batch({}, {{1, 0}, {1, -1}}), ErrorCode::kInvalidArgument,
                     "prefill[1] context_before must be ≥ 0, got -1");
}

}  // namespace
}  // namespace joule::sim
