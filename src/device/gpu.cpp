// SPDX-License-Identifier: Apache-2.0
#include "joule/device/gpu.hpp"

#include <fmt/format.h>

namespace joule::device {

std::string format_watts(uint32_t power_mw) {
  std::string text = fmt::format("{:.3f}", power_mw / 1e3);
  while (text.back() == '0') {
    text.pop_back();
  }
  if (text.back() == '.') {
    text.pop_back();
  }
  return text + " W";
}

std::string Gpu::label() const {
  return fmt::format("GPU {} ({})", info_.index, info_.name);
}

Result<uint64_t> Gpu::energy_mj() {
  if (!info_.has_energy_counter) {
    return fail(ErrorCode::kNotSupported,
                "{} has no energy counter; its energy is estimated from power samples", label());
  }
  std::lock_guard lock(mutex_);
  return do_energy_mj();
}

Result<uint32_t> Gpu::power_mw() {
  std::lock_guard lock(mutex_);
  return do_power_mw();
}

Result<PowerLimitConstraints> Gpu::constraints_locked() {
  if (!constraints_) {
    auto constraints = do_power_limit_constraints();
    if (!constraints) {
      return constraints;
    }
    constraints_ = *constraints;
  }
  return *constraints_;
}

Result<PowerLimitConstraints> Gpu::power_limit_constraints() {
  std::lock_guard lock(mutex_);
  return constraints_locked();
}

Result<uint32_t> Gpu::power_limit_mw() {
  std::lock_guard lock(mutex_);
  return do_power_limit_mw();
}

Result<void> Gpu::set_power_limit_mw(uint32_t power_limit_mw) {
  std::lock_guard lock(mutex_);
  const auto constraints = JOULE_TRY(constraints_locked());
  if (power_limit_mw < constraints.min_mw || power_limit_mw > constraints.max_mw) {
    return fail(ErrorCode::kOutOfRange, "power limit {} is outside {}'s range {} to {}",
                format_watts(power_limit_mw), label(), format_watts(constraints.min_mw),
                format_watts(constraints.max_mw));
  }
  return do_set_power_limit_mw(power_limit_mw);
}

Result<void> Gpu::reset_power_limit() {
  std::lock_guard lock(mutex_);
  const auto constraints = JOULE_TRY(constraints_locked());
  return do_set_power_limit_mw(constraints.default_mw);
}

Result<std::vector<uint32_t>> Gpu::supported_sm_clocks_mhz() {
  std::lock_guard lock(mutex_);
  return do_supported_sm_clocks_mhz();
}

Result<void> Gpu::lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  if (min_mhz > max_mhz) {
    return fail(ErrorCode::kInvalidArgument,
                "cannot lock {}'s SM clock: minimum {} MHz is above maximum {} MHz", label(), min_mhz,
                max_mhz);
  }
  std::lock_guard lock(mutex_);
  return do_lock_sm_clocks(min_mhz, max_mhz);
}

Result<void> Gpu::reset_sm_clocks() {
  std::lock_guard lock(mutex_);
  return do_reset_sm_clocks();
}

Result<std::vector<uint32_t>> Gpu::supported_memory_clocks_mhz() {
  std::lock_guard lock(mutex_);
  return do_supported_memory_clocks_mhz();
}

Result<void> Gpu::lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  if (min_mhz > max_mhz) {
    return fail(ErrorCode::kInvalidArgument,
                "cannot lock {}'s memory clock: minimum {} MHz is above maximum {} MHz", label(), min_mhz,
                max_mhz);
  }
  std::lock_guard lock(mutex_);
  return do_lock_memory_clocks(min_mhz, max_mhz);
}

Result<void> Gpu::reset_memory_clocks() {
  std::lock_guard lock(mutex_);
  return do_reset_memory_clocks();
}

Result<std::vector<uint32_t>> Gpu::do_supported_memory_clocks_mhz() {
  return fail(ErrorCode::kNotSupported, "{} cannot lock its memory clock ({} backend)", label(),
              info_.backend);
}

Result<void> Gpu::do_lock_memory_clocks(uint32_t /*min_mhz*/, uint32_t /*max_mhz*/) {
  return fail(ErrorCode::kNotSupported, "{} cannot lock its memory clock ({} backend)", label(),
              info_.backend);
}

Result<void> Gpu::do_reset_memory_clocks() {
  return fail(ErrorCode::kNotSupported, "{} cannot lock its memory clock ({} backend)", label(),
              info_.backend);
}

// ---- Telemetry ------------------------------------------------------------------------------------------

std::vector<std::string> clock_event_reason_names(uint64_t mask) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {clock_event::kIdle, "idle"},
      {clock_event::kApplicationClocks, "applications_clocks"},
      {clock_event::kSwPowerCap, "sw_power_cap"},
      {clock_event::kHwSlowdown, "hw_slowdown"},
      {clock_event::kSyncBoost, "sync_boost"},
      {clock_event::kSwThermalSlowdown, "sw_thermal_slowdown"},
      {clock_event::kHwThermalSlowdown, "hw_thermal_slowdown"},
      {clock_event::kHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {clock_event::kDisplayClocks, "display_clocks"},
  };
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if ((mask & bit) != 0) {
      names.emplace_back(name);
    }
  }
  for (int bit = 0; bit < 64; ++bit) {
    const uint64_t value = uint64_t{1} << bit;
    if ((mask & value) != 0 && (known & value) == 0) {
      names.push_back(fmt::format("{:#x}", value));
    }
  }
  return names;
}

const std::vector<TelemetryField>& telemetry_fields() {
  static const std::vector<TelemetryField> fields = {
      TelemetryField::kTemperature,    TelemetryField::kSmClock,           TelemetryField::kMemoryClock,
      TelemetryField::kGpuUtilization, TelemetryField::kMemoryUtilization, TelemetryField::kClockEventReasons,
      TelemetryField::kMemoryPower,
  };
  return fields;
}

std::string_view telemetry_field_name(TelemetryField field) {
  switch (field) {
    case TelemetryField::kTemperature:
      return "temperature_c";
    case TelemetryField::kSmClock:
      return "sm_clock_mhz";
    case TelemetryField::kMemoryClock:
      return "memory_clock_mhz";
    case TelemetryField::kGpuUtilization:
      return "gpu_utilization_pct";
    case TelemetryField::kMemoryUtilization:
      return "memory_utilization_pct";
    case TelemetryField::kClockEventReasons:
      return "clock_event_reasons";
    case TelemetryField::kMemoryPower:
      return "memory_power_w";
  }
  return "unknown";
}

namespace {

// What a field is called in messages.
std::string_view telemetry_reading(TelemetryField field) {
  switch (field) {
    case TelemetryField::kTemperature:
      return "temperature";
    case TelemetryField::kSmClock:
      return "the SM clock";
    case TelemetryField::kMemoryClock:
      return "the memory clock";
    case TelemetryField::kGpuUtilization:
      return "GPU utilisation";
    case TelemetryField::kMemoryUtilization:
      return "memory utilisation";
    case TelemetryField::kClockEventReasons:
      return "clock event (throttle) reasons";
    case TelemetryField::kMemoryPower:
      return "memory power";
  }
  return "this reading";
}

}  // namespace

bool GpuTelemetry::has(TelemetryField field) const {
  return error(field) == nullptr;
}

const Error* GpuTelemetry::error(TelemetryField field) const {
  for (const auto& [failed, why] : errors) {
    if (failed == field) {
      return &why;
    }
  }
  return nullptr;
}

Error Gpu::telemetry_not_supported(TelemetryField field, std::string_view why) const {
  std::string message =
      fmt::format("{} does not report {} ({} backend)", label(), telemetry_reading(field), info_.backend);
  if (!why.empty()) {
    message += fmt::format(": {}", why);
  }
  return Error(ErrorCode::kNotSupported, std::move(message));
}

Result<double> Gpu::do_temperature_c() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kTemperature));
}
Result<uint32_t> Gpu::do_sm_clock_mhz() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kSmClock));
}
Result<uint32_t> Gpu::do_memory_clock_mhz() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kMemoryClock));
}
Result<uint32_t> Gpu::do_gpu_utilization_pct() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kGpuUtilization));
}
Result<uint32_t> Gpu::do_memory_utilization_pct() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kMemoryUtilization));
}
Result<uint64_t> Gpu::do_clock_event_reasons() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kClockEventReasons));
}
Result<uint32_t> Gpu::do_memory_power_mw() {
  return tl::unexpected(telemetry_not_supported(TelemetryField::kMemoryPower));
}

namespace {

Error no_module_scope(const Gpu& gpu, std::string_view reading) {
  return Error(ErrorCode::kNotSupported,
               fmt::format("{} does not report {} ({} backend): only NVIDIA Grace Hopper and Grace Blackwell "
                           "modules do, through NVML",
                           gpu.label(), reading, gpu.info().backend));
}

}  // namespace

Result<uint32_t> Gpu::do_module_power_mw() {
  return tl::unexpected(no_module_scope(*this, "module power"));
}

Result<uint64_t> Gpu::do_module_energy_mj() {
  return tl::unexpected(no_module_scope(*this, "module energy"));
}

Result<uint32_t> Gpu::module_power_mw() {
  std::lock_guard lock(mutex_);
  return do_module_power_mw();
}

Result<uint64_t> Gpu::module_energy_mj() {
  std::lock_guard lock(mutex_);
  return do_module_energy_mj();
}

Result<double> Gpu::temperature_c() {
  std::lock_guard lock(mutex_);
  return do_temperature_c();
}
Result<uint32_t> Gpu::sm_clock_mhz() {
  std::lock_guard lock(mutex_);
  return do_sm_clock_mhz();
}
Result<uint32_t> Gpu::memory_clock_mhz() {
  std::lock_guard lock(mutex_);
  return do_memory_clock_mhz();
}
Result<uint32_t> Gpu::gpu_utilization_pct() {
  std::lock_guard lock(mutex_);
  return do_gpu_utilization_pct();
}
Result<uint32_t> Gpu::memory_utilization_pct() {
  std::lock_guard lock(mutex_);
  return do_memory_utilization_pct();
}
Result<uint64_t> Gpu::clock_event_reasons() {
  std::lock_guard lock(mutex_);
  return do_clock_event_reasons();
}
Result<double> Gpu::do_set_simulated_busy(bool /*busy*/) {
  return fail(ErrorCode::kNotSupported,
              "GPU {} ({}) is not simulated: only a simulated GPU can be made busy or idle", info().index,
              info().name);
}

Result<double> Gpu::set_simulated_busy(bool busy) {
  std::lock_guard lock(mutex_);
  return do_set_simulated_busy(busy);
}

Result<uint32_t> Gpu::memory_power_mw() {
  std::lock_guard lock(mutex_);
  return do_memory_power_mw();
}

GpuTelemetry Gpu::telemetry() {
  std::lock_guard lock(mutex_);
  GpuTelemetry out;
  const auto take = [&out](TelemetryField field, auto result, auto& slot) {
    if (result) {
      slot = *result;
    } else {
      out.errors.emplace_back(field, std::move(result.error()));
    }
  };
  take(TelemetryField::kTemperature, do_temperature_c(), out.temperature_c);
  take(TelemetryField::kSmClock, do_sm_clock_mhz(), out.sm_clock_mhz);
  take(TelemetryField::kMemoryClock, do_memory_clock_mhz(), out.memory_clock_mhz);
  take(TelemetryField::kGpuUtilization, do_gpu_utilization_pct(), out.gpu_utilization_pct);
  take(TelemetryField::kMemoryUtilization, do_memory_utilization_pct(), out.memory_utilization_pct);
  take(TelemetryField::kClockEventReasons, do_clock_event_reasons(), out.clock_event_reasons);
  take(TelemetryField::kMemoryPower, do_memory_power_mw(), out.memory_power_mw);
  return out;
}

}  // namespace joule::device
