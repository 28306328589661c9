// SPDX-License-Identifier: Apache-2.0
// `joule devices`: what joule can see and control.
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "joule/device/hw_check_report.hpp"
#include "joule/device/inventory.hpp"

#include "common.hpp"
#include "devices_check.hpp"
#include "usage.hpp"

namespace joule::cli {

void add_devices_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* command = app.add_subcommand("devices", "List GPUs and CPUs, their power limits and energy counters");
  auto format = std::make_shared<Format>(Format::kText);
  add_format_option(*command, *format, {Format::kText, Format::kJson});
  auto check = std::make_shared<bool>(false);
  auto check_flags = std::make_shared<DevicesCheckFlags>();
  command->add_flag(
      "--check", *check,
      "Check every GPU read-only (energy counter against power, update periods, limits, clocks, "
      "telemetry) and print a report to paste into a bug; without a GPU, check a simulated one "
      "(docs/devices.md)");
  command
      ->add_option("--duration-s", check_flags->duration_s,
                   "With --check: how long the GPUs are watched, s (default 10; run a load meanwhile)")
      ->check(number(duration_rule()))
      ->option_text("S");
  set_examples(*command, {"joule devices --format json", "joule --sim v100 devices --check --duration-s 1"});
  command->callback([&global, &exit_code, format, check, check_flags] {
    if (*check) {
      exit_code = run_devices_check(global, *check_flags, *format);
      return;
    }
    const device::DeviceSet devices = open_devices(global);
    const std::vector<device::GpuInventory> gpus = device::gpu_inventory(devices);
    if (*format == Format::kJson) {
      std::cout << nlohmann::json{{"gpus", device::gpu_inventory_json(gpus)},
                                  {"cpus", device::cpu_inventory_json(devices)},
                                  {"backends", device::backends_json(devices)}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << device::inventory_text(devices, gpus) << "Backends:\n" << device::backends_text(devices);
    }
    exit_code = 0;
  });
}

}  // namespace joule::cli
