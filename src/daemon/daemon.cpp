// SPDX-License-Identifier: Apache-2.0
// joule::daemon::Daemon: checks the options and what it may serve, takes the socket, and hands the rest to
// the private Server (server.hpp, server.cpp: the event loop).
#include "joule/daemon/daemon.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "joule/core/log.hpp"

#include "server.hpp"

namespace joule::daemon {

namespace {

// The largest values of the options that Daemon::start() checks.
constexpr double kMaxLeaseS = 86'400;
constexpr double kMaxIdleTimeoutS = 86'400;
constexpr double kMaxHelloTimeoutS = 3'600;
constexpr size_t kMaxConnections = 65'536;
constexpr double kMaxJobEnergyPeriodS = 60;

// The bounds of the job energy accounting (docs/daemon.md, "Job energy on shared GPUs").
Result<void> check_job_energy_options(const DaemonOptions& options) {
  if (!(options.job_energy_period_s >= 0 && options.job_energy_period_s <= kMaxJobEnergyPeriodS)) {
    return fail(
        ErrorCode::kInvalidArgument,
        "--job-energy-period-s {} must be from 0 (off) to {} (the driver keeps only seconds of process "
        "samples)",
        options.job_energy_period_s, kMaxJobEnergyPeriodS);
  }
  if (options.job_energy.max_jobs == 0 || options.job_energy.max_remembered_processes == 0 ||
      !(options.job_energy.retention_s > 0 && std::isfinite(options.job_energy.retention_s))) {
    return fail(ErrorCode::kInvalidArgument,
                "the job energy accounting's bounds must be positive (jobs kept, processes remembered, "
                "retention)");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::start(std::vector<device::Gpu*> gpus, Clock& clock,
                                              DaemonOptions options) {
  if (!(options.lease_s > 0 && options.lease_s <= kMaxLeaseS)) {
    return fail(ErrorCode::kInvalidArgument, "--lease-s {} must be above 0 and at most {} (one day)",
                options.lease_s, kMaxLeaseS);
  }
  if (options.max_connections == 0 || options.max_connections > kMaxConnections) {
    return fail(ErrorCode::kInvalidArgument, "--max-connections {} must be at least 1 and at most {}",
                options.max_connections, kMaxConnections);
  }
  if (options.max_connections_per_user == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-connections-per-user 0 must be at least 1");
  }
  if (options.root_reserved_connections >= options.max_connections) {
    return fail(ErrorCode::kInvalidArgument,
                "--root-reserved-connections {} must be less than --max-connections {} (other users need "
                "room too)",
                options.root_reserved_connections, options.max_connections);
  }
  if (!(options.hello_timeout_s > 0 && options.hello_timeout_s <= kMaxHelloTimeoutS)) {
    return fail(ErrorCode::kInvalidArgument, "--hello-timeout-s {} must be above 0 and at most {} (one hour)",
                options.hello_timeout_s, kMaxHelloTimeoutS);
  }
  if (options.max_refusals_in_a_row == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-refusals-in-a-row 0 must be at least 1");
  }
  if (options.requests_per_turn == 0) {
    return fail(ErrorCode::kInvalidArgument, "--requests-per-turn 0 must be at least 1");
  }
  if (!(options.idle_timeout_s > 0 && options.idle_timeout_s <= kMaxIdleTimeoutS)) {
    return fail(ErrorCode::kInvalidArgument, "--idle-timeout-s {} must be above 0 and at most {} (one day)",
                options.idle_timeout_s, kMaxIdleTimeoutS);
  }
  if (options.max_idle_connections_per_user == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-idle-connections-per-user 0 must be at least 1");
  }
  if (options.max_idle_connections == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-idle-connections 0 must be at least 1");
  }
  JOULE_TRY(check_job_energy_options(options));
  if (options.max_streams_per_connection == 0 || options.max_queued_bytes == 0) {
    return fail(ErrorCode::kInvalidArgument, "connection limits must be positive");
  }
  if (::geteuid() != 0 && !options.allow_unprivileged) {
    std::vector<std::string> real;
    for (const auto* gpu : gpus) {
      if (gpu->info().backend != "sim") {
        real.push_back(gpu->label());
      }
    }
    if (!real.empty()) {
      return fail(
          ErrorCode::kPermissionDenied,
          "joule daemon runs as uid {}, not root, so it could not change the power limits and clocks of {}; "
          "run it as root (see docs/daemon.md for a systemd unit), or pass --allow-unprivileged to serve "
          "them anyway (reads work; changes fail unless this user may make them)",
          ::geteuid(), fmt::join(real, ", "));
    }
  }
  auto access =
      JOULE_TRY(AccessPolicy::create(options.access, static_cast<uint32_t>(::geteuid()), options.users));
  auto audit = JOULE_TRY(AuditLog::open(
      options.audit_log, AuditLimits{options.audit_refusals_per_user, options.audit_refusal_interval_s}));
  if (options.network.max_handshakes == 0 || options.network.handshake_steps_per_pass == 0) {
    return fail(ErrorCode::kInvalidArgument, "--max-handshakes 0 must be at least 1");
  }
  // The network listener's files first: a daemon that cannot serve what it was asked to does not start.
  NetworkSecurity security;
  std::vector<NetworkListener> network_listeners;
  if (!options.network.listen.empty()) {
    security = JOULE_TRY(NetworkSecurity::load(options.network, ::geteuid()));
    for (const auto& address : options.network.listen) {
      network_listeners.push_back(JOULE_TRY(NetworkListener::open(address, security.tls == nullptr)));
    }
  } else if (!options.network.tokens_file.empty() || !options.network.tls_certificate_file.empty() ||
             !options.network.tls_client_ca_file.empty() || options.network.allow_plain_loopback) {
    return fail(
        ErrorCode::kInvalidArgument,
        "--tokens, --tls-cert, --tls-key, --tls-client-ca and --allow-plain-loopback are for the network "
        "listener: give --listen HOST:PORT too");
  }
  auto listener = JOULE_TRY(Listener::open(options.socket_path, ::geteuid()));
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return fail(ErrorCode::kIo, "cannot create an eventfd: {}", std::strerror(errno));
  }
  if (!network_listeners.empty()) {
    std::vector<std::string> addresses;
    addresses.reserve(network_listeners.size());
    for (const auto& network_listener : network_listeners) {
      addresses.push_back(network_listener.address());
    }
    log().info("network listener on {}: {}", fmt::join(addresses, ", "), security.describe(options.network));
  }
  auto server = std::make_unique<Server>(std::move(gpus), clock, std::move(options), std::move(access),
                                         std::move(audit), std::move(listener), wake_fd,
                                         std::move(network_listeners), std::move(security));
  // The constructor is private: a daemon exists only started.
  return std::unique_ptr<Daemon>(new Daemon(std::move(server)));
}

Daemon::Daemon(std::unique_ptr<Server> server) : server_(std::move(server)) {}

Daemon::~Daemon() = default;

Result<std::optional<int>> Daemon::run(const std::vector<int>& stop_signals,
                                       const std::vector<int>& reload_signals) {
  return server_->run(stop_signals, reload_signals);
}

std::vector<std::string> Daemon::network_addresses() const {
  return server_->network_addresses();
}

void Daemon::stop() {
  server_->stop();
}

const std::string& Daemon::socket_path() const {
  return server_->socket_path();
}

const AccessPolicy& Daemon::access() const {
  return server_->access();
}

std::string Daemon::job_energy_description() const {
  return server_->job_energy_description();
}

const std::string& Daemon::audit_log_path() const {
  return server_->audit_log_path();
}

}  // namespace joule::daemon
