// SPDX-License-Identifier: Apache-2.0
// Shared plumbing of the `joule` subcommands: global options, device discovery, output formats.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "joule/carbon/country.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/duration.hpp"
#include "joule/core/error.hpp"
#include "joule/core/file.hpp"
#include "joule/core/validate.hpp"
#include "joule/device/daemon_client_options.hpp"
#include "joule/device/discovery.hpp"

namespace joule::cli {

/// Options every command accepts.
/// joule's version, as `joule --version` prints it and reports carry it.
inline constexpr const char* kJouleVersion = "0.1.0";

struct GlobalOptions {
  std::optional<std::string> sim;     ///< --sim SPEC (else JOULE_SIM)
  std::optional<std::string> daemon;  ///< --daemon SOCKET (else JOULE_DAEMON_SOCKET)
  std::string log_level = "warn";     ///< --log-level
  std::vector<std::string> labels;    ///< --label NAME=VALUE, repeatable: identity labels of the metrics
  /// Everything after the first "--" on the command line (the command `joule measure` runs), if "--"
  /// was given. CLI11 never sees these arguments, so the command's own flags cannot be taken for ours.
  std::optional<std::vector<std::string>> after_dashes;
};

enum class Format { kText, kJson, kCsv };

/// Adds `--format` accepting the given formats (the first is the default).
CLI::Option* add_format_option(CLI::App& command, Format& format, const std::vector<Format>& allowed);

/// @return the discovery options from the environment with the global flags applied.
Result<device::DiscoveryOptions> discovery_options(const GlobalOptions& global);

/// Discovers devices as the global options say. @throws joule::Exception on bad configuration.
device::DeviceSet open_devices(const GlobalOptions& global, bool gpus = true, bool cpus = true);

/// A CLI11 check that the flag's value is a number obeying `rule` (joule::check_number, the same rule the
/// server and the Python bindings apply): "--duration-s must be a finite number > 0, got nan". Text that is
/// not a number at all is left to CLI11's conversion ("--x expects a number, got 'abc'").
CLI::Validator number(NumberRule rule);

/// @return `rule` with its lower bound excluded (a quantity that must be > 0 here, e.g. a step).
inline NumberRule above_zero(NumberRule rule) {
  rule.min_exclusive = true;
  return rule;
}

/// @return the value of a lookup of a name typed on the command line (a GPU or model name, a workload, a
/// country code): an unknown name (kNotFound) is a usage error like any bad value (kInvalidArgument, exit
/// 2), with the same message. @throws joule::Exception.
template <class T>
T name_or_throw(Result<T> result) {
  if (!result && result.error().code() == ErrorCode::kNotFound) {
    throw Exception(ErrorCode::kInvalidArgument, result.error().message());
  }
  return value_or_throw(std::move(result));
}

/// Resolves `country` (--country: an ISO 3166-1 code, or "auto" to infer it from the timezone or the
/// locale) with carbon::choose_country(), before any work: an unknown code is a usage error (exit 2).
/// @return the choice (its describe() says how it was chosen). @throws joule::Exception.
carbon::CountryChoice resolve_country(const std::string& country);

/// @return `source` with its --country (if any) resolved with resolve_country() to an ISO 3166-1 alpha-3
/// code, before any work: an unknown code is a usage error (exit 2). @throws joule::Exception.
carbon::CarbonSourceOptions resolve_carbon_source(carbon::CarbonSourceOptions source);

/// Parses "0,2,3" into indices; kInvalidArgument naming `flag` for anything else.
Result<std::vector<int>> parse_index_list(const std::string& text, std::string_view flag);

/// Opens the output `path` given to `flag` (OutputFile::open), before the command's work: nullopt for an
/// empty path (the flag was not given). @throws joule::Exception kInvalidArgument with OutputFile::open()'s
/// message ("--plot out/x.svg: the folder out does not exist (create it first)"): a path that cannot be
/// written is a bad value, refused before anything runs (exit 2).
std::optional<OutputFile> open_output(const std::string& path, std::string_view flag,
                                      OutputMode mode = OutputMode::kReplace);

/// Writes `content` to `output` at the end of a command. A failure does not throw, so that the command's
/// other outputs are still written and its exit code is kept: it prints "joule: error: MESSAGE" on stderr,
/// followed, when `keep_on_stderr` (a measurement that cannot be made again), by "; here it is instead:"
/// and the content itself. @return whether it was written.
bool write_or_report(OutputFile& output, std::string_view content, bool keep_on_stderr);

/// Throws kInvalidArgument if --sim or --daemon was given to a command that opens no device (`simulate`,
/// `plan`, `carbon …`, `infer replay`, `serve`, `job` other than `register`), saying why and what to use
/// instead: a flag is never silently ignored. Call once parsing is complete, before the command runs.
void refuse_unused_device_flags(const CLI::App& app, const GlobalOptions& global);

/// Sets the identity labels every metric of this process carries (metrics::set_default_identity_labels):
/// those the environment names (Slurm, Kubernetes downward API), then --label. Throws kInvalidArgument for
/// a malformed --label, or --label on a command that exports no metrics. Call once parsing is complete.
void apply_metric_labels(const CLI::App& app, const GlobalOptions& global);

/// Registers each subcommand; each returns the process exit code when run.
/// The flags that reach network nodes' daemons (HOST:PORT in --nodes): --node-ca, --node-cert, --node-key,
/// --node-token-file, --node-plain-tcp, into `options` (their environment variables apply when not given).
void add_node_connection_options(CLI::App& command, device::DaemonClientOptions& options);
/// Throws kInvalidArgument if a flag of add_node_connection_options() was given to `command` without --nodes.
void refuse_node_flags_without_nodes(const device::DaemonClientOptions& options, std::string_view command);

void add_devices_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_measure_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_power_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_demo_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_simulate_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_plan_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_daemon_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_serve_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_job_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_carbon_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_infer_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_counters_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_fleet_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_probe_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_cluster_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace joule::cli
