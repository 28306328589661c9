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
  NvmlGpu(GpuInfo info, std::shared_ptr<const NvmlLibrary> library, nvmlDevice_t device)
      : Gpu(std::move(info)), library_(std::move(library)), api_(library_->api()), device_(device) {}

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
  bool instant_power_ = false;  ///< NVML_FI_DEV_POWER_INSTANT worked when probed
};

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
  const auto physical = JOULE_TRY(resolve_visible_devices(visible, uuids));

  std::vector<std::unique_ptr<Gpu>> gpus;
  for (size_t index = 0; index < physical.size(); ++index) {
    const auto physical_index = static_cast<unsigned int>((physical)[index]);
    GpuInfo info;
    info.backend = "nvml";
    info.index = static_cast<int>(index);
    info.physical_index = static_cast<int>(physical_index);
    info.uuid = uuids[physical_index];
    if (const nvmlReturn_t status = read_string<nvml::NVML_DEVICE_NAME_V2_BUFFER_SIZE>(
            api.device_get_name, devices[physical_index], info.name);
        status != nvml::NVML_SUCCESS) {
      return tl::make_unexpected(
          library->error(status, "reading the name", device_label(physical_index), NvmlAccess::kRead));
    }
    auto gpu = std::make_unique<NvmlGpu>(std::move(info), library, devices[physical_index]);
    gpu->probe();
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace joule::device
