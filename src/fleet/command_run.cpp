// SPDX-License-Identifier: Apache-2.0
#include "joule/fleet/command_run.hpp"

#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/clock.hpp"
#include "joule/core/csv.hpp"
#include "joule/fleet/json_forms.hpp"

namespace joule::fleet {

namespace {

constexpr std::string_view kWindow = "joule measure --nodes";

std::string energy_text(double energy_j) {
  return std::isnan(energy_j) ? std::string("not measured") : fmt::format("{:.3f} J", energy_j);
}

nlohmann::ordered_json number_or_null(double value) {
  return std::isfinite(value) ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
}

// Each node's devices as (kind, index, energy): GPUs, then CPU packages, then DRAM.
template <class Visit>
void for_each_device(const NodeMeasurement& node, Visit visit) {
  for (const auto& gpu : node.measurement.gpu_energy) {
    visit("gpu", gpu);
  }
  for (const auto& cpu : node.measurement.cpu_energy) {
    visit("cpu", cpu);
  }
  for (const auto& dram : node.measurement.dram_energy) {
    visit("dram", dram);
  }
}

}  // namespace

Result<FleetCommandRun> run_on_nodes(FleetMonitor& fleet, const std::vector<std::string>& command,
                                     ChildSignals& signals) {
  JOULE_TRY(fleet.begin_window(kWindow));
  const auto exit = run_child(command, signals);
  if (!exit) {
    (void)fleet.cancel_window(kWindow);
    return tl::make_unexpected(exit.error());
  }
  auto measurement = JOULE_TRY(fleet.end_window(kWindow));
  return FleetCommandRun{command, exit->exit_code, exit->signal, std::move(measurement)};
}

std::string render_fleet_run_text(const FleetCommandRun& run) {
  const FleetMeasurement& m = run.measurement;
  std::string out = fmt::format("\n joule measure --nodes: {}\n\n", fmt::join(run.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time (the nodes' windows align within {:.3f} ms)\n", m.time_s,
                     m.alignment_error_s * 1e3);
  out += fmt::format("   {:>12}     exit code{}\n\n", run.exit_code,
                     run.signal != 0 ? fmt::format(" (killed by signal {})", run.signal) : "");
  out += fmt::format("   {:<24} {:>16}  {}\n", "node / device", "energy", "clock offset");
  for (const auto& node : m.nodes) {
    if (!node.complete) {
      out += fmt::format("   {:<24} {:>16}  {}\n", node.node, "incomplete", node.error);
      continue;
    }
    out += fmt::format("   {:<24} {:>16}  {:+.3f} ms ± {:.3f} ms\n", node.node, energy_text(node.energy_j),
                       node.clock_offset.offset_s * 1e3, node.clock_offset.uncertainty_s * 1e3);
    for_each_device(node, [&](std::string_view kind, const measure::DeviceEnergy& device) {
      out += fmt::format("     {:<22} {:>16}{}\n", fmt::format("{} {}", kind, device.index),
                         energy_text(device.energy_j),
                         device.not_measurable.empty() ? "" : fmt::format("  {}", device.not_measurable));
    });
  }
  out += fmt::format("   {:<24} {:>16}\n", "total", energy_text(m.total_energy_j));
  if (!m.complete()) {
    out += fmt::format("   incomplete: {} did not answer; the total counts no node in part\n",
                       m.incomplete_nodes());
  }
  for (const auto& warning : m.warnings) {
    out += fmt::format("   warning: {}\n", warning);
  }
  return out;
}

nlohmann::ordered_json to_json(const FleetMeasurement& m) {
  nlohmann::ordered_json document;
  document["name"] = m.name;
  document["wall_time_s"] = m.time_s;
  document["alignment_error_s"] = m.alignment_error_s;
  document["complete"] = m.complete();
  document["total_energy_j"] = number_or_null(m.total_energy_j);
  document["nodes"] = nlohmann::ordered_json::array();
  for (const auto& node : m.nodes) {
    nlohmann::ordered_json entry;
    entry["node"] = node.node;
    entry["complete"] = node.complete;
    entry["error"] = node.complete ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(node.error);
    entry["energy_j"] = number_or_null(node.energy_j);
    entry["clock_offset_s"] = number_or_null(node.clock_offset.offset_s);
    entry["clock_offset_uncertainty_s"] = number_or_null(node.clock_offset.uncertainty_s);
    entry["devices"] = nlohmann::ordered_json::array();
    if (node.complete) {
      for_each_device(node, [&](std::string_view kind, const measure::DeviceEnergy& device) {
        entry["devices"].push_back({{"kind", kind},
                                    {"index", device.index},
                                    {"energy_j", number_or_null(device.energy_j)},
                                    {"source", measure::to_string(device.source)},
                                    {"not_measurable", device.not_measurable.empty()
                                                           ? nlohmann::ordered_json(nullptr)
                                                           : nlohmann::ordered_json(device.not_measurable)}});
      });
    }
    document["nodes"].push_back(std::move(entry));
  }
  document["warnings"] = m.warnings;
  return document;
}

std::string render_fleet_run_json(const FleetCommandRun& run) {
  nlohmann::ordered_json document;
  document["command"] = run.command;
  document["exit_code"] = run.exit_code;
  document["signal"] = run.signal != 0 ? nlohmann::ordered_json(run.signal) : nlohmann::ordered_json(nullptr);
  nlohmann::ordered_json measured = to_json(run.measurement);
  measured.erase("name");
  document.update(measured);
  return document.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string render_fleet_run_csv(const FleetCommandRun& run) {
  std::ostringstream out;
  csv::write_row(out, {"node", "device", "index", "energy_j", "complete", "error"});
  for (const auto& node : run.measurement.nodes) {
    if (!node.complete) {
      csv::write_row(out, {node.node, "", "", "", "false", node.error});
      continue;
    }
    for_each_device(node, [&](std::string_view kind, const measure::DeviceEnergy& device) {
      csv::write_row(out, {node.node, std::string(kind), std::to_string(device.index),
                           std::isnan(device.energy_j) ? std::string() : csv::format_exact(device.energy_j),
                           "true", device.not_measurable});
    });
  }
  return out.str();
}

}  // namespace joule::fleet

namespace joule::fleet {

std::string render_fleet_power_text(const FleetPower& power) {
  std::string line = format_iso8601_utc(power.time_unix_ms * 1'000'000);
  for (const auto& node : power.nodes) {
    line += node.complete ? fmt::format("  {} {:.3f} W", node.node, node.total_w)
                          : fmt::format("  {} - ({})", node.node, node.error);
  }
  line +=
      std::isnan(power.total_w) ? std::string("  total -") : fmt::format("  total {:.3f} W", power.total_w);
  return line + "\n";
}

std::string fleet_power_csv_header() {
  return "time_unix_ms,node,gpu,power_w\n";
}

std::string render_fleet_power_csv(const FleetPower& power) {
  std::ostringstream out;
  for (const auto& node : power.nodes) {
    if (!node.complete) {
      csv::write_row(out, {std::to_string(power.time_unix_ms), node.node, "", ""});
      continue;
    }
    for (size_t gpu = 0; gpu < node.gpu_power_w.size(); ++gpu) {
      csv::write_row(out, {std::to_string(power.time_unix_ms), node.node, std::to_string(gpu),
                           csv::format_exact(node.gpu_power_w[gpu])});
    }
  }
  return out.str();
}

}  // namespace joule::fleet
