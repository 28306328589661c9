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

#include "joule/carbon/command_meter.hpp"
#include "joule/carbon/run_report.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/child_process.hpp"
#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"
#include "joule/fleet/command_run.hpp"

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
  std::string nodes;       // --nodes NAME=ADDRESS,…: the energy of a fleet's daemons instead of this node's
  fleet::FleetOptions
      fleet_options;  // --node-ca, --node-cert, --node-key, --node-token-file, --node-plain-tcp
};

// Checked before the command runs, so that a wrong file costs no run. @return true if the header is to be
// written (the file is new or empty, or not a regular file: a FIFO, /dev/stdout); throws if the file holds
// something else.
bool history_needs_header(const OutputFile& history) {
  std::ostringstream header_line;
  csv::write_row(header_line, carbon::history_header());
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

// The devices the runs are measured on and their meter (energy, peak power, carbon and cost when asked for).
// Made before the command runs, so that bad flags cost no run.
struct Meters {
  device::DeviceSet devices;
  std::unique_ptr<carbon::CommandMeter> meter;
};

void open_meters(Meters& meters, const GlobalOptions& global, const MeasureFlags& flags,
                 const carbon::CarbonSourceOptions& carbon_source,
                 const std::optional<std::vector<int>>& gpu_indices) {
  meters.devices = open_devices(global, true, flags.cpus);
  const device::DeviceSet& devices = meters.devices;
  std::vector<device::Gpu*> gpus = value_or_throw(devices.select_gpus(gpu_indices));
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
  carbon::CommandMeterOptions options;
  options.sample_period = std::chrono::milliseconds(flags.interval_ms);
  if (flags.carbon.sources_given() > 0) {
    options.carbon = carbon_source;
  } else if (!flags.carbon.provider.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "measure: --carbon-provider needs --zone");
  }
  if (!flags.tariff.empty()) {
    options.tariff = value_or_throw(carbon::HourlyTariff::read_file(flags.tariff));
  }
  meters.meter = value_or_throw(
      carbon::CommandMeter::open(std::move(gpus), std::move(cpus), *devices.clock, std::move(options)));
}

std::string render_runs(const std::vector<carbon::CommandRun>& runs, const MeasureFlags& flags) {
  if (flags.repeat == 1) {
    switch (flags.format) {
      case Format::kText:
        return carbon::render_run_text(runs.front());
      case Format::kJson:
        return carbon::render_run_json(runs.front());
      case Format::kCsv:
        return carbon::render_run_csv(runs.front());
    }
  }
  switch (flags.format) {
    case Format::kText:
      return carbon::render_repeat_text(runs, flags.repeat);
    case Format::kJson:
      return carbon::render_repeat_json(runs, flags.repeat);
    case Format::kCsv:
      return carbon::render_repeat_csv(runs);
  }
  return {};
}

// --nodes: the command runs here, its energy is the fleet's (joule/fleet). No flag is silently ignored.
int run_measure_on_nodes(const GlobalOptions& global, const MeasureFlags& flags) {
  for (const auto& [given, flag] :
       {std::pair{global.sim.has_value() || global.daemon.has_value(), "--sim/--daemon"},
        std::pair{!flags.gpus.empty() || flags.cpus, "--gpus/--cpus"},
        std::pair{flags.carbon.sources_given() > 0 || !flags.tariff.empty(), "carbon and tariff flags"},
        std::pair{flags.repeat != 1 || !flags.append_csv.empty(), "-r/--append-csv"}}) {
    if (given) {
      throw Exception(
          ErrorCode::kInvalidArgument,
          fmt::format("measure --nodes: {} do not apply: the nodes' daemons serve every GPU and CPU "
                      "package they have, measured once",
                      flag));
    }
  }
  const auto nodes = value_or_throw(fleet::parse_nodes(flags.nodes));
  std::optional<OutputFile> output = open_output(flags.output, "-o");
  ChildSignals signals;  // before any thread exists (the fleet's connections)
  auto monitor = value_or_throw(fleet::FleetMonitor::connect(nodes, flags.fleet_options));
  auto run = value_or_throw(fleet::run_on_nodes(*monitor, flags.command, signals));
  const std::string text = flags.format == Format::kJson  ? fleet::render_fleet_run_json(run)
                           : flags.format == Format::kCsv ? fleet::render_fleet_run_csv(run)
                                                          : fleet::render_fleet_run_text(run);
  if (output) {
    write_or_report(*output, text, true);
  } else {
    std::cerr << text << std::flush;
  }
  return run.exit_code;
}

int run_measure(const GlobalOptions& global, const MeasureFlags& flags) {
  if (flags.command.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "measure: no command given (usage: joule measure [OPTIONS] -- CMD ARGS…)");
  }
  if (!flags.nodes.empty()) {
    return run_measure_on_nodes(global, flags);
  }
  refuse_node_flags_without_nodes(flags.fleet_options.connection, "measure");
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
  Meters meters;
  open_meters(meters, global, flags, carbon_source, gpu_indices);

  std::vector<carbon::CommandRun> runs;
  for (int run = 0; run < flags.repeat; ++run) {
    auto measured = meters.meter->run(flags.command, signals);
    if (!measured) {
      // Shells' convention: 127 for a command that does not exist, 126 for one that cannot be executed.
      const Error& error = measured.error();
      if (error.code() == ErrorCode::kNotFound || error.code() == ErrorCode::kPermissionDenied) {
        std::cerr << fmt::format("joule: error: {}\n", error.message());
        return error.code() == ErrorCode::kNotFound ? 127 : 126;
      }
      throw Exception(error);
    }
    const int exit_code = measured->exit_code;
    runs.push_back(std::move(*measured));
    if (exit_code != 0 && run + 1 < flags.repeat) {
      // A failed run's figures are not a sample of the same work: stop, report what ran.
      log().warn("run {} of {} exited with {}: not repeating further", run + 1, flags.repeat, exit_code);
      break;
    }
  }
  meters.meter->stop();

  // A file that cannot be written now (disk full, folder removed meanwhile) loses nothing: what it would
  // have held goes to stderr instead, and the exit code stays the command's.
  if (history) {
    write_or_report(*history, carbon::history_rows(runs, history_header_needed), true);
  }
  const std::string text = render_runs(runs, flags);
  if (output) {
    write_or_report(*output, text, true);
  } else {
    std::cerr << text << std::flush;
  }
  return runs.back().exit_code;
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
      ->add_option("--nodes", flags->nodes,
                   "Measure the nodes' GPUs and CPUs through their daemons instead of this node's: "
                   "NAME=ADDRESS,… with Unix sockets or HOST:PORT of network listeners (one window on all at "
                   "once; docs/fleet.md)")
      ->option_text("LIST");
  add_node_connection_options(*command, flags->fleet_options.connection);
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
