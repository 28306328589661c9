// SPDX-License-Identifier: Apache-2.0
// joule/sim/json_forms.hpp — the JSON form of the simulators' inputs and results (a Zeus job, a fixed
// configuration, a whole simulation as joule.simulate returns it; a serving GPU, a model and one iteration's
// cost): the one form the Python binding hands out as dicts. Keys keep the order written here; units are in
// the key names.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "joule/sim/llm.hpp"
#include "joule/sim/simulator.hpp"
#include "joule/sim/trace.hpp"

namespace joule::sim {

/// @return {"dataset", "network", "optimizer", "target_metric", "max_epochs", "default_batch_size"}.
nlohmann::ordered_json to_json(const Job& job);

/// @return {"batch_size", "power_limit_w", "energy_j", "time_s", "cost", "reach_rate"}.
nlohmann::ordered_json to_json(const FixedConfiguration& configuration);

/// @return joule.simulate()'s result: {"gpu", "eta", "beta", "seed", "job", "recurrences", "max_power_w",
/// "tries": [{"recurrence", "attempt", "batch_size", "power_limit_w", "energy_j", "time_s", "reached",
/// "cost"}, …], "optimizer": {"energy_j", "time_s", "cost"}, "baseline", "oracle" (null without one),
/// "configurations"}. (`joule simulate --json` prints render_simulation_json's form instead.)
nlohmann::ordered_json simulation_result_json(const std::string& gpu, const SimulationResult& result,
                                              const SimulationOptions& options);

/// @return every field of the spec under its own name (units in the names: flops, bps, bytes, MHz, W, s),
/// then "source".
nlohmann::ordered_json to_json(const LlmGpuSpec& gpu);

/// @return every field of the spec under its own name, then "source".
nlohmann::ordered_json to_json(const LlmModelSpec& model);

/// @return {"time_s", "power_w" (per GPU), "energy_j" (the replica's: all `tensor_parallel` GPUs),
/// "clock_mhz", "compute_s", "memory_s", "comm_s"}.
nlohmann::ordered_json to_json(const IterationCost& cost, int tensor_parallel);

}  // namespace joule::sim
