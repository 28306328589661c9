// SPDX-License-Identifier: Apache-2.0
// `joule probe`: characterise one GPU and write its frontier card (docs/cards.md). Thin: the probe and the
// card are joule::probe's.
#include "joule/probe/probe.hpp"

#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "joule/core/file.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/probe/cuda_runner.hpp"
#include "joule/sim/llm_replica.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace probe_detail {

struct ProbeFlags {
  int gpu = 0;
  std::string out;
  bool read_only = false;
  bool load = false;
  bool quick = false;
  bool real_time = false;
};

// A simulated GPU is probed in virtual time (the card is the same on every machine, made in milliseconds)
// unless --real-time asks for the pace of a real device.
device::DeviceSet open_probed_devices(const GlobalOptions& global, const ProbeFlags& flags) {
  auto options = value_or_throw(discovery_options(global));
  if (flags.real_time && !options.sim_spec) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        "--real-time applies to simulated GPUs only (--sim): a real device always runs in real time");
  }
  if (options.sim_spec && !flags.real_time) {
    options.clock =
        std::make_shared<VirtualClock>(SteadyClock::instance().to_unix_ns(SteadyClock::instance().now()));
  }
  options.cpus = false;
  // The serving simulator's GPUs (`joule --sim h100 probe`): not a device model of the sim spec, but a
  // GPU of `joule infer replay`, whose card its --card takes.
  if (options.sim_spec && !device::sim::find_gpu_model(*options.sim_spec) &&
      sim::find_llm_gpu(*options.sim_spec)) {
    return value_or_throw(sim::llm_gpu_devices(
        *options.sim_spec, options.clock
                               ? options.clock
                               : std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &SteadyClock::instance())));
  }
  return value_or_throw(device::discover(options));
}

int run_probe(const GlobalOptions& global, const ProbeFlags& flags) {
  // A path that cannot be written is refused before the probe; the check's temporary file is removed at
  // once, so that Ctrl-C (which kills the process once the settings are back) leaves nothing behind.
  if (flags.load && !flags.read_only) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "--load applies to --read-only only: a full probe always runs its kernels");
  }
  const bool to_file = open_output(flags.out, "--out").has_value();
  const device::DeviceSet devices = open_probed_devices(global, flags);
  const auto gpus = value_or_throw(devices.select_gpus(std::vector<int>{flags.gpu}));
  device::Gpu& gpu = *gpus.front();
  probe::ProbeOptions options = flags.quick ? probe::quick_probe_options() : probe::ProbeOptions{};
  options.read_only = flags.read_only;
  options.counter_under_load = !flags.read_only || flags.load;
  options.joule_version = kJouleVersion;
  options.progress = [](std::string_view step) { fmt::print(stderr, "joule probe: {}\n", step); };
  // A read-only probe without --load runs no kernel: it loads no driver and allocates nothing on the GPU.
  std::unique_ptr<probe::KernelRunner> runner =
      options.counter_under_load ? probe::make_simulated_runner(gpu) : nullptr;
  if (!runner && options.counter_under_load && gpu.info().backend == "nvml") {
    auto cuda = probe::make_cuda_runner(gpu.info().index);
    if (cuda) {
      runner = std::move(*cuda);
    } else {  // the card then lists the frontiers as skipped
      fmt::print(stderr, "joule probe: no kernels can run: {}\n", cuda.error().message());
    }
  }
  const probe::Card card = value_or_throw(probe::probe_gpu(gpu, *devices.clock, runner.get(), options));
  // The card is written once, whole, at the end (a temporary file renamed over --out): a probe that is
  // interrupted leaves no card behind.
  if (!to_file) {
    std::cout << probe::render_card(card);
    return 0;
  }
  auto output = value_or_throw(OutputFile::open(flags.out));
  if (!write_or_report(output, probe::render_card(card), true)) {
    return 1;
  }
  std::cout << probe::summarize_card(card) << fmt::format("card written to {}\n", flags.out);
  return 0;
}

}  // namespace probe_detail

void add_probe_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<probe_detail::ProbeFlags>();
  auto* command = app.add_subcommand(
      "probe",
      "Characterise a GPU and write its frontier card: energy counter period and error, latency of a "
      "power-limit change and a clock lock, time-energy frontiers of two kernels (docs/cards.md)");
  command->add_option("--gpu", flags->gpu, "GPU index (default: 0)")->check(CLI::NonNegativeNumber);
  command->add_option("--out", flags->out, "Write the card here (default: print it)")->option_text("PATH");
  command->add_flag(
      "--read-only", flags->read_only,
      "Measure only what needs no setting (counter period and error, ranges): no privilege needed, no "
      "kernel run unless --load");
  command->add_flag("--load", flags->load,
                    "With --read-only: run the compute kernel while the counter is read (no setting changed, "
                    "but the GPU is loaded)");
  command->add_flag("--quick", flags->quick, "A short probe: 3 knob values, 5 ms runs");
  command->add_flag("--real-time", flags->real_time,
                    "With --sim: probe the simulated GPU in real time (seconds) instead of virtual time");
  set_examples(*command, {"sudo joule probe --out card.json", "joule probe --read-only",
                          "joule --sim v100 probe --quick"});
  command->callback([&global, &exit_code, flags] { exit_code = probe_detail::run_probe(global, *flags); });
}

}  // namespace joule::cli
