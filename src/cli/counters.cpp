// SPDX-License-Identifier: Apache-2.0
// `joule counters`: one JSON snapshot of the GPUs' and CPUs' cumulative energy counters with the wall-clock
// time, so that two snapshots taken by different processes (a Slurm prolog and epilog, packaging/slurm/) give
// the energy used in between.
#include <chrono>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/device/daemon_client.hpp"
#include "joule/fleet/fleet_monitor.hpp"
#include "joule/measure/counter_snapshot.hpp"
#include "joule/measure/job_energy.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace counters_detail {

struct CountersFlags {
  std::string gpus;
  std::string nodes;
  std::string job;  // --job-energy: that job's estimated share of the GPUs it shared, from the daemon
  fleet::FleetOptions fleet;
};

// --nodes: every node's counters through its daemon, read at once (Slurm's controller prolog and epilog).
int run_counters_on_nodes(const GlobalOptions& global, const CountersFlags& flags) {
  if (!flags.gpus.empty() || global.sim || global.daemon) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        "counters --nodes: --gpus, --sim and --daemon do not apply: the nodes' daemons serve every "
        "GPU and CPU package they have");
  }
  const auto nodes = value_or_throw(fleet::parse_nodes(flags.nodes));
  // A node that cannot be reached is in the output with its error (and its devices empty), not a failure:
  // the epilog names it in the job file instead of writing nothing.
  std::cout << fleet::FleetMonitor::read_counters(nodes, flags.fleet).dump(2) << "\n";
  return 0;
}

// --job-energy JOB: the job's estimated share of each GPU it shared, as the daemon accounts it (the Slurm
// epilog writes it beside the counters' difference).
int run_job_energy(const GlobalOptions& global, const CountersFlags& flags) {
  value_or_throw(measure::validate_job_id(flags.job));
  if (!flags.gpus.empty() || !flags.nodes.empty() || global.sim) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "counters --job-energy: --gpus, --nodes and --sim do not apply: the daemon answers for "
                    "every GPU the job was sampled on");
  }
  const auto options = value_or_throw(discovery_options(global));
  if (!options.daemon_socket) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        "counters --job-energy: only joule daemon can tell a job's share of a shared GPU (it "
        "samples the GPUs' processes all along): give --daemon SOCKET or set JOULE_DAEMON_SOCKET");
  }
  const auto client = value_or_throw(device::DaemonClient::connect(*options.daemon_socket));
  const auto answer = value_or_throw(client->job_energy(flags.job));
  std::cout << device::daemon_protocol::job_energy_result(answer).dump(2) << "\n";
  return 0;
}

int run_counters(const GlobalOptions& global, const CountersFlags& flags) {
  if (!flags.job.empty()) {
    return run_job_energy(global, flags);
  }
  if (!flags.nodes.empty()) {
    return run_counters_on_nodes(global, flags);
  }
  refuse_node_flags_without_nodes(flags.fleet.connection, "counters");
  const std::string& gpus_text = flags.gpus;
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
  auto flags = std::make_shared<counters_detail::CountersFlags>();
  auto* command = app.add_subcommand(
      "counters",
      "Print the GPUs' and CPUs' cumulative energy counters as JSON, with the time (the Slurm prolog and "
      "epilog in packaging/slurm/ subtract two)");
  command->add_option("--gpus", flags->gpus, "GPU indices, e.g. 0,1 (default: all visible)")
      ->option_text("LIST");
  command
      ->add_option("--nodes", flags->nodes,
                   "Every node's counters through its daemon instead of this node's: NAME=ADDRESS,… (Unix "
                   "sockets or HOST:PORT; docs/fleet.md)")
      ->option_text("LIST");
  command
      ->add_option(
          "--job-energy", flags->job,
          "Instead: job JOB's estimated share of each GPU it shared with other jobs, as joule daemon "
          "accounts it from the GPUs' process samples (docs/daemon.md)")
      ->option_text("JOB");
  add_node_connection_options(*command, flags->fleet.connection);
  set_examples(*command,
               {"joule counters --gpus 0,1", "joule --daemon /run/joule/joule.sock counters",
                "joule --daemon /run/joule/joule.sock counters --job-energy 4242",
                "joule counters --nodes node1:9700,node2:9700 --node-ca ca.pem --node-token-file token"});
  command->callback(
      [&global, &exit_code, flags] { exit_code = counters_detail::run_counters(global, *flags); });
}

}  // namespace joule::cli
