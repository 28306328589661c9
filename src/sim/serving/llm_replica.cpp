// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/llm_replica.hpp"

#include <fmt/format.h>

namespace joule::sim {

namespace {

// One GPU of an LlmDevice seen through the Gpu interface, so that the replica's GPUs form a DeviceSet
// (Monitor, PowerSampler) and each call reaches the simulated GPU. Keeps the LlmDevice alive.
class LlmReplicaGpu final : public device::Gpu {
 public:
  LlmReplicaGpu(std::shared_ptr<LlmDevice> owner, device::sim::SimulatedGpu* target)
      : Gpu(target->info()), owner_(std::move(owner)), target_(target) {}

 protected:
  Result<uint64_t> do_energy_mj() override { return target_->energy_mj(); }
  Result<uint32_t> do_power_mw() override { return target_->power_mw(); }
  Result<device::PowerLimitConstraints> do_power_limit_constraints() override {
    return target_->power_limit_constraints();
  }
  Result<uint32_t> do_power_limit_mw() override { return target_->power_limit_mw(); }
  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    return target_->set_power_limit_mw(power_limit_mw);
  }
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    return target_->supported_sm_clocks_mhz();
  }
  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    return target_->lock_sm_clocks(min_mhz, max_mhz);
  }
  Result<void> do_reset_sm_clocks() override { return target_->reset_sm_clocks(); }

 private:
  std::shared_ptr<LlmDevice> owner_;
  device::sim::SimulatedGpu* target_;
};

// An idle serving GPU's workload until the probe gives it its kernels: what it draws idle.
class LlmIdleWorkload final : public device::sim::Workload {
 public:
  explicit LlmIdleWorkload(const device::sim::GpuModel& model) : model_(model) {}
  std::string description() const override { return "idle"; }
  device::sim::OperatingPoint at(double /*power_limit_w*/,
                                 std::optional<double> /*locked_sm_clock_mhz*/) const override {
    return {model_.idle_power_w, 1e-3, static_cast<double>(model_.min_sm_clock_mhz)};
  }

 private:
  const device::sim::GpuModel& model_;
};

// The device::sim::GpuModel of every built-in serving GPU, alive for the program (SimulatedGpu keeps a
// reference), in llm_gpus()' order.
const std::vector<device::sim::GpuModel>& llm_device_models() {
  static const std::vector<device::sim::GpuModel> models = [] {
    std::vector<device::sim::GpuModel> list;
    for (const LlmGpuSpec& gpu : llm_gpus()) {
      list.push_back(llm_gpu_model(gpu));
    }
    return list;
  }();
  return models;
}

}  // namespace

Result<device::DeviceSet> llm_gpu_devices(std::string_view key, std::shared_ptr<Clock> clock) {
  if (!clock) {
    return fail(ErrorCode::kInvalidArgument, "llm_gpu_devices: no clock");
  }
  const LlmGpuSpec* gpu = JOULE_TRY(find_llm_gpu(key));
  const auto index = static_cast<size_t>(gpu - llm_gpus().data());
  const device::sim::GpuModel& model = llm_device_models().at(index);
  device::DeviceSet set;
  set.clock = std::move(clock);
  auto simulated = std::make_unique<device::sim::SimulatedGpu>(
      model, std::make_shared<LlmIdleWorkload>(model), set.clock, /*index=*/0);
  simulated->set_busy(false);
  set.gpus.push_back(std::move(simulated));
  set.reports.push_back(
      {.backend = "sim",
       .kind = "gpu",
       .devices = 1,
       .ok = true,
       .detail = fmt::format("serving GPU {} (joule's serving model's limits and clocks)", gpu->name)});
  return set;
}

probe::DeviceIdentity llm_gpu_identity(const LlmGpuSpec& gpu) {
  return {.model = gpu.name, .backend = "sim", .driver_version = "sim", .uuid = ""};
}

LlmReplica make_llm_replica(std::shared_ptr<LlmDevice> device) {
  if (!device) {
    throw Exception(ErrorCode::kInvalidArgument, "make_llm_replica: no device");
  }
  auto set = std::make_shared<device::DeviceSet>();
  for (device::sim::SimulatedGpu* simulated : device->gpus()) {
    set->gpus.push_back(std::make_unique<LlmReplicaGpu>(device, simulated));
  }
  // The set's clock is the replica's virtual clock, kept alive by the replica.
  set->clock = std::shared_ptr<Clock>(device, &device->clock());
  const LlmCostModel& cost = device->cost_model();
  set->reports.push_back({.backend = "sim",
                          .kind = "gpu",
                          .devices = set->gpus.size(),
                          .ok = true,
                          .detail = fmt::format("LLM serving replica: {} × {}, {}", cost.tensor_parallel(),
                                                cost.gpu().name, cost.model().name)});
  return {std::move(device), std::move(set)};
}

Result<IterationBatch> make_iteration_batch(const std::vector<int64_t>& decode_contexts,
                                            const std::vector<std::pair<int64_t, int64_t>>& prefill) {
  IterationBatch batch;
  for (size_t i = 0; i < decode_contexts.size(); ++i) {
    if (decode_contexts[i] < 1) {
      return fail(ErrorCode::kInvalidArgument,
                  "decode_contexts[{}] must be ≥ 1 (the tokens in the request's context), got {}", i,
                  decode_contexts[i]);
    }
    batch.add_decode(decode_contexts[i]);
  }
  for (size_t i = 0; i < prefill.size(); ++i) {
    const auto [tokens, context_before] = prefill[i];
    if (tokens < 1) {
      return fail(ErrorCode::kInvalidArgument, "prefill[{}] tokens must be ≥ 1, got {}", i, tokens);
    }
    if (context_before < 0) {
      return fail(ErrorCode::kInvalidArgument, "prefill[{}] context_before must be ≥ 0, got {}", i,
                  context_before);
    }
    batch.add_prefill(tokens, context_before);
  }
  return batch;
}

}  // namespace joule::sim
