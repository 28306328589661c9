// SPDX-License-Identifier: Apache-2.0
// `joule cluster`: the cluster autopilot (docs/cluster.md). Parses, calls joule::cluster, prints.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "joule/cluster/replay.hpp"
#include "joule/core/validate.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {
namespace {

struct ClusterReplayFlags {
  cluster::ReplayOptions options;
  std::vector<std::string> policies;  // empty: all five
  Format format = Format::kText;
  std::string plot;
};

int run_cluster_replay(ClusterReplayFlags flags) {
  for (const std::string& name : flags.policies) {
    flags.options.policies.push_back(value_or_throw(cluster::parse_replay_policy(name)));
  }
  // Checked before the replay runs.
  std::optional<OutputFile> plot = open_output(flags.plot, "--plot");
  flags.options.keep_timeline = plot.has_value() || flags.format == Format::kJson;
  const cluster::ReplayReport report = value_or_throw(cluster::run_cluster_replay(flags.options));
  std::cout << (flags.format == Format::kJson ? cluster::to_json(report) : cluster::format_table(report));
  if (plot) {
    if (!write_or_report(*plot, cluster::replay_plot_svg(report), false)) {
      return kExitFailure;
    }
    if (flags.format == Format::kText) {
      std::cout << fmt::format("plot written to {}\n", flags.plot);
    }
  }
  return 0;
}

void add_cluster_replay_command(CLI::App& command, int& exit_code) {
  auto flags = std::make_shared<ClusterReplayFlags>();
  cluster::ReplayOptions& options = flags->options;
  auto* replay = command.add_subcommand(
      "replay",
      "Simulate a GPU cluster under a power cap and a carbon trace: uncapped, a uniform cap, Zeus and Chase "
      "per job, and the autopilot");
  replay->add_option("--carbon-trace", options.carbon_trace_path, "Carbon trace CSV (tiled to the horizon)")
      ->option_text("FILE")
      ->required();
  replay->add_option("--gpus", options.gpus, "GPUs in the cluster (default 1000)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay->add_option("--days", options.days, "Simulated days (default 14)")
      ->check(number(NumberRule::positive()))
      ->option_text("D");
  replay
      ->add_option("--cap-share", options.cap_share,
                   "The cap as a share of the GPUs' summed maximum power, (0, 1] (default 0.8)")
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  replay
      ->add_option("--deferrable-share", options.deferrable_share,
                   "Share of the training work that may wait for cleaner hours, [0, 1] (default 0.3)")
      ->check(number(NumberRule::between(0, 1)))
      ->option_text("S");
  replay->add_option("--seed", options.seed, "Seed of the job mix and the inference load (default 1)")
      ->option_text("N");
  replay
      ->add_option("--training-load", options.training_load,
                   "Offered training load as a share of the training GPUs, (0, 2] (default 0.9)")
      ->check(number(NumberRule::positive()))
      ->option_text("L");
  replay
      ->add_option("--control-period-s", options.control_period_s,
                   "The autopilot's re-allocation period, s (default 300)")
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  replay
      ->add_option(
          "--policies", flags->policies,
          "Comma-separated: uncapped, uniform_cap, zeus_per_job, chase_per_job, autopilot (default all)")
      ->delimiter(',')
      ->option_text("LIST");
  add_format_option(*replay, flags->format, {Format::kText, Format::kJson});
  replay->add_option("--plot", flags->plot, "Write an SVG of each policy's cluster power against the cap")
      ->option_text("FILE.svg");
  set_examples(*replay,
               {"joule cluster replay --carbon-trace data/carbon/synthetic_us_solar_14d.csv --gpus 1000 "
                "--days 14 --cap-share 0.8 --deferrable-share 0.3 --plot cluster.svg"});
  replay->callback([&exit_code, flags] { exit_code = run_cluster_replay(*flags); });
}

}  // namespace

void add_cluster_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto* command = app.add_subcommand(
      "cluster", "One power and carbon budget for all the jobs of a GPU cluster (docs/cluster.md)");
  command->require_subcommand(1);
  set_examples(*command, {"joule cluster replay --carbon-trace data/carbon/synthetic_us_solar_14d.csv"});
  add_cluster_replay_command(*command, exit_code);
}

}  // namespace joule::cli
