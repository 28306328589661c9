// SPDX-License-Identifier: Apache-2.0
// `joule devices --check`: the read-only hardware check (device/hw_check.hpp) and its report.
#include "devices_check.hpp"

#include <iostream>

#include <fmt/format.h>

#include "joule/device/hw_check_report.hpp"

namespace joule::cli {

int run_devices_check(const GlobalOptions& global, const DevicesCheckFlags& flags, Format format) {
  device::HwCheckOptions options;
  options.duration_s = flags.duration_s;
  value_or_throw(device::validate(options));
  device::DeviceSet devices = open_devices(global, true, false);
  std::string fallback_note;
  if (devices.gpus.empty()) {
    // Without a GPU the check still runs, the same way, on a simulated one: the report shows what a real
    // GPU's would hold, and the exit status stays 0 (no GPU is not a failure of the machine).
    fallback_note = fmt::format("{}; checking a simulated {} the same way instead", devices.why_no_gpus(),
                                flags.fallback_sim);
    GlobalOptions simulated = global;
    simulated.sim = flags.fallback_sim;
    devices = open_devices(simulated, true, false);
  }
  std::vector<device::Gpu*> gpus;
  for (const auto& gpu : devices.gpus) {
    gpus.push_back(gpu.get());
  }
  if (format == Format::kText) {
    std::cerr << fmt::format("joule: watching {} GPU{} for {} s (read-only)...\n", gpus.size(),
                             gpus.size() == 1 ? "" : "s", flags.duration_s);
  }
  const std::string time = format_iso8601_utc(devices.clock->to_unix_ns(devices.clock->now()));
  const auto checks = device::check_gpus(gpus, *devices.clock, options);
  const device::HwCheckReport report{
      .joule_version = kJouleVersion, .time = time, .fallback_note = fallback_note};
  std::cout << (format == Format::kJson ? device::hw_check_json(devices, checks, report)
                                        : device::hw_check_text(devices, checks, report));
  return device::count_status(checks, device::CheckStatus::kFail) > 0 ? 1 : 0;
}

}  // namespace joule::cli
