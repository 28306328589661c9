// SPDX-License-Identifier: Apache-2.0
// `joule devices --check`: the read-only hardware check (device/hw_check.hpp) and its report.
#include "devices_check.hpp"

#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/utsname.h>

#include "joule/device/hw_check.hpp"

namespace joule::cli {

namespace devices_check {

std::string kernel_line() {
  utsname name{};
  if (uname(&name) != 0) {
    return "unknown";
  }
  return fmt::format("{} {} {}", name.sysname, name.release, name.machine);
}

std::string render_text(const device::DeviceSet& devices, const std::vector<device::GpuCheck>& checks,
                        const std::string& fallback_note, const std::string& time) {
  std::string out =
      fmt::format("joule hardware check: joule {}, {}, {}\n", kJouleVersion, time, kernel_line());
  if (!fallback_note.empty()) {
    out += fallback_note + "\n";
  }
  out += "backends:\n" + backend_lines(devices);
  for (const auto& check : checks) {
    out += fmt::format("GPU {} [{}] {}\n", check.info.index, check.info.backend, check.info.name);
    for (const auto& item : check.items) {
      out += fmt::format("  {} {:<16} {}\n", device::to_string(item.status), item.name, item.detail);
    }
  }
  out += fmt::format("summary: {} pass, {} warn, {} fail, {} skipped; no setting was changed\n",
                     device::count_status(checks, device::CheckStatus::kPass),
                     device::count_status(checks, device::CheckStatus::kWarn),
                     device::count_status(checks, device::CheckStatus::kFail),
                     device::count_status(checks, device::CheckStatus::kSkip));
  return out;
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::string render_json(const device::DeviceSet& devices, const std::vector<device::GpuCheck>& checks,
                        const std::string& fallback_note, const std::string& time) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& check : checks) {
    nlohmann::json items = nlohmann::json::array();
    for (const auto& item : check.items) {
      items.push_back(
          {{"check", item.name}, {"status", device::to_string(item.status)}, {"detail", item.detail}});
    }
    gpus.push_back({{"index", check.info.index},
                    {"backend", check.info.backend},
                    {"name", check.info.name},
                    {"uuid", check.info.uuid},
                    {"watched_s", check.watched_s},
                    {"energy_reads", check.energy_reads},
                    {"power_reads", check.power_reads},
                    {"counter_energy_j", optional_json(check.counter_energy_j)},
                    {"integrated_energy_j", optional_json(check.integrated_energy_j)},
                    {"power_update_period_s", optional_json(check.power_update_period_s)},
                    {"energy_update_period_s", optional_json(check.energy_update_period_s)},
                    {"checks", std::move(items)}});
  }
  nlohmann::json out = {{"joule_version", kJouleVersion},
                        {"time", time},
                        {"kernel", kernel_line()},
                        {"simulated_fallback", !fallback_note.empty()},
                        {"note", fallback_note},
                        {"backends", backends_json(devices)},
                        {"gpus", std::move(gpus)},
                        {"summary",
                         {{"pass", device::count_status(checks, device::CheckStatus::kPass)},
                          {"warn", device::count_status(checks, device::CheckStatus::kWarn)},
                          {"fail", device::count_status(checks, device::CheckStatus::kFail)},
                          {"skip", device::count_status(checks, device::CheckStatus::kSkip)}}},
                        {"settings_changed", false}};
  return out.dump(2) + "\n";
}

}  // namespace devices_check

std::string backend_lines(const device::DeviceSet& devices) {
  std::string out;
  for (const auto& report : devices.reports) {
    out += fmt::format("  {:<7} {}  {}\n", report.backend,
                       report.ok ? fmt::format("{} device{}", report.devices, report.devices == 1 ? "" : "s")
                                 : std::string("unavailable"),
                       report.detail);
  }
  return out;
}

nlohmann::json backends_json(const device::DeviceSet& devices) {
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& report : devices.reports) {
    backends.push_back({{"backend", report.backend},
                        {"kind", report.kind},
                        {"ok", report.ok},
                        {"devices", report.devices},
                        {"detail", report.detail}});
  }
  return backends;
}

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
  std::cout << (format == Format::kJson ? devices_check::render_json(devices, checks, fallback_note, time)
                                        : devices_check::render_text(devices, checks, fallback_note, time));
  return device::count_status(checks, device::CheckStatus::kFail) > 0 ? 1 : 0;
}

}  // namespace joule::cli
