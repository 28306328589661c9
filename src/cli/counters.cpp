// SPDX-License-Identifier: Apache-2.0
// `joule counters`: one JSON snapshot of the GPUs' and CPUs' cumulative energy counters with the wall-clock
// time, so that two snapshots taken by different processes (a Slurm prolog and epilog, packaging/slurm/) give
// the energy used in between.
#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/measure/counter_snapshot.hpp"

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
  std::vector<device::Cpu*> cpus;
  for (const auto& cpu : devices.cpus) {
    cpus.push_back(cpu.get());
  }
  // Wall-clock time, not the device clock: the two snapshots come from different processes.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::cout << measure::counter_snapshot_json(gpus, cpus, std::chrono::duration<double>(now).count()).dump(2)
            << "\n";
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
