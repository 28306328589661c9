// SPDX-License-Identifier: Apache-2.0
// `joule simulate`: Zeus's trace-driven simulation of recurring training jobs.
#include <cmath>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/sim/report.hpp"
#include "joule/sim/simulator.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct SimulateFlags {
  std::string gpu;
  std::string workload;
  bool all = false;
  uint64_t seed = 1;
  double eta = 0.5;
  std::string beta = "2";
  std::optional<int> recurrences;
  std::optional<int> b0;
  std::optional<double> target_metric;
  std::optional<int> max_epochs;
  std::optional<std::string> trace_dir;
  std::optional<std::string> groups;
  Format format = Format::kText;
  std::string plot;
};

double parse_beta(const std::string& text) {
  if (text == "inf" || text == "infinity" || text == "none") {
    return std::numeric_limits<double>::infinity();
  }
  size_t used = 0;
  double beta = 0;
  try {
    beta = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("simulate: --beta '{}' is not a number or 'inf'", text));
  }
  return beta;
}

std::string savings_table(const std::vector<sim::SavingsRow>& rows, const sim::SimulationOptions& options,
                          Format format) {
  switch (format) {
    case Format::kJson:
      return sim::render_savings_json(rows, options);
    case Format::kCsv:
      return sim::render_savings_csv(rows);
    case Format::kText:
      break;
  }
  return sim::render_savings_text(rows, options);
}

sim::SimulationOptions options_of(const SimulateFlags& flags) {
  sim::SimulationOptions options;
  options.seed = flags.seed;
  options.eta = flags.eta;
  options.beta = parse_beta(flags.beta);
  options.recurrences = flags.recurrences;
  value_or_throw(sim::validate(options));
  return options;
}

// The --gpu's traces: without --trace-dir an unknown GPU is an unknown name (exit 2); with it, a missing file
// is a file error like any other (exit 1).
sim::Trace trace_of(const SimulateFlags& flags) {
  // One workload's rows when one is simulated (the groups file names several).
  auto trace = flags.workload.empty() ? sim::gpu_trace(flags.gpu, flags.trace_dir)
                                      : sim::workload_trace(flags.gpu, flags.workload, flags.trace_dir);
  return flags.trace_dir ? value_or_throw(std::move(trace)) : name_or_throw(std::move(trace));
}

sim::Job job_of(const sim::Trace& trace, const SimulateFlags& flags) {
  sim::Job job = name_or_throw(sim::paper_job(trace, flags.workload));
  if (flags.b0) {
    job.default_batch_size = *flags.b0;
  }
  if (flags.target_metric) {
    job.target_metric = *flags.target_metric;
  }
  if (flags.max_epochs) {
    job.max_epochs = *flags.max_epochs;
  }
  return job;
}

int run_all(const SimulateFlags& flags) {
  const sim::SimulationOptions options = options_of(flags);
  std::cout << savings_table(value_or_throw(sim::simulate_paper_workloads(options, flags.trace_dir)), options,
                             flags.format);
  return 0;
}

int run_groups(const SimulateFlags& flags) {
  const sim::SimulationOptions base = options_of(flags);
  const sim::Trace trace = trace_of(flags);
  const auto groups = value_or_throw(sim::load_groups(*flags.groups));
  const auto rows = name_or_throw(sim::simulate_groups(trace, flags.gpu, groups, base));
  std::cout << savings_table(rows, base, flags.format);
  return 0;
}

// No flag is silently ignored: one that does not apply in this mode is an error that says why.
void refuse_unused(std::string_view mode, std::string_view why,
                   std::initializer_list<std::pair<bool, std::string_view>> flags) {
  for (const auto& [given, name] : flags) {
    if (given) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("simulate: {} does not apply with {}: {}", name, mode, why));
    }
  }
}

int run_simulate(const SimulateFlags& flags) {
  if (flags.all) {
    refuse_unused("--all",
                  "it simulates every GPU and workload of the paper with their own settings and prints the "
                  "savings table (for one GPU and workload, give --gpu and --workload instead of --all)",
                  {{!flags.gpu.empty(), "--gpu"},
                   {!flags.workload.empty(), "--workload"},
                   {!flags.plot.empty(), "--plot"},
                   {flags.groups.has_value(), "--groups"},
                   {flags.b0.has_value(), "--b0"},
                   {flags.target_metric.has_value(), "--target-metric"},
                   {flags.max_epochs.has_value(), "--max-epochs"}});
    return run_all(flags);
  }
  if (flags.groups) {
    refuse_unused(
        "--groups",
        "each group's workload and settings come from the groups file and the paper, and groups print "
        "the savings table only",
        {{!flags.workload.empty(), "--workload"},
         {!flags.plot.empty(), "--plot"},
         {flags.b0.has_value(), "--b0"},
         {flags.target_metric.has_value(), "--target-metric"},
         {flags.max_epochs.has_value(), "--max-epochs"}});
  }
  if (flags.gpu.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("simulate: --gpu is required (one of: {}), or use --all",
                                fmt::join(sim::trace_gpus(), ", ")));
  }
  if (flags.groups) {
    return run_groups(flags);
  }
  if (flags.workload.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("simulate: --workload is required (one of: {}), or use --all",
                                fmt::join(sim::paper_workloads(), ", ")));
  }
  // Checked before the simulation runs.
  std::optional<OutputFile> plot = open_output(flags.plot, "--plot");
  const sim::SimulationOptions options = options_of(flags);
  const sim::Trace trace = trace_of(flags);
  const sim::Job job = job_of(trace, flags);
  const sim::Simulator simulator = sim::zeus_simulator(trace, options);
  const sim::SimulationResult result = value_or_throw(simulator.simulate(job));
  switch (flags.format) {
    case Format::kCsv:
      std::cout << sim::render_tries_csv(result);
      break;
    case Format::kJson:
      std::cout << sim::render_simulation_json(trace.gpu, result, options);
      break;
    case Format::kText:
      std::cout << sim::render_simulation_text(trace.gpu, result, options);
      break;
  }
  if (plot) {
    if (!write_or_report(*plot, sim::simulation_plot_svg(trace.gpu, result), false)) {
      return kExitFailure;
    }
    if (flags.format == Format::kText) {
      std::cout << fmt::format("plot written to {}\n", flags.plot);
    }
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto flags = std::make_shared<SimulateFlags>();
  auto* command = app.add_subcommand("simulate",
                                     "Replay Zeus's batch-size and power-limit optimization over recurring "
                                     "training jobs on the NSDI'23 traces");
  command->add_option("--gpu", flags->gpu, fmt::format("GPU trace: {}", fmt::join(sim::trace_gpus(), ", ")))
      ->option_text("GPU");
  command
      ->add_option("--workload", flags->workload,
                   fmt::format("Workload: {}", fmt::join(sim::paper_workloads(), ", ")))
      ->option_text("W");
  command->add_flag("--all", flags->all, "Simulate every GPU × workload and print the savings table");
  command->add_option("--seed", flags->seed, "Random seed (default 1)")->option_text("S");
  command->add_option("--eta", flags->eta, "Weight of energy against time in [0, 1] (default 0.5)")
      ->check(number(NumberRule::between(0, 1)))
      ->option_text("E");
  command->add_option("--beta", flags->beta, "Early-stop threshold > 1, or inf to disable (default 2)")
      ->option_text("B|inf");
  command
      ->add_option("--recurrences", flags->recurrences,
                   "Recurrences (default 2 × batch sizes × power limits of the job)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command->add_option("--b0", flags->b0, "Default batch size (default: the paper's)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("B");
  command->add_option("--target-metric", flags->target_metric, "Target metric (default: the paper's)")
      ->check(number(NumberRule::any_finite()))
      ->option_text("X");
  command->add_option("--max-epochs", flags->max_epochs, "Epoch limit of a try (default: the paper's)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command
      ->add_option("--trace-dir", flags->trace_dir,
                   "Directory with summary_train.csv and summary_power_<gpu>.csv (default: built in)")
      ->option_text("DIR");
  command
      ->add_option(
          "--groups", flags->groups,
          "Concurrent recurrences from a group CSV (group,start_time,end_time,dataset,runtime_ratio)")
      ->option_text("FILE");
  add_format_option(*command, flags->format, {Format::kText, Format::kCsv, Format::kJson});
  command
      ->add_option("--plot", flags->plot,
                   "Write an SVG of all configurations in (time, energy) with the frontier, baseline, oracle "
                   "and the optimizer's tries")
      ->option_text("FILE.svg");
  set_examples(*command,
               {"joule simulate --gpu v100 --workload cifar100 --plot cifar100.svg", "joule simulate --all"});
  command->callback([&exit_code, flags] { exit_code = run_simulate(*flags); });
}

}  // namespace joule::cli
