// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/llm_replica.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/probe/probe.hpp"

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

namespace joule::sim {
namespace {

// data/cards/sim-{h100,a100-80gb,a100-40gb}.json are what `joule --sim KEY probe` made of the serving GPUs
// (llm_gpu_devices): probing them again gives the same frontiers within 3%, and the cards carry the identity
// `joule infer replay --card` checks (llm_gpu_identity).
TEST(ServingCards, RegeneratingMatchesWithinTolerance) {
  const auto cards = std::filesystem::path(JOULE_SOURCE_DIR) / "data/cards";
  for (const char* key : {"h100", "a100-80gb", "a100-40gb"}) {
    auto devices = llm_gpu_devices(key, std::make_shared<VirtualClock>());
    ASSERT_TRUE(devices) << devices.error().message();
    const LlmGpuSpec& gpu = *find_llm_gpu(key).value();
    const auto shipped =
        probe::read_card((cards / fmt::format("sim-{}.json", key)).string(), llm_gpu_identity(gpu));
    ASSERT_TRUE(shipped) << shipped.error().message();
    EXPECT_FALSE(shipped->quick);
    EXPECT_EQ(shipped->device.model, gpu.name);
    const auto runner = probe::make_simulated_runner(*devices->gpus.front());
    ASSERT_NE(runner, nullptr);
    probe::ProbeOptions options;
    options.counter_window_s = 0.05;  // the counter's figures are not compared
    const auto fresh = probe::probe_gpu(*devices->gpus.front(), *devices->clock, runner.get(), options);
    ASSERT_TRUE(fresh) << fresh.error().message();
    ASSERT_EQ(fresh->frontiers.size(), shipped->frontiers.size()) << key;
    for (size_t i = 0; i < fresh->frontiers.size(); ++i) {
      const auto& now = fresh->frontiers[i];
      const auto& then = shipped->frontiers[i];
      ASSERT_EQ(now.points.size(), then.points.size()) << key << " " << now.kernel << " " << now.knob;
      for (size_t j = 0; j < now.points.size(); ++j) {
        EXPECT_EQ(now.points[j].knob_value, then.points[j].knob_value);
        EXPECT_NEAR(now.points[j].time_per_iteration_s, then.points[j].time_per_iteration_s,
                    0.03 * then.points[j].time_per_iteration_s)
            << key << " " << now.kernel << " " << now.knob;
        EXPECT_NEAR(now.points[j].energy_per_iteration_j, then.points[j].energy_per_iteration_j,
                    0.03 * then.points[j].energy_per_iteration_j)
            << key << " " << now.kernel << " " << now.knob;
      }
    }
  }
  const auto unknown = llm_gpu_devices("v100", std::make_shared<VirtualClock>());
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace joule::sim
