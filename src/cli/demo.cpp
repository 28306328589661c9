// SPDX-License-Identifier: Apache-2.0
// `joule demo`: a short simulated training job at two power limits, timed and measured.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"

#include "common.hpp"

namespace joule::cli {

namespace {

constexpr std::string_view kDefaultDemoSpec = "v100:imagenet";

struct DemoFlags {
  int64_t iterations = 500;
  std::optional<double> low_power_limit_w;
  Format format = Format::kText;
};

struct DemoRun {
  double power_limit_w = 0;
  measure::Measurement measurement;
};

// A limit halfway down the range, on a 25 W step: a typical energy-saving setting to compare with the max.
uint32_t default_low_limit_mw(const device::PowerLimitConstraints& constraints) {
  const uint32_t middle_mw = (constraints.min_mw + constraints.max_mw) / 2;
  constexpr uint32_t kStepMw = 25'000;
  return std::max(constraints.min_mw, middle_mw / kStepMw * kStepMw);
}

int run_demo(const GlobalOptions& global, const DemoFlags& flags) {
  if (flags.iterations <= 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("demo: --iterations must be positive (got {})", flags.iterations));
  }
  auto options = value_or_throw(discovery_options(global));
  const std::string spec_text = options.sim_spec.value_or(std::string(kDefaultDemoSpec));
  const device::sim::Spec spec = value_or_throw(device::sim::parse_spec(spec_text));
  // Virtual time: the job "runs" for minutes of simulated time in milliseconds of real time.
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = value_or_throw(device::sim::open_sim_gpus(spec, clock));
  std::vector<device::sim::SimulatedGpu*> sim_gpus;
  std::vector<device::Gpu*> monitored;
  for (auto& gpu : gpus) {
    sim_gpus.push_back(gpu.get());
    monitored.push_back(gpu.get());
  }
  device::sim::TrainingJob job(sim_gpus, *clock);
  measure::EnergyMonitor monitor(monitored, {}, *clock);

  const auto constraints = value_or_throw(gpus.front()->power_limit_constraints());
  const uint32_t low_mw = flags.low_power_limit_w
                              ? static_cast<uint32_t>(round_w_to_mw(*flags.low_power_limit_w))
                              : default_low_limit_mw(constraints);
  std::vector<DemoRun> runs;
  for (const uint32_t limit_mw : {constraints.max_mw, low_mw}) {
    for (auto* gpu : sim_gpus) {
      value_or_throw(gpu->set_power_limit_mw(limit_mw));
    }
    const std::string window = fmt::format("{} W", mw_to_w(limit_mw));
    monitor.begin_window(window);
    job.run_iterations(flags.iterations);
    runs.push_back({mw_to_w(limit_mw), monitor.end_window(window)});
  }
  for (auto* gpu : sim_gpus) {
    value_or_throw(gpu->reset_power_limit());
  }

  const auto& fast = runs[0].measurement;
  const auto& slow = runs[1].measurement;
  const double time_change = slow.time_s / fast.time_s - 1.0;
  const double energy_change = slow.total_gpu_energy_j() / fast.total_gpu_energy_j() - 1.0;
  const std::string workload = gpus.front()->workload()->description();
  if (flags.format == Format::kJson) {
    nlohmann::json out = {{"gpu", spec.model->key},
                          {"gpu_count", spec.count},
                          {"workload", spec.workload->key},
                          {"iterations", flags.iterations},
                          {"runs", nlohmann::json::array()}};
    for (const auto& run : runs) {
      out["runs"].push_back({{"power_limit_w", run.power_limit_w},
                             {"time_s", run.measurement.time_s},
                             {"energy_j", run.measurement.total_gpu_energy_j()},
                             {"estimated", run.measurement.estimated()}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "joule demo: {} simulated {} GPU{} ({}) training {} for {} iterations per run\n"
      "(virtual clock; energy from the {})\n\n",
      spec.count, spec.model->key, spec.count == 1 ? "" : "s", gpus.front()->info().name, workload,
      flags.iterations,
      gpus.front()->info().has_energy_counter ? "GPU energy counter" : "integrated power samples");
  std::cout << fmt::format("  {:>11}  {:>10}  {:>12}  {:>13}  {:>15}\n", "power limit", "time (s)",
                           "energy (J)", "avg power (W)", "energy/iter (J)");
  for (const auto& run : runs) {
    const double energy_j = run.measurement.total_gpu_energy_j();
    std::cout << fmt::format("  {:>9.0f} W  {:>10.1f}  {:>12.1f}  {:>13.1f}  {:>15.2f}\n", run.power_limit_w,
                             run.measurement.time_s, energy_j, energy_j / run.measurement.time_s,
                             energy_j / static_cast<double>(flags.iterations));
  }
  std::cout << fmt::format(
      "\nAt {:.0f} W instead of {:.0f} W the job took {:.1f}% {} and used {:.1f}% {} energy.\n",
      runs[1].power_limit_w, runs[0].power_limit_w, std::abs(time_change) * 100,
      time_change >= 0 ? "longer" : "less time", std::abs(energy_change) * 100,
      energy_change <= 0 ? "less" : "more");
  return 0;
}

}  // namespace

void add_demo_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<DemoFlags>();
  auto* command = app.add_subcommand(
      "demo", fmt::format("Run a short simulated training job at two power limits (default --sim {})",
                          kDefaultDemoSpec));
  command->add_option("--iterations", flags->iterations, "Training iterations per power limit (default 500)")
      ->option_text("N");
  command
      ->add_option("--low-power-limit-w", flags->low_power_limit_w,
                   "The lower power limit to compare with the maximum (default: mid-range)")
      ->option_text("W");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson});
  command->callback([&global, &exit_code, flags] { exit_code = run_demo(global, *flags); });
}

}  // namespace joule::cli
