// SPDX-License-Identifier: Apache-2.0
// The slice of the ROCm SMI 5.2 C API that joule uses, declared here so joule builds without the ROCm
// headers and loads the library with dlopen at run time. The types mirror rocm_smi/rocm_smi.h exactly
// (same enumerator values, same underlying types, same struct layout); tests/device/rocm/
// rocm_smi_api_check.cpp static_asserts that against the installed header whenever it is present.
// The fake library in tests/fakes/rocm/ implements these same declarations.
#pragma once

#include <cstddef>
#include <cstdint>

namespace joule::device::rocm_smi {

/// rsmi_status_t. The real enum holds 0xFFFFFFFF, so its underlying type is unsigned int.
enum class Status : uint32_t {
  kSuccess = 0x0,
  kInvalidArgs = 0x1,
  kNotSupported = 0x2,
  kFileError = 0x3,
  kPermission = 0x4,
  kOutOfResources = 0x5,
  kInternalException = 0x6,
  kInputOutOfBounds = 0x7,
  kInitError = 0x8,
  kNotYetImplemented = 0x9,
  kNotFound = 0xA,
  kInsufficientSize = 0xB,
  kInterrupt = 0xC,
  kUnexpectedSize = 0xD,
  kNoData = 0xE,
  kUnexpectedData = 0xF,
  kBusy = 0x10,
  kRefcountOverflow = 0x11,
  kUnknownError = 0xFFFFFFFF,
};

/// rsmi_clk_type_t (only the values joule passes).
enum class ClkType : uint32_t {
  kSys = 0x0,  ///< RSMI_CLK_TYPE_SYS: the graphics (SM) clock
  kMem = 0x4,  ///< RSMI_CLK_TYPE_MEM
};

/// rsmi_dev_perf_level_t (only the values joule passes).
enum class PerfLevel : uint32_t {
  kAuto = 0x0,    ///< RSMI_DEV_PERF_LEVEL_AUTO: the driver picks clocks (undoes a clock-range lock)
  kManual = 0x3,  ///< RSMI_DEV_PERF_LEVEL_MANUAL
};

/// rsmi_temperature_metric_t (only the value joule passes).
enum class TempMetric : uint32_t {
  kCurrent = 0x0,  ///< RSMI_TEMP_CURRENT: the current value
};

/// rsmi_temperature_type_t value passed as rsmi_dev_temp_metric_get's `sensor_type` (a plain uint32_t there).
inline constexpr uint32_t kTempTypeEdge = 0;  ///< RSMI_TEMP_TYPE_EDGE: the GPU's edge sensor
inline constexpr uint32_t kTempTypeJunction =
    1;  ///< RSMI_TEMP_TYPE_JUNCTION: the hotspot (MI300 has no edge)

/// RSMI_MAX_NUM_FREQUENCIES.
inline constexpr std::size_t kMaxNumFrequencies = 32;

/// rsmi_frequencies_t. Frequencies are in Hz; only the first num_supported are valid.
struct Frequencies {
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[kMaxNumFrequencies];
};

// Function types, one per symbol, named after the symbol. Units as in ROCm SMI: power in µW, energy
// counter in ticks of `resolution` µJ, clocks in Hz (reads) or MHz (rsmi_dev_clk_range_set), temperature in
// millidegrees Celsius, busy shares in %.
using InitFn = Status (*)(uint64_t init_flags);
using ShutDownFn = Status (*)();
using StatusStringFn = Status (*)(Status status, const char** status_string);
using NumMonitorDevicesFn = Status (*)(uint32_t* num_devices);
using DevNameGetFn = Status (*)(uint32_t dv_ind, char* name, std::size_t len);
using DevUniqueIdGetFn = Status (*)(uint32_t dv_ind, uint64_t* id);
using DevPowerAveGetFn = Status (*)(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* power_uw);
using DevEnergyCountGetFn = Status (*)(uint32_t dv_ind, uint64_t* counter, float* counter_resolution_uj,
                                       uint64_t* timestamp_ns);
using DevPowerCapGetFn = Status (*)(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* cap_uw);
using DevPowerCapDefaultGetFn = Status (*)(uint32_t dv_ind, uint64_t* default_cap_uw);
using DevPowerCapRangeGetFn = Status (*)(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* max_uw,
                                         uint64_t* min_uw);
using DevPowerCapSetFn = Status (*)(uint32_t dv_ind, uint32_t sensor_ind, uint64_t cap_uw);
using DevGpuClkFreqGetFn = Status (*)(uint32_t dv_ind, ClkType clk_type, Frequencies* frequencies);
using DevClkRangeSetFn = Status (*)(uint32_t dv_ind, uint64_t min_clk_mhz, uint64_t max_clk_mhz,
                                    ClkType clk_type);
using DevPerfLevelSetV1Fn = Status (*)(uint32_t dv_ind, PerfLevel perf_level);
using DevTempMetricGetFn = Status (*)(uint32_t dv_ind, uint32_t sensor_type, TempMetric metric,
                                      int64_t* temperature_mdeg_c);
using DevBusyPercentGetFn = Status (*)(uint32_t dv_ind, uint32_t* busy_percent);
using DevMemoryBusyPercentGetFn = Status (*)(uint32_t dv_ind, uint32_t* busy_percent);

/// The X-macro list of every symbol joule resolves: X(symbol, function type, required).
/// rsmi_dev_power_cap_default_get is optional because older releases lack it (joule then uses the
/// maximum cap as the default, which is what those boards ship with). The telemetry calls are optional
/// too: without one, only that reading is missing.
#define JOULE_ROCM_SMI_FUNCTIONS(X)                                 \
  X(rsmi_init, InitFn, true)                                        \
  X(rsmi_shut_down, ShutDownFn, true)                               \
  X(rsmi_status_string, StatusStringFn, true)                       \
  X(rsmi_num_monitor_devices, NumMonitorDevicesFn, true)            \
  X(rsmi_dev_name_get, DevNameGetFn, true)                          \
  X(rsmi_dev_unique_id_get, DevUniqueIdGetFn, true)                 \
  X(rsmi_dev_power_ave_get, DevPowerAveGetFn, true)                 \
  X(rsmi_dev_energy_count_get, DevEnergyCountGetFn, true)           \
  X(rsmi_dev_power_cap_get, DevPowerCapGetFn, true)                 \
  X(rsmi_dev_power_cap_default_get, DevPowerCapDefaultGetFn, false) \
  X(rsmi_dev_power_cap_range_get, DevPowerCapRangeGetFn, true)      \
  X(rsmi_dev_power_cap_set, DevPowerCapSetFn, true)                 \
  X(rsmi_dev_gpu_clk_freq_get, DevGpuClkFreqGetFn, true)            \
  X(rsmi_dev_clk_range_set, DevClkRangeSetFn, true)                 \
  X(rsmi_dev_perf_level_set_v1, DevPerfLevelSetV1Fn, true)          \
  X(rsmi_dev_temp_metric_get, DevTempMetricGetFn, false)            \
  X(rsmi_dev_busy_percent_get, DevBusyPercentGetFn, false)          \
  X(rsmi_dev_memory_busy_percent_get, DevMemoryBusyPercentGetFn, false)

/// @return the enumerator's name in the header, e.g. "RSMI_STATUS_PERMISSION", or "" if unknown.
constexpr const char* status_name(Status status) {
  switch (status) {
    case Status::kSuccess:
      return "RSMI_STATUS_SUCCESS";
    case Status::kInvalidArgs:
      return "RSMI_STATUS_INVALID_ARGS";
    case Status::kNotSupported:
      return "RSMI_STATUS_NOT_SUPPORTED";
    case Status::kFileError:
      return "RSMI_STATUS_FILE_ERROR";
    case Status::kPermission:
      return "RSMI_STATUS_PERMISSION";
    case Status::kOutOfResources:
      return "RSMI_STATUS_OUT_OF_RESOURCES";
    case Status::kInternalException:
      return "RSMI_STATUS_INTERNAL_EXCEPTION";
    case Status::kInputOutOfBounds:
      return "RSMI_STATUS_INPUT_OUT_OF_BOUNDS";
    case Status::kInitError:
      return "RSMI_STATUS_INIT_ERROR";
    case Status::kNotYetImplemented:
      return "RSMI_STATUS_NOT_YET_IMPLEMENTED";
    case Status::kNotFound:
      return "RSMI_STATUS_NOT_FOUND";
    case Status::kInsufficientSize:
      return "RSMI_STATUS_INSUFFICIENT_SIZE";
    case Status::kInterrupt:
      return "RSMI_STATUS_INTERRUPT";
    case Status::kUnexpectedSize:
      return "RSMI_STATUS_UNEXPECTED_SIZE";
    case Status::kNoData:
      return "RSMI_STATUS_NO_DATA";
    case Status::kUnexpectedData:
      return "RSMI_STATUS_UNEXPECTED_DATA";
    case Status::kBusy:
      return "RSMI_STATUS_BUSY";
    case Status::kRefcountOverflow:
      return "RSMI_STATUS_REFCOUNT_OVERFLOW";
    case Status::kUnknownError:
      return "RSMI_STATUS_UNKNOWN_ERROR";
  }
  return "";
}

}  // namespace joule::device::rocm_smi
