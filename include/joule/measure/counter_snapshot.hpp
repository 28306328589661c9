// SPDX-License-Identifier: Apache-2.0
// joule/measure/counter_snapshot.hpp — one snapshot of the GPUs' and CPUs' cumulative energy counters with
// the wall-clock time (`joule counters`): two snapshots taken by different processes (a Slurm prolog and
// epilog, packaging/slurm/) give the energy used in between.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"

namespace joule::measure {

/// Reads every counter once. @return {time_unix_s, gpus: [{index, physical_index, uuid, name, backend,
/// energy_j (J since the driver loaded, null without a counter, with "error"), energy_counter}], cpus:
/// [{index, name, backend, wrap_corrected_across_processes, package_energy_j, dram_energy_j,
/// package_counter_resets, dram_counter_resets, counter_reset}]}. Two snapshots subtract only where the
/// counter resets are equal (a reset is not a wrap). A counter that fails is null with its "error".
nlohmann::json counter_snapshot_json(const std::vector<device::Gpu*>& gpus,
                                     const std::vector<device::Cpu*>& cpus, double time_unix_s);

}  // namespace joule::measure
