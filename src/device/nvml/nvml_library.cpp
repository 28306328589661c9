// SPDX-License-Identifier: Apache-2.0
#include "device/nvml/nvml_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace joule::device::nvml {

namespace {

// Resolves `symbol` into `function`. @return false if the library does not export it.
template <class Function>
bool resolve(void* handle, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, symbol));
  return function != nullptr;
}

}  // namespace

Result<std::shared_ptr<NvmlLibrary>> NvmlLibrary::open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    return fail(ErrorCode::kLibraryMissing,
                "cannot load NVML: {}. Install the NVIDIA driver, or set JOULE_NVML_LIBRARY to the path of "
                "libnvidia-ml.so.1",
                reason != nullptr ? reason : library);
  }
  // From here on the destructor owns the handle, including on the error paths.
  std::shared_ptr<NvmlLibrary> nvml(new NvmlLibrary(library, handle));
  NvmlApi& api = nvml->api_;

  const char* missing = nullptr;
  const auto require = [&](const char* symbol, auto& function) {
    if (!resolve(handle, symbol, function) && missing == nullptr) {
      missing = symbol;
    }
  };
  // nvml.h #defines these three to their _v2 versions; the unversioned ones are the pre-2013 ABI.
  require("nvmlInit_v2", api.init);
  require("nvmlDeviceGetCount_v2", api.device_get_count);
  require("nvmlDeviceGetHandleByIndex_v2", api.device_get_handle_by_index);
  require("nvmlShutdown", api.shutdown);
  require("nvmlErrorString", api.error_string);
  require("nvmlDeviceGetName", api.device_get_name);
  require("nvmlDeviceGetUUID", api.device_get_uuid);
  require("nvmlDeviceGetPowerUsage", api.device_get_power_usage);
  require("nvmlDeviceGetPowerManagementLimitConstraints", api.device_get_power_management_limit_constraints);
  require("nvmlDeviceGetPowerManagementDefaultLimit", api.device_get_power_management_default_limit);
  require("nvmlDeviceGetPowerManagementLimit", api.device_get_power_management_limit);
  require("nvmlDeviceSetPowerManagementLimit", api.device_set_power_management_limit);
  require("nvmlDeviceGetSupportedMemoryClocks", api.device_get_supported_memory_clocks);
  require("nvmlDeviceGetSupportedGraphicsClocks", api.device_get_supported_graphics_clocks);
  require("nvmlDeviceSetGpuLockedClocks", api.device_set_gpu_locked_clocks);
  require("nvmlDeviceResetGpuLockedClocks", api.device_reset_gpu_locked_clocks);
  if (missing != nullptr) {
    return fail(
        ErrorCode::kLibraryMissing,
        "{} lacks the required symbol {}: the NVIDIA driver is probably too old for joule; upgrade it, or "
        "set JOULE_NVML_LIBRARY to a newer libnvidia-ml.so.1",
        library, missing);
  }
  // Optional: their absence only disables a capability.
  resolve(handle, "nvmlDeviceGetArchitecture", api.device_get_architecture);
  resolve(handle, "nvmlDeviceSetMemoryLockedClocks", api.device_set_memory_locked_clocks);
  resolve(handle, "nvmlDeviceResetMemoryLockedClocks", api.device_reset_memory_locked_clocks);
  resolve(handle, "nvmlDeviceGetTotalEnergyConsumption", api.device_get_total_energy_consumption);
  resolve(handle, "nvmlDeviceGetFieldValues", api.device_get_field_values);
  resolve(handle, "nvmlDeviceGetTemperature", api.device_get_temperature);
  resolve(handle, "nvmlDeviceGetClockInfo", api.device_get_clock_info);
  resolve(handle, "nvmlDeviceGetUtilizationRates", api.device_get_utilization_rates);
  resolve(handle, "nvmlDeviceGetMigMode", api.device_get_mig_mode);
  resolve(handle, "nvmlDeviceGetMaxMigDeviceCount", api.device_get_max_mig_device_count);
  resolve(handle, "nvmlDeviceGetMigDeviceHandleByIndex", api.device_get_mig_device_handle_by_index);
  resolve(handle, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
          api.device_get_device_handle_from_mig_device_handle);
  resolve(handle, "nvmlDeviceGetGpuInstanceId", api.device_get_gpu_instance_id);
  resolve(handle, "nvmlDeviceGetComputeInstanceId", api.device_get_compute_instance_id);
  resolve(handle, "nvmlDeviceGetAttributes_v2", api.device_get_attributes);
  resolve(handle, "nvmlDeviceGetProcessUtilization", api.device_get_process_utilization);
  if (!resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", api.device_get_compute_running_processes)) {
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v2", api.device_get_compute_running_processes);
  }
  // The newer name first; drivers from before the rename export only the old one.
  for (const char* symbol :
       {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}) {
    if (resolve(handle, symbol, api.device_get_current_clocks_event_reasons)) {
      api.clocks_event_reasons_symbol = symbol;
      break;
    }
  }

  if (const nvmlReturn_t status = api.init(); status != NVML_SUCCESS) {
    return tl::make_unexpected(nvml->error(status, "initializing NVML",
                                           fmt::format("this machine ({})", library), NvmlAccess::kRead));
  }
  nvml->initialized_ = true;
  return nvml;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialized_) {
    api_.shutdown();
  }
  dlclose(handle_);
}

std::string NvmlLibrary::status_text(nvmlReturn_t status) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(status) : nullptr;
  const std::string_view code_name = return_code_name(status);
  return fmt::format("{} ({})", text != nullptr ? text : "no description",
                     code_name.empty() ? fmt::format("NVML return code {}", static_cast<int>(status))
                                       : std::string(code_name));
}

Error NvmlLibrary::error(nvmlReturn_t status, std::string_view what, std::string_view where,
                         NvmlAccess access) const {
  std::string message = fmt::format("{} on {}: {}", what, where, status_text(status));
  ErrorCode code = ErrorCode::kDevice;
  switch (status) {
    case NVML_ERROR_NOT_SUPPORTED:
    // What NVML returns from a call it has removed (nvmlDeviceGetTemperature and the ...ThrottleReasons
    // calls are to go in CUDA 14): the driver no longer reports the value that way.
    case NVML_ERROR_DEPRECATED:
      code = ErrorCode::kNotSupported;
      break;
    case NVML_ERROR_NO_PERMISSION:
      code = ErrorCode::kPermissionDenied;
      message +=
          access == NvmlAccess::kControl
              ? ". Changing power limits and clocks needs root or CAP_SYS_ADMIN: run as root, or give the "
                "program that capability"
              : ". The process may not use the NVIDIA device files (/dev/nvidia*): run as root or as a user "
                "allowed to open them";
      break;
    case NVML_ERROR_INVALID_ARGUMENT:
      code = ErrorCode::kInvalidArgument;
      break;
    case NVML_ERROR_DRIVER_NOT_LOADED:
      code = ErrorCode::kLibraryMissing;
      message += ". Install the NVIDIA driver, or load its kernel module (nvidia-smi checks both)";
      break;
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      code = ErrorCode::kLibraryMissing;
      break;
    default:
      break;
  }
  return Error(code, std::move(message));
}

}  // namespace joule::device::nvml
