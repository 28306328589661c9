// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/counter_snapshot.hpp"

#include <string>

#include "joule/device/nvml.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::measure {

nlohmann::json counter_snapshot_json(const std::vector<device::Gpu*>& gpus,
                                     const std::vector<device::Cpu*>& cpus, double time_unix_s) {
  using device::Cpu;
  using device::Gpu;
  nlohmann::json out;
  out["time_unix_s"] = time_unix_s;
  out["gpus"] = nlohmann::json::array();
  for (Gpu* gpu : gpus) {
    const auto& info = gpu->info();
    nlohmann::json entry = {{"index", info.index},
                            {"physical_index", info.physical_index},
                            {"uuid", info.uuid},
                            {"name", info.name},
                            {"backend", info.backend},
                            {"energy_j", nullptr},
                            {"energy_counter", info.has_energy_counter},
                            // A MIG instance's counter is its GPU's × its slice share: estimated, and said so.
                            {"energy_source", device::is_mig_uuid(info.uuid)
                                                  ? std::string(device::kMigEnergyMethod)
                                                  : std::string("counter")}};
    // The counter's origin is the driver's (driver load), so it is comparable across processes. A GPU
    // without one has no such figure: null, and why.
    if (const auto energy_mj = gpu->energy_mj()) {
      entry["energy_j"] = static_cast<double>(*energy_mj) / 1000.0;
    } else {
      entry["error"] = energy_mj.error().message();
    }
    out["gpus"].push_back(std::move(entry));
  }
  // RAPL counters wrap within minutes at full load. The daemon's are wrap-corrected over its whole life, so
  // two snapshots a job apart can be subtracted; a process's own are corrected only while it runs.
  out["cpus"] = nlohmann::json::array();
  for (Cpu* cpu : cpus) {
    const auto& info = cpu->info();
    nlohmann::json entry = {{"index", info.index},
                            {"name", info.name},
                            {"backend", info.backend},
                            {"wrap_corrected_across_processes", info.backend == "daemon"},
                            {"package_energy_j", nullptr},
                            {"dram_energy_j", nullptr},
                            {"package_counter_resets", nullptr},
                            {"dram_counter_resets", nullptr},
                            {"counter_reset", nullptr}};
    // With each reading, the counter resets seen before it: two snapshots subtract only if these are equal
    // (a reset is not a wrap: counted as one it was a range's worth of phantom energy).
    std::string last_reset;
    if (const auto package = cpu->package_reading()) {
      entry["package_energy_j"] = static_cast<double>(package->energy_mj) / 1000.0;
      entry["package_counter_resets"] = package->resets;
      last_reset = package->last_reset;
    } else {
      entry["error"] = package.error().message();
    }
    if (info.has_dram) {
      if (const auto dram = cpu->dram_reading()) {
        entry["dram_energy_j"] = static_cast<double>(dram->energy_mj) / 1000.0;
        entry["dram_counter_resets"] = dram->resets;
        if (last_reset.empty()) {
          last_reset = dram->last_reset;
        }
      } else {
        entry["error"] = dram.error().message();
      }
    }
    if (!last_reset.empty()) {
      entry["counter_reset"] = last_reset;
    }
    out["cpus"].push_back(std::move(entry));
  }
  return out;
}

}  // namespace joule::measure
