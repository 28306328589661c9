// SPDX-License-Identifier: Apache-2.0
// joule/device/inventory.hpp — what the discovered devices are and can do (`joule devices`): each GPU's power
// limit, its range, its energy counter and the telemetry it supports; each CPU's DRAM counter. Read once, as
// text or JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/device/discovery.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

/// One GPU's readings.
struct GpuInventory {
  Gpu* gpu = nullptr;
  Result<PowerLimitConstraints> constraints;
  Result<uint32_t> power_limit_mw;
  GpuTelemetry telemetry;
  /// Grace Hopper / Blackwell module power (nvml_module_power_mw()): the whole module, GPU included — shown
  /// beside the GPU's readings, never added to them. kNotSupported elsewhere.
  Result<uint32_t> module_power_mw = tl::make_unexpected(Error(ErrorCode::kNotSupported, "not read"));
};

/// Reads every GPU of `devices` once (power limit, its constraints, telemetry); failed readings are kept as
/// errors.
std::vector<GpuInventory> gpu_inventory(const DeviceSet& devices);

/// @return one telemetry field's value as JSON (W for memory power, clock event reasons by name; null when
/// not read).
nlohmann::json telemetry_value_json(const GpuTelemetry& reading, TelemetryField field);

/// @return one reading's cells for `joule power`'s CSV after power_w (temperature_c, sm_clock_mhz,
/// memory_clock_mhz, gpu_utilization_pct, memory_utilization_pct, clock_event_reasons as "a|b" or "none",
/// memory_power_w): a field the device does not give is an empty cell, never 0; no reading is 7 empty cells.
std::string telemetry_csv_cells(const std::optional<GpuTelemetry>& reading);
/// @return " 64.8 C 1380 MHz  98%": temperature, SM clock and utilisation for text output, "-" where the
/// device gives none.
std::string telemetry_columns_text(const GpuTelemetry& reading);

/// The GPUs and CPUs as text, one block per device (the backends' lines are the caller's).
std::string inventory_text(const DeviceSet& devices, const std::vector<GpuInventory>& gpus);
/// The GPUs as a JSON array (power limits in W, null when unknown, with "error"; supports, telemetry and
/// telemetry_errors by field name).
nlohmann::json gpu_inventory_json(const std::vector<GpuInventory>& gpus);
/// The CPUs as a JSON array: index, backend, name, dram_counter.
nlohmann::json cpu_inventory_json(const DeviceSet& devices);

}  // namespace joule::device
