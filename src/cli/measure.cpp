// SPDX-License-Identifier: Apache-2.0
// `joule measure -- CMD ARGS…`: energy and time of a command, like `perf stat`.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/power_sampler.hpp"

#include "child_process.hpp"
#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct MeasureFlags {
  std::string gpus;  // empty: all
  bool cpus = false;
  int interval_ms = 100;
  Format format = Format::kText;
  std::string output;
  std::vector<std::string> command;
  carbon::CarbonSourceOptions
      carbon;              // --carbon-intensity, --carbon-trace, --zone, --carbon-provider, --country
  std::string tariff;      // --tariff FILE: hour,price_usd_per_kwh
  int repeat = 1;          // -r N: run the command N times, report mean ± stddev
  std::string append_csv;  // --append-csv FILE: one row per device per run, appended
};

struct DeviceFigure {
  std::string kind;  // "gpu", "cpu", "dram"
  int index = 0;
  std::string name;
  double energy_j = 0;
  double average_power_w = 0;
  std::optional<double> peak_power_w;
  measure::EnergySource source = measure::EnergySource::kCounter;
  // Why energy_j and average_power_w are NaN (a RAPL counter reset during the run); empty when measured.
  std::string not_measurable;
};

struct Summary {
  std::vector<std::string> command;
  ChildExit exit;
  int64_t started_unix_s = 0;  // when the run began (UTC), for --append-csv
  double wall_time_s = 0;
  std::vector<DeviceFigure> devices;
  // Carbon and cost, when asked for: a value, or the error that explains why there is none.
  std::optional<Result<carbon::CarbonReport>> carbon;
  std::optional<carbon::PriceReport> price;
  double total_energy_j() const {
    double total = 0;
    for (const auto& d : devices) {
      total += d.energy_j;
    }
    return total;
  }
};

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

std::string how(measure::EnergySource source) {
  switch (source) {
    case measure::EnergySource::kCounter:
      return "counter";
    case measure::EnergySource::kPowerSamples:
      return "estimated (power samples)";
    case measure::EnergySource::kInstantPower:
      return "estimated (instant power)";
  }
  return "unknown";
}

constexpr const char* kNoDeviceLine =
    "\n   no device measured: no GPU found (joule --sim v100 measure … measures a simulated one)\n";

// "GPU 0 Tesla V100…", "CPU 1 …", "CPU 0 DRAM"; without the name where columns are tight.
std::string device_label(const DeviceFigure& d, bool with_name) {
  if (d.kind == "dram") {
    return fmt::format("CPU {} DRAM", d.index);
  }
  const std::string kind = d.kind == "gpu" ? "GPU" : "CPU";
  return with_name ? fmt::format("{} {} {}", kind, d.index, d.name) : fmt::format("{} {}", kind, d.index);
}

std::string render_text(const Summary& summary) {
  std::string out = fmt::format("\n joule measure: {}\n\n", fmt::join(summary.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time\n", summary.wall_time_s);
  out +=
      fmt::format("   {:>12}     exit code{}\n", summary.exit.exit_code,
                  summary.exit.signal != 0 ? fmt::format(" (killed by signal {})", summary.exit.signal) : "");
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

nlohmann::json summary_json(const Summary& summary) {
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
         {"source", measure::to_string(d.source)},
         {"estimated", d.source != measure::EnergySource::kCounter}});
    if (!d.not_measurable.empty()) {
      devices.back()["error"] = d.not_measurable;
    }
  }
  nlohmann::json out = {
      {"command", summary.command},
      {"exit_code", summary.exit.exit_code},
      {"signal", summary.exit.signal == 0 ? nlohmann::json(nullptr) : nlohmann::json(summary.exit.signal)},
      {"wall_time_s", summary.wall_time_s},
      {"devices", devices},
      {"total_energy_j", summary.total_energy_j()}};
  if (summary.carbon) {
    if (*summary.carbon) {
      const auto& c = **summary.carbon;
      nlohmann::json buckets = nlohmann::json::array();
      for (const auto& b : c.buckets) {
        buckets.push_back({{"start", carbon::format_utc_time(b.start_unix_s)},
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

std::string render_json(const Summary& summary) {
  return summary_json(summary).dump(2) + "\n";
}

// The CSV cells of a device's carbon (g) and cost ($): per GPU (the carbon and price monitors split GPUs;
// CPU figures are in the JSON format), empty otherwise. `gpu` counts the GPUs seen so far.
std::pair<std::string, std::string> carbon_and_cost_cells(const Summary& summary, const DeviceFigure& device,
                                                          size_t& gpu) {
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

std::vector<std::string> device_cells(const Summary& summary, const DeviceFigure& d) {
  return {fmt::format("{}", fmt::join(summary.command, " ")),
          std::to_string(summary.exit.exit_code),
          csv::format_exact(summary.wall_time_s),
          d.kind,
          std::to_string(d.index),
          d.name,
          csv_number(d.energy_j),  // empty when not measurable (the reason is on stderr)
          csv_number(d.average_power_w),
          d.peak_power_w ? csv::format_exact(*d.peak_power_w) : std::string(),
          std::string(measure::to_string(d.source))};
}

// The header and one row per device. The carbon and cost columns only when asked for (--carbon-…,
// --tariff), so the plain format stays stable.
std::vector<std::vector<std::string>> csv_table(const Summary& summary) {
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

std::string render_csv(const Summary& summary) {
  std::ostringstream out;
  for (const auto& row : csv_table(summary)) {
    csv::write_row(out, row);
  }
  return out.str();
}

// Mean and sample standard deviation (n − 1; 0 for one run) of one figure over the runs.
struct Spread {
  double mean = 0;
  double stddev = 0;
};

Spread spread_of(const std::vector<double>& values) {
  Spread out;
  if (values.empty()) {
    return out;
  }
  for (const double v : values) {
    out.mean += v;
  }
  out.mean /= static_cast<double>(values.size());
  if (values.size() > 1) {
    double squares = 0;
    for (const double v : values) {
      squares += (v - out.mean) * (v - out.mean);
    }
    out.stddev = std::sqrt(squares / static_cast<double>(values.size() - 1));
  }
  return out;
}

std::string plus_minus(const Spread& spread) {
  return spread.mean != 0 ? fmt::format("± {:.2f}%", 100 * spread.stddev / std::abs(spread.mean))
                          : fmt::format("± {:.3g}", spread.stddev);
}

// Every figure of every device over the runs (all runs measured the same devices in the same order).
struct RepeatStatistics {
  Spread wall_time_s;
  Spread total_energy_j;
  std::vector<Spread> energy_j, average_power_w, peak_power_w;
};

RepeatStatistics statistics_of(const std::vector<Summary>& runs) {
  RepeatStatistics stats;
  std::vector<double> wall;
  std::vector<double> total;
  for (const auto& run : runs) {
    wall.push_back(run.wall_time_s);
    total.push_back(run.total_energy_j());
  }
  stats.wall_time_s = spread_of(wall);
  stats.total_energy_j = spread_of(total);
  for (size_t d = 0; d < runs.front().devices.size(); ++d) {
    std::vector<double> energy;
    std::vector<double> average;
    std::vector<double> peak;
    for (const auto& run : runs) {
      energy.push_back(run.devices[d].energy_j);
      average.push_back(run.devices[d].average_power_w);
      peak.push_back(run.devices[d].peak_power_w.value_or(0));
    }
    stats.energy_j.push_back(spread_of(energy));
    stats.average_power_w.push_back(spread_of(average));
    stats.peak_power_w.push_back(spread_of(peak));
  }
  return stats;
}

std::string render_repeat_text(const std::vector<Summary>& runs, int asked) {
  const RepeatStatistics stats = statistics_of(runs);
  const Summary& first = runs.front();
  std::string out =
      fmt::format("\n joule measure ({} run{}{}): {}\n\n", runs.size(), runs.size() == 1 ? "" : "s",
                  static_cast<int>(runs.size()) < asked ? fmt::format(" of {}", asked) : "",
                  fmt::join(first.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time  {}  (mean; ± sample standard deviation)\n",
                     stats.wall_time_s.mean, plus_minus(stats.wall_time_s));
  out += fmt::format("   {:>12}     exit code of the last run\n", runs.back().exit.exit_code);
  if (first.devices.empty()) {
    out += kNoDeviceLine;
    return out;
  }
  out += fmt::format("\n   {:<28}  {:>24}  {:>22}  {:>22}\n", "device", "energy", "avg power", "peak power");
  // A figure not measurable in some run (NaN) has no mean: it is shown as such, and why after the table.
  const auto with_spread = [](const std::string& text, const Spread& spread, size_t width) {
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

std::string render_repeat_json(const std::vector<Summary>& runs, int asked) {
  const RepeatStatistics stats = statistics_of(runs);
  const auto spread_json = [](const Spread& spread) {
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

std::string render_repeat_csv(const std::vector<Summary>& runs) {
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

// Checked before the command runs, so that a wrong file costs no run. @return true if the header is to be
// written (the file is new or empty, or not a regular file: a FIFO, /dev/stdout); throws if the file holds
// something else.
bool history_needs_header(const OutputFile& history) {
  std::ostringstream header_line;
  csv::write_row(header_line, history_header());
  const std::string head = value_or_throw(history.read_head(header_line.str().size()));
  if (head.empty()) {
    return true;
  }
  if (head != header_line.str()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("--append-csv {}: the file exists with other columns (first line {}); give "
                                "a new file or one written by --append-csv",
                                history.path(), quoted_excerpt(head.substr(0, head.find('\n')), 80)));
  }
  return false;
}

std::string history_rows(const std::vector<Summary>& runs, bool write_header) {
  std::ostringstream rows;
  if (write_header) {
    csv::write_row(rows, history_header());
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const Summary& run = runs[r];
    size_t gpu = 0;
    for (const auto& d : run.devices) {
      const auto [carbon_g, cost_usd] = carbon_and_cost_cells(run, d, gpu);
      std::vector<std::string> row = {carbon::format_utc_time(run.started_unix_s), std::to_string(r + 1)};
      const auto cells = device_cells(run, d);
      row.insert(row.end(), cells.begin(), cells.end());
      row.push_back(carbon_g);
      row.push_back(cost_usd);
      csv::write_row(rows, row);
    }
  }
  return rows.str();
}

int run_measure(const GlobalOptions& global, const MeasureFlags& flags) {
  if (flags.command.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "measure: no command given (usage: joule measure [OPTIONS] -- CMD ARGS…)");
  }
  // Every output is checked before the command runs: a path that cannot be written costs no run.
  std::optional<OutputFile> output = open_output(flags.output, "-o");
  std::optional<OutputFile> history = open_output(flags.append_csv, "--append-csv", OutputMode::kAppend);
  const bool history_header_needed = history && history_needs_header(*history);
  // A country ("auto" infers it) is chosen now: an unknown code costs no run either.
  const carbon::CarbonSourceOptions carbon_source = resolve_carbon_source(flags.carbon);
  std::optional<std::vector<int>> gpu_indices;
  if (!flags.gpus.empty()) {
    gpu_indices = value_or_throw(parse_index_list(flags.gpus, "--gpus"));
  }
  // Before any device thread exists, so that all threads inherit the block (see ChildSignals).
  ChildSignals signals;
  const device::DeviceSet devices = open_devices(global, true, flags.cpus);
  const std::vector<device::Gpu*> gpus = value_or_throw(devices.select_gpus(gpu_indices));
  if (gpus.empty()) {
    log().warn("{}: {}. For a simulated GPU, run joule --sim v100 measure …",
               flags.cpus ? "no GPU will be measured" : "nothing will be measured but time",
               devices.why_no_gpus());
  }
  std::vector<device::Cpu*> cpus;
  if (flags.cpus) {
    if (devices.cpus.empty()) {
      throw Exception(ErrorCode::kNotFound, fmt::format("--cpus: {}", devices.why_no_cpus()));
    }
    cpus = value_or_throw(devices.select_cpus(std::nullopt));
  }
  Clock& clock = *devices.clock;
  measure::EnergyMonitor monitor(gpus, cpus, clock);
  // Carbon and cost sources are checked before the command runs, so that bad flags cost nothing.
  std::unique_ptr<carbon::CarbonSignal> signal;
  std::unique_ptr<carbon::CarbonMonitor> carbon;
  if (flags.carbon.sources_given() > 0) {
    signal = value_or_throw(carbon::make_carbon_signal(carbon_source, clock));
    carbon = std::make_unique<carbon::CarbonMonitor>(monitor, *signal);
  } else if (!flags.carbon.provider.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "measure: --carbon-provider needs --zone");
  }
  std::optional<carbon::HourlyTariff> tariff;
  std::unique_ptr<carbon::PriceMonitor> price;
  if (!flags.tariff.empty()) {
    tariff = value_or_throw(carbon::HourlyTariff::read_file(flags.tariff));
    price = std::make_unique<carbon::PriceMonitor>(monitor, *tariff);
  }

  // One sampler for the peak power of every device; energy comes from the monitor.
  std::vector<measure::PowerChannel> channels;
  channels.reserve(gpus.size() + 2 * cpus.size());
  for (auto* gpu : gpus) {
    channels.push_back(measure::gpu_power_channel(*gpu));
  }
  for (auto* cpu : cpus) {
    channels.push_back(measure::cpu_power_channel(*cpu, clock));
    if (cpu->info().has_dram) {
      channels.push_back(measure::cpu_power_channel(*cpu, clock, true));
    }
  }
  measure::PowerSampler sampler(std::move(channels), clock, std::chrono::milliseconds(flags.interval_ms));
  if (sampler.channel_count() > 0) {
    sampler.start();
  }

  std::vector<Summary> runs;
  for (int run = 0; run < flags.repeat; ++run) {
    const Nanos window_start = clock.now();
    const int64_t started_unix_s = clock.to_unix_ns(window_start) / 1'000'000'000;
    monitor.begin_window("measure", false);
    if (carbon) {
      carbon->begin_window("measure");
    }
    if (price) {
      price->begin_window("measure");
    }
    const auto exit = run_child(flags.command, signals);
    if (!exit) {
      monitor.cancel_window("measure");
      if (carbon) {
        carbon->cancel_window("measure");
      }
      if (price) {
        price->cancel_window("measure");
      }
      sampler.stop();
      // Shells' convention: 127 for a command that does not exist, 126 for one that cannot be executed.
      if (exit.error().code() == ErrorCode::kNotFound ||
          exit.error().code() == ErrorCode::kPermissionDenied) {
        std::cerr << fmt::format("joule: error: {}\n", exit.error().message());
        return exit.error().code() == ErrorCode::kNotFound ? 127 : 126;
      }
      throw Exception(exit.error());
    }
    sampler.sample_now();
    const measure::Measurement measurement = monitor.end_window("measure", false);

    Summary summary{flags.command, *exit, started_unix_s, measurement.time_s, {}, std::nullopt, std::nullopt};
    if (carbon) {
      auto carbon_measurement = carbon->end_window("measure");
      if (!carbon_measurement.carbon) {
        log().warn("carbon: {}", carbon_measurement.carbon.error().message());
      }
      summary.carbon = std::move(carbon_measurement.carbon);
    }
    if (price) {
      summary.price = price->end_window("measure");
    }
    const Nanos window_end = clock.now();
    size_t channel = 0;
    auto figure = [&](std::string kind, const measure::DeviceEnergy& energy, std::string name) {
      const auto sampled_peak = sampler.peak_mw(channel++, window_start, window_end);
      const double average_w = !energy.measurable()     ? std::numeric_limits<double>::quiet_NaN()
                               : measurement.time_s > 0 ? energy.energy_j / measurement.time_s
                                                        : 0.0;
      // The power that was integrated never stays below its own average, but a sampler can miss its highest
      // moments: the peak is the highest sample, or the average when that is higher (never "avg > peak").
      std::optional<double> peak_w;
      if (sampled_peak) {
        peak_w = std::max(mw_to_w(*sampled_peak), average_w);
      }
      summary.devices.push_back({std::move(kind), energy.index, std::move(name), energy.energy_j, average_w,
                                 peak_w, energy.source, energy.not_measurable});
    };
    for (size_t i = 0; i < gpus.size(); ++i) {
      figure("gpu", measurement.gpu_energy[i], gpus[i]->info().name);
    }
    size_t dram = 0;
    for (size_t i = 0; i < cpus.size(); ++i) {
      figure("cpu", measurement.cpu_energy[i], cpus[i]->info().name);
      if (cpus[i]->info().has_dram) {
        figure("dram", measurement.dram_energy[dram++], "dram");
      }
    }
    runs.push_back(std::move(summary));
    if (exit->exit_code != 0 && run + 1 < flags.repeat) {
      // A failed run's figures are not a sample of the same work: stop, report what ran.
      log().warn("run {} of {} exited with {}: not repeating further", run + 1, flags.repeat,
                 exit->exit_code);
      break;
    }
  }
  sampler.stop();

  // A file that cannot be written now (disk full, folder removed meanwhile) loses nothing: what it would
  // have held goes to stderr instead, and the exit code stays the command's.
  if (history) {
    write_or_report(*history, history_rows(runs, history_header_needed), true);
  }
  std::string text;
  if (flags.repeat == 1) {
    switch (flags.format) {
      case Format::kText:
        text = render_text(runs.front());
        break;
      case Format::kJson:
        text = render_json(runs.front());
        break;
      case Format::kCsv:
        text = render_csv(runs.front());
        break;
    }
  } else {
    switch (flags.format) {
      case Format::kText:
        text = render_repeat_text(runs, flags.repeat);
        break;
      case Format::kJson:
        text = render_repeat_json(runs, flags.repeat);
        break;
      case Format::kCsv:
        text = render_repeat_csv(runs);
        break;
    }
  }
  if (output) {
    write_or_report(*output, text, true);
  } else {
    std::cerr << text << std::flush;
  }
  return runs.back().exit.exit_code;
}

}  // namespace

void add_measure_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<MeasureFlags>();
  auto* command = app.add_subcommand(
      "measure",
      "Run a command and report its wall time and the energy, average and peak power of each device "
      "(on stderr, or in the -o file). Exits with the command's exit code.");
  command->add_option("--gpus", flags->gpus, "GPU indices to measure, e.g. 0,1 (default: all visible)")
      ->option_text("LIST");
  command->add_flag("--cpus", flags->cpus, "Also measure CPU package and DRAM energy (RAPL)");
  command
      ->add_option("--interval-ms", flags->interval_ms, "Power sampling period for peak power (default 100)")
      ->check(number(quantity::sampling_period_ms()))
      ->option_text("N");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson, Format::kCsv});
  command
      ->add_option("-o,--output", flags->output,
                   "Write the summary to FILE instead of stderr (-: stdout; a device or FIFO is written "
                   "through)")
      ->option_text("FILE");
  command
      ->add_option("--carbon-intensity", flags->carbon.intensity_g_per_kwh,
                   "Add the carbon (gCO2e) at this constant intensity, g/kWh")
      ->check(number(quantity::carbon_intensity_g_per_kwh()))
      ->option_text("G_PER_KWH");
  command
      ->add_option("--carbon-trace", flags->carbon.trace_path,
                   "Add the carbon from a trace CSV (timestamp,carbon_intensity_g_per_kwh) covering the run")
      ->option_text("FILE");
  command
      ->add_option("--zone", flags->carbon.zone,
                   "Add the carbon from a live provider's zone (Electricity Maps zone, WattTime region, GB)")
      ->option_text("Z");
  command
      ->add_option(
          "--country", flags->carbon.country,
          "Add the carbon at a country's yearly average intensity: ISO 3166-1 code (DEU or DE), or auto "
          "to infer it from the timezone or locale (joule carbon countries lists them)")
      ->option_text("CODE|auto");
  command
      ->add_option("--carbon-provider", flags->carbon.provider,
                   "electricitymaps, watttime or uk (default: JOULE_CARBON_PROVIDER, else electricitymaps)")
      ->option_text("P");
  command
      ->add_option("--tariff", flags->tariff,
                   "Add the cost from an hourly tariff CSV (hour,price_usd_per_kwh)")
      ->option_text("FILE");
  command
      ->add_option("-r,--repeat", flags->repeat,
                   "Run the command N times and report each figure's mean ± sample standard deviation (like "
                   "perf stat -r); stops at the first run that fails")
      ->check(number(NumberRule{.min = 1, .max = 100000, .integer = true}))
      ->option_text("N");
  command
      ->add_option("--append-csv", flags->append_csv,
                   "Also append one row per device per run to FILE (timestamp, run, command, energy, power, "
                   "carbon, cost; the header when the file is new), to build one history over many runs")
      ->option_text("FILE");
  // The command comes after "--" (split off in main); a command without "--" gets a pointed message.
  auto stray = std::make_shared<std::vector<std::string>>();
  command->add_option("command", *stray, "The command to run and its arguments, after --")
      ->option_text("-- CMD ARGS…");
  set_examples(*command, {"joule measure --gpus 0 -- python train.py --epochs 1",
                          "joule measure --country auto --format json -o run.json -- python train.py"});
  command->callback([&global, &exit_code, flags, stray] {
    if (!stray->empty()) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("measure: put the command after '--': joule measure [OPTIONS] -- {}",
                                  fmt::join(*stray, " ")));
    }
    flags->command = global.after_dashes.value_or(std::vector<std::string>{});
    exit_code = run_measure(global, *flags);
  });
}

}  // namespace joule::cli
