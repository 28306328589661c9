// SPDX-License-Identifier: Apache-2.0
// `joule`: measure and cut the energy of deep-learning work on GPUs. Parses flags, calls the library,
// formats its results; no algorithm lives here.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "joule/core/log.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace {

using joule::cli::kExitFailure;
using joule::cli::kExitUsage;

void install_logger(const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("joule", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("joule: %l: %v");
  logger->set_level(spdlog::level::from_str(level));
  joule::set_logger(std::move(logger));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"joule: measure and cut the energy of deep-learning training and inference on GPUs", "joule"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string("joule ") + joule::cli::kJouleVersion);
  joule::cli::GlobalOptions global;
  app.add_option("--sim", global.sim,
                 "Use simulated GPUs: [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]], e.g. v100 or 4xa40:imagenet:256 "
                 "(environment: JOULE_SIM)")
      ->option_text("SPEC");
  app.add_option("--daemon", global.daemon,
                 "Use the GPUs of the joule daemon listening on this socket, without privileges "
                 "(environment: JOULE_DAEMON_SOCKET; docs/daemon.md)")
      ->option_text("SOCKET");
  app.add_option("--log-level", global.log_level,
                 "Log level: trace, debug, info, warn, error, off (default warn)")
      ->check(joule::cli::one_of({"trace", "debug", "info", "warn", "error", "off"}))
      ->option_text("LEVEL");
  app.add_option("--label", global.labels,
                 "Add NAME=VALUE to every exported metric (repeatable; over the Slurm and Kubernetes labels "
                 "detected from the environment; docs/operators.md)")
      ->option_text("NAME=VALUE")
      ->allow_extra_args(false);

  // Split off "--" and what follows before CLI11 parses: it is the command `joule measure` runs.
  int cli_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      global.after_dashes = std::vector<std::string>(argv + i + 1, argv + argc);
      cli_argc = i;
      break;
    }
  }
  // Only the command asked for gets its flags (all of them for `joule --help` or an unknown command): the
  // flags of every command cost each run ~0.5 ms (issue 24).
  using AddCommand = void (*)(CLI::App&, const joule::cli::GlobalOptions&, int&);
  using namespace joule::cli;
  constexpr std::pair<std::string_view, AddCommand> kCommands[] = {
      {"devices", add_devices_command},   {"measure", add_measure_command},
      {"power", add_power_command},       {"demo", add_demo_command},
      {"simulate", add_simulate_command}, {"plan", add_plan_command},
      {"daemon", add_daemon_command},     {"serve", add_serve_command},
      {"job", add_job_command},           {"carbon", add_carbon_command},
      {"infer", add_infer_command},       {"counters", add_counters_command},
      {"fleet", add_fleet_command},       {"probe", add_probe_command},
      {"cluster", add_cluster_command}};
  const std::string asked = command_word(app, cli_argc, argv);
  const bool known = std::any_of(std::begin(kCommands), std::end(kCommands),
                                 [&](const auto& command) { return command.first == asked; });
  int exit_code = 0;
  for (const auto& [name, add] : kCommands) {
    if (!known || name == asked) {
      add(app, global, exit_code);
    }
  }
  joule::cli::set_examples(app, {"joule devices", "joule --sim v100 measure -- sleep 1"});
  app.footer(app.get_footer() + "\nEach command has --help, with examples: joule COMMAND --help.");
  joule::cli::mark_required_options(app);
  app.parse_complete_callback([&app, &global] {
    install_logger(global.log_level);
    joule::cli::refuse_unused_device_flags(app, global);
    joule::cli::apply_metric_labels(app, global);
  });

  try {
    app.parse(cli_argc, argv);
    if (global.after_dashes && asked != "measure") {
      std::cerr << "joule: '--' is only used by 'joule measure -- CMD ARGS…' (see 'joule --help')\n";
      return kExitUsage;
    }
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << "joule " << joule::cli::kJouleVersion << "\n";
    return 0;
  } catch (const CLI::ParseError& error) {
    // One clear line naming the flag or command; the help of the command in use is one flag away.
    std::cerr << fmt::format("joule: error: {}\n",
                             joule::cli::explain_parse_error(app, error, cli_argc, argv));
    return kExitUsage;
  } catch (const joule::Exception& error) {
    std::cerr << fmt::format("joule: error: {}\n", error.what());
    return error.code() == joule::ErrorCode::kInvalidArgument ? kExitUsage : kExitFailure;
  } catch (const std::exception& error) {
    std::cerr << fmt::format("joule: internal error: {}\n", error.what());
    return kExitFailure;
  }
  return exit_code;
}
