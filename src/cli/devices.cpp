// SPDX-License-Identifier: Apache-2.0
// `joule devices`: what joule can see and control.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace joule::cli {

namespace {

struct GpuRow {
  device::Gpu* gpu;
  Result<device::PowerLimitConstraints> constraints;
  Result<uint32_t> power_limit_mw;
};

std::string watts_or_error(const Result<uint32_t>& value) {
  return value ? device::format_watts(*value) : "unknown";
}

nlohmann::json watts_json(uint32_t power_mw) {
  return power_mw / 1e3;
}

std::string render_text(const device::DeviceSet& devices, const std::vector<GpuRow>& rows) {
  std::string out;
  out += fmt::format("GPUs: {}\n", devices.gpus.size());
  for (const auto& row : rows) {
    const auto& info = row.gpu->info();
    out += fmt::format("  {} [{}] {}\n", info.index, info.backend, info.name);
    if (!info.uuid.empty()) {
      out += fmt::format("      uuid           {}\n", info.uuid);
    }
    if (row.constraints) {
      out += fmt::format("      power limit    {} (range {} to {}, default {})\n",
                         watts_or_error(row.power_limit_mw), device::format_watts(row.constraints->min_mw),
                         device::format_watts(row.constraints->max_mw),
                         device::format_watts(row.constraints->default_mw));
    } else {
      out += fmt::format("      power limit    unknown: {}\n", row.constraints.error().message());
    }
    out += fmt::format("      energy counter {}\n",
                       info.has_energy_counter ? "yes" : "no (energy is estimated from power samples)");
  }
  out += fmt::format("CPUs: {}\n", devices.cpus.size());
  for (const auto& cpu : devices.cpus) {
    out += fmt::format("  {} [{}] {}  DRAM counter {}\n", cpu->info().index, cpu->info().backend,
                       cpu->info().name, cpu->info().has_dram ? "yes" : "no");
  }
  out += "Backends:\n";
  for (const auto& report : devices.reports) {
    out += fmt::format("  {:<5} {}  {}\n", report.backend,
                       report.ok ? fmt::format("{} device{}", report.devices, report.devices == 1 ? "" : "s")
                                 : std::string("unavailable"),
                       report.detail);
  }
  return out;
}

std::string render_json(const device::DeviceSet& devices, const std::vector<GpuRow>& rows) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& row : rows) {
    const auto& info = row.gpu->info();
    nlohmann::json gpu = {{"index", info.index},
                          {"physical_index", info.physical_index},
                          {"backend", info.backend},
                          {"name", info.name},
                          {"uuid", info.uuid},
                          {"energy_counter", info.has_energy_counter},
                          {"power_limit_w", nullptr},
                          {"min_power_limit_w", nullptr},
                          {"max_power_limit_w", nullptr},
                          {"default_power_limit_w", nullptr}};
    if (row.power_limit_mw) {
      gpu["power_limit_w"] = watts_json(*row.power_limit_mw);
    }
    if (row.constraints) {
      gpu["min_power_limit_w"] = watts_json(row.constraints->min_mw);
      gpu["max_power_limit_w"] = watts_json(row.constraints->max_mw);
      gpu["default_power_limit_w"] = watts_json(row.constraints->default_mw);
    } else {
      gpu["error"] = row.constraints.error().message();
    }
    gpus.push_back(std::move(gpu));
  }
  nlohmann::json cpus = nlohmann::json::array();
  for (const auto& cpu : devices.cpus) {
    cpus.push_back({{"index", cpu->info().index},
                    {"backend", cpu->info().backend},
                    {"name", cpu->info().name},
                    {"dram_counter", cpu->info().has_dram}});
  }
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& report : devices.reports) {
    backends.push_back({{"backend", report.backend},
                        {"kind", report.kind},
                        {"ok", report.ok},
                        {"devices", report.devices},
                        {"detail", report.detail}});
  }
  return nlohmann::json{{"gpus", gpus}, {"cpus", cpus}, {"backends", backends}}.dump(2) + "\n";
}

}  // namespace

void add_devices_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* command = app.add_subcommand("devices", "List GPUs and CPUs, their power limits and energy counters");
  auto format = std::make_shared<Format>(Format::kText);
  add_format_option(*command, *format, {Format::kText, Format::kJson});
  command->callback([&global, &exit_code, format] {
    const device::DeviceSet devices = open_devices(global);
    std::vector<GpuRow> rows;
    for (const auto& gpu : devices.gpus) {
      rows.push_back({gpu.get(), gpu->power_limit_constraints(), gpu->power_limit_mw()});
    }
    std::cout << (*format == Format::kJson ? render_json(devices, rows) : render_text(devices, rows));
    exit_code = 0;
  });
}

}  // namespace joule::cli
