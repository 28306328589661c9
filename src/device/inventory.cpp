// SPDX-License-Identifier: Apache-2.0
#include "joule/device/inventory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "joule/device/nvml.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

namespace {

// @return "  telemetry      temperature_c, …\n" and one line per reading that is not supported or failed.
std::string telemetry_support_text(const GpuTelemetry& reading) {
  std::vector<std::string_view> supported;
  for (const auto field : telemetry_fields()) {
    if (reading.has(field)) {
      supported.push_back(telemetry_field_name(field));
    }
  }
  std::string out =
      fmt::format("      telemetry      {}\n",
                  supported.empty() ? std::string("none") : fmt::format("{}", fmt::join(supported, ", ")));
  for (const auto& [field, error] : reading.errors) {
    out += fmt::format("      {:<14} {}: {}\n", "",
                       error.code() == ErrorCode::kNotSupported ? "not supported" : "failed",
                       telemetry_field_name(field));
  }
  return out;
}

std::string watts_or_error(const Result<uint32_t>& value) {
  return value ? format_watts(*value) : "unknown";
}

nlohmann::json watts_json(uint32_t power_mw) {
  return power_mw / 1e3;
}

}  // namespace

std::vector<GpuInventory> gpu_inventory(const DeviceSet& devices) {
  std::vector<GpuInventory> rows;
  for (const auto& gpu : devices.gpus) {
    rows.push_back({gpu.get(), gpu->power_limit_constraints(), gpu->power_limit_mw(), gpu->telemetry(),
                    gpu->module_power_mw()});
  }
  return rows;
}

// @return the telemetry field's value as JSON (clock event reasons by name).
nlohmann::json telemetry_value_json(const GpuTelemetry& reading, TelemetryField field) {
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
                 ? nlohmann::json(clock_event_reason_names(*reading.clock_event_reasons))
                 : nlohmann::json(nullptr);
    case TelemetryField::kMemoryPower:
      return reading.memory_power_mw ? nlohmann::json(*reading.memory_power_mw / 1e3)
                                     : nlohmann::json(nullptr);
  }
  return nullptr;
}

std::string inventory_text(const DeviceSet& devices, const std::vector<GpuInventory>& rows) {
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
                         watts_or_error(row.power_limit_mw), format_watts(row.constraints->min_mw),
                         format_watts(row.constraints->max_mw), format_watts(row.constraints->default_mw));
    } else {
      out += fmt::format("      power limit    unknown: {}\n", row.constraints.error().message());
    }
    out += fmt::format("      energy counter {}\n",
                       info.has_energy_counter ? "yes" : "no (energy is estimated from power samples)");
    if (is_mig_uuid(info.uuid)) {
      out += fmt::format(
          "      MIG instance   of NVML device {}, {:.3f} of its compute (energy estimated: {})\n",
          info.physical_index, mig_compute_share(*row.gpu), kMigEnergyMethod);
    }
    if (row.module_power_mw) {
      out += fmt::format(
          "      module power   {} (scope=module: the whole module, this GPU included; never add "
          "it to the GPU's)\n",
          format_watts(*row.module_power_mw));
    } else if (row.module_power_mw.error().code() != ErrorCode::kNotSupported) {
      out += fmt::format("      module power   unknown: {}\n", row.module_power_mw.error().message());
    }
    out += telemetry_support_text(row.telemetry);
  }
  out += fmt::format("CPUs: {}\n", devices.cpus.size());
  for (const auto& cpu : devices.cpus) {
    out += fmt::format("  {} [{}] {}  DRAM counter {}\n", cpu->info().index, cpu->info().backend,
                       cpu->info().name, cpu->info().has_dram ? "yes" : "no");
  }
  return out;
}

nlohmann::json gpu_inventory_json(const std::vector<GpuInventory>& rows) {
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
    for (const auto field : telemetry_fields()) {
      const std::string name(telemetry_field_name(field));
      telemetry[name] = telemetry_value_json(row.telemetry, field);
      const Error* error = row.telemetry.error(field);
      supports[name] = error == nullptr || error->code() != ErrorCode::kNotSupported;
      if (error != nullptr) {
        telemetry_errors[name] = error->message();
      }
    }
    // Module scope (Grace Hopper / Blackwell), beside the GPU's readings and labelled so.
    nlohmann::json module = {{"scope", "module"}, {"power_w", nullptr}};
    if (row.module_power_mw) {
      module["power_w"] = watts_json(*row.module_power_mw);
    } else {
      module["error"] = row.module_power_mw.error().message();
    }
    gpu["module"] = std::move(module);
    if (is_mig_uuid(info.uuid)) {
      gpu["mig_compute_share"] = mig_compute_share(*row.gpu);
      gpu["energy_estimate"] = kMigEnergyMethod;
    }
    gpu["supports"] = std::move(supports);
    gpu["telemetry"] = std::move(telemetry);
    gpu["telemetry_errors"] = std::move(telemetry_errors);
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

nlohmann::json cpu_inventory_json(const DeviceSet& devices) {
  nlohmann::json cpus = nlohmann::json::array();
  for (const auto& cpu : devices.cpus) {
    cpus.push_back({{"index", cpu->info().index},
                    {"backend", cpu->info().backend},
                    {"name", cpu->info().name},
                    {"dram_counter", cpu->info().has_dram}});
  }
  return cpus;
}

namespace {

// @return the reasons as "a|b", "none" when no reason holds the clocks (empty stays "not reported").
std::string reasons_text(uint64_t mask) {
  const auto names = clock_event_reason_names(mask);
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, "|"));
}

}  // namespace

std::string telemetry_csv_cells(const std::optional<GpuTelemetry>& reading) {
  if (!reading) {
    return ",,,,,,";
  }
  const auto cell = [](const auto& value) { return value ? fmt::format("{}", *value) : std::string(); };
  return fmt::format(
      "{},{},{},{},{},{},{}",
      reading->temperature_c ? fmt::format("{:.1f}", *reading->temperature_c) : std::string(),
      cell(reading->sm_clock_mhz), cell(reading->memory_clock_mhz), cell(reading->gpu_utilization_pct),
      cell(reading->memory_utilization_pct),
      reading->clock_event_reasons ? reasons_text(*reading->clock_event_reasons) : std::string(),
      reading->memory_power_mw ? fmt::format("{:.3f}", mw_to_w(*reading->memory_power_mw)) : std::string());
}

std::string telemetry_columns_text(const GpuTelemetry& reading) {
  return fmt::format(" {:>5} C {:>4} MHz {:>3}%",
                     reading.temperature_c ? fmt::format("{:.1f}", *reading.temperature_c) : "-",
                     reading.sm_clock_mhz ? std::to_string(*reading.sm_clock_mhz) : "-",
                     reading.gpu_utilization_pct ? std::to_string(*reading.gpu_utilization_pct) : "-");
}

}  // namespace joule::device
