// SPDX-License-Identifier: Apache-2.0
// The slice of NVML's C API that joule uses, declared here because nvml.h is not installed on build machines
// (it ships only in Debian non-free and with the CUDA toolkit). Values and layouts follow nvml.h; the fake
// libnvidia-ml.so.1 in tests/fakes/nvml includes this header too and static_asserts its definitions against
// the function-pointer types below.
#pragma once

#include <string_view>

namespace joule::device::nvml {

// NVML's own spellings, so the declarations can be compared with nvml.h line by line.
// NOLINTBEGIN(readability-identifier-naming)

/// Opaque device handle; only the library knows the struct.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

/// NVML's return codes (a C enum, hence int-sized).
enum nvmlReturn_t : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999,
};

/// @return the macro name of a return code, e.g. "NVML_ERROR_NO_PERMISSION"; "" for codes not listed above.
constexpr std::string_view return_code_name(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return "NVML_SUCCESS";
    case NVML_ERROR_UNINITIALIZED:
      return "NVML_ERROR_UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED:
      return "NVML_ERROR_NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION:
      return "NVML_ERROR_NO_PERMISSION";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case NVML_ERROR_NOT_FOUND:
      return "NVML_ERROR_NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case NVML_ERROR_TIMEOUT:
      return "NVML_ERROR_TIMEOUT";
    case NVML_ERROR_IRQ_ISSUE:
      return "NVML_ERROR_IRQ_ISSUE";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "NVML_ERROR_GPU_IS_LOST";
    case NVML_ERROR_RESET_REQUIRED:
      return "NVML_ERROR_RESET_REQUIRED";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case NVML_ERROR_IN_USE:
      return "NVML_ERROR_IN_USE";
    case NVML_ERROR_MEMORY:
      return "NVML_ERROR_MEMORY";
    case NVML_ERROR_NO_DATA:
      return "NVML_ERROR_NO_DATA";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case NVML_ERROR_DEPRECATED:
      return "NVML_ERROR_DEPRECATED";
    case NVML_ERROR_NOT_READY:
      return "NVML_ERROR_NOT_READY";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "NVML_ERROR_GPU_NOT_FOUND";
    case NVML_ERROR_INVALID_STATE:
      return "NVML_ERROR_INVALID_STATE";
    case NVML_ERROR_UNKNOWN:
      return "NVML_ERROR_UNKNOWN";
  }
  return "";
}

/// nvmlDeviceArchitecture_t and the values joule compares against.
using nvmlDeviceArchitecture_t = unsigned int;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_KEPLER = 2;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_MAXWELL = 3;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_PASCAL = 4;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_VOLTA = 5;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_TURING = 6;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_AMPERE = 7;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_ADA = 8;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_HOPPER = 9;
inline constexpr nvmlDeviceArchitecture_t NVML_DEVICE_ARCH_UNKNOWN = 0xffffffffu;

/// Buffer sizes nvml.h recommends for names and UUIDs (the _V2 sizes, large enough for every driver).
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

/// Field id of the instantaneous board power, in mW (nvml.h NVML_FI_DEV_POWER_INSTANT).
inline constexpr unsigned int NVML_FI_DEV_POWER_INSTANT = 186;
/// Field id of the energy consumed since the driver loaded, in mJ (nvml.h NVML_FI_DEV_ENERGY): with scope
/// NVML_POWER_SCOPE_GPU the same as nvmlDeviceGetTotalEnergyConsumption.
inline constexpr unsigned int NVML_FI_DEV_ENERGY = 191;
/// Scope id for power fields: the GPU alone (nvml.h NVML_POWER_SCOPE_GPU).
inline constexpr unsigned int NVML_POWER_SCOPE_GPU = 0;
/// Scope id for power fields: the whole module, e.g. a Grace Hopper superchip's GPU, CPU and memory
/// (nvml.h NVML_POWER_SCOPE_MODULE).
inline constexpr unsigned int NVML_POWER_SCOPE_MODULE = 1;

/// MIG modes of nvmlDeviceGetMigMode (nvml.h NVML_DEVICE_MIG_DISABLE / _ENABLE).
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;

/// nvmlDeviceAttributes_t (the _v2 layout, nvml.h since CUDA 11.1): what a MIG device owns. NVML fills it
/// for MIG device handles.
struct nvmlDeviceAttributes_t {
  unsigned int multiprocessorCount;  ///< SMs of the device
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;      ///< slices of its GPU instance
  unsigned int computeInstanceSliceCount;  ///< slices of its compute instance
  unsigned long long memorySizeMB;
};

/// nvmlValueType_t: which member of nvmlValue_t a field value fills.
enum nvmlValueType_t : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
};

union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
};

/// One request/answer of nvmlDeviceGetFieldValues: the caller fills fieldId and scopeId.
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;    ///< CPU time of the reading, µs since 1970
  long long latencyUsec;  ///< how long the reading took
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};

/// nvmlTemperatureSensors_t (only the value joule passes).
enum nvmlTemperatureSensors_t : int {
  NVML_TEMPERATURE_GPU = 0,  ///< the GPU die
};

/// nvmlClockType_t. All clocks are in MHz.
enum nvmlClockType_t : int {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
};

/// nvmlUtilization_t: percentages over the driver's last sample period (1/6 s to 1 s, by product).
struct nvmlUtilization_t {
  unsigned int gpu;     ///< % of the time one or more kernels ran
  unsigned int memory;  ///< % of the time device memory was read or written
};

/// Clocks-event (formerly "throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons; the old
/// nvmlClocksThrottleReason* macros have the same values.
inline constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ull;
inline constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ull;
inline constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ull;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ull;
inline constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ull;
inline constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ull;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ull;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ull;
inline constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ull;

/// nvmlProcessUtilizationSample_t: one process's utilisation over one of the driver's sample periods.
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  ///< CPU time of the sample, µs since 1970
  unsigned int smUtil;           ///< % of the period the process's kernels occupied the SMs
  unsigned int memUtil;          ///< % of the period it read or wrote device memory
  unsigned int encUtil;
  unsigned int decUtil;
};

/// nvmlProcessInfo_t (the layout of nvmlDeviceGetComputeRunningProcesses_v3 and _v2).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  ///< bytes
  unsigned int gpuInstanceId;        ///< 0xFFFFFFFF outside MIG
  unsigned int computeInstanceId;
};

static_assert(sizeof(nvmlReturn_t) == sizeof(int));
static_assert(sizeof(nvmlTemperatureSensors_t) == sizeof(int));
static_assert(sizeof(nvmlClockType_t) == sizeof(int));
static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t must match nvml.h's layout");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t must match nvml.h's layout");
static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t must match nvml.h's layout");
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "must match nvml.h's layout");
static_assert(sizeof(nvmlProcessInfo_t) == 24, "must match nvml.h's layout");

// Function types, one per symbol joule resolves (all extern "C" in the library; units as in nvml.h: mW,
// mJ, MHz).
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t result);
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int* device_count);
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using DeviceGetNameFn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using DeviceGetUuidFn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using DeviceGetArchitectureFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch);
using DeviceGetTotalEnergyConsumptionFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                           unsigned long long* energy_mj);
using DeviceGetPowerUsageFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power_mw);
using DeviceGetFieldValuesFn = nvmlReturn_t (*)(nvmlDevice_t device, int values_count,
                                                nvmlFieldValue_t* values);
using DeviceGetPowerManagementLimitConstraintsFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                    unsigned int* min_limit_mw,
                                                                    unsigned int* max_limit_mw);
using DeviceGetPowerManagementDefaultLimitFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned int* default_limit_mw);
using DeviceGetPowerManagementLimitFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* limit_mw);
using DeviceSetPowerManagementLimitFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int limit_mw);
/// `count` is in/out: capacity of `clocks_mhz` on entry, number of clocks on return (INSUFFICIENT_SIZE if
/// the capacity was too small).
using DeviceGetSupportedMemoryClocksFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* count,
                                                          unsigned int* clocks_mhz);
using DeviceGetSupportedGraphicsClocksFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                            unsigned int memory_clock_mhz,
                                                            unsigned int* count, unsigned int* clocks_mhz);
using DeviceSetGpuLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int min_clock_mhz,
                                                    unsigned int max_clock_mhz);
using DeviceResetGpuLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device);
// Memory clock locks (driver R470 and later; optional).
using DeviceSetMemoryLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int min_clock_mhz,
                                                       unsigned int max_clock_mhz);
using DeviceResetMemoryLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                unsigned int* temperature_c);
using DeviceGetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlClockType_t type,
                                              unsigned int* clock_mhz);
using DeviceGetUtilizationRatesFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlUtilization_t* utilization);
/// nvmlDeviceGetCurrentClocksEventReasons and its older name nvmlDeviceGetCurrentClocksThrottleReasons share
/// this type: a bit mask of nvmlClocksEventReason* values.
using DeviceGetCurrentClocksEventReasonsFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                              unsigned long long* reasons);
// MIG (all optional: drivers before CUDA 11 lack them, and joule then sees whole GPUs only).
/// `current_mode` and `pending_mode` are NVML_DEVICE_MIG_DISABLE or _ENABLE.
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* current_mode,
                                            unsigned int* pending_mode);
/// The number of MIG device slots of a GPU (as many as it has compute slices: 7 on A100 and H100).
using DeviceGetMaxMigDeviceCountFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* count);
/// The MIG device in slot `index`; NVML_ERROR_NOT_FOUND if the slot is empty.
using DeviceGetMigDeviceHandleByIndexFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int index,
                                                           nvmlDevice_t* mig_device);
using DeviceGetDeviceHandleFromMigDeviceHandleFn = nvmlReturn_t (*)(nvmlDevice_t mig_device,
                                                                    nvmlDevice_t* device);
/// nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId share this type.
using DeviceGetInstanceIdFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
/// nvml.h #defines nvmlDeviceGetAttributes to nvmlDeviceGetAttributes_v2.
using DeviceGetAttributesFn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes);
/// The per-process samples newer than `last_seen_time_stamp` (µs since 1970; 0: every sample the driver
/// holds). `count` is in/out as for lists; with `utilization` null it returns the count needed
/// (NVML_ERROR_INSUFFICIENT_SIZE). NVML_ERROR_NOT_FOUND: no sample newer than the timestamp.
using DeviceGetProcessUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                       nvmlProcessUtilizationSample_t* utilization,
                                                       unsigned int* count,
                                                       unsigned long long last_seen_time_stamp);
/// nvmlDeviceGetComputeRunningProcesses_v3 (and _v2, the same layout): `count` in/out as for lists.
using DeviceGetComputeRunningProcessesFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* count,
                                                            nvmlProcessInfo_t* infos);

// NOLINTEND(readability-identifier-naming)

}  // namespace joule::device::nvml
