// SPDX-License-Identifier: Apache-2.0
#include "common.hpp"

#include <charconv>
#include <iostream>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "joule/core/strings.hpp"
#include "joule/metrics/identity.hpp"

namespace joule::cli {

namespace {
std::string_view format_name(Format format) {
  switch (format) {
    case Format::kText:
      return "text";
    case Format::kJson:
      return "json";
    case Format::kCsv:
      return "csv";
  }
  return "text";
}
}  // namespace

CLI::Option* add_format_option(CLI::App& command, Format& format, const std::vector<Format>& allowed) {
  std::map<std::string, Format> names;
  std::vector<std::string> listed;
  for (const Format f : allowed) {
    names.emplace(std::string(format_name(f)), f);
    listed.emplace_back(format_name(f));
  }
  format = allowed.front();
  const std::string choices = fmt::format("{}", fmt::join(listed, ", "));
  // The name becomes the enum's number for CLI11's conversion; anything else is refused in words.
  CLI::Validator to_format(
      [names, choices](std::string& value) -> std::string {
        const auto found = names.find(to_lower(value));
        if (found == names.end()) {
          return fmt::format("must be one of {} (got '{}')", choices, value);
        }
        value = std::to_string(static_cast<int>(found->second));
        return {};
      },
      "");
  return command
      .add_option("--format", format, fmt::format("Output format: {} (default {})", choices, listed[0]))
      ->transform(to_format)
      ->option_text("FORMAT");
}

Result<device::DiscoveryOptions> discovery_options(const GlobalOptions& global) {
  auto options = device::DiscoveryOptions::from_environment();
  if (!options) {
    return options;
  }
  if (global.sim) {
    options->sim_spec = *global.sim;
  }
  if (global.daemon) {
    options->daemon_socket = *global.daemon;
  }
  return options;
}

device::DeviceSet open_devices(const GlobalOptions& global, bool gpus, bool cpus) {
  auto options = value_or_throw(discovery_options(global));
  options.gpus = gpus;
  options.cpus = cpus;
  device::DeviceSet devices = value_or_throw(device::discover(options));
  // The daemon's GPUs were asked for by name: without them the work would go unmeasured or uncontrolled,
  // and nobody would notice in a batch job. (A daemon that serves only CPU energy, asked for it, will do.)
  const bool daemon_cpus = !devices.cpus.empty() && devices.cpus.front()->info().backend == "daemon";
  if (gpus && options.daemon_socket && devices.gpus.empty() && !daemon_cpus) {
    const std::string asked = global.daemon ? fmt::format("--daemon {}", *options.daemon_socket)
                                            : fmt::format("JOULE_DAEMON_SOCKET={}", *options.daemon_socket);
    throw Exception(ErrorCode::kNotFound, fmt::format("{}: {}", asked, devices.why_no_gpus()));
  }
  return devices;
}

CLI::Validator number(NumberRule rule) {
  return CLI::Validator(
      [rule](std::string& text) -> std::string {
        const std::string_view trimmed = trim(text);
        double value = 0;
        const auto [end, ec] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
        if (ec != std::errc() || end != trimmed.data() + trimmed.size()) {
          return {};  // not a number: CLI11's conversion says so
        }
        const auto checked = check_number(value, rule, "");
        return checked ? std::string() : checked.error().message();
      },
      "");
}

namespace {

// @return the subcommands used, as "carbon replay", and the last of them (`app` itself if none).
std::pair<std::string, const CLI::App*> used_command(const CLI::App& app) {
  std::string path;
  const CLI::App* command = &app;
  for (auto used = command->get_subcommands(); !used.empty(); used = command->get_subcommands()) {
    command = used.front();
    path += path.empty() ? command->get_name() : " " + command->get_name();
  }
  return {path, command};
}

}  // namespace

void refuse_unused_device_flags(const CLI::App& app, const GlobalOptions& global) {
  if (!global.sim && !global.daemon) {
    return;
  }
  const std::string path = used_command(app).first;
  // The commands that open devices, and why each other one does not.
  static const std::map<std::string, std::string> no_device_commands = {
      {"simulate", "it replays the Zeus traces (choose the GPU with --gpu)"},
      {"plan", "it plans from a profile file, on no device"},
      {"carbon replay",
       "it simulates its own GPU from the Zeus traces (choose it with --gpu and --workload)"},
      {"carbon forecast", "it uses no device"},
      {"carbon intensity", "it uses no device"},
      {"carbon countries", "it uses no device"},
      {"infer replay", "it simulates its own GPUs (choose them with --gpu, --model and --tp)"},
      {"cluster replay", "it simulates its own cluster (from the Zeus traces and the serving model)"},
      {"serve", "the server opens no device (its clients measure theirs)"},
      {"job next", "it talks to a server and opens no device"},
      {"job report", "it talks to a server and opens no device"},
      {"job end", "it talks to a server and opens no device"},
      {"job status", "it talks to a server and opens no device"},
      {"job delete", "it talks to a server and opens no device"},
  };
  const auto found = no_device_commands.find(path);
  if (found == no_device_commands.end()) {
    return;
  }
  throw Exception(ErrorCode::kInvalidArgument,
                  fmt::format("{} does not apply to 'joule {}': {}", global.sim ? "--sim" : "--daemon", path,
                              found->second));
}

void apply_metric_labels(const CLI::App& app, const GlobalOptions& global) {
  if (!global.labels.empty()) {
    // The commands that export metrics, and the flag that makes them do so ("": always). --label anywhere
    // else would be silently ignored.
    static const std::map<std::string, std::string> exporters = {{"power", "--serve"},
                                                                 {"daemon", "--metrics"},
                                                                 {"serve", ""},
                                                                 {"infer replay", "--metrics-out"},
                                                                 {"infer bench", "--metrics-out"}};
    const auto [path, command] = used_command(app);
    const auto found = exporters.find(path);
    const CLI::Option* flag = found == exporters.end() || found->second.empty()
                                  ? nullptr
                                  : command->get_option_no_throw(found->second);
    if (found == exporters.end() || (!found->second.empty() && (flag == nullptr || flag->count() == 0))) {
      throw Exception(
          ErrorCode::kInvalidArgument,
          fmt::format("--label applies only to exported metrics, which 'joule {}' has none of: use it "
                      "with joule power --serve, joule daemon --metrics, joule serve, or joule infer "
                      "replay|bench --metrics-out",
                      path));
    }
  }
  auto labels =
      metrics::merge_identity_labels(metrics::detect_identity_labels_from_environment(), global.labels);
  if (!labels) {
    throw Exception(ErrorCode::kInvalidArgument, fmt::format("--label: {}", labels.error().message()));
  }
  metrics::set_default_identity_labels(std::move(*labels));
}

Result<std::vector<int>> parse_index_list(const std::string& text, std::string_view flag) {
  std::vector<int> indices;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        std::string_view(text).substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int value = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 0) {
      return fail(ErrorCode::kInvalidArgument, "{} '{}': '{}' is not a device index (expected e.g. 0,1,3)",
                  flag, text, item);
    }
    indices.push_back(value);
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  return indices;
}

carbon::CountryChoice resolve_country(const std::string& country) {
  return name_or_throw(carbon::choose_country(carbon::CountryTable::builtin(), country,
                                              carbon::LocaleSources::from_process()));
}

carbon::CarbonSourceOptions resolve_carbon_source(carbon::CarbonSourceOptions source) {
  if (!source.country.empty()) {
    source.country = resolve_country(source.country).country.iso3;
  }
  return source;
}

std::optional<OutputFile> open_output(const std::string& path, std::string_view flag, OutputMode mode) {
  if (path.empty()) {
    return std::nullopt;
  }
  auto output = OutputFile::open(path, flag, mode);
  if (!output) {
    throw Exception(ErrorCode::kInvalidArgument, output.error().message());
  }
  return std::move(*output);
}

bool write_or_report(OutputFile& output, std::string_view content, bool keep_on_stderr) {
  const auto written = output.write(content);
  if (written) {
    return true;
  }
  std::cerr << fmt::format("joule: error: {}{}\n", written.error().message(),
                           keep_on_stderr ? "; here it is instead:" : "");
  if (keep_on_stderr) {
    std::cerr << content << std::flush;
  }
  return false;
}

void add_node_connection_options(CLI::App& command, device::DaemonClientOptions& options) {
  command
      .add_option("--node-ca", options.tls_ca_file,
                  "The authority of the nodes' daemon certificates, for HOST:PORT nodes (environment: "
                  "JOULE_DAEMON_CA; default: the system's)")
      ->option_text("FILE");
  command
      .add_option(
          "--node-cert", options.tls_certificate_file,
          "This client's certificate for mutual TLS with HOST:PORT nodes (environment: JOULE_DAEMON_CERT)")
      ->option_text("FILE");
  command
      .add_option("--node-key", options.tls_private_key_file,
                  "The private key of --node-cert (environment: JOULE_DAEMON_KEY)")
      ->option_text("FILE");
  command
      .add_option("--node-token-file", options.token_file,
                  "A file holding the bearer token for HOST:PORT nodes, readable by this user only "
                  "(environment: JOULE_DAEMON_TOKEN_FILE)")
      ->option_text("FILE");
  command.add_flag("--node-plain-tcp", options.plain_tcp,
                   "Reach HOST:PORT nodes over plain TCP (daemons with --allow-plain-loopback, or a tunnel)");
}

void refuse_node_flags_without_nodes(const device::DaemonClientOptions& options, std::string_view command) {
  if (!options.tls_ca_file.empty() || !options.tls_certificate_file.empty() ||
      !options.tls_private_key_file.empty() || !options.token_file.empty() || options.plain_tcp) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: --node-ca, --node-cert, --node-key, --node-token-file and --node-plain-tcp "
                    "are for --nodes HOST:PORT,…: give the nodes too",
                    command));
  }
}

}  // namespace joule::cli
