// SPDX-License-Identifier: Apache-2.0
// `joule serve`: the optimizer service over HTTP (Zeus's batch-size optimizer API and the pipeline planner),
// on SQLite or PostgreSQL, until SIGINT/SIGTERM; Prometheus metrics at GET /metrics.
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <iostream>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <unistd.h>

#include "joule/cluster/service.hpp"
#include "joule/core/log.hpp"
#include "joule/core/signals.hpp"
#include "joule/fleet/fleet_monitor.hpp"
#include "joule/metrics/http_listener.hpp"
#include "joule/plan/card_profile.hpp"
#include "joule/plan/profile_codec.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/metrics.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct ServeFlags {
  std::string db = "sqlite:joule.db";
  std::string listen = "127.0.0.1:7787";
  size_t threads = server::kDefaultThreads;
  size_t max_connections = server::kDefaultMaxConnections;
  int64_t max_open_trials = server::ServiceOptions().max_open_trials;
  int64_t response_ttl_s = server::ServiceOptions().response_ttl.count();
  int db_connections = 0;
  // Zeus's pipeline frequency optimizer (docs/perseus-live.md).
  int pfo_microbatches = 0;
  std::string pfo_profile;
  std::string pfo_card;
  int pfo_round_iterations = plan::LiveOptions().planned_round_iterations;
  int pfo_profile_samples = plan::LiveOptions().profile_samples;
  double pfo_blocking_w = plan::LiveOptions().default_p_blocking_w;
  int pfo_max_warmup_rounds = plan::LiveOptions().max_warmup_rounds;
  double pfo_schedule_wait_s = 600;
  int64_t pfo_max_result_kib = static_cast<int64_t>(server::ServiceOptions().live_max_result_bytes >> 10);
  int64_t pfo_max_job_idle_s = server::ServiceOptions().live_max_job_idle.count();
  int pfo_registrations_per_minute = server::ServiceOptions().live_registrations_per_minute;
  int64_t pfo_plan_cache_mib = static_cast<int64_t>(server::ServiceOptions().live_plan_cache_bytes >> 20);
  double shutdown_grace_s = 10;
  // The cluster autopilot (docs/cluster.md, "Serving the controller").
  std::optional<double> cluster_power_cap_w;
  std::string cluster_nodes;
  // Unset: the defaults below (set, without a cap: refused, as the flag would do nothing).
  std::optional<double> cluster_node_timeout_s;
  std::optional<double> cluster_control_period_s;
  bool cluster_degrade_slos = false;
  // High availability (docs/cluster.md): where followers send clients, and the lease's length.
  std::string cluster_advertise;
  std::optional<double> cluster_lease_s;
  double lease_s() const { return cluster_lease_s.value_or(5); }
  double node_timeout_s() const {
    return cluster_node_timeout_s.value_or(cluster::ControllerOptions().node_timeout_s);
  }
  double control_period_s() const { return cluster_control_period_s.value_or(5); }
};

// The cluster autopilot's flags, checked before the store is opened. @return the node daemons (none:
// decisions are not enforced). @throws joule::Exception (kInvalidArgument) naming the flag.
std::vector<cluster::NodeAddress> cluster_nodes(const ServeFlags& flags) {
  if (!flags.cluster_power_cap_w) {
    const char* given = !flags.cluster_nodes.empty()       ? "--cluster-nodes"
                        : flags.cluster_node_timeout_s     ? "--cluster-node-timeout-s"
                        : flags.cluster_control_period_s   ? "--cluster-control-period-s"
                        : flags.cluster_degrade_slos       ? "--cluster-degrade-slos"
                        : !flags.cluster_advertise.empty() ? "--cluster-advertise"
                        : flags.cluster_lease_s            ? "--cluster-lease-s"
                                                           : nullptr;
    if (given != nullptr) {
      throw Exception(
          ErrorCode::kInvalidArgument,
          fmt::format("serve: {} needs --cluster-power-cap-w (the cluster autopilot is off without a cap)",
                      given));
    }
    return {};
  }
  if (!(flags.control_period_s() < flags.node_timeout_s())) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("serve: --cluster-control-period-s {:g} must be shorter than --cluster-node-timeout-s "
                    "{:g}: each period's enforcement round is how nodes are heard from",
                    flags.control_period_s(), flags.node_timeout_s()));
  }
  if (!flags.cluster_advertise.empty() && !flags.cluster_advertise.starts_with("http://") &&
      !flags.cluster_advertise.starts_with("https://")) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("serve: --cluster-advertise '{}' must be a URL (http://HOST:PORT) that clients "
                    "of the other replicas can reach",
                    flags.cluster_advertise));
  }
  std::vector<cluster::NodeAddress> nodes;
  if (!flags.cluster_nodes.empty()) {
    auto parsed = fleet::parse_nodes(flags.cluster_nodes);
    if (!parsed) {
      throw Exception(parsed.error().with_context("serve: --cluster-nodes"));
    }
    for (fleet::Node& node : *parsed) {
      nodes.push_back({std::move(node.name), std::move(node.socket_path)});
    }
  }
  return nodes;
}

// The holder the autopilot's replicas name to the node daemons (docs/daemon.md "Holders").
constexpr std::string_view kClusterHolder = "joule-cluster-autopilot";

// This host's name, for the replica's lease holder id ("localhost" if it has none).
std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name.data();
}

// --cluster-power-cap-w: the cluster autopilot over the service's store, enforcing through the node daemons
// of --cluster-nodes (none: decisions computed and served, not enforced).
std::shared_ptr<cluster::ClusterService> open_cluster_service(
    const ServeFlags& flags, const std::vector<cluster::NodeAddress>& nodes,
    const std::shared_ptr<store::Store>& database, const std::shared_ptr<server::ServerMetrics>& metrics) {
  cluster::ClusterServiceOptions cluster_options;
  cluster_options.controller.node_timeout_s = flags.node_timeout_s();
  cluster_options.controller.degrade_slos = flags.cluster_degrade_slos;
  cluster_options.initial_cap_w = flags.cluster_power_cap_w;
  cluster_options.control_period_s = flags.control_period_s();
  cluster_options.on_replan = [metrics](const cluster::ClusterDecision* decision,
                                        const cluster::ReplanStats& stats) {
    metrics->observe_cluster(decision, stats);
  };
  // Always a lease, on every store: replicas on one database elect one leader (docs/cluster.md "High
  // availability"). Renewed every second (or a quarter lease, if shorter).
  cluster_options.lease = cluster::LeaseOptions{
      .holder = fmt::format("{}:{}:{:04x}", host_name(), ::getpid(), std::random_device()() & 0xffff),
      .address = flags.cluster_advertise,
      .lease_s = flags.lease_s(),
      .renew_period_s = std::min(1.0, flags.lease_s() / 4),
      .release_on_close = true};
  cluster_options.on_leadership = [metrics](const cluster::Leadership& leadership) {
    metrics->observe_cluster_leader(leadership);
  };
  if (!nodes.empty()) {
    // Every replica acts for one holder on the daemons: the limits a killed leader set stay in force for the
    // daemon's lease, and the next leader's connection takes them over (docs/cluster.md "Lease lengths").
    device::DaemonClientOptions daemon_options;
    daemon_options.holder = std::string(kClusterHolder);
    cluster_options.enforcer = value_or_throw(cluster::DaemonEnforcer::create(nodes, daemon_options));
  }
  auto opened_cluster = cluster::ClusterService::open(database, std::move(cluster_options));
  if (!opened_cluster) {
    throw Exception(opened_cluster.error().with_context("serve: cluster autopilot"));
  }
  const auto cap_w = (*opened_cluster)->cap_w();
  if (cap_w && *cap_w != *flags.cluster_power_cap_w) {
    log().warn(
        "serve: the cluster cap stored in {} ({:g} W, set at run time) stands; --cluster-power-cap-w "
        "{:g} applies to a database without one",
        database->description(), *cap_w, *flags.cluster_power_cap_w);
  }
  if (nodes.empty()) {
    log().warn(
        "serve: cluster autopilot without --cluster-nodes: decisions are computed and served at "
        "GET /cluster/decision, not enforced on any node");
  } else {
    log().info("serve: cluster autopilot enforcing on {} node daemons every {:g} s", nodes.size(),
               flags.control_period_s());
  }
  return std::move(*opened_cluster);
}

int run_serve(const ServeFlags& flags) {
  // A file-size limit (ulimit -f) reached while writing the database must fail that write (EFBIG: the request
  // gets a 503 and the service goes on), not kill the service with SIGXFSZ.
  ::signal(SIGXFSZ, SIG_IGN);
  // Before any thread starts, so that only the wait below receives them.
  BlockedSignals stop({SIGINT, SIGTERM});
  const auto [host, port] =
      value_or_throw(metrics::parse_host_port(flags.listen, "listen address", server::kDefaultPort));
  // Before the store is opened: a bad card leaves nothing behind.
  std::optional<probe::Card> card;
  if (!flags.pfo_card.empty()) {
    if (!flags.pfo_profile.empty()) {
      throw Exception(
          ErrorCode::kInvalidArgument,
          "serve: --pfo-card and --pfo-profile: a job given a profile profiles nothing (keep one)");
    }
    card = value_or_throw(plan::read_job_card(flags.pfo_card));
  }
  const std::vector<cluster::NodeAddress> nodes = cluster_nodes(flags);
  store::OpenOptions open_options;
  open_options.max_connections = flags.db_connections;
  auto opened = store::open_store(flags.db, open_options);
  if (!opened) {
    throw Exception(
        opened.error().with_context(fmt::format("serve: --db {}", store::mask_password(flags.db))));
  }
  std::shared_ptr<store::Store> database(std::move(*opened));
  // GET /metrics on the same listener (docs/metrics.md); reports feed its epoch histograms.
  metrics::MetricsRegistry registry;
  auto metrics = std::make_shared<server::ServerMetrics>(registry);
  server::ServiceOptions service_options;
  service_options.max_open_trials = flags.max_open_trials;
  service_options.response_ttl = std::chrono::seconds(flags.response_ttl_s);
  service_options.on_epoch_report = [metrics](const server::EpochReport& report) {
    metrics->observe_epoch(report);
  };
  service_options.live.planned_round_iterations = flags.pfo_round_iterations;
  service_options.live.profile_samples = flags.pfo_profile_samples;
  service_options.live.default_p_blocking_w = flags.pfo_blocking_w;
  service_options.live.max_warmup_rounds = flags.pfo_max_warmup_rounds;
  service_options.live_default_microbatches = flags.pfo_microbatches;
  service_options.live_schedule_wait =
      std::chrono::milliseconds(static_cast<int64_t>(flags.pfo_schedule_wait_s * 1000));
  service_options.live_max_result_bytes = static_cast<size_t>(flags.pfo_max_result_kib) << 10;
  service_options.live_max_job_idle = std::chrono::seconds(flags.pfo_max_job_idle_s);
  service_options.live_registrations_per_minute = flags.pfo_registrations_per_minute;
  service_options.live_plan_cache_bytes = static_cast<size_t>(flags.pfo_plan_cache_mib) << 20;
  if (!flags.pfo_profile.empty()) {
    const plan::Profile profile = value_or_throw(plan::Profile::read(flags.pfo_profile));
    service_options.live_profile_csv = plan::profile_csv(profile);
  }
  service_options.live_card = std::move(card);
  service_options.live_card_source = flags.pfo_card;
  if (flags.cluster_power_cap_w) {
    service_options.cluster = open_cluster_service(flags, nodes, database, metrics);
  }
  server::Service service(database, service_options);
  server::HttpServerOptions options;
  options.metrics = metrics;
  options.host = host;
  options.port = port;
  options.threads = flags.threads;
  options.max_connections = flags.max_connections;
  options.max_result_body_bytes = service_options.live_max_result_bytes;
  options.shutdown_grace = std::chrono::milliseconds(static_cast<int64_t>(flags.shutdown_grace_s * 1000));
  server::HttpServer http(service, options);
  value_or_throw(http.start());
  if (service_options.cluster && flags.cluster_advertise.empty()) {
    // Followers name this address to clients; only now is the port known (--listen HOST:0).
    service_options.cluster->advertise(fmt::format(
        "http://{}:{}", host.find(':') != std::string::npos ? "[" + host + "]" : host, http.port()));
  }
  // Tests and scripts read the port from this line (with --listen HOST:0 it is the one chosen).
  std::cout << fmt::format("joule serve: listening on http://{}:{} (store {}, {} threads)\n",
                           host.find(':') != std::string::npos ? "[" + host + "]" : host, http.port(),
                           database->description(), flags.threads)
            << std::flush;
  const auto received = stop.wait(std::nullopt);
  log().info(
      "serve: signal {} received, stopping (waiting requests answered 503; at most {:g} s for the rest)",
      received ? received->si_signo : 0, flags.shutdown_grace_s);
  http.stop();
  std::cout << "joule serve: stopped\n" << std::flush;
  return 0;
}

// The listener, the store and the batch-size service.
void add_service_options(CLI::App& command, ServeFlags& flags) {
  command
      .add_option("--db", flags.db,
                  "Store: sqlite:PATH, postgresql://USER@HOST:PORT/DB or memory: (default sqlite:joule.db)")
      ->option_text("URL");
  command.add_option("--listen", flags.listen, "Address to listen on (default 127.0.0.1:7787; port 0: any)")
      ->option_text("HOST:PORT");
  command
      .add_option("--threads", flags.threads,
                  fmt::format("Requests handled at once (default {}); open connections take no thread",
                              server::kDefaultThreads))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--max-connections", flags.max_connections,
                  fmt::format("Open connections at most; more are closed at accept (default {})",
                              server::kDefaultMaxConnections))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option(
          "--max-open-trials", flags.max_open_trials,
          fmt::format("Trials of one job handed out and not ended at once; GET /jobs/batch_size answers "
                      "409 beyond (default {})",
                      flags.max_open_trials))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--response-ttl-s", flags.response_ttl_s,
                  fmt::format("How long the response of a request with X-Request-Id is kept for its retries "
                              "(default {} = 24 h; 0: forever)",
                              flags.response_ttl_s))
      ->check(number(duration_rule(true)))
      ->option_text("S");
  command
      .add_option("--db-connections", flags.db_connections,
                  "Most database connections at once (PostgreSQL; default: the store's)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
}

// Zeus's pipeline frequency optimizer (docs/perseus-live.md).
void add_pipeline_frequency_options(CLI::App& command, ServeFlags& flags) {
  command
      .add_option("--pfo-microbatches", flags.pfo_microbatches,
                  "Microbatches per iteration of pipeline-frequency jobs that do not send num_microbatches "
                  "(Zeus's client does not; default: required from the job)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("M");
  command
      .add_option("--pfo-profile", flags.pfo_profile,
                  "A measured pipeline profile (CSV: stage,instruction,frequency_mhz,time_s,energy_j) that "
                  "every pipeline-frequency job starts from instead of profiling")
      ->option_text("FILE");
  command
      .add_option(
          "--pfo-card", flags.pfo_card,
          "A frontier card of the stage GPUs (joule probe): profiled jobs measure a few SM clocks and "
          "predict the rest from it (a job's own card, sent by its client, wins)")
      ->option_text("FILE");
  command
      .add_option(
          "--pfo-round-iterations", flags.pfo_round_iterations,
          fmt::format("Iterations between two reports of a planned pipeline-frequency job (default {})",
                      flags.pfo_round_iterations))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option(
          "--pfo-profile-samples", flags.pfo_profile_samples,
          fmt::format("Computations measured per stage, instruction and clock while profiling (default {})",
                      flags.pfo_profile_samples))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option(
          "--pfo-max-warmup-rounds", flags.pfo_max_warmup_rounds,
          fmt::format("Most warm-up rounds of a pipeline-frequency job while some rank reports its GPU "
                      "not thermally steady; then it profiles anyway (default {})",
                      flags.pfo_max_warmup_rounds))
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      .add_option("--pfo-blocking-w", flags.pfo_blocking_w,
                  fmt::format("Power of a GPU waiting on its neighbours when profiling cannot measure it, W "
                              "(default {})",
                              flags.pfo_blocking_w))
      ->check(number(quantity::power_w()))
      ->option_text("W");
  command
      .add_option("--pfo-schedule-wait-s", flags.pfo_schedule_wait_s,
                  "How long GET /schedule waits for the other ranks before 409 (default 600; a waiting "
                  "request holds its connection, no thread)")
      ->check(number(NumberRule::non_negative()))
      ->check(CLI::Range(0.0, 3600.0))
      ->option_text("S");
  command
      .add_option("--pfo-max-result-kib", flags.pfo_max_result_kib,
                  fmt::format("Largest body of POST /result; jobs whose ranks could report more are refused "
                              "at registration (default {})",
                              flags.pfo_max_result_kib))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->option_text("KIB");
  command
      .add_option(
          "--pfo-max-job-idle-s", flags.pfo_max_job_idle_s,
          fmt::format("A pipeline-frequency job no rank changed for this long is deleted (default {} = "
                      "a week, as Zeus's max_job_idle_time; 0: never)",
                      flags.pfo_max_job_idle_s))
      ->check(CLI::Range(int64_t{0}, int64_t{100} * 365 * 24 * 3600))
      ->option_text("S");
  command
      .add_option("--pfo-registrations-per-minute", flags.pfo_registrations_per_minute,
                  fmt::format("POST /register_job per client address per minute; 429 beyond (default {}; "
                              "0: no limit)",
                              flags.pfo_registrations_per_minute))
      ->check(CLI::Range(0, 1'000'000))
      ->option_text("N");
  command
      .add_option("--pfo-plan-cache-mib", flags.pfo_plan_cache_mib,
                  fmt::format("Memory for planned frontiers kept for straggler re-planning (default {})",
                              flags.pfo_plan_cache_mib))
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->option_text("MIB");
}

// The cluster autopilot (docs/cluster.md, "Serving the controller").
void add_cluster_options(CLI::App& command, ServeFlags& flags) {
  command
      .add_option(
          "--cluster-power-cap-w", flags.cluster_power_cap_w,
          "Serve the cluster autopilot (/cluster/... routes) with this power cap over all its jobs' GPUs, "
          "W (changeable at run time with PUT /cluster/cap; a cap stored by that wins at restart)")
      ->check(number(NumberRule::positive()))
      ->option_text("W");
  command
      .add_option(
          "--cluster-nodes", flags.cluster_nodes,
          "The node daemons that enforce the autopilot's limits: NAME=ADDRESS,... (ADDRESS a Unix socket "
          "or HOST:PORT; NAME as jobs name their GPUs' node); none: decisions are served, not enforced")
      ->option_text("LIST");
  command
      .add_option(
          "--cluster-node-timeout-s", flags.cluster_node_timeout_s,
          fmt::format("A node whose daemon has not answered for this long is silent: its GPUs are counted at "
                      "their maximum (default {:g})",
                      flags.node_timeout_s()))
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  command
      .add_option(
          "--cluster-control-period-s", flags.cluster_control_period_s,
          fmt::format("How often the autopilot re-plans and enforces on its own (time passes: silent nodes, "
                      "forecast slots) (default {:g})",
                      flags.control_period_s()))
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  command
      .add_option("--cluster-advertise", flags.cluster_advertise,
                  "This replica's URL as clients of the other replicas on the database reach it (followers "
                  "name the leader's in their 503s) (default http://LISTEN-ADDRESS)")
      ->option_text("URL");
  command
      .add_option(
          "--cluster-lease-s", flags.cluster_lease_s,
          fmt::format(
              "Leadership among replicas on one database: a leader silent this long is replaced "
              "(failover within it + 1 s); keep it well below the node daemons' --lease-s (default {:g})",
              flags.lease_s()))
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  command.add_flag(
      "--cluster-degrade-slos", flags.cluster_degrade_slos,
      "When the cap is below the inference jobs' SLO floors, place them below their floors and say "
      "so, instead of refusing the change");
}

}  // namespace

void add_serve_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto flags = std::make_shared<ServeFlags>();
  auto* command = app.add_subcommand(
      "serve",
      "Run the optimizer service: Zeus's batch-size optimizer REST API and the pipeline frequency planner "
      "(Prometheus metrics at GET /metrics)");
  add_service_options(*command, *flags);
  add_pipeline_frequency_options(*command, *flags);
  add_cluster_options(*command, *flags);
  command
      ->add_option("--shutdown-grace-s", flags->shutdown_grace_s,
                   "On SIGTERM/SIGINT: waiting requests are answered 503 at once, then requests in flight "
                   "get this long to finish (default 10)")
      ->check(CLI::Range(0.0, 3600.0))
      ->option_text("S");
  set_examples(*command, {"joule serve --db sqlite:joule.db --listen 127.0.0.1:7787"});
  command->callback([&exit_code, flags] { exit_code = run_serve(*flags); });
}

}  // namespace joule::cli
