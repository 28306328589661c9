// SPDX-License-Identifier: Apache-2.0
#include "joule/device/nvml.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "joule/core/log.hpp"

#include "device/nvml/nvml_library.hpp"

namespace joule::device {

namespace {

using nvml::NvmlAccess;
using nvml::nvmlDevice_t;
using nvml::NvmlLibrary;
using nvml::nvmlReturn_t;

// NVML fills fixed-size buffers; terminate defensively in case a driver does not.
template <unsigned int Size, class Getter>
nvmlReturn_t read_string(Getter getter, nvmlDevice_t device, std::string& out) {
  char buffer[Size] = {};
  const nvmlReturn_t status = getter(device, buffer, Size);
  buffer[Size - 1] = '\0';
  if (status == nvml::NVML_SUCCESS) {
    out = buffer;
  }
  return status;
}

// NVML's two-call idiom for lists: ask with no buffer to learn the count (NVML_ERROR_INSUFFICIENT_SIZE), then
// fetch. Retries in case the list grows between the calls.
nvmlReturn_t read_list(const std::function<nvmlReturn_t(unsigned int*, unsigned int*)>& call,
                       std::vector<uint32_t>& out) {
  std::vector<unsigned int> buffer;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto count = static_cast<unsigned int>(buffer.size());
    const nvmlReturn_t status = call(&count, buffer.empty() ? nullptr : buffer.data());
    if (status == nvml::NVML_SUCCESS) {
      buffer.resize(std::min<size_t>(count, buffer.size()));
      out.assign(buffer.begin(), buffer.end());
      return status;
    }
    if (status != nvml::NVML_ERROR_INSUFFICIENT_SIZE || count <= buffer.size()) {
      return status;
    }
    buffer.resize(count);
  }
  return nvml::NVML_ERROR_INSUFFICIENT_SIZE;
}

// @return the field value as a whole number of mW, or nullopt if it is negative or not a number.
std::optional<uint32_t> field_to_mw(const nvml::nvmlFieldValue_t& field) {
  double value = 0;
  switch (field.valueType) {
    case nvml::NVML_VALUE_TYPE_DOUBLE:
      value = field.value.dVal;
      break;
    case nvml::NVML_VALUE_TYPE_UNSIGNED_INT:
      return field.value.uiVal;
    case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG:
      value = static_cast<double>(field.value.ulVal);
      break;
    case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      value = static_cast<double>(field.value.ullVal);
      break;
    case nvml::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      value = static_cast<double>(field.value.sllVal);
      break;
    case nvml::NVML_VALUE_TYPE_SIGNED_INT:
      value = field.value.siVal;
      break;
    default:
      return std::nullopt;
  }
  if (!(value >= 0) || value > std::numeric_limits<uint32_t>::max()) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::lround(value));
}

// joule's clock_event bits are NVML's, so masks pass through unchanged.
static_assert(clock_event::kIdle == nvml::nvmlClocksEventReasonGpuIdle);
static_assert(clock_event::kApplicationClocks == nvml::nvmlClocksEventReasonApplicationsClocksSetting);
static_assert(clock_event::kSwPowerCap == nvml::nvmlClocksEventReasonSwPowerCap);
static_assert(clock_event::kHwSlowdown == nvml::nvmlClocksThrottleReasonHwSlowdown);
static_assert(clock_event::kSyncBoost == nvml::nvmlClocksEventReasonSyncBoost);
static_assert(clock_event::kSwThermalSlowdown == nvml::nvmlClocksEventReasonSwThermalSlowdown);
static_assert(clock_event::kHwThermalSlowdown == nvml::nvmlClocksThrottleReasonHwThermalSlowdown);
static_assert(clock_event::kHwPowerBrakeSlowdown == nvml::nvmlClocksThrottleReasonHwPowerBrakeSlowdown);
static_assert(clock_event::kDisplayClocks == nvml::nvmlClocksEventReasonDisplayClockSetting);

/// One NVIDIA GPU. Holds the library so that NVML stays initialized while any GPU is alive.
class NvmlGpu final : public Gpu {
 public:
  NvmlGpu(GpuInfo info, std::shared_ptr<const NvmlLibrary> library, nvmlDevice_t device, bool mig_enabled)
      : Gpu(std::move(info)),
        library_(std::move(library)),
        api_(library_->api()),
        device_(device),
        mig_enabled_(mig_enabled) {}

  /// @return the module's power (NVML_FI_DEV_POWER_INSTANT at NVML_POWER_SCOPE_MODULE), mW.
  Result<uint32_t> do_module_power_mw() override {
    const auto field = JOULE_TRY(read_module_field(nvml::NVML_FI_DEV_POWER_INSTANT, "module power"));
    if (const auto power_mw = field_to_mw(field)) {
      return *power_mw;
    }
    return fail(ErrorCode::kDevice, "{} reports a module power that is not a power in mW (value type {})",
                label(), static_cast<int>(field.valueType));
  }

  /// @return the module's energy since the driver loaded (NVML_FI_DEV_ENERGY at module scope), mJ.
  Result<uint64_t> do_module_energy_mj() override {
    const auto field = JOULE_TRY(read_module_field(nvml::NVML_FI_DEV_ENERGY, "module energy"));
    switch (field.valueType) {
      case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return static_cast<uint64_t>(field.value.ullVal);
      case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG:
        return static_cast<uint64_t>(field.value.ulVal);
      case nvml::NVML_VALUE_TYPE_UNSIGNED_INT:
        return static_cast<uint64_t>(field.value.uiVal);
      case nvml::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        if (field.value.sllVal >= 0) {
          return static_cast<uint64_t>(field.value.sllVal);
        }
        break;
      default:
        break;
    }
    return fail(ErrorCode::kDevice, "{} reports a module energy that is not a count of mJ (value type {})",
                label(), static_cast<int>(field.valueType));
  }

  /// @return the per-process SM utilisation samples newer than `since_us` (nvmlDeviceGetProcessUtilization).
  Result<std::vector<ProcessUtilizationSample>> process_utilization(uint64_t since_us) {
    if (api_.device_get_process_utilization == nullptr) {
      return fail(ErrorCode::kNotSupported,
                  "{} does not report per-process utilisation: {} lacks nvmlDeviceGetProcessUtilization",
                  label(), library_->name());
    }
    std::vector<nvml::nvmlProcessUtilizationSample_t> buffer;
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto count = static_cast<unsigned int>(buffer.size());
      const nvmlReturn_t status = api_.device_get_process_utilization(
          device_, buffer.empty() ? nullptr : buffer.data(), &count, since_us);
      if (status == nvml::NVML_ERROR_NOT_FOUND || (status == nvml::NVML_SUCCESS && buffer.empty())) {
        return std::vector<ProcessUtilizationSample>{};  // no sample newer than since_us
      }
      if (status == nvml::NVML_SUCCESS) {
        std::vector<ProcessUtilizationSample> samples;
        for (size_t i = 0; i < std::min<size_t>(count, buffer.size()); ++i) {
          samples.push_back({buffer[i].pid, buffer[i].timeStamp, buffer[i].smUtil});
        }
        return samples;
      }
      if (status != nvml::NVML_ERROR_INSUFFICIENT_SIZE || count <= buffer.size()) {
        return tl::make_unexpected(
            error(status, "reading the per-process utilisation samples", NvmlAccess::kRead));
      }
      buffer.resize(count);
    }
    return fail(ErrorCode::kDevice, "{}: the per-process utilisation samples kept growing while read",
                label());
  }

  /// @return the PIDs of the compute processes running on the GPU (nvmlDeviceGetComputeRunningProcesses).
  Result<std::vector<uint32_t>> compute_processes() {
    if (api_.device_get_compute_running_processes == nullptr) {
      return fail(ErrorCode::kNotSupported,
                  "{} does not list its processes: {} lacks nvmlDeviceGetComputeRunningProcesses_v3 and _v2",
                  label(), library_->name());
    }
    std::vector<nvml::nvmlProcessInfo_t> buffer;
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto count = static_cast<unsigned int>(buffer.size());
      const nvmlReturn_t status = api_.device_get_compute_running_processes(
          device_, &count, buffer.empty() ? nullptr : buffer.data());
      if (status == nvml::NVML_SUCCESS) {
        std::vector<uint32_t> pids;
        for (size_t i = 0; i < std::min<size_t>(count, buffer.size()); ++i) {
          pids.push_back(buffer[i].pid);
        }
        return pids;
      }
      if (status != nvml::NVML_ERROR_INSUFFICIENT_SIZE || count <= buffer.size()) {
        return tl::make_unexpected(error(status, "listing the compute processes", NvmlAccess::kRead));
      }
      buffer.resize(count);
    }
    return fail(ErrorCode::kDevice, "{}: the list of compute processes kept growing while read", label());
  }

  /// Learns the capabilities that need a device call: the energy counter and instantaneous power.
  void probe() {
    mutable_info().has_energy_counter = probe_energy_counter();
    instant_power_ = read_instant_power_mw().has_value();
    log().debug("NVML: {}: energy counter {}, power from {}", label(),
                info().has_energy_counter ? "present" : "absent",
                instant_power_ ? "NVML_FI_DEV_POWER_INSTANT" : "nvmlDeviceGetPowerUsage");
  }

 protected:
  Result<uint64_t> do_energy_mj() override {
    unsigned long long energy_mj = 0;
    if (const nvmlReturn_t status = api_.device_get_total_energy_consumption(device_, &energy_mj);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the energy counter", NvmlAccess::kRead));
    }
    return static_cast<uint64_t>(energy_mj);
  }

  Result<uint32_t> do_power_mw() override {
    if (instant_power_) {
      if (const auto power_mw = read_instant_power_mw()) {
        return *power_mw;
      }
    }
    unsigned int power_mw = 0;
    if (const nvmlReturn_t status = api_.device_get_power_usage(device_, &power_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the power draw", NvmlAccess::kRead));
    }
    return power_mw;
  }

  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    PowerLimitConstraints constraints;
    if (const nvmlReturn_t status = api_.device_get_power_management_limit_constraints(
            device_, &constraints.min_mw, &constraints.max_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the power-limit range", NvmlAccess::kRead));
    }
    if (const nvmlReturn_t status =
            api_.device_get_power_management_default_limit(device_, &constraints.default_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the default power limit", NvmlAccess::kRead));
    }
    return constraints;
  }

  Result<uint32_t> do_power_limit_mw() override {
    unsigned int limit_mw = 0;
    if (const nvmlReturn_t status = api_.device_get_power_management_limit(device_, &limit_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the power limit", NvmlAccess::kRead));
    }
    return limit_mw;
  }

  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    if (const nvmlReturn_t status = api_.device_set_power_management_limit(device_, power_limit_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          error(status, fmt::format("setting the power limit to {}", format_watts(power_limit_mw)),
                NvmlAccess::kControl));
    }
    return {};
  }

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    std::vector<uint32_t> memory_clocks_mhz;
    if (const nvmlReturn_t status = read_list(
            [this](unsigned int* count, unsigned int* clocks_mhz) {
              return api_.device_get_supported_memory_clocks(device_, count, clocks_mhz);
            },
            memory_clocks_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the supported memory clocks", NvmlAccess::kRead));
    }
    if (memory_clocks_mhz.empty()) {
      return fail(ErrorCode::kNotSupported,
                  "{} lists no supported memory clocks, so its SM clocks are unknown", label());
    }
    // SM clocks depend on the memory clock; training runs at the highest, as Zeus assumes.
    const uint32_t memory_clock_mhz = *std::max_element(memory_clocks_mhz.begin(), memory_clocks_mhz.end());
    std::vector<uint32_t> clocks_mhz;
    if (const nvmlReturn_t status = read_list(
            [this, memory_clock_mhz](unsigned int* count, unsigned int* graphics_mhz) {
              return api_.device_get_supported_graphics_clocks(device_, memory_clock_mhz, count,
                                                               graphics_mhz);
            },
            clocks_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(
          status, fmt::format("reading the supported SM clocks at memory clock {} MHz", memory_clock_mhz),
          NvmlAccess::kRead));
    }
    std::sort(clocks_mhz.begin(), clocks_mhz.end(), std::greater<>());
    clocks_mhz.erase(std::unique(clocks_mhz.begin(), clocks_mhz.end()), clocks_mhz.end());
    return clocks_mhz;
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    if (mig_enabled_) {
      // NVML's rule: locked GPU clocks are not supported while MIG mode is on (they would hold every
      // instance's clock, and instances belong to different users).
      return fail(
          ErrorCode::kNotSupported,
          "locking the SM clock to {}-{} MHz on {}: the GPU is in MIG mode, and NVML does not lock GPU "
          "clocks while MIG is enabled. Disable MIG mode (nvidia-smi -i {} -mig 0, no instance "
          "running) to lock clocks",
          min_mhz, max_mhz, label(), info().physical_index);
    }
    if (const nvmlReturn_t status = api_.device_set_gpu_locked_clocks(device_, min_mhz, max_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(
          status, fmt::format("locking the SM clock to {}-{} MHz", min_mhz, max_mhz), NvmlAccess::kControl));
    }
    return {};
  }

  Result<void> do_reset_sm_clocks() override {
    if (const nvmlReturn_t status = api_.device_reset_gpu_locked_clocks(device_);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "resetting the SM clock lock", NvmlAccess::kControl));
    }
    return {};
  }

  // Memory clock locks: nvmlDeviceSetMemoryLockedClocks (R470+). The list is the one the SM clocks are read
  // against; HBM GPUs list one memory clock, GDDR ones several.
  Result<std::vector<uint32_t>> do_supported_memory_clocks_mhz() override {
    JOULE_TRY(memory_locks_available("listing the memory clocks to lock"));
    std::vector<uint32_t> memory_clocks_mhz;
    if (const nvmlReturn_t status = read_list(
            [this](unsigned int* count, unsigned int* clocks_mhz) {
              return api_.device_get_supported_memory_clocks(device_, count, clocks_mhz);
            },
            memory_clocks_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the supported memory clocks", NvmlAccess::kRead));
    }
    std::sort(memory_clocks_mhz.rbegin(), memory_clocks_mhz.rend());
    memory_clocks_mhz.erase(std::unique(memory_clocks_mhz.begin(), memory_clocks_mhz.end()),
                            memory_clocks_mhz.end());
    return memory_clocks_mhz;
  }

  Result<void> do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    const std::string what = fmt::format("locking the memory clock to {}-{} MHz", min_mhz, max_mhz);
    JOULE_TRY(memory_locks_available(what));
    if (const nvmlReturn_t status = api_.device_set_memory_locked_clocks(device_, min_mhz, max_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, what, NvmlAccess::kControl));
    }
    return {};
  }

  Result<void> do_reset_memory_clocks() override {
    JOULE_TRY(memory_locks_available("resetting the memory clock lock"));
    if (const nvmlReturn_t status = api_.device_reset_memory_locked_clocks(device_);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "resetting the memory clock lock", NvmlAccess::kControl));
    }
    return {};
  }

  // ---- Telemetry (memory power stays the default: NVML documents no memory-power reading) ----

  Result<double> do_temperature_c() override {
    constexpr TelemetryField kField = TelemetryField::kTemperature;
    if (api_.device_get_temperature == nullptr) {
      return tl::make_unexpected(missing_symbol(kField, "nvmlDeviceGetTemperature"));
    }
    unsigned int temperature_c = 0;
    if (const nvmlReturn_t status =
            api_.device_get_temperature(device_, nvml::NVML_TEMPERATURE_GPU, &temperature_c);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          telemetry_error(kField, status, "nvmlDeviceGetTemperature", "reading the temperature"));
    }
    return static_cast<double>(temperature_c);
  }

  Result<uint32_t> do_sm_clock_mhz() override {
    return read_clock_mhz(TelemetryField::kSmClock, nvml::NVML_CLOCK_SM, "reading the SM clock");
  }

  Result<uint32_t> do_memory_clock_mhz() override {
    return read_clock_mhz(TelemetryField::kMemoryClock, nvml::NVML_CLOCK_MEM, "reading the memory clock");
  }

  Result<uint32_t> do_gpu_utilization_pct() override {
    const auto utilization = JOULE_TRY(read_utilization(TelemetryField::kGpuUtilization));
    return utilization.gpu;
  }

  Result<uint32_t> do_memory_utilization_pct() override {
    const auto utilization = JOULE_TRY(read_utilization(TelemetryField::kMemoryUtilization));
    return utilization.memory;
  }

  Result<uint64_t> do_clock_event_reasons() override {
    constexpr TelemetryField kField = TelemetryField::kClockEventReasons;
    if (api_.device_get_current_clocks_event_reasons == nullptr) {
      return tl::make_unexpected(missing_symbol(
          kField, "nvmlDeviceGetCurrentClocksEventReasons and nvmlDeviceGetCurrentClocksThrottleReasons"));
    }
    unsigned long long reasons = 0;
    if (const nvmlReturn_t status = api_.device_get_current_clocks_event_reasons(device_, &reasons);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(telemetry_error(kField, status, api_.clocks_event_reasons_symbol,
                                                 "reading the clock event reasons"));
    }
    return static_cast<uint64_t>(reasons);
  }

 private:
  Error error(nvmlReturn_t status, std::string_view what, NvmlAccess access) const {
    return library_->error(status, what, label(), access);
  }

  // A telemetry read that failed: what NVML calls not supported becomes telemetry_not_supported (naming the
  // call and NVML's answer); anything else is the ordinary error.
  Error telemetry_error(TelemetryField field, nvmlReturn_t status, std::string_view symbol,
                        std::string_view what) const {
    Error converted = error(status, what, NvmlAccess::kRead);
    if (converted.code() == ErrorCode::kNotSupported) {
      return telemetry_not_supported(field,
                                     fmt::format("{} returned {}", symbol, library_->status_text(status)));
    }
    return converted;
  }

  // Telemetry symbols are optional: a driver without one still loads and lacks only that reading.
  // kNotSupported, saying why, where the memory clock cannot be locked: a driver without the calls (before
  // R470) or MIG mode (NVML locks no clock of a GPU in MIG mode).
  Result<void> memory_locks_available(std::string_view what) const {
    if (api_.device_set_memory_locked_clocks == nullptr ||
        api_.device_reset_memory_locked_clocks == nullptr) {
      return fail(ErrorCode::kNotSupported,
                  "{} on {}: the NVML library lacks nvmlDeviceSetMemoryLockedClocks (driver R470 or later)",
                  what, label());
    }
    if (mig_enabled_) {
      return fail(ErrorCode::kNotSupported,
                  "{} on {}: the GPU is in MIG mode, and NVML does not lock clocks while MIG is enabled",
                  what, label());
    }
    return {};
  }

  Error missing_symbol(TelemetryField field, std::string_view symbols) const {
    return telemetry_not_supported(
        field, fmt::format("{} lacks {}; a newer NVIDIA driver may provide it", library_->name(), symbols));
  }

  Result<uint32_t> read_clock_mhz(TelemetryField field, nvml::nvmlClockType_t type, std::string_view what) {
    if (api_.device_get_clock_info == nullptr) {
      return tl::make_unexpected(missing_symbol(field, "nvmlDeviceGetClockInfo"));
    }
    unsigned int clock_mhz = 0;
    if (const nvmlReturn_t status = api_.device_get_clock_info(device_, type, &clock_mhz);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(telemetry_error(field, status, "nvmlDeviceGetClockInfo", what));
    }
    return clock_mhz;
  }

  // GPU and memory utilisation come from one call; each field reads it on its own.
  Result<nvml::nvmlUtilization_t> read_utilization(TelemetryField field) {
    if (api_.device_get_utilization_rates == nullptr) {
      return tl::make_unexpected(missing_symbol(field, "nvmlDeviceGetUtilizationRates"));
    }
    nvml::nvmlUtilization_t utilization{};
    if (const nvmlReturn_t status = api_.device_get_utilization_rates(device_, &utilization);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          telemetry_error(field, status, "nvmlDeviceGetUtilizationRates", "reading the utilisation"));
    }
    return utilization;
  }

  // One module-scope field (Grace Hopper / Grace Blackwell: the GPU, CPU and memory of the module together).
  Result<nvml::nvmlFieldValue_t> read_module_field(unsigned int field_id, std::string_view reading) {
    if (api_.device_get_field_values == nullptr) {
      return fail(ErrorCode::kNotSupported, "{} does not report {}: {} lacks nvmlDeviceGetFieldValues",
                  label(), reading, library_->name());
    }
    nvml::nvmlFieldValue_t field{};
    field.fieldId = field_id;
    field.scopeId = nvml::NVML_POWER_SCOPE_MODULE;
    if (const nvmlReturn_t status = api_.device_get_field_values(device_, 1, &field);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, fmt::format("reading the {}", reading), NvmlAccess::kRead));
    }
    if (field.nvmlReturn == nvml::NVML_ERROR_NOT_SUPPORTED) {
      return fail(
          ErrorCode::kNotSupported,
          "{} does not report {}: NVML answers {} for field {} at module scope; only Grace Hopper and "
          "Grace Blackwell modules report it",
          label(), reading, library_->status_text(field.nvmlReturn), field_id);
    }
    if (field.nvmlReturn != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          error(field.nvmlReturn, fmt::format("reading the {} (field {} at module scope)", reading, field_id),
                NvmlAccess::kRead));
    }
    return field;
  }

  // Zeus's rule: the counter exists from Volta on. The probe also catches drivers that refuse the call
  // (vGPUs, some containers) and GPUs whose architecture NVML cannot name.
  bool probe_energy_counter() {
    if (api_.device_get_total_energy_consumption == nullptr) {
      return false;
    }
    if (api_.device_get_architecture != nullptr) {
      nvml::nvmlDeviceArchitecture_t architecture = nvml::NVML_DEVICE_ARCH_UNKNOWN;
      if (api_.device_get_architecture(device_, &architecture) == nvml::NVML_SUCCESS &&
          architecture != nvml::NVML_DEVICE_ARCH_UNKNOWN && architecture < nvml::NVML_DEVICE_ARCH_VOLTA) {
        return false;
      }
    }
    unsigned long long energy_mj = 0;
    return api_.device_get_total_energy_consumption(device_, &energy_mj) == nvml::NVML_SUCCESS;
  }

  std::optional<uint32_t> read_instant_power_mw() {
    if (api_.device_get_field_values == nullptr) {
      return std::nullopt;
    }
    nvml::nvmlFieldValue_t field{};
    field.fieldId = nvml::NVML_FI_DEV_POWER_INSTANT;
    field.scopeId = nvml::NVML_POWER_SCOPE_GPU;
    if (api_.device_get_field_values(device_, 1, &field) != nvml::NVML_SUCCESS ||
        field.nvmlReturn != nvml::NVML_SUCCESS) {
      return std::nullopt;
    }
    return field_to_mw(field);
  }

  std::shared_ptr<const NvmlLibrary> library_;
  const nvml::NvmlApi& api_;  // owned by library_
  nvmlDevice_t device_;
  bool mig_enabled_ = false;    ///< MIG mode was on when opened: clock locks are refused
  bool instant_power_ = false;  ///< NVML_FI_DEV_POWER_INSTANT worked when probed
};

/// One MIG instance as NVML lists it when the GPU is opened.
struct MigInstance {
  unsigned int parent = 0;  ///< the parent's physical index
  nvmlDevice_t device = nullptr;
  std::string uuid;  ///< "MIG-…"
  unsigned int gpu_instance_id = 0;
  unsigned int compute_instance_id = 0;
  unsigned int compute_slices = 0;  ///< slices of its compute instance
  unsigned int total_slices = 0;    ///< the parent's MIG slots, one per compute slice
};

/// One MIG instance. NVML reports energy and power only for the whole GPU, so the instance's are
/// estimates: the parent's × the instance's share of the GPU's compute slices (NVML gives no utilisation per
/// instance to weight it with). Power limits and clocks belong to the whole GPU and are refused here.
class NvmlMigGpu final : public Gpu {
 public:
  NvmlMigGpu(GpuInfo info, std::shared_ptr<const NvmlLibrary> library, MigInstance instance,
             nvmlDevice_t parent, std::string parent_uuid)
      : Gpu(std::move(info)),
        library_(std::move(library)),
        api_(library_->api()),
        instance_(std::move(instance)),
        parent_(parent),
        parent_uuid_(std::move(parent_uuid)) {}

  /// The parent's energy counter, as NvmlGpu::probe_energy_counter learns it (Volta and later: every MIG
  /// GPU).
  void probe() {
    unsigned long long energy_mj = 0;
    mutable_info().has_energy_counter =
        api_.device_get_total_energy_consumption != nullptr &&
        api_.device_get_total_energy_consumption(parent_, &energy_mj) == nvml::NVML_SUCCESS;
  }

  /// @return the instance's share of its GPU's compute, 0–1.
  double share() const {
    return static_cast<double>(instance_.compute_slices) / static_cast<double>(instance_.total_slices);
  }

 protected:
  // The module belongs to the whole GPU, which several instances share.
  Result<uint32_t> do_module_power_mw() override {
    return tl::unexpected(no_module_of_instance("module power"));
  }
  Result<uint64_t> do_module_energy_mj() override {
    return tl::unexpected(no_module_of_instance("module energy"));
  }
  Error no_module_of_instance(std::string_view reading) const {
    return Error(ErrorCode::kNotSupported,
                 fmt::format("{} does not report {}: it is a MIG instance, and the module belongs to its "
                             "whole GPU; read it on the parent GPU",
                             label(), reading));
  }
  Result<uint64_t> do_energy_mj() override {
    JOULE_TRY(check_present());
    unsigned long long energy_mj = 0;
    if (const nvmlReturn_t status = api_.device_get_total_energy_consumption(parent_, &energy_mj);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the parent GPU's energy counter"));
    }
    // Scaling the cumulative counter scales every difference of it: a window's estimate is the parent's
    // energy in the window × the share (to 1 mJ).
    return static_cast<uint64_t>(std::floor(static_cast<double>(energy_mj) * share()));
  }

  Result<uint32_t> do_power_mw() override {
    JOULE_TRY(check_present());
    unsigned int power_mw = 0;
    if (const nvmlReturn_t status = api_.device_get_power_usage(parent_, &power_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the parent GPU's power draw"));
    }
    return static_cast<uint32_t>(std::lround(static_cast<double>(power_mw) * share()));
  }

  // Reading the parent's power limit is harmless (and what a settings guard saves); changing it is not.
  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    PowerLimitConstraints constraints;
    if (const nvmlReturn_t status = api_.device_get_power_management_limit_constraints(
            parent_, &constraints.min_mw, &constraints.max_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the parent GPU's power-limit range"));
    }
    if (const nvmlReturn_t status =
            api_.device_get_power_management_default_limit(parent_, &constraints.default_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the parent GPU's default power limit"));
    }
    return constraints;
  }

  Result<uint32_t> do_power_limit_mw() override {
    unsigned int limit_mw = 0;
    if (const nvmlReturn_t status = api_.device_get_power_management_limit(parent_, &limit_mw);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(error(status, "reading the parent GPU's power limit"));
    }
    return limit_mw;
  }

  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    return tl::make_unexpected(
        refused(fmt::format("setting the power limit to {}", format_watts(power_limit_mw)),
                "NVML sets power limits only for the whole GPU, which every instance on it shares. Set it "
                "on the parent GPU instead (it then holds for all its instances)"));
  }

  // Why an instance refuses every clock lock (SM and memory alike).
  static constexpr std::string_view kNoClockLocksOnInstances =
      "NVML locks clocks only for the whole GPU, and not while MIG is on";

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    return tl::make_unexpected(refused("listing the SM clocks to lock", kNoClockLocksOnInstances));
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    return tl::make_unexpected(refused(fmt::format("locking the SM clock to {}-{} MHz", min_mhz, max_mhz),
                                       kNoClockLocksOnInstances));
  }

  Result<void> do_reset_sm_clocks() override {
    return tl::make_unexpected(refused("resetting the SM clock lock", kNoClockLocksOnInstances));
  }

  Result<std::vector<uint32_t>> do_supported_memory_clocks_mhz() override {
    return tl::make_unexpected(refused("listing the memory clocks to lock", kNoClockLocksOnInstances));
  }

  Result<void> do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    return tl::make_unexpected(refused(fmt::format("locking the memory clock to {}-{} MHz", min_mhz, max_mhz),
                                       kNoClockLocksOnInstances));
  }

  Result<void> do_reset_memory_clocks() override {
    return tl::make_unexpected(refused("resetting the memory clock lock", kNoClockLocksOnInstances));
  }

 private:
  std::string where() const {
    return fmt::format("{}, MIG instance {} (GPU instance {}, compute instance {}) of NVML device {} ({})",
                       label(), instance_.uuid, instance_.gpu_instance_id, instance_.compute_instance_id,
                       instance_.parent, parent_uuid_);
  }

  Error error(nvmlReturn_t status, std::string_view what) const {
    return library_->error(status, what, where(), NvmlAccess::kRead);
  }

  Error refused(std::string_view what, std::string_view why) const {
    return Error(ErrorCode::kNotSupported, fmt::format("{} on {}: refused, because {}", what, where(), why));
  }

  // An instance destroyed (or its GPU reconfigured) while joule holds it leaves a stale handle: NVML then
  // fails on it, or names other instance ids. Either way the figures would belong to nobody.
  Result<void> check_present() const {
    unsigned int gpu_instance_id = 0;
    unsigned int compute_instance_id = 0;
    nvmlReturn_t status = api_.device_get_gpu_instance_id(instance_.device, &gpu_instance_id);
    if (status == nvml::NVML_SUCCESS) {
      status = api_.device_get_compute_instance_id(instance_.device, &compute_instance_id);
    }
    if (status != nvml::NVML_SUCCESS) {
      return fail(ErrorCode::kNotFound,
                  "{} is gone: NVML answers {} for it. The instance was destroyed or the GPU reconfigured "
                  "while joule measured it, so its measurement ends here; list the instances again "
                  "(nvidia-smi -L) and measure the new ones",
                  where(), library_->status_text(status));
    }
    if (gpu_instance_id != instance_.gpu_instance_id ||
        compute_instance_id != instance_.compute_instance_id) {
      return fail(ErrorCode::kNotFound,
                  "{} is gone: its handle now names GPU instance {}, compute instance {}. The GPU was "
                  "reconfigured while joule measured it, so its measurement ends here; list the instances "
                  "again (nvidia-smi -L) and measure the new ones",
                  where(), gpu_instance_id, compute_instance_id);
    }
    return {};
  }

  std::shared_ptr<const NvmlLibrary> library_;
  const nvml::NvmlApi& api_;  // owned by library_
  MigInstance instance_;
  nvmlDevice_t parent_;
  std::string parent_uuid_;
};

// @return whether physical GPU `index` is in MIG mode now. A GPU without MIG (NVML_ERROR_NOT_SUPPORTED), or
// a driver without the MIG calls, is simply not; other failures are logged and treated the same way, so
// that one odd GPU does not hide the others.
bool mig_enabled(const NvmlLibrary& library, nvmlDevice_t device, unsigned int index) {
  const nvml::NvmlApi& api = library.api();
  if (!api.has_mig()) {
    return false;
  }
  unsigned int current = nvml::NVML_DEVICE_MIG_DISABLE;
  unsigned int pending = nvml::NVML_DEVICE_MIG_DISABLE;
  const nvmlReturn_t status = api.device_get_mig_mode(device, &current, &pending);
  if (status != nvml::NVML_SUCCESS && status != nvml::NVML_ERROR_NOT_SUPPORTED) {
    log().warn("NVML: NVML device {}: cannot read the MIG mode ({}); its MIG instances are not listed", index,
               library.status_text(status));
  }
  return status == nvml::NVML_SUCCESS && current == nvml::NVML_DEVICE_MIG_ENABLE;
}

// Reads MIG slot `slot` of physical GPU `parent`. @return nullopt for an empty slot; an error for one that
// cannot be read or reports an impossible share.
Result<std::optional<MigInstance>> read_mig_instance(const NvmlLibrary& library, nvmlDevice_t device,
                                                     unsigned int parent, unsigned int slot,
                                                     unsigned int total_slices) {
  const nvml::NvmlApi& api = library.api();
  const std::string where = fmt::format("MIG slot {} of NVML device {}", slot, parent);
  MigInstance instance;
  instance.parent = parent;
  instance.total_slices = total_slices;
  nvmlReturn_t status = api.device_get_mig_device_handle_by_index(device, slot, &instance.device);
  if (status == nvml::NVML_ERROR_NOT_FOUND) {
    return std::optional<MigInstance>();
  }
  if (status == nvml::NVML_SUCCESS) {
    status = read_string<nvml::NVML_DEVICE_UUID_V2_BUFFER_SIZE>(api.device_get_uuid, instance.device,
                                                                instance.uuid);
  }
  if (status == nvml::NVML_SUCCESS) {
    status = api.device_get_gpu_instance_id(instance.device, &instance.gpu_instance_id);
  }
  if (status == nvml::NVML_SUCCESS) {
    status = api.device_get_compute_instance_id(instance.device, &instance.compute_instance_id);
  }
  nvml::nvmlDeviceAttributes_t attributes{};
  if (status == nvml::NVML_SUCCESS) {
    status = api.device_get_attributes(instance.device, &attributes);
  }
  if (status != nvml::NVML_SUCCESS) {
    return tl::make_unexpected(library.error(status, "reading the MIG instance", where, NvmlAccess::kRead));
  }
  instance.compute_slices = attributes.computeInstanceSliceCount;
  if (instance.compute_slices == 0 || instance.compute_slices > total_slices) {
    return fail(ErrorCode::kDevice,
                "{} ({}) reports {} compute slices, but its GPU has {}: its share of the GPU's energy cannot "
                "be estimated",
                where, instance.uuid, instance.compute_slices, total_slices);
  }
  return std::optional<MigInstance>(std::move(instance));
}

// Lists the MIG instances of physical GPU `parent`. An instance that cannot be read is logged and left out
// (it cannot be selected then: CUDA_VISIBLE_DEVICES naming it says it matches nothing).
std::vector<MigInstance> list_mig_instances(const NvmlLibrary& library, nvmlDevice_t device,
                                            unsigned int parent) {
  const nvml::NvmlApi& api = library.api();
  std::vector<MigInstance> instances;
  unsigned int slots = 0;
  if (const nvmlReturn_t status = api.device_get_max_mig_device_count(device, &slots);
      status != nvml::NVML_SUCCESS || slots == 0) {
    log().warn("NVML: NVML device {} is in MIG mode but {}; its MIG instances are not listed", parent,
               status != nvml::NVML_SUCCESS
                   ? fmt::format("its MIG slots cannot be counted ({})", library.status_text(status))
                   : std::string("reports no MIG slots"));
    return instances;
  }
  for (unsigned int slot = 0; slot < slots; ++slot) {
    auto instance = read_mig_instance(library, device, parent, slot, slots);
    if (!instance) {
      log().warn("NVML: {}; the instance is not listed", instance.error().message());
    } else if (instance->has_value()) {
      instances.push_back(std::move(**instance));
    }
  }
  return instances;
}

}  // namespace

Result<std::vector<std::unique_ptr<Gpu>>> open_nvml_gpus(const NvmlOptions& options,
                                                         const VisibleDevices& visible) {
  auto opened = JOULE_TRY(NvmlLibrary::open(options.library));
  const std::shared_ptr<const NvmlLibrary> library = std::move(opened);
  const nvml::NvmlApi& api = library->api();
  const auto device_label = [](unsigned int physical_index) {
    return fmt::format("NVML device {}", physical_index);
  };

  unsigned int count = 0;
  if (const nvmlReturn_t status = api.device_get_count(&count); status != nvml::NVML_SUCCESS) {
    return tl::make_unexpected(library->error(
        status, "counting GPUs", fmt::format("this machine ({})", library->name()), NvmlAccess::kRead));
  }
  // Every device's UUID is needed to resolve CUDA_VISIBLE_DEVICES, which may name GPUs by UUID.
  std::vector<nvmlDevice_t> devices(count, nullptr);
  std::vector<std::string> uuids(count);
  for (unsigned int i = 0; i < count; ++i) {
    if (const nvmlReturn_t status = api.device_get_handle_by_index(i, &devices[i]);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          library->error(status, "opening the device", device_label(i), NvmlAccess::kRead));
    }
    if (const nvmlReturn_t status =
            read_string<nvml::NVML_DEVICE_UUID_V2_BUFFER_SIZE>(api.device_get_uuid, devices[i], uuids[i]);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          library->error(status, "reading the UUID", device_label(i), NvmlAccess::kRead));
    }
  }
  std::vector<bool> mig_on(count, false);
  std::vector<MigInstance> instances;
  std::vector<std::string> mig_uuids;
  for (unsigned int i = 0; i < count; ++i) {
    mig_on[i] = mig_enabled(*library, devices[i], i);
    if (mig_on[i]) {
      for (auto& instance : list_mig_instances(*library, devices[i], i)) {
        mig_uuids.push_back(instance.uuid);
        instances.push_back(std::move(instance));
      }
    }
  }
  const auto order = JOULE_TRY(resolve_visible_devices(visible, uuids, mig_uuids));

  std::vector<std::unique_ptr<Gpu>> gpus;
  for (size_t index = 0; index < order.size(); ++index) {
    const auto selected = static_cast<unsigned int>(order[index]);
    const bool is_mig = selected >= count;
    const MigInstance* instance = is_mig ? &instances[selected - count] : nullptr;
    const unsigned int physical_index = is_mig ? instance->parent : selected;
    GpuInfo info;
    info.backend = "nvml";
    info.index = static_cast<int>(index);
    info.physical_index = static_cast<int>(physical_index);
    info.uuid = is_mig ? instance->uuid : uuids[physical_index];
    if (const nvmlReturn_t status = read_string<nvml::NVML_DEVICE_NAME_V2_BUFFER_SIZE>(
            api.device_get_name, is_mig ? instance->device : devices[physical_index], info.name);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(library->error(status, "reading the name",
                                                is_mig ? instance->uuid : device_label(physical_index),
                                                NvmlAccess::kRead));
    }
    if (is_mig) {
      auto gpu = std::make_unique<NvmlMigGpu>(std::move(info), library, *instance, devices[physical_index],
                                              uuids[physical_index]);
      gpu->probe();
      log().debug("NVML: {} is MIG instance {} of NVML device {}: {} of {} compute slices", gpu->label(),
                  instance->uuid, physical_index, instance->compute_slices, instance->total_slices);
      gpus.push_back(std::move(gpu));
      continue;
    }
    auto gpu =
        std::make_unique<NvmlGpu>(std::move(info), library, devices[physical_index], mig_on[physical_index]);
    gpu->probe();
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

Result<uint32_t> nvml_module_power_mw(Gpu& gpu) {
  return gpu.module_power_mw();
}

Result<uint64_t> nvml_module_energy_mj(Gpu& gpu) {
  return gpu.module_energy_mj();
}

Result<std::vector<ProcessUtilizationSample>> nvml_process_utilization(Gpu& gpu, uint64_t since_us) {
  if (auto* nvml_gpu = dynamic_cast<NvmlGpu*>(&gpu)) {
    return nvml_gpu->process_utilization(since_us);
  }
  return fail(
      ErrorCode::kNotSupported,
      "{} does not report per-process utilisation ({}): only whole NVIDIA GPUs do, through NVML", gpu.label(),
      dynamic_cast<const NvmlMigGpu*>(&gpu) != nullptr ? "a MIG instance" : gpu.info().backend + " backend");
}

Result<std::vector<uint32_t>> nvml_compute_processes(Gpu& gpu) {
  if (auto* nvml_gpu = dynamic_cast<NvmlGpu*>(&gpu)) {
    return nvml_gpu->compute_processes();
  }
  return fail(
      ErrorCode::kNotSupported,
      "{} does not list its processes ({}): only whole NVIDIA GPUs do, through NVML", gpu.label(),
      dynamic_cast<const NvmlMigGpu*>(&gpu) != nullptr ? "a MIG instance" : gpu.info().backend + " backend");
}

double mig_compute_share(const Gpu& gpu) {
  const auto* mig = dynamic_cast<const NvmlMigGpu*>(&gpu);
  return mig != nullptr ? mig->share() : 1.0;
}

}  // namespace joule::device
