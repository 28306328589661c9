// SPDX-License-Identifier: Apache-2.0
// `joule power`: stream power readings with UTC timestamps, or (--serve) export them to Prometheus.
#include <cerrno>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include "joule/carbon/signal.hpp"
#include "joule/core/csv.hpp"
#include "joule/core/signals.hpp"
#include "joule/device/inventory.hpp"
#include "joule/measure/power_sampler.hpp"
#include "joule/metrics/device_exporter.hpp"
#include "joule/metrics/http_listener.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct PowerFlags {
  int interval_ms = 1000;
  double duration_s = 0;  // 0: until interrupted
  std::string gpus;
  bool cpus = false;
  bool telemetry = false;  // text: also temperature, clocks, utilisation (CSV and JSON always have them)
  Format format = Format::kText;
  std::string serve;  // HOST:PORT of /metrics; empty: print readings
  // Where the carbon metrics' intensity comes from: --carbon-intensity, --carbon-trace, --zone (+ provider),
  // --country.
  carbon::CarbonSourceOptions carbon;
  double carbon_refresh_s = 300;  // how often a trace or provider is asked for the current intensity
};

// The telemetry columns of CSV and JSON, after power_w (docs/measure.md).
constexpr const char* kCsvHeader =
    "timestamp,device,power_w,temperature_c,sm_clock_mhz,memory_clock_mhz,gpu_utilization_pct,"
    "memory_utilization_pct,clock_event_reasons,memory_power_w";

// Adds the telemetry fields to a JSON line; a reading the device does not give is null.
void telemetry_json(const std::optional<device::GpuTelemetry>& reading, nlohmann::json& line) {
  for (const auto field : device::telemetry_fields()) {
    line[std::string(device::telemetry_field_name(field))] =
        reading ? device::telemetry_value_json(*reading, field) : nlohmann::json(nullptr);
  }
}

// The channels `joule power` samples: the chosen GPUs, then (--cpus) each CPU package and its DRAM.
struct PowerChannels {
  std::vector<measure::PowerChannel> channels;
  std::vector<std::string> names;
  std::vector<device::Gpu*> gpus;  // the GPU of each channel, nullptr for CPU channels
};

PowerChannels power_channels(const device::DeviceSet& devices, const std::vector<device::Gpu*>& gpus,
                             bool cpus) {
  PowerChannels out;
  for (auto* gpu : gpus) {
    out.channels.push_back(measure::gpu_power_channel(*gpu));
    out.names.push_back(fmt::format("gpu{}", gpu->info().index));
    out.gpus.push_back(gpu);
  }
  if (cpus) {
    if (devices.cpus.empty()) {
      throw Exception(ErrorCode::kNotFound, fmt::format("--cpus: {}", devices.why_no_cpus()));
    }
    for (const auto& cpu : devices.cpus) {
      out.channels.push_back(measure::cpu_power_channel(*cpu, *devices.clock));
      out.names.push_back(fmt::format("cpu{}", cpu->info().index));
      out.gpus.push_back(nullptr);
      if (cpu->info().has_dram) {
        out.channels.push_back(measure::cpu_power_channel(*cpu, *devices.clock, true));
        out.names.push_back(fmt::format("dram{}", cpu->info().index));
        out.gpus.push_back(nullptr);
      }
    }
  }
  if (out.channels.empty()) {
    throw Exception(ErrorCode::kNotFound, fmt::format("power: nothing to sample: {}", devices.why_no_gpus()));
  }
  return out;
}

// The exporter's options from the flags. `metrics` does not depend on `carbon`: the carbon signal is handed
// over as a callback, refreshed on the exporter's timer when it is a trace or a provider.
// @param carbon_source the flags' carbon source, its --country resolved.
metrics::DeviceExporterOptions exporter_options(const PowerFlags& flags,
                                                const carbon::CarbonSourceOptions& carbon_source,
                                                Clock& clock) {
  metrics::DeviceExporterOptions options;
  options.address = flags.serve;
  options.flag = "power: --serve";
  options.name = "power";
  if (flags.carbon.sources_given() > 0) {
    std::shared_ptr<carbon::CarbonSignal> signal =
        value_or_throw(carbon::make_carbon_signal(carbon_source, clock));
    options.carbon = metrics::CarbonIntensitySource{
        .latest = [signal]() -> Result<double> { return JOULE_TRY(signal->latest()).intensity_g_per_kwh; },
        .description = signal->describe()};
    const bool constant = flags.carbon.intensity_g_per_kwh || !flags.carbon.country.empty();
    options.carbon_refresh_s = constant ? 0 : flags.carbon_refresh_s;
  }
  return options;
}

// @return one tick's readings in the --format (text: one line for all channels, with its timestamp).
std::string readings_text(const PowerFlags& flags, const PowerChannels& channels,
                          const measure::PowerSampler& sampler, const std::string& timestamp) {
  std::string line;
  for (size_t i = 0; i < channels.names.size(); ++i) {
    const auto sample = sampler.latest(i);
    // Energy-derived CPU channels have no reading until their second tick.
    const std::string watts = sample ? fmt::format("{:.3f}", mw_to_w(sample->power_mw)) : std::string();
    std::optional<device::GpuTelemetry> reading;
    if (channels.gpus[i] != nullptr && (flags.format != Format::kText || flags.telemetry)) {
      reading = channels.gpus[i]->telemetry();
    }
    if (flags.format == Format::kCsv) {
      line += fmt::format("{},{},{},{}\n", timestamp, channels.names[i], watts,
                          device::telemetry_csv_cells(reading));
    } else if (flags.format == Format::kJson) {
      nlohmann::json json_line = {{"timestamp", timestamp}, {"device", channels.names[i]}};
      json_line["power_w"] = sample ? nlohmann::json(mw_to_w(sample->power_mw)) : nlohmann::json(nullptr);
      telemetry_json(reading, json_line);
      line += json_line.dump() + "\n";
    } else {
      line += fmt::format("  {} {:>9} W{}", channels.names[i], watts.empty() ? "-" : watts,
                          reading ? device::telemetry_columns_text(*reading) : std::string());
    }
  }
  return flags.format == Format::kText ? timestamp + line + "\n" : line;
}

void print_summary(const PowerFlags& flags, const PowerChannels& channels,
                   const measure::PowerSampler& sampler, Nanos start, Nanos end) {
  std::cout << fmt::format("\n{:.3f} s sampled every {} ms\n", to_seconds(end - start), flags.interval_ms);
  for (size_t i = 0; i < channels.names.size(); ++i) {
    const auto energy = sampler.energy_j(i, start, end);
    if (energy) {
      std::cout << fmt::format("  {:<6} {:>12.3f} J  avg {:>8.1f} W  ({})\n", channels.names[i], *energy,
                               to_seconds(end - start) > 0 ? *energy / to_seconds(end - start) : 0.0,
                               sampler.label(i));
    }
  }
}

int run_power(const GlobalOptions& global, const PowerFlags& flags) {
  if (flags.carbon.sources_given() > 0 && flags.serve.empty()) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        "power: --carbon-intensity, --carbon-trace, --zone and --country are only used by the metrics: add "
        "--serve HOST:PORT");
  }
  if (!flags.serve.empty()) {
    value_or_throw(metrics::parse_host_port(flags.serve, "power: --serve"));
  }
  const carbon::CarbonSourceOptions carbon_source = resolve_carbon_source(flags.carbon);
  std::optional<std::vector<int>> gpu_indices;
  if (!flags.gpus.empty()) {
    gpu_indices = value_or_throw(parse_index_list(flags.gpus, "--gpus"));
  }
  // Block the stop signals before any device thread exists, so that every thread inherits the mask and
  // the signals reach only the sampling loop's wait.
  BlockedSignals stop({SIGINT, SIGTERM});
  const device::DeviceSet devices = open_devices(global, true, flags.cpus);
  const auto gpus = value_or_throw(devices.select_gpus(gpu_indices));
  PowerChannels channels = power_channels(devices, gpus, flags.cpus);
  Clock& clock = *devices.clock;
  const Nanos period = std::chrono::milliseconds(flags.interval_ms);
  measure::PowerSampler sampler(std::move(channels.channels), clock, period);
  // With --serve the scrape is the output: readings are not printed (a service's log would fill with them),
  // only where to scrape and, at the end, the summary.
  std::unique_ptr<metrics::DeviceExporter> exporter;
  if (!flags.serve.empty()) {
    std::vector<device::Cpu*> cpus;
    for (const auto& cpu : devices.cpus) {
      cpus.push_back(cpu.get());
    }
    exporter =
        value_or_throw(metrics::DeviceExporter::start(gpus, flags.cpus ? cpus : std::vector<device::Cpu*>{},
                                                      clock, exporter_options(flags, carbon_source, clock)));
    // Tests and scripts read the port from this line (with HOST:0 it is the one chosen).
    std::cout << fmt::format("joule power: serving metrics of {} GPU{} on {}\n", gpus.size(),
                             gpus.size() == 1 ? "" : "s", exporter->url())
              << std::flush;
  } else if (flags.format == Format::kCsv) {
    std::cout << kCsvHeader << '\n';
  }
  const Nanos start = clock.now();
  const Nanos deadline = start + from_seconds(flags.duration_s);
  for (Nanos next = start;;) {
    sampler.sample_now();
    if (!exporter) {
      std::cout << readings_text(flags, channels, sampler, format_iso8601_utc(clock.to_unix_ns(clock.now())))
                << std::flush;
    }
    next += period;
    if ((flags.duration_s > 0 && next > deadline) || stop.wait(next - clock.now())) {
      break;  // the duration is over, or a stop signal arrived
    }
  }
  const Nanos end = clock.now();
  if (exporter) {
    exporter->stop();
  }
  if (flags.format == Format::kText) {
    print_summary(flags, channels, sampler, start, end);
  }
  return 0;
}

}  // namespace

void add_power_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<PowerFlags>();
  auto* command =
      app.add_subcommand("power", "Print power readings with ISO-8601 UTC timestamps until Ctrl-C");
  command->add_option("--interval-ms", flags->interval_ms, "Sampling period in ms (default 1000)")
      ->check(number(quantity::sampling_period_ms()))
      ->option_text("N");
  command
      ->add_option("--duration-s", flags->duration_s, "Stop after S seconds (default: run until interrupted)")
      ->check(number(duration_rule()))
      ->option_text("S");
  command->add_option("--gpus", flags->gpus, "GPU indices, e.g. 0,1 (default: all visible)")
      ->option_text("LIST");
  command->add_flag("--cpus", flags->cpus, "Also print CPU package and DRAM power (RAPL)");
  command->add_flag("--telemetry", flags->telemetry,
                    "Text output: also temperature, SM clock and utilisation (CSV and JSON always have every "
                    "reading; see docs/measure.md)");
  command
      ->add_option("--serve", flags->serve,
                   "Serve Prometheus metrics on http://HOST:PORT/metrics instead of printing readings "
                   "(port 0: any free port; see docs/metrics.md)")
      ->option_text("HOST:PORT");
  command
      ->add_option("--carbon-intensity", flags->carbon.intensity_g_per_kwh,
                   "Grid carbon intensity in gCO2eq/kWh, for the carbon metrics of --serve")
      ->check(number(quantity::carbon_intensity_g_per_kwh()))
      ->option_text("G_PER_KWH");
  command
      ->add_option(
          "--carbon-trace", flags->carbon.trace_path,
          "Carbon metrics from a CSV trace (timestamp,carbon_intensity_g_per_kwh) at the current time")
      ->option_text("FILE");
  command
      ->add_option("--zone", flags->carbon.zone,
                   "Carbon metrics from a live provider for this zone (docs/carbon.md)")
      ->option_text("ZONE");
  command
      ->add_option(
          "--country", flags->carbon.country,
          "Carbon metrics at a country's yearly average intensity: ISO 3166-1 code (DEU or DE), or auto "
          "to infer it from the timezone or locale")
      ->option_text("CODE|auto");
  command
      ->add_option("--carbon-provider", flags->carbon.provider,
                   "electricitymaps (default), watttime or uk; with --zone")
      ->option_text("NAME");
  command
      ->add_option("--carbon-refresh-s", flags->carbon_refresh_s,
                   "How often --carbon-trace or --zone is read again, seconds (default 300)")
      ->check(number(duration_rule()))
      ->option_text("S");
  add_format_option(*command, flags->format, {Format::kText, Format::kCsv, Format::kJson});
  set_examples(*command, {"joule power --interval-ms 100 --duration-s 10 --format csv",
                          "joule power --serve 127.0.0.1:9400 --country auto"});
  command->callback([&global, &exit_code, flags] { exit_code = run_power(global, *flags); });
}

}  // namespace joule::cli
