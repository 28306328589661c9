// SPDX-License-Identifier: Apache-2.0
// `joule counters`: one JSON snapshot of the GPUs' and CPUs' cumulative energy counters with the wall-clock
// time, so that two snapshots taken by different processes (a Slurm prolog and epilog, packaging/slurm/) give
// the energy used in between.
#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace counters_detail {

int run_counters(const GlobalOptions& global, const std::string& gpus_text) {
  std::optional<std::vector<int>> indices;
  if (!gpus_text.empty()) {
    indices = value_or_throw(parse_index_list(gpus_text, "--gpus"));
  }
  const device::DeviceSet devices = open_devices(global, true, true);
  const auto gpus = value_or_throw(devices.select_gpus(indices));
  if (gpus.empty()) {
    throw Exception(ErrorCode::kNotFound, fmt::format("counters: no GPU: {}", devices.why_no_gpus()));
  }
  nlohmann::json out;
  // Wall-clock time, not the device clock: the two snapshots come from different processes.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  out["time_unix_s"] = std::chrono::duration<double>(now).count();
  out["gpus"] = nlohmann::json::array();
  for (device::Gpu* gpu : gpus) {
    const auto& info = gpu->info();
    nlohmann::json entry = {{"index", info.index},
                            {"physical_index", info.physical_index},
                            {"uuid", info.uuid},
                            {"name", info.name},
                            {"backend", info.backend},
                            {"energy_j", nullptr},
                            {"energy_counter", info.has_energy_counter}};
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
  for (const auto& cpu : devices.cpus) {
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
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace counters_detail

void add_counters_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto gpus = std::make_shared<std::string>();
  auto* command = app.add_subcommand(
      "counters",
      "Print the GPUs' and CPUs' cumulative energy counters as JSON, with the time (the Slurm prolog and "
      "epilog in packaging/slurm/ subtract two)");
  command->add_option("--gpus", *gpus, "GPU indices, e.g. 0,1 (default: all visible)")->option_text("LIST");
  set_examples(*command, {"joule counters --gpus 0,1", "joule --daemon /run/joule/joule.sock counters"});
  command->callback(
      [&global, &exit_code, gpus] { exit_code = counters_detail::run_counters(global, *gpus); });
}

}  // namespace joule::cli
