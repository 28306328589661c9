// SPDX-License-Identifier: Apache-2.0
// `joule devices`: what joule can see and control.
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "devices_check.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

struct GpuRow {
  device::Gpu* gpu;
  Result<device::PowerLimitConstraints> constraints;
  Result<uint32_t> power_limit_mw;
  device::GpuTelemetry telemetry;
};

// @return the telemetry field's value as JSON (clock event reasons by name).
nlohmann::json telemetry_value(const device::GpuTelemetry& reading, device::TelemetryField field) {
  using device::TelemetryField;
  const auto json_of = [](const auto& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  switch (field) {
    case TelemetryField::kTemperature:
      return json_of(reading.temperature_c);
    case TelemetryField::kSmClock:
      return json_of(reading.sm_clock_mhz);
    case TelemetryField::kMemoryClock:
      return json_of(reading.memory_clock_mhz);
    case TelemetryField::kGpuUtilization:
      return json_of(reading.gpu_utilization_pct);
    case TelemetryField::kMemoryUtilization:
      return json_of(reading.memory_utilization_pct);
    case TelemetryField::kClockEventReasons:
      return reading.clock_event_reasons
                 ? nlohmann::json(device::clock_event_reason_names(*reading.clock_event_reasons))
                 : nlohmann::json(nullptr);
    case TelemetryField::kMemoryPower:
      return reading.memory_power_mw ? nlohmann::json(*reading.memory_power_mw / 1e3)
                                     : nlohmann::json(nullptr);
  }
  return nullptr;
}

// @return "  telemetry      temperature_c, …\n" and one line per reading that is not supported or failed.
std::string telemetry_support_text(const device::GpuTelemetry& reading) {
  std::vector<std::string_view> supported;
  for (const auto field : device::telemetry_fields()) {
    if (reading.has(field)) {
      supported.push_back(device::telemetry_field_name(field));
    }
  }
  std::string out =
      fmt::format("      telemetry      {}\n",
                  supported.empty() ? std::string("none") : fmt::format("{}", fmt::join(supported, ", ")));
  for (const auto& [field, error] : reading.errors) {
    out += fmt::format("      {:<14} {}: {}\n", "",
                       error.code() == ErrorCode::kNotSupported ? "not supported" : "failed",
                       device::telemetry_field_name(field));
  }
  return out;
}

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
    out += telemetry_support_text(row.telemetry);
  }
  out += fmt::format("CPUs: {}\n", devices.cpus.size());
  for (const auto& cpu : devices.cpus) {
    out += fmt::format("  {} [{}] {}  DRAM counter {}\n", cpu->info().index, cpu->info().backend,
                       cpu->info().name, cpu->info().has_dram ? "yes" : "no");
  }
  out += "Backends:\n" + backend_lines(devices);
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
    nlohmann::json telemetry = nlohmann::json::object();
    nlohmann::json supports = nlohmann::json::object();
    nlohmann::json telemetry_errors = nlohmann::json::object();
    for (const auto field : device::telemetry_fields()) {
      const std::string name(device::telemetry_field_name(field));
      telemetry[name] = telemetry_value(row.telemetry, field);
      const Error* error = row.telemetry.error(field);
      supports[name] = error == nullptr || error->code() != ErrorCode::kNotSupported;
      if (error != nullptr) {
        telemetry_errors[name] = error->message();
      }
    }
    gpu["supports"] = std::move(supports);
    gpu["telemetry"] = std::move(telemetry);
    gpu["telemetry_errors"] = std::move(telemetry_errors);
    gpus.push_back(std::move(gpu));
  }
  nlohmann::json cpus = nlohmann::json::array();
  for (const auto& cpu : devices.cpus) {
    cpus.push_back({{"index", cpu->info().index},
                    {"backend", cpu->info().backend},
                    {"name", cpu->info().name},
                    {"dram_counter", cpu->info().has_dram}});
  }
  return nlohmann::json{{"gpus", gpus}, {"cpus", cpus}, {"backends", backends_json(devices)}}.dump(2) + "\n";
}

}  // namespace

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
    std::vector<GpuRow> rows;
    for (const auto& gpu : devices.gpus) {
      rows.push_back({gpu.get(), gpu->power_limit_constraints(), gpu->power_limit_mw(), gpu->telemetry()});
    }
    std::cout << (*format == Format::kJson ? render_json(devices, rows) : render_text(devices, rows));
    exit_code = 0;
  });
}

}  // namespace joule::cli
