// SPDX-License-Identifier: Apache-2.0
// `joule measure -- CMD ARGS…`: energy and time of a command, like `perf stat`.
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/log.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/power_sampler.hpp"

#include "child_process.hpp"
#include "common.hpp"

namespace joule::cli {

namespace {

struct MeasureFlags {
  std::string gpus;  // empty: all
  bool cpus = false;
  int interval_ms = 100;
  Format format = Format::kText;
  std::string output;
  std::vector<std::string> command;
};

struct DeviceFigure {
  std::string kind;  // "gpu", "cpu", "dram"
  int index = 0;
  std::string name;
  double energy_j = 0;
  double average_power_w = 0;
  std::optional<double> peak_power_w;
  measure::EnergySource source = measure::EnergySource::kCounter;
};

struct Summary {
  std::vector<std::string> command;
  ChildExit exit;
  double wall_time_s = 0;
  std::vector<DeviceFigure> devices;
  double total_energy_j() const {
    double total = 0;
    for (const auto& d : devices) {
      total += d.energy_j;
    }
    return total;
  }
};

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

std::string render_text(const Summary& summary) {
  std::string out = fmt::format("\n joule measure: {}\n\n", fmt::join(summary.command, " "));
  out += fmt::format("   {:>12.3f} s   wall time\n", summary.wall_time_s);
  out +=
      fmt::format("   {:>12}     exit code{}\n", summary.exit.exit_code,
                  summary.exit.signal != 0 ? fmt::format(" (killed by signal {})", summary.exit.signal) : "");
  if (summary.devices.empty()) {
    out += "\n   no device measured\n";
    return out;
  }
  size_t name_width = 6;
  std::vector<std::string> labels;
  for (const auto& d : summary.devices) {
    labels.push_back(d.kind == "dram"
                         ? fmt::format("CPU {} DRAM", d.index)
                         : fmt::format("{} {} {}", d.kind == "gpu" ? "GPU" : "CPU", d.index, d.name));
    name_width = std::max(name_width, labels.back().size());
  }
  out += fmt::format("\n   {:<{}}  {:>14}  {:>10}  {:>10}  {}\n", "device", name_width, "energy", "avg power",
                     "peak power", "how");
  for (size_t i = 0; i < summary.devices.size(); ++i) {
    const auto& d = summary.devices[i];
    out += fmt::format("   {:<{}}  {:>12.3f} J  {:>8.1f} W  {:>10}  {}\n", labels[i], name_width, d.energy_j,
                       d.average_power_w, d.peak_power_w ? fmt::format("{:.1f} W", *d.peak_power_w) : "-",
                       how(d.source));
  }
  out += fmt::format("   {:<{}}  {:>12.3f} J\n\n", "total", name_width, summary.total_energy_j());
  return out;
}

std::string render_json(const Summary& summary) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : summary.devices) {
    devices.push_back(
        {{"kind", d.kind},
         {"index", d.index},
         {"name", d.name},
         {"energy_j", d.energy_j},
         {"average_power_w", d.average_power_w},
         {"peak_power_w", d.peak_power_w ? nlohmann::json(*d.peak_power_w) : nlohmann::json(nullptr)},
         {"source", measure::to_string(d.source)},
         {"estimated", d.source != measure::EnergySource::kCounter}});
  }
  nlohmann::json out = {
      {"command", summary.command},
      {"exit_code", summary.exit.exit_code},
      {"signal", summary.exit.signal == 0 ? nlohmann::json(nullptr) : nlohmann::json(summary.exit.signal)},
      {"wall_time_s", summary.wall_time_s},
      {"devices", devices},
      {"total_energy_j", summary.total_energy_j()}};
  return out.dump(2) + "\n";
}

std::string render_csv(const Summary& summary) {
  std::ostringstream out;
  csv::write_row(out, {"command", "exit_code", "wall_time_s", "kind", "index", "name", "energy_j",
                       "average_power_w", "peak_power_w", "source"});
  const std::string command = fmt::format("{}", fmt::join(summary.command, " "));
  for (const auto& d : summary.devices) {
    csv::write_row(out, {command, std::to_string(summary.exit.exit_code),
                         csv::format_exact(summary.wall_time_s), d.kind, std::to_string(d.index), d.name,
                         csv::format_exact(d.energy_j), csv::format_exact(d.average_power_w),
                         d.peak_power_w ? csv::format_exact(*d.peak_power_w) : std::string(),
                         std::string(measure::to_string(d.source))});
  }
  return out.str();
}

int run_measure(const GlobalOptions& global, const MeasureFlags& flags) {
  if (flags.command.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "measure: no command given (usage: joule measure [OPTIONS] -- CMD ARGS…)");
  }
  if (flags.interval_ms <= 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("measure: --interval-ms must be positive (got {})", flags.interval_ms));
  }
  std::optional<std::vector<int>> gpu_indices;
  if (!flags.gpus.empty()) {
    gpu_indices = value_or_throw(parse_index_list(flags.gpus, "--gpus"));
  }
  // Before any device thread exists, so that all threads inherit the block (see ChildSignals).
  ChildSignals signals;
  const device::DeviceSet devices = open_devices(global, true, flags.cpus);
  const std::vector<device::Gpu*> gpus = value_or_throw(devices.select_gpus(gpu_indices));
  if (gpus.empty()) {
    log().warn("{}; measuring time only", devices.why_no_gpus());
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

  const Nanos window_start = clock.now();
  monitor.begin_window("measure", false);
  const auto exit = run_child(flags.command, signals);
  if (!exit) {
    monitor.cancel_window("measure");
    // Shells' convention: 127 for a command that does not exist, 126 for one that cannot be executed.
    if (exit.error().code() == ErrorCode::kNotFound || exit.error().code() == ErrorCode::kPermissionDenied) {
      std::cerr << fmt::format("joule: error: {}\n", exit.error().message());
      return exit.error().code() == ErrorCode::kNotFound ? 127 : 126;
    }
    throw Exception(exit.error());
  }
  sampler.sample_now();
  const measure::Measurement measurement = monitor.end_window("measure", false);
  sampler.stop();

  Summary summary{flags.command, *exit, measurement.time_s, {}};
  const Nanos window_end = clock.now();
  size_t channel = 0;
  auto figure = [&](std::string kind, const measure::DeviceEnergy& energy, std::string name) {
    const auto peak = sampler.peak_mw(channel++, window_start, window_end);
    summary.devices.push_back({std::move(kind), energy.index, std::move(name), energy.energy_j,
                               measurement.time_s > 0 ? energy.energy_j / measurement.time_s : 0.0,
                               peak ? std::optional<double>(mw_to_w(*peak)) : std::nullopt, energy.source});
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
  std::string text;
  switch (flags.format) {
    case Format::kText:
      text = render_text(summary);
      break;
    case Format::kJson:
      text = render_json(summary);
      break;
    case Format::kCsv:
      text = render_csv(summary);
      break;
  }
  write_output(flags.output, text, std::cerr);
  return exit->exit_code;
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
      ->option_text("N");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson, Format::kCsv});
  command->add_option("-o,--output", flags->output, "Write the summary to FILE instead of stderr")
      ->option_text("FILE");
  // The command comes after "--" (split off in main); a command without "--" gets a pointed message.
  auto stray = std::make_shared<std::vector<std::string>>();
  command->add_option("command", *stray, "The command to run and its arguments, after --")
      ->option_text("-- CMD ARGS…");
  command->footer("Example: joule measure --gpus 0 -- python train.py --epochs 1");
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
