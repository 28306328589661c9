// SPDX-License-Identifier: Apache-2.0
// The loaded NVML library: the dlopen handle, the resolved function table, and the one function that turns
// an nvmlReturn_t into a joule Error.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

#include "device/nvml/nvml_api.hpp"

namespace joule::device::nvml {

/// The functions resolved from the library. Optional ones are nullptr when the library lacks them.
struct NvmlApi {
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  DeviceGetCountFn device_get_count = nullptr;
  DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;
  DeviceGetNameFn device_get_name = nullptr;
  DeviceGetUuidFn device_get_uuid = nullptr;
  DeviceGetArchitectureFn device_get_architecture = nullptr;                        ///< optional
  DeviceGetTotalEnergyConsumptionFn device_get_total_energy_consumption = nullptr;  ///< optional
  DeviceGetPowerUsageFn device_get_power_usage = nullptr;
  DeviceGetFieldValuesFn device_get_field_values = nullptr;  ///< optional
  DeviceGetPowerManagementLimitConstraintsFn device_get_power_management_limit_constraints = nullptr;
  DeviceGetPowerManagementDefaultLimitFn device_get_power_management_default_limit = nullptr;
  DeviceGetPowerManagementLimitFn device_get_power_management_limit = nullptr;
  DeviceSetPowerManagementLimitFn device_set_power_management_limit = nullptr;
  DeviceGetSupportedMemoryClocksFn device_get_supported_memory_clocks = nullptr;
  DeviceGetSupportedGraphicsClocksFn device_get_supported_graphics_clocks = nullptr;
  DeviceSetGpuLockedClocksFn device_set_gpu_locked_clocks = nullptr;
  DeviceResetGpuLockedClocksFn device_reset_gpu_locked_clocks = nullptr;
  DeviceSetMemoryLockedClocksFn device_set_memory_locked_clocks = nullptr;      ///< optional
  DeviceResetMemoryLockedClocksFn device_reset_memory_locked_clocks = nullptr;  ///< optional
  // Telemetry, all optional.
  DeviceGetTemperatureFn device_get_temperature = nullptr;
  DeviceGetClockInfoFn device_get_clock_info = nullptr;
  DeviceGetUtilizationRatesFn device_get_utilization_rates = nullptr;
  /// nvmlDeviceGetCurrentClocksEventReasons, or on drivers before its introduction the same call under its
  /// old name nvmlDeviceGetCurrentClocksThrottleReasons.
  DeviceGetCurrentClocksEventReasonsFn device_get_current_clocks_event_reasons = nullptr;
  /// The symbol device_get_current_clocks_event_reasons came from, for messages; nullptr if neither.
  const char* clocks_event_reasons_symbol = nullptr;
  // MIG, all optional; has_mig() says whether every one of them is there.
  DeviceGetMigModeFn device_get_mig_mode = nullptr;
  DeviceGetMaxMigDeviceCountFn device_get_max_mig_device_count = nullptr;
  DeviceGetMigDeviceHandleByIndexFn device_get_mig_device_handle_by_index = nullptr;
  DeviceGetDeviceHandleFromMigDeviceHandleFn device_get_device_handle_from_mig_device_handle = nullptr;
  DeviceGetInstanceIdFn device_get_gpu_instance_id = nullptr;
  DeviceGetInstanceIdFn device_get_compute_instance_id = nullptr;
  DeviceGetAttributesFn device_get_attributes = nullptr;
  // Per-process accounting, optional.
  DeviceGetProcessUtilizationFn device_get_process_utilization = nullptr;
  DeviceGetComputeRunningProcessesFn device_get_compute_running_processes = nullptr;

  /// @return true if the library has every MIG call joule uses.
  bool has_mig() const {
    return device_get_mig_mode != nullptr && device_get_max_mig_device_count != nullptr &&
           device_get_mig_device_handle_by_index != nullptr &&
           device_get_device_handle_from_mig_device_handle != nullptr &&
           device_get_gpu_instance_id != nullptr && device_get_compute_instance_id != nullptr &&
           device_get_attributes != nullptr;
  }
};

/// What a failed call was trying to do; decides the advice a permission error carries.
enum class NvmlAccess {
  kRead,     ///< reading a value
  kControl,  ///< changing a setting (power limit, clocks): needs root or CAP_SYS_ADMIN
};

/// One loaded and initialized NVML. Shared by every NvmlGpu opened from it: nvmlShutdown and dlclose run
/// when the last of them is destroyed.
class NvmlLibrary {
 public:
  /// dlopens `library` (RTLD_NOW | RTLD_LOCAL), resolves the symbols and calls nvmlInit_v2.
  /// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol; nvmlInit_v2's
  /// failure converted by error().
  static Result<std::shared_ptr<NvmlLibrary>> open(const std::string& library);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }
  /// @return the library as it was named when opened (soname or path).
  const std::string& name() const { return name_; }

  /// The only conversion from nvmlReturn_t to Error. The message is "<what> on <where>: <NVML's text>
  /// (NVML_ERROR_<NAME>)", followed by advice where there is some.
  /// @param what the action in the gerund, e.g. "setting the power limit to 200 W"
  /// @param where the device, usually Gpu::label()
  Error error(nvmlReturn_t status, std::string_view what, std::string_view where, NvmlAccess access) const;

  /// @return NVML's text for `status` and the code's name, e.g. "Not Supported (NVML_ERROR_NOT_SUPPORTED)":
  /// the tail of error()'s message, for messages that explain a status without being its error.
  std::string status_text(nvmlReturn_t status) const;

 private:
  NvmlLibrary(std::string name, void* handle) : name_(std::move(name)), handle_(handle) {}

  std::string name_;
  void* handle_ = nullptr;
  bool initialized_ = false;  ///< nvmlInit_v2 succeeded, so nvmlShutdown is owed
  NvmlApi api_;
};

}  // namespace joule::device::nvml
