// SPDX-License-Identifier: Apache-2.0
// `joule fleet power --nodes …`: the live power of several nodes' GPUs, like `joule power` for one node.
#include <csignal>
#include <iostream>

#include "joule/core/clock.hpp"
#include "joule/core/signals.hpp"
#include "joule/fleet/command_run.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct FleetPowerFlags {
  std::string nodes;
  fleet::FleetOptions options;
  int interval_ms = 1000;
  double duration_s = 0;  // 0: until interrupted
  Format format = Format::kText;
};

int run_fleet_power(const FleetPowerFlags& flags) {
  const auto nodes = value_or_throw(fleet::parse_nodes(flags.nodes));
  BlockedSignals stop({SIGINT, SIGTERM});  // before the connections' threads exist
  auto monitor = value_or_throw(fleet::FleetMonitor::connect(nodes, flags.options));
  if (flags.format == Format::kCsv) {
    std::cout << fleet::fleet_power_csv_header();
  }
  Clock& clock = SteadyClock::instance();
  const Nanos start = clock.now();
  const Nanos period = std::chrono::milliseconds(flags.interval_ms);
  for (Nanos next = start;; next += period) {
    const fleet::FleetPower power = monitor->power();
    std::cout << (flags.format == Format::kCsv ? fleet::render_fleet_power_csv(power)
                                               : fleet::render_fleet_power_text(power))
              << std::flush;
    if ((flags.duration_s > 0 && next + period > start + from_seconds(flags.duration_s)) ||
        stop.wait(next + period - clock.now())) {
      return 0;
    }
  }
}

}  // namespace

void add_fleet_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto* fleet = app.add_subcommand("fleet", "Several nodes' daemons at once (docs/fleet.md)");
  fleet->require_subcommand(1);
  auto flags = std::make_shared<FleetPowerFlags>();
  auto* power = fleet->add_subcommand(
      "power", "Print the power of several nodes' GPUs (through their daemons) with ISO-8601 UTC timestamps");
  power
      ->add_option("--nodes", flags->nodes,
                   "The nodes: NAME=ADDRESS,… (their daemons' Unix sockets, or HOST:PORT of their network "
                   "listeners)")
      ->required()
      ->option_text("LIST");
  power->add_option("--interval-ms", flags->interval_ms, "Sampling period in ms (default 1000)")
      ->check(number(quantity::sampling_period_ms()))
      ->option_text("N");
  power
      ->add_option("--duration-s", flags->duration_s, "Stop after S seconds (default: run until interrupted)")
      ->check(number(duration_rule()))
      ->option_text("S");
  add_format_option(*power, flags->format, {Format::kText, Format::kCsv});
  add_node_connection_options(*power, flags->options.connection);
  set_examples(
      *power,
      {"joule fleet power --nodes a=/run/joule/a.sock,b=/tmp/node2.sock --duration-s 10",
       "joule fleet power --nodes node1:9700,node2:9700 --node-ca ca.pem --node-token-file ~/.joule-token"});
  set_examples(*fleet, {"joule fleet power --nodes a=/run/joule/a.sock,b=/tmp/node2.sock"});
  power->callback([flags, &exit_code] { exit_code = run_fleet_power(*flags); });
}

}  // namespace joule::cli
