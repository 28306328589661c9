// SPDX-License-Identifier: Apache-2.0
// joule/fleet/command_run.hpp — `joule measure --nodes …`: a command run here, its energy measured on the
// nodes of a fleet (the job's other ranks run there), and that run as text, JSON and CSV.
#pragma once

#include <string>
#include <vector>

#include "joule/core/child_process.hpp"
#include "joule/core/error.hpp"
#include "joule/fleet/fleet_monitor.hpp"

namespace joule::fleet {

/// One command and what the fleet used while it ran.
struct FleetCommandRun {
  std::vector<std::string> command;
  int exit_code = 0;  ///< as run_child's (128 + N when signal N ended it)
  int signal = 0;
  FleetMeasurement measurement;
};

/// Opens a window on every node of `fleet`, runs `command` here (run_child: signals forwarded), and closes
/// the window. @return the run; errors as run_child() (the window is then discarded) or begin_window().
Result<FleetCommandRun> run_on_nodes(FleetMonitor& fleet, const std::vector<std::string>& command,
                                     ChildSignals& signals);

/// The run as a person reads it: wall time, exit code, one line per node and device, the total (or which
/// nodes did not answer), the alignment error and any warning.
std::string render_fleet_run_text(const FleetCommandRun& run);
/// The same as a JSON document (2-space indent, final newline); NaN figures are null.
std::string render_fleet_run_json(const FleetCommandRun& run);
/// One row per node and device: node,device,index,energy_j,complete,error (17 significant digits).
std::string render_fleet_run_csv(const FleetCommandRun& run);

/// One line of `joule fleet power`: the time (ISO 8601, UTC), each node's total and the fleet's, e.g.
/// "2026-11-28T21:14:24.649Z  a 440.500 W  b 943.000 W  total 1383.500 W"; a node that did not answer shows
/// "- (why)" and the total "-".
std::string render_fleet_power_text(const FleetPower& power);
/// CSV rows (no header) time_unix_ms,node,gpu,power_w: one per GPU; a silent node one row with gpu and power
/// empty.
std::string render_fleet_power_csv(const FleetPower& power);
/// The header of render_fleet_power_csv().
std::string fleet_power_csv_header();

}  // namespace joule::fleet
