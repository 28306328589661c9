// SPDX-License-Identifier: Apache-2.0
// `joule daemon`: serve this machine's GPUs and CPU energy counters to unprivileged processes over a Unix
// socket (docs/daemon.md).
#include "joule/daemon/daemon.hpp"

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include "joule/core/log.hpp"
#include "joule/daemon/metrics.hpp"
#include "joule/metrics/cpu_metrics.hpp"
#include "joule/metrics/endpoint.hpp"
#include "joule/metrics/gpu_metrics.hpp"
#include "joule/metrics/http_listener.hpp"

#include "common.hpp"
#include "signals.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct DaemonFlags {
  std::string socket;
  std::vector<std::string> allow_users;
  std::vector<std::string> allow_groups;
  std::vector<std::string> read_users;
  std::vector<std::string> read_groups;
  std::string others = "read";
  std::string audit_log;
  double lease_s = 60;
  bool allow_unprivileged = false;
  // Defaults from DaemonOptions: one place for them.
  size_t max_connections = daemon::DaemonOptions{}.max_connections;
  size_t max_connections_per_user = daemon::DaemonOptions{}.max_connections_per_user;
  size_t root_reserved_connections = daemon::DaemonOptions{}.root_reserved_connections;
  double hello_timeout_s = daemon::DaemonOptions{}.hello_timeout_s;
  size_t audit_refusals_per_user = daemon::DaemonOptions{}.audit_refusals_per_user;
  size_t max_refusals_in_a_row = daemon::DaemonOptions{}.max_refusals_in_a_row;
  size_t requests_per_turn = daemon::DaemonOptions{}.requests_per_turn;
  double idle_timeout_s = daemon::DaemonOptions{}.idle_timeout_s;
  size_t max_idle_connections_per_user = daemon::DaemonOptions{}.max_idle_connections_per_user;
  size_t max_idle_connections = daemon::DaemonOptions{}.max_idle_connections;
  std::string metrics;                     // HOST:PORT of /metrics; empty: none
  std::optional<double> carbon_intensity;  // gCO2eq/kWh, for the carbon metrics
  std::string country;                     // --country CODE|auto: the metrics' intensity, a yearly average
};

std::string signal_name(int signal_number) {
  const char* abbreviation = ::sigabbrev_np(signal_number);
  return abbreviation != nullptr ? fmt::format("SIG{}", abbreviation) : std::to_string(signal_number);
}

int run_daemon(const GlobalOptions& global, const DaemonFlags& flags) {
  daemon::DaemonOptions options;
  const char* socket_env = std::getenv("JOULE_DAEMON_SOCKET");
  options.socket_path = !flags.socket.empty()                            ? flags.socket
                        : (socket_env != nullptr && *socket_env != '\0') ? std::string(socket_env)
                                                                         : options.socket_path;
  // The daemon serves the machine's own GPUs: never GPUs of another daemon (nor of itself).
  ::unsetenv("JOULE_DAEMON_SOCKET");
  options.access.control_users = flags.allow_users;
  options.access.control_groups = flags.allow_groups;
  options.access.read_users = flags.read_users;
  options.access.read_groups = flags.read_groups;
  options.access.others = flags.others == "none"      ? daemon::Right::kNone
                          : flags.others == "control" ? daemon::Right::kControl
                                                      : daemon::Right::kRead;
  options.audit_log = flags.audit_log;
  options.lease_s = flags.lease_s;
  options.allow_unprivileged = flags.allow_unprivileged;
  options.max_connections = flags.max_connections;
  options.max_connections_per_user = flags.max_connections_per_user;
  options.root_reserved_connections = flags.root_reserved_connections;
  options.hello_timeout_s = flags.hello_timeout_s;
  options.audit_refusals_per_user = flags.audit_refusals_per_user;
  options.max_refusals_in_a_row = flags.max_refusals_in_a_row;
  options.requests_per_turn = flags.requests_per_turn;
  options.idle_timeout_s = flags.idle_timeout_s;
  options.max_idle_connections_per_user = flags.max_idle_connections_per_user;
  options.max_idle_connections = flags.max_idle_connections;

  if ((flags.carbon_intensity || !flags.country.empty()) && flags.metrics.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("daemon: {} is only used by the metrics: add --metrics HOST:PORT",
                                flags.carbon_intensity ? "--carbon-intensity" : "--country"));
  }
  if (flags.carbon_intensity && !flags.country.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "daemon: give --carbon-intensity or --country, not both");
  }
  std::optional<double> carbon_intensity = flags.carbon_intensity;
  if (!flags.country.empty()) {
    const carbon::CountryChoice choice = resolve_country(flags.country);
    std::cerr << fmt::format("joule daemon: {}\n", choice.describe());
    carbon_intensity = choice.country.intensity_g_per_kwh;
  }
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
  std::string cpu_line;
  for (const auto& report : devices.reports) {
    if (report.kind == "cpu" && !report.ok) {
      options.no_cpus_reason = report.detail;
      cpu_line = fmt::format("no CPU energy to serve: {}", report.detail);
    } else if (report.kind == "cpu") {
      cpu_line = fmt::format("serving the energy of {} CPU package{} (RAPL at {})", report.devices,
                             report.devices == 1 ? "" : "s", report.detail);
    }
  }
  // The GPUs' and the daemon's metrics on their own HTTP listener (the daemon's socket speaks its protocol).
  metrics::MetricsRegistry metrics;
  std::unique_ptr<metrics::MetricsEndpoint> endpoint;
  if (!flags.metrics.empty()) {
    auto gpu_metrics = std::make_shared<metrics::GpuMetrics>(gpus, *devices.clock);
    if (carbon_intensity) {
      value_or_throw(gpu_metrics->set_carbon_intensity(*carbon_intensity));
    }
    metrics.add_collector(gpu_metrics);
    if (!options.cpus.empty()) {
      // The RAPL counters the daemon reads as root: exported beside the GPUs.
      metrics.add_collector(std::make_shared<metrics::CpuMetrics>(options.cpus));
    }
    options.metrics = std::make_shared<daemon::DaemonMetrics>(metrics);
    endpoint = value_or_throw(metrics::MetricsEndpoint::start(
        flags.metrics, [&metrics] { return metrics.render(); }, "daemon: --metrics"));
  }
  auto daemon = value_or_throw(daemon::Daemon::start(gpus, *devices.clock, std::move(options)));
  std::cout << fmt::format("joule daemon: serving {} GPU{} on {} (protocol {}, lease {} s, audit log {})\n",
                           gpus.size(), gpus.size() == 1 ? "" : "s", daemon->socket_path(),
                           device::daemon_protocol::kVersion, flags.lease_s, daemon->audit_log_path())
            << fmt::format("joule daemon: {}\n", daemon->access().describe())
            << fmt::format("joule daemon: {}\n", cpu_line);
  if (endpoint) {
    std::cout << fmt::format("joule daemon: metrics on {}\n", endpoint->url());
  }
  std::cout << std::flush;
  const auto stopped_by = value_or_throw(daemon->run({SIGINT, SIGTERM, SIGHUP}));
  daemon.reset();  // restores, closes, removes the socket
  if (endpoint) {
    endpoint->stop();
  }
  std::cout << fmt::format("joule daemon: stopped{}; every setting made through it is restored\n",
                           stopped_by ? " by " + signal_name(*stopped_by) : std::string())
            << std::flush;
  return 0;
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
  command->add_option("--allow-user", flags->allow_users, "Grant USER read and control (repeatable)")
      ->option_text("USER")
      ->allow_extra_args(false);
  command
      ->add_option("--allow-group", flags->allow_groups,
                   "Grant members of GROUP read and control (repeatable)")
      ->option_text("GROUP")
      ->allow_extra_args(false);
  command->add_option("--read-user", flags->read_users, "Grant USER read only (repeatable)")
      ->option_text("USER")
      ->allow_extra_args(false);
  command->add_option("--read-group", flags->read_groups, "Grant members of GROUP read only (repeatable)")
      ->option_text("GROUP")
      ->allow_extra_args(false);
  command
      ->add_option("--others", flags->others,
                   "Right of everyone else: none, read or control (default read; root always has control)")
      ->check(one_of({"none", "read", "control"}))
      ->option_text("RIGHT");
  command->add_option("--audit-log", flags->audit_log, "Append the audit log to PATH (default: stderr)")
      ->option_text("PATH");
  command
      ->add_option("--audit-refusals-per-user", flags->audit_refusals_per_user,
                   fmt::format("Refused requests of one user written to the audit log per 10 s; the rest are "
                               "counted in one line (default {})",
                               flags->audit_refusals_per_user))
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N");
  command
      ->add_option("--max-refusals-in-a-row", flags->max_refusals_in_a_row,
                   fmt::format("Close a connection whose last N requests were all refused (default {})",
                               flags->max_refusals_in_a_row))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--lease-s", flags->lease_s,
                   "Restore a connection's settings after S seconds without a request (default 60)")
      ->check(number(NumberRule{.min = 0, .max = 86400, .min_exclusive = true}))
      ->option_text("S");
  command->add_flag("--allow-unprivileged", flags->allow_unprivileged,
                    "Serve real GPUs even when not running as root");
  command
      ->add_option("--max-connections", flags->max_connections,
                   fmt::format("Connections served at once; one more is told why and closed (default {})",
                               flags->max_connections))
      ->check(number(NumberRule{.min = 1, .max = 65536, .integer = true}))
      ->option_text("N");
  command
      ->add_option("--max-connections-per-user", flags->max_connections_per_user,
                   fmt::format("Connections one user other than root may hold (default {})",
                               flags->max_connections_per_user))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--root-reserved-connections", flags->root_reserved_connections,
                   fmt::format("Of --max-connections, how many only root may take (default {})",
                               flags->root_reserved_connections))
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N");
  command
      ->add_option("--hello-timeout-s", flags->hello_timeout_s,
                   fmt::format("Close a connection that sends no hello within S seconds (default {})",
                               flags->hello_timeout_s))
      ->check(number(NumberRule{.min = 0, .max = 3600, .min_exclusive = true}))
      ->option_text("S");
  command
      ->add_option("--requests-per-turn", flags->requests_per_turn,
                   fmt::format("Requests of one user served per turn of the daemon's loop, root's first "
                               "(default {})",
                               flags->requests_per_turn))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--idle-timeout-s", flags->idle_timeout_s,
                   fmt::format("A connection that holds nothing and sends nothing for S seconds is idle "
                               "(default {})",
                               flags->idle_timeout_s))
      ->check(number(NumberRule{.min = 0, .max = 86400, .min_exclusive = true}))
      ->option_text("S");
  command
      ->add_option("--max-idle-connections-per-user", flags->max_idle_connections_per_user,
                   fmt::format("Idle connections one user other than root may keep (default {})",
                               flags->max_idle_connections_per_user))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--max-idle-connections", flags->max_idle_connections,
                   fmt::format("Idle connections all users other than root may keep together (default {})",
                               flags->max_idle_connections))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--metrics", flags->metrics,
                   "Serve Prometheus metrics of the GPUs and the daemon on http://HOST:PORT/metrics (port 0: "
                   "any free port; see docs/metrics.md)")
      ->option_text("HOST:PORT");
  command
      ->add_option("--carbon-intensity", flags->carbon_intensity,
                   "Grid carbon intensity in gCO2eq/kWh, for the carbon metrics of --metrics")
      ->check(number(quantity::carbon_intensity_g_per_kwh()))
      ->option_text("G_PER_KWH");
  command
      ->add_option(
          "--country", flags->country,
          "Carbon metrics of --metrics at a country's yearly average intensity: ISO 3166-1 code (DEU or "
          "DE), or auto to infer it from the timezone or locale")
      ->option_text("CODE|auto");
  set_examples(*command, {"sudo joule daemon --allow-group gpu --metrics 127.0.0.1:9401 --country auto",
                          "joule --sim 2xv100 daemon --socket joule.sock"});
  command->callback([&global, &exit_code, flags] { exit_code = run_daemon(global, *flags); });
}

}  // namespace joule::cli
