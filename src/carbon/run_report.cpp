// SPDX-License-Identifier: Apache-2.0
#include "joule/carbon/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/signal.hpp"
#include "joule/core/csv.hpp"

namespace joule::carbon {

using measure::EnergySource;

double CommandRun::total_energy_j() const {
  double total = 0;
  for (const auto& d : devices) {
    total += d.energy_j;
  }
  return total;
}

namespace {

// Energy and power cells: a figure that is not measurable (NaN) is shown as such, never as a number.
std::string energy_text(double energy_j) {
  return std::isnan(energy_j) ? std::string("not measurable") : fmt::format("{:.3f} J", energy_j);
}

std::string power_text(double power_w) {
  return std::isnan(power_w) ? std::string("-") : fmt::format("{:.1f} W", power_w);
}

std::string csv_number(double value) {
  return std::isnan(value) ? std::string() : csv::format_exact(value);
}

std::string how(EnergySource source) {
  switch (source) {
    case EnergySource::kCounter:
      return "counter";
    case EnergySource::kPowerSamples:
      return "estimated (power samples)";
    case EnergySource::kInstantPower:
      return "estimated (instant power)";
    case EnergySource::kMigSliceShare:
      return "estimated (MIG slice share)";
  }
  return "unknown";
}

constexpr const char* kNoDeviceLine =
    "\n   no device measured: no GPU found (joule --sim v100 measure … measures a simulated one)\n";

// "GPU 0 Tesla V100…", "CPU 1 …", "CPU 0 DRAM"; without the name where columns are tight.
std::string device_label(const measure::DeviceFigure& d, bool with_name) {
  if (d.kind == "dram") {
    return fmt::format("CPU {} DRAM", d.index);
  }
  const std::string kind = d.kind == "gpu" ? "GPU" : "CPU";
  return with_name ? fmt::format("{} {} {}", kind, d.index, d.name) : fmt::format("{} {}", kind, d.index);
}

}  // namespace

std::string render_run_text(const CommandRun& summary) {
  std::string out = fmt::format("\n joule measure: {}\n\n", fmt::join(summary.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time\n", summary.wall_time_s);
  out += fmt::format("   {:>12}     exit code{}\n", summary.exit_code,
                     summary.signal != 0 ? fmt::format(" (killed by signal {})", summary.signal) : "");
  if (summary.devices.empty()) {
    out += kNoDeviceLine;
    return out;
  }
  size_t name_width = 6;
  std::vector<std::string> labels;
  for (const auto& d : summary.devices) {
    labels.push_back(device_label(d, true));
    name_width = std::max(name_width, labels.back().size());
  }
  out += fmt::format("\n   {:<{}}  {:>14}  {:>10}  {:>10}  {}\n", "device", name_width, "energy", "avg power",
                     "peak power", "how");
  for (size_t i = 0; i < summary.devices.size(); ++i) {
    const auto& d = summary.devices[i];
    out += fmt::format("   {:<{}}  {:>14}  {:>10}  {:>10}  {}\n", labels[i], name_width,
                       energy_text(d.energy_j), power_text(d.average_power_w),
                       d.peak_power_w ? power_text(*d.peak_power_w) : "-", how(d.source));
  }
  out += fmt::format("   {:<{}}  {:>14}\n", "total", name_width, energy_text(summary.total_energy_j()));
  for (size_t i = 0; i < summary.devices.size(); ++i) {
    if (!summary.devices[i].not_measurable.empty()) {
      out += fmt::format("   {}: {}\n", labels[i], summary.devices[i].not_measurable);
    }
  }
  if (summary.carbon) {
    if (*summary.carbon && std::isnan((*summary.carbon)->carbon_g)) {
      out += fmt::format("   {:<{}}  not measurable: a device's energy is not measurable\n", "carbon",
                         name_width);
    } else if (*summary.carbon) {
      const auto& c = **summary.carbon;
      out += fmt::format("   {:<{}}  {:>12.3f} g  CO2e at {:.1f} g/kWh{} ({})\n", "carbon", name_width,
                         c.carbon_g, c.average_intensity_g_per_kwh(), c.estimated ? ", estimated" : "",
                         c.source);
    } else {
      out += fmt::format("   {:<{}}  unavailable: {}\n", "carbon", name_width,
                         summary.carbon->error().message());
    }
  }
  if (summary.price && std::isnan(summary.price->cost_usd)) {
    out +=
        fmt::format("   {:<{}}  not measurable: a device's energy is not measurable\n", "cost", name_width);
  } else if (summary.price) {
    out += fmt::format("   {:<{}}  {:>12.6f} $  ({})\n", "cost", name_width, summary.price->cost_usd,
                       summary.price->source);
  }
  out += "\n";
  return out;
}

namespace {

nlohmann::json summary_json(const CommandRun& summary) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : summary.devices) {
    // A figure that is not measurable is NaN, which nlohmann writes as null; "error" says why.
    devices.push_back(
        {{"kind", d.kind},
         {"index", d.index},
         {"name", d.name},
         {"energy_j", d.energy_j},
         {"average_power_w", d.average_power_w},
         {"peak_power_w", d.peak_power_w ? nlohmann::json(*d.peak_power_w) : nlohmann::json(nullptr)},
         {"source", to_string(d.source)},
         {"estimated", d.source != EnergySource::kCounter}});
    if (!d.not_measurable.empty()) {
      devices.back()["error"] = d.not_measurable;
    }
  }
  nlohmann::json out = {
      {"command", summary.command},
      {"exit_code", summary.exit_code},
      {"signal", summary.signal == 0 ? nlohmann::json(nullptr) : nlohmann::json(summary.signal)},
      {"wall_time_s", summary.wall_time_s},
      {"devices", devices},
      {"total_energy_j", summary.total_energy_j()}};
  if (summary.carbon) {
    if (*summary.carbon) {
      const auto& c = **summary.carbon;
      nlohmann::json buckets = nlohmann::json::array();
      for (const auto& b : c.buckets) {
        buckets.push_back({{"start", format_utc_time(b.start_unix_s)},
                           {"energy_j", b.energy_j},
                           {"intensity_g_per_kwh", b.intensity_g_per_kwh},
                           {"estimated", b.estimated},
                           {"carbon_g", b.carbon_g}});
      }
      out["carbon"] = {{"source", c.source},
                       {"carbon_g", c.carbon_g},
                       {"gpu_carbon_g", c.gpu_carbon_g},
                       {"cpu_carbon_g", c.cpu_carbon_g},
                       {"dram_carbon_g", c.dram_carbon_g},
                       {"average_intensity_g_per_kwh", c.average_intensity_g_per_kwh()},
                       {"estimated", c.estimated},
                       {"buckets", buckets}};
    } else {
      out["carbon"] = {{"error", summary.carbon->error().message()}};
    }
  }
  if (summary.price) {
    out["cost"] = {{"source", summary.price->source},
                   {"cost_usd", summary.price->cost_usd},
                   {"gpu_cost_usd", summary.price->gpu_cost_usd}};
  }
  return out;
}

}  // namespace

std::string render_run_json(const CommandRun& summary) {
  return summary_json(summary).dump(2) + "\n";
}

namespace {

// The CSV cells of a device's carbon (g) and cost ($): per GPU (the carbon and price monitors split GPUs;
// CPU figures are in the JSON format), empty otherwise. `gpu` counts the GPUs seen so far.
std::pair<std::string, std::string> carbon_and_cost_cells(const CommandRun& summary,
                                                          const measure::DeviceFigure& device, size_t& gpu) {
  std::pair<std::string, std::string> cells;
  if (device.kind != "gpu") {
    return cells;
  }
  if (summary.carbon && *summary.carbon && gpu < (*summary.carbon)->gpu_carbon_g.size()) {
    cells.first = csv::format_exact((*summary.carbon)->gpu_carbon_g[gpu]);
  }
  if (summary.price && gpu < summary.price->gpu_cost_usd.size()) {
    cells.second = csv::format_exact(summary.price->gpu_cost_usd[gpu]);
  }
  ++gpu;
  return cells;
}

// The columns every CSV form shares, and one device's cells in them.
const std::vector<std::string>& device_columns() {
  static const std::vector<std::string> columns = {
      "command", "exit_code", "wall_time_s",     "kind",         "index",
      "name",    "energy_j",  "average_power_w", "peak_power_w", "source"};
  return columns;
}

std::vector<std::string> device_cells(const CommandRun& summary, const measure::DeviceFigure& d) {
  return {fmt::format("{}", fmt::join(summary.command, " ")),
          std::to_string(summary.exit_code),
          csv::format_exact(summary.wall_time_s),
          d.kind,
          std::to_string(d.index),
          d.name,
          csv_number(d.energy_j),  // empty when not measurable (the reason is on stderr)
          csv_number(d.average_power_w),
          d.peak_power_w ? csv::format_exact(*d.peak_power_w) : std::string(),
          std::string(to_string(d.source))};
}

// The header and one row per device. The carbon and cost columns only when asked for (--carbon-…,
// --tariff), so the plain format stays stable.
std::vector<std::vector<std::string>> csv_table(const CommandRun& summary) {
  std::vector<std::vector<std::string>> table = {device_columns()};
  if (summary.carbon) {
    table.front().emplace_back("carbon_g");
  }
  if (summary.price) {
    table.front().emplace_back("cost_usd");
  }
  size_t gpu = 0;
  for (const auto& d : summary.devices) {
    const auto [carbon_g, cost_usd] = carbon_and_cost_cells(summary, d, gpu);
    std::vector<std::string> row = device_cells(summary, d);
    if (summary.carbon) {
      row.push_back(carbon_g);
    }
    if (summary.price) {
      row.push_back(cost_usd);
    }
    table.push_back(std::move(row));
  }
  return table;
}

}  // namespace

std::string render_run_csv(const CommandRun& summary) {
  std::ostringstream out;
  for (const auto& row : csv_table(summary)) {
    csv::write_row(out, row);
  }
  return out.str();
}

namespace {

std::string plus_minus(const measure::Spread& spread) {
  return spread.mean != 0 ? fmt::format("± {:.2f}%", 100 * spread.stddev / std::abs(spread.mean))
                          : fmt::format("± {:.3g}", spread.stddev);
}

}  // namespace

RepeatStatistics statistics_of(const std::vector<CommandRun>& runs) {
  RepeatStatistics stats;
  std::vector<double> wall;
  std::vector<double> total;
  for (const auto& run : runs) {
    wall.push_back(run.wall_time_s);
    total.push_back(run.total_energy_j());
  }
  stats.wall_time_s = measure::spread_of(wall);
  stats.total_energy_j = measure::spread_of(total);
  for (size_t d = 0; d < runs.front().devices.size(); ++d) {
    std::vector<double> energy;
    std::vector<double> average;
    std::vector<double> peak;
    for (const auto& run : runs) {
      energy.push_back(run.devices[d].energy_j);
      average.push_back(run.devices[d].average_power_w);
      peak.push_back(run.devices[d].peak_power_w.value_or(0));
    }
    stats.energy_j.push_back(measure::spread_of(energy));
    stats.average_power_w.push_back(measure::spread_of(average));
    stats.peak_power_w.push_back(measure::spread_of(peak));
  }
  return stats;
}

std::string render_repeat_text(const std::vector<CommandRun>& runs, int asked) {
  const RepeatStatistics stats = statistics_of(runs);
  const CommandRun& first = runs.front();
  std::string out =
      fmt::format("\n joule measure ({} run{}{}): {}\n\n", runs.size(), runs.size() == 1 ? "" : "s",
                  static_cast<int>(runs.size()) < asked ? fmt::format(" of {}", asked) : "",
                  fmt::join(first.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time  {}  (mean; ± sample standard deviation)\n",
                     stats.wall_time_s.mean, plus_minus(stats.wall_time_s));
  out += fmt::format("   {:>12}     exit code of the last run\n", runs.back().exit_code);
  if (first.devices.empty()) {
    out += kNoDeviceLine;
    return out;
  }
  out += fmt::format("\n   {:<28}  {:>24}  {:>22}  {:>22}\n", "device", "energy", "avg power", "peak power");
  // A figure not measurable in some run (NaN) has no mean: it is shown as such, and why after the table.
  const auto with_spread = [](const std::string& text, const measure::Spread& spread, size_t width) {
    return fmt::format("{:>{}} {:>10}", text, width, std::isnan(spread.mean) ? "" : plus_minus(spread));
  };
  for (size_t d = 0; d < first.devices.size(); ++d) {
    const std::string label = device_label(first.devices[d], false);
    out += fmt::format("   {:<28}  {}  {}  {}\n", label,
                       with_spread(energy_text(stats.energy_j[d].mean), stats.energy_j[d], 14),
                       with_spread(power_text(stats.average_power_w[d].mean), stats.average_power_w[d], 12),
                       with_spread(power_text(stats.peak_power_w[d].mean), stats.peak_power_w[d], 12));
  }
  out += std::isnan(stats.total_energy_j.mean)
             ? fmt::format("   {:<28}  {:>14}\n", "total", energy_text(stats.total_energy_j.mean))
             : fmt::format("   {:<28}  {}\n", "total",
                           with_spread(energy_text(stats.total_energy_j.mean), stats.total_energy_j, 14));
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const auto& device : runs[r].devices) {
      if (!device.not_measurable.empty()) {
        out += fmt::format("   run {}: {}: {}\n", r + 1, device_label(device, false), device.not_measurable);
      }
    }
  }
  out += "\n";
  return out;
}

std::string render_repeat_json(const std::vector<CommandRun>& runs, int asked) {
  const RepeatStatistics stats = statistics_of(runs);
  const auto spread_json = [](const measure::Spread& spread) {
    return nlohmann::json{{"mean", spread.mean}, {"stddev", spread.stddev}};
  };
  nlohmann::json devices = nlohmann::json::array();
  for (size_t d = 0; d < runs.front().devices.size(); ++d) {
    const auto& device = runs.front().devices[d];
    devices.push_back({{"kind", device.kind},
                       {"index", device.index},
                       {"name", device.name},
                       {"energy_j", spread_json(stats.energy_j[d])},
                       {"average_power_w", spread_json(stats.average_power_w[d])},
                       {"peak_power_w", spread_json(stats.peak_power_w[d])}});
  }
  nlohmann::json each = nlohmann::json::array();
  for (const auto& run : runs) {
    each.push_back(summary_json(run));
  }
  const nlohmann::json out = {{"command", runs.front().command},
                              {"repeat", asked},
                              {"completed_runs", runs.size()},
                              {"wall_time_s", spread_json(stats.wall_time_s)},
                              {"total_energy_j", spread_json(stats.total_energy_j)},
                              {"devices", devices},
                              {"runs", each}};
  return out.dump(2) + "\n";
}

std::string render_repeat_csv(const std::vector<CommandRun>& runs) {
  std::ostringstream out;
  for (size_t r = 0; r < runs.size(); ++r) {
    auto table = csv_table(runs[r]);
    // The header once, then every row with its run number in front.
    for (size_t i = r == 0 ? 0 : 1; i < table.size(); ++i) {
      table[i].insert(table[i].begin(), i == 0 ? std::string("run") : std::to_string(r + 1));
      csv::write_row(out, table[i]);
    }
  }
  return out.str();
}

// --append-csv: one history file for many invocations (CodeCarbon's emissions.csv, for joule). The columns
// are fixed, carbon and cost included (empty when not measured), so every row of a file has the same shape.
const std::vector<std::string>& history_header() {
  static const std::vector<std::string> header = [] {
    std::vector<std::string> columns = {"timestamp", "run"};
    columns.insert(columns.end(), device_columns().begin(), device_columns().end());
    columns.emplace_back("carbon_g");
    columns.emplace_back("cost_usd");
    return columns;
  }();
  return header;
}

std::string history_rows(const std::vector<CommandRun>& runs, bool write_header) {
  std::ostringstream rows;
  if (write_header) {
    csv::write_row(rows, history_header());
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const CommandRun& run = runs[r];
    size_t gpu = 0;
    for (const auto& d : run.devices) {
      const auto [carbon_g, cost_usd] = carbon_and_cost_cells(run, d, gpu);
      std::vector<std::string> row = {format_utc_time(run.started_unix_s), std::to_string(r + 1)};
      const auto cells = device_cells(run, d);
      row.insert(row.end(), cells.begin(), cells.end());
      row.push_back(carbon_g);
      row.push_back(cost_usd);
      csv::write_row(rows, row);
    }
  }
  return rows.str();
}

}  // namespace joule::carbon
