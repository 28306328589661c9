// SPDX-License-Identifier: Apache-2.0
// joule/sim/llm_replica.hpp — an LLM serving replica on simulated GPUs (sim::LlmDevice) seen as a
// device::DeviceSet, so that what takes real GPUs (EnergyMonitor, PowerSampler, SettingsGuard) takes it; and
// the checked batch of one serving iteration.
//
//   LlmReplica replica = make_llm_replica(std::make_shared<LlmDevice>(gpu, model, /*tensor_parallel=*/2));
//   replica.device->run_iteration(make_iteration_batch({1200, 800}, {{512, 0}}).value());
//   uint64_t mj = replica.devices->gpus[0]->energy_mj().value();   // at replica.devices->clock's now
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/discovery.hpp"
#include "joule/probe/card.hpp"
#include "joule/sim/llm.hpp"

namespace joule::sim {

/// A replica and its GPUs as a DeviceSet.
struct LlmReplica {
  std::shared_ptr<LlmDevice> device;
  /// device->gpus() as device::Gpu objects (every call reaches the simulated GPU; each keeps `device`
  /// alive), on the replica's virtual clock, with one "sim" backend report. Do not advance its clock: time
  /// moves through run_iteration() and idle_until().
  std::shared_ptr<device::DeviceSet> devices;
};

/// @return the replica of `device` (not null). @throws joule::Exception (kInvalidArgument) for a null device.
LlmReplica make_llm_replica(std::shared_ptr<LlmDevice> device);

/// @return the built-in serving GPU called `key` (find_llm_gpu()) as one idle device::sim::SimulatedGpu of
/// its llm_gpu_model() on `clock`, alone in a DeviceSet: what `joule --sim h100 probe` probes, so that the
/// probe's own kernels run as the GPU's workloads (its simulated runner) and its card is made as any
/// simulated GPU's, from the GPU's limits, clocks and idle power, not from the serving cost model.
/// kNotFound as find_llm_gpu(); kInvalidArgument for a null clock.
Result<device::DeviceSet> llm_gpu_devices(std::string_view key, std::shared_ptr<Clock> clock);

/// @return the identity a card for the serving GPU `gpu` must carry (probe::read_card checks it): the
/// GPU's name, backend "sim" and driver "sim" (the simulated kernel runner's), as `joule --sim KEY probe`
/// writes it.
probe::DeviceIdentity llm_gpu_identity(const LlmGpuSpec& gpu);

/// @return the batch of one iteration: a decode step per context length in `decode_contexts` (the tokens in
/// the request's KV cache, ≥ 1) and a prompt chunk per (tokens ≥ 1, context_before ≥ 0) in `prefill`;
/// kInvalidArgument naming the first bad entry ("decode_contexts[2] must be ≥ 1 …").
Result<IterationBatch> make_iteration_batch(const std::vector<int64_t>& decode_contexts,
                                            const std::vector<std::pair<int64_t, int64_t>>& prefill);

}  // namespace joule::sim
