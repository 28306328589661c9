// SPDX-License-Identifier: Apache-2.0
// `joule daemon`: serve this machine's GPUs and CPU energy counters to unprivileged processes over a Unix
// socket (docs/daemon.md).
#include "joule/daemon/daemon.hpp"

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include "joule/core/signals.hpp"
#include "joule/daemon/metrics.hpp"
#include "joule/metrics/device_exporter.hpp"
#include "joule/metrics/http_listener.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

// The flags: the daemon's own options are parsed straight into the DaemonOptions handed to Daemon::start
// (their defaults are the library's); the rest are converted by run_daemon.
struct DaemonFlags {
  daemon::DaemonOptions options;
  std::string socket;  // --socket; else JOULE_DAEMON_SOCKET; else the default
  std::string others = "read";
  std::string metrics;                     // HOST:PORT of /metrics; empty: none
  std::optional<double> carbon_intensity;  // gCO2eq/kWh, for the carbon metrics
  std::string country;                     // --country CODE|auto: the metrics' intensity, a yearly average
};

std::string signal_name(int signal_number) {
  const char* abbreviation = ::sigabbrev_np(signal_number);
  return abbreviation != nullptr ? fmt::format("SIG{}", abbreviation) : std::to_string(signal_number);
}

// @return the metrics' constant carbon intensity from --carbon-intensity or --country (said on stderr).
std::optional<double> metrics_carbon_intensity(const DaemonFlags& flags) {
  if ((flags.carbon_intensity || !flags.country.empty()) && flags.metrics.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("daemon: {} is only used by the metrics: add --metrics HOST:PORT",
                                flags.carbon_intensity ? "--carbon-intensity" : "--country"));
  }
  if (flags.carbon_intensity && !flags.country.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "daemon: give --carbon-intensity or --country, not both");
  }
  if (!flags.country.empty()) {
    const carbon::CountryChoice choice = resolve_country(flags.country);
    std::cerr << fmt::format("joule daemon: {}\n", choice.describe());
    return choice.country.intensity_g_per_kwh;
  }
  return flags.carbon_intensity;
}

// @return the line that says which CPU energy the daemon serves; sets options.no_cpus_reason.
std::string cpu_line(const device::DeviceSet& devices, daemon::DaemonOptions& options) {
  std::string line;
  for (const auto& report : devices.reports) {
    if (report.kind == "cpu" && !report.ok) {
      options.no_cpus_reason = report.detail;
      line = fmt::format("no CPU energy to serve: {}", report.detail);
    } else if (report.kind == "cpu") {
      line = fmt::format("serving the energy of {} CPU package{} (RAPL at {})", report.devices,
                         report.devices == 1 ? "" : "s", report.detail);
    }
  }
  return line;
}

int run_daemon(const GlobalOptions& global, const DaemonFlags& flags) {
  daemon::DaemonOptions options = flags.options;
  const char* socket_env = std::getenv("JOULE_DAEMON_SOCKET");
  options.socket_path = !flags.socket.empty()                            ? flags.socket
                        : (socket_env != nullptr && *socket_env != '\0') ? std::string(socket_env)
                                                                         : options.socket_path;
  // The daemon serves the machine's own GPUs: never GPUs of another daemon (nor of itself).
  ::unsetenv("JOULE_DAEMON_SOCKET");
  options.access.others = flags.others == "none"      ? daemon::Right::kNone
                          : flags.others == "control" ? daemon::Right::kControl
                                                      : daemon::Right::kRead;
  const std::optional<double> carbon_intensity = metrics_carbon_intensity(flags);
  if (!flags.metrics.empty()) {
    value_or_throw(metrics::parse_host_port(flags.metrics, "daemon: --metrics"));
  }

  // Blocked before any thread exists, so that the stop signals only ever reach the daemon's signalfd: a
  // signal must never kill the daemon before it has restored what its clients changed.
  BlockedSignals stop({SIGINT, SIGTERM, SIGHUP});
  GlobalOptions own_devices = global;
  own_devices.daemon.reset();
  // The CPUs' RAPL counters too (JOULE_POWERCAP_ROOT moves their tree): only root may read them since
  // Linux 5.10, so the daemon serves them to its peers. A machine without them still serves its GPUs.
  const device::DeviceSet devices = open_devices(own_devices, true, true);
  if (devices.gpus.empty() && devices.cpus.empty()) {
    throw Exception(ErrorCode::kNotFound, fmt::format("daemon: nothing to serve: {}; {}",
                                                      devices.why_no_gpus(), devices.why_no_cpus()));
  }
  std::vector<device::Gpu*> gpus;
  for (const auto& gpu : devices.gpus) {
    gpus.push_back(gpu.get());
  }
  for (const auto& cpu : devices.cpus) {
    options.cpus.push_back(cpu.get());
  }
  const std::string cpus_served = cpu_line(devices, options);
  // The GPUs', CPUs' and the daemon's metrics on their own HTTP listener (the socket speaks its protocol).
  std::unique_ptr<metrics::DeviceExporter> exporter;
  if (!flags.metrics.empty()) {
    metrics::DeviceExporterOptions exporter_options;
    exporter_options.address = flags.metrics;
    exporter_options.flag = "daemon: --metrics";
    exporter_options.name = "daemon";
    exporter_options.carbon_intensity_g_per_kwh = carbon_intensity;
    exporter = value_or_throw(
        metrics::DeviceExporter::start(gpus, options.cpus, *devices.clock, std::move(exporter_options)));
    options.metrics = std::make_shared<daemon::DaemonMetrics>(exporter->registry());
  }
  auto daemon = value_or_throw(daemon::Daemon::start(gpus, *devices.clock, std::move(options)));
  std::cout << fmt::format("joule daemon: serving {} GPU{} on {} (protocol {}, lease {} s, audit log {})\n",
                           gpus.size(), gpus.size() == 1 ? "" : "s", daemon->socket_path(),
                           device::daemon_protocol::kVersion, flags.options.lease_s, daemon->audit_log_path())
            << fmt::format("joule daemon: {}\n", daemon->access().describe())
            << fmt::format("joule daemon: {}\n", cpus_served);
  if (exporter) {
    std::cout << fmt::format("joule daemon: metrics on {}\n", exporter->url());
  }
  for (const auto& address : daemon->network_addresses()) {
    std::cout << fmt::format(
        "joule daemon: network listener on {} ({}; SIGHUP reloads its files)\n", address,
        flags.options.network.tls_certificate_file.empty() ? "plain TCP, loopback only" : "TLS");
  }
  // Last, so that the lines before keep their places for the scripts that read them.
  std::cout << fmt::format("joule daemon: {}\n", daemon->job_energy_description()) << std::flush;
  // SIGHUP reloads the network listener's token file and TLS files (as sshd and nginx reload theirs;
  // systemctl reload sends it); without a listener it has nothing to reload and the daemon goes on.
  const auto stopped_by = value_or_throw(daemon->run({SIGINT, SIGTERM}, {SIGHUP}));
  daemon.reset();  // restores, closes, removes the socket
  if (exporter) {
    exporter->stop();
  }
  std::cout << fmt::format("joule daemon: stopped{}; every setting made through it is restored\n",
                           stopped_by ? " by " + signal_name(*stopped_by) : std::string())
            << std::flush;
  return 0;
}

// Who may do what, and the audit log of it.
void add_access_options(CLI::App& command, DaemonFlags& flags) {
  command
      .add_option("--allow-user", flags.options.access.control_users,
                  "Grant USER read and control (repeatable)")
      ->option_text("USER")
      ->allow_extra_args(false);
  command
      .add_option("--allow-group", flags.options.access.control_groups,
                  "Grant members of GROUP read and control (repeatable)")
      ->option_text("GROUP")
      ->allow_extra_args(false);
  command.add_option("--read-user", flags.options.access.read_users, "Grant USER read only (repeatable)")
      ->option_text("USER")
      ->allow_extra_args(false);
  command
      .add_option("--read-group", flags.options.access.read_groups,
                  "Grant members of GROUP read only (repeatable)")
      ->option_text("GROUP")
      ->allow_extra_args(false);
  command
      .add_option("--others", flags.others,
                  "Right of everyone else: none, read or control (default read; root always has control)")
      ->check(one_of({"none", "read", "control"}))
      ->option_text("RIGHT");
  command
      .add_option("--audit-log", flags.options.audit_log, "Append the audit log to PATH (default: stderr)")
      ->option_text("PATH");
  command
      .add_option("--audit-refusals-per-user", flags.options.audit_refusals_per_user,
                  fmt::format("Refused requests of one user written to the audit log per 10 s; the rest are "
                              "counted in one line (default {})",
                              flags.options.audit_refusals_per_user))
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N");
  command
      .add_option("--max-refusals-in-a-row", flags.options.max_refusals_in_a_row,
                  fmt::format("Close a connection whose last N requests were all refused (default {})",
                              flags.options.max_refusals_in_a_row))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
}

// The limits on connections and requests that keep one user from starving the others (docs/daemon.md).
void add_connection_limit_options(CLI::App& command, DaemonFlags& flags) {
  command
      .add_option("--max-connections", flags.options.max_connections,
                  fmt::format("Connections served at once; one more is told why and closed (default {})",
                              flags.options.max_connections))
      ->check(number(NumberRule{.min = 1, .max = 65536, .integer = true}))
      ->option_text("N");
  command
      .add_option("--max-connections-per-user", flags.options.max_connections_per_user,
                  fmt::format("Connections one user other than root may hold (default {})",
                              flags.options.max_connections_per_user))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--root-reserved-connections", flags.options.root_reserved_connections,
                  fmt::format("Of --max-connections, how many only root may take (default {})",
                              flags.options.root_reserved_connections))
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N");
  command
      .add_option("--hello-timeout-s", flags.options.hello_timeout_s,
                  fmt::format("Close a connection that sends no hello within S seconds (default {})",
                              flags.options.hello_timeout_s))
      ->check(number(NumberRule{.min = 0, .max = 3600, .min_exclusive = true}))
      ->option_text("S");
  command
      .add_option("--requests-per-turn", flags.options.requests_per_turn,
                  fmt::format("Requests of one user served per turn of the daemon's loop, root's first "
                              "(default {})",
                              flags.options.requests_per_turn))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--idle-timeout-s", flags.options.idle_timeout_s,
                  fmt::format("A connection that holds nothing and sends nothing for S seconds is idle "
                              "(default {})",
                              flags.options.idle_timeout_s))
      ->check(number(NumberRule{.min = 0, .max = 86400, .min_exclusive = true}))
      ->option_text("S");
  command
      .add_option("--max-idle-connections-per-user", flags.options.max_idle_connections_per_user,
                  fmt::format("Idle connections one user other than root may keep (default {})",
                              flags.options.max_idle_connections_per_user))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--max-idle-connections", flags.options.max_idle_connections,
                  fmt::format("Idle connections all users other than root may keep together (default {})",
                              flags.options.max_idle_connections))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
}

// The Prometheus endpoint and its carbon metrics.
void add_metrics_options(CLI::App& command, DaemonFlags& flags) {
  command
      .add_option("--metrics", flags.metrics,
                  "Serve Prometheus metrics of the GPUs and the daemon on http://HOST:PORT/metrics (port 0: "
                  "any free port; see docs/metrics.md)")
      ->option_text("HOST:PORT");
  command
      .add_option("--carbon-intensity", flags.carbon_intensity,
                  "Grid carbon intensity in gCO2eq/kWh, for the carbon metrics of --metrics")
      ->check(number(quantity::carbon_intensity_g_per_kwh()))
      ->option_text("G_PER_KWH");
  command
      .add_option(
          "--country", flags.country,
          "Carbon metrics of --metrics at a country's yearly average intensity: ISO 3166-1 code (DEU or "
          "DE), or auto to infer it from the timezone or locale")
      ->option_text("CODE|auto");
}

// The network listener (docs/fleet.md).
void add_network_options(CLI::App& command, DaemonFlags& flags) {
  auto& network = flags.options.network;
  command
      .add_option(
          "--listen", network.listen,
          "Also serve the protocol on the network at HOST:PORT, over TLS, to clients with a token or a "
          "client certificate (repeatable; port 0: any free port; see docs/fleet.md)")
      ->option_text("HOST:PORT");
  command
      .add_option("--tls-cert", network.tls_certificate_file,
                  "The daemon's certificate chain for --listen, PEM")
      ->option_text("FILE");
  command
      .add_option("--tls-key", network.tls_private_key_file,
                  "The private key of --tls-cert, PEM (root's or the daemon's own file, mode 0600 or 0400)")
      ->option_text("FILE");
  command
      .add_option("--tls-client-ca", network.tls_client_ca_file,
                  "Accept client certificates of this authority (mutual TLS): a client is the Common Name of "
                  "its certificate, given a scope by a `NAME SCOPE certificate` line of --tokens")
      ->option_text("FILE");
  command
      .add_option("--tokens", network.tokens_file,
                  "The network clients: NAME SCOPE TOKEN lines (scope read, control or admin; root's or the "
                  "daemon's own file, mode 0600 or 0400); reloaded on SIGHUP")
      ->option_text("FILE");
  command.add_flag("--allow-plain-loopback", network.allow_plain_loopback,
                   "Allow --listen without TLS, on a loopback address only (tests, SSH tunnels)");
  command
      .add_option("--max-handshakes", network.max_handshakes,
                  "TLS handshakes in progress at once; more new connections wait in the listen backlog "
                  "(default 64)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
}

}  // namespace

void add_daemon_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<DaemonFlags>();
  auto* command = app.add_subcommand(
      "daemon",
      "Serve this machine's GPUs and CPU energy counters (RAPL) to unprivileged processes over a Unix "
      "socket (run as root; see docs/daemon.md)");
  command
      ->add_option("--socket", flags->socket,
                   fmt::format("Unix socket to listen on (environment: JOULE_DAEMON_SOCKET; default {})",
                               device::daemon_protocol::kDefaultSocketPath))
      ->option_text("PATH");
  add_access_options(*command, *flags);
  command
      ->add_option("--lease-s", flags->options.lease_s,
                   "Restore a connection's settings after S seconds without a request (default 60)")
      ->check(number(NumberRule{.min = 0, .max = 86400, .min_exclusive = true}))
      ->option_text("S");
  command->add_flag("--allow-unprivileged", flags->options.allow_unprivileged,
                    "Serve real GPUs even when not running as root");
  command
      ->add_option("--job-energy-period-s", flags->options.job_energy_period_s,
                   fmt::format("Split the GPUs' energy among jobs (Slurm cgroups) every S seconds from the "
                               "driver's process samples, for job_energy; 0: off (default {})",
                               flags->options.job_energy_period_s))
      ->check(number(NumberRule{.min = 0, .max = 60}))
      ->option_text("S");
  add_connection_limit_options(*command, *flags);
  add_metrics_options(*command, *flags);
  add_network_options(*command, *flags);
  set_examples(*command, {"sudo joule daemon --allow-group gpu --metrics 127.0.0.1:9401 --country auto",
                          "joule --sim 2xv100 daemon --socket joule.sock",
                          "sudo joule daemon --listen 10.0.0.7:9700 --tls-cert /etc/joule/node.pem --tls-key "
                          "/etc/joule/node.key --tokens /etc/joule/tokens"});
  command->callback([&global, &exit_code, flags] { exit_code = run_daemon(global, *flags); });
}

}  // namespace joule::cli
