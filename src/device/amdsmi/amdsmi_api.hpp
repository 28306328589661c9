// SPDX-License-Identifier: Apache-2.0
// The slice of the AMD SMI C API (amd_smi/amdsmi.h) that joule uses, declared here so joule builds without
// ROCm and loads libamd_smi.so with dlopen at run time.
//
// AMD SMI changes its structures whenever its library major version changes (AMDSMI_LIB_VERSION_MAJOR:
// "should be changed for every header change that breaks ABI"). joule knows three ABIs, chosen at load time
// from amdsmi_get_lib_version (amdsmi_library.cpp), written from amdsmi.h of each release:
//   24.x  ROCm 6.1-6.3  amdsmi_version_t begins with the year; amdsmi_power_info_t is 17 uint32_t; before
//                       24.5.2 (ROCm 6.1.2) amdsmi_get_power_cap_info reported W, since then µW
//   25.x  ROCm 6.4      no year; amdsmi_power_info_t gains a leading uint64_t socket_power (host only)
//   26.x  ROCm 7        amdsmi_power_info_t's voltages become uint64_t and its reserved tail grows
// Every function joule calls keeps its signature across the three, and the other structures joule reads
// (amdsmi_power_cap_info_t, amdsmi_frequencies_t, amdsmi_engine_usage_t) keep their layout. The layouts that
// differ are declared side by side below; the static_asserts pin their sizes and offsets on LP64. Any other
// major version is refused rather than misread. The fake library in tests/fakes/amdsmi/ implements these
// same declarations and can present each ABI.
#pragma once

#include <cstddef>
#include <cstdint>

namespace joule::device::amd_smi {

/// The AMD SMI library major versions whose structure layouts these declarations reproduce.
inline constexpr uint32_t kLibMajor24 = 24;  ///< ROCm 6.1-6.3
inline constexpr uint32_t kLibMajor25 = 25;  ///< ROCm 6.4
inline constexpr uint32_t kLibMajor26 = 26;  ///< ROCm 7

/// amdsmi_status_t. The real enum holds 0xFFFFFFFF, so its underlying type is unsigned int.
enum class Status : uint32_t {
  kSuccess = 0,
  kInval = 1,
  kNotSupported = 2,
  kNotYetImplemented = 3,
  kFailLoadModule = 4,
  kFailLoadSymbol = 5,
  kDrmError = 6,
  kApiFailed = 7,
  kTimeout = 8,
  kRetry = 9,
  kNoPerm = 10,
  kInterrupt = 11,
  kIo = 12,
  kAddressFault = 13,
  kFileError = 14,
  kOutOfResources = 15,
  kInternalException = 16,
  kInputOutOfBounds = 17,
  kInitError = 18,
  kRefcountOverflow = 19,
  kDirectoryNotFound = 20,
  kBusy = 30,
  kNotFound = 31,
  kNotInit = 32,
  kNoSlot = 33,
  kDriverNotLoaded = 34,
  kMoreData = 39,
  kNoData = 40,
  kInsufficientSize = 41,
  kUnexpectedSize = 42,
  kUnexpectedData = 43,
  kNonAmdCpu = 44,
  kNoEnergyDrv = 45,
  kNoMsrDrv = 46,
  kNoHsmpDrv = 47,
  kNoHsmpSup = 48,
  kNoHsmpMsgSup = 49,
  kHsmpTimeout = 50,
  kNoDrv = 51,
  kFileNotFound = 52,
  kArgPtrNull = 53,
  kAmdgpuRestartErr = 54,
  kSettingUnavailable = 55,
  kCorruptedEeprom = 56,
  kMapError = 0xFFFFFFFE,
  kUnknownError = 0xFFFFFFFF,
};

/// amdsmi_init_flags_t (only the value joule passes).
inline constexpr uint64_t kInitAmdGpus = 1u << 1;  ///< AMDSMI_INIT_AMD_GPUS

/// processor_type_t (a C enum: 4 bytes).
enum class ProcessorType : uint32_t {
  kUnknown = 0,  ///< AMDSMI_PROCESSOR_TYPE_UNKNOWN
  kAmdGpu = 1,   ///< AMDSMI_PROCESSOR_TYPE_AMD_GPU
};

/// amdsmi_clk_type_t (only the values joule passes).
enum class ClkType : uint32_t {
  kSys = 0x0,  ///< AMDSMI_CLK_TYPE_SYS (= AMDSMI_CLK_TYPE_GFX): the graphics (SM) clock
  kMem = 0x4,  ///< AMDSMI_CLK_TYPE_MEM
};

/// amdsmi_temperature_type_t (only the values joule passes).
enum class TemperatureType : uint32_t {
  kEdge = 0,     ///< AMDSMI_TEMPERATURE_TYPE_EDGE
  kHotspot = 1,  ///< AMDSMI_TEMPERATURE_TYPE_HOTSPOT (= JUNCTION); MI300 boards have no edge sensor
};

/// amdsmi_temperature_metric_t (only the value joule passes).
enum class TemperatureMetric : uint32_t {
  kCurrent = 0,  ///< AMDSMI_TEMP_CURRENT
};

/// amdsmi_dev_perf_level_t (only the values joule passes).
enum class PerfLevel : uint32_t {
  kAuto = 0,    ///< AMDSMI_DEV_PERF_LEVEL_AUTO: the driver picks clocks (undoes a clock range)
  kManual = 3,  ///< AMDSMI_DEV_PERF_LEVEL_MANUAL
};

/// amdsmi_processor_handle / amdsmi_socket_handle: opaque pointers.
using ProcessorHandle = void*;
using SocketHandle = void*;

/// AMDSMI_GPU_UUID_SIZE: the smallest buffer amdsmi_get_gpu_device_uuid accepts.
inline constexpr std::size_t kGpuUuidSize = 38;
/// AMDSMI_MAX_STRING_LENGTH (26.x).
inline constexpr std::size_t kMaxStringLength = 256;
/// AMDSMI_MAX_NUM_FREQUENCIES (26.x; 32 before 24.x).
inline constexpr std::size_t kMaxNumFrequencies = 33;

/// amdsmi_version_t as raw words, filled by amdsmi_get_lib_version. 24.x: {year, major, minor, release,
/// build}, the year (24) being what identifies the ABI; 25.x and later dropped the year: {major, minor,
/// release, build}, word[3] then being padding. Both are 24 bytes with `build` at offset 16, so one buffer
/// reads either.
struct Version {
  uint32_t word[4];
  const char* build;
};

/// amdsmi_asic_info_t (26.x). joule reads market_name only, which comes first in every release; 26.x's
/// structure is the largest (24.x: 64- or 256-byte market_name and a shorter tail), so a 26.x buffer holds
/// any of them.
struct AsicInfo {
  char market_name[kMaxStringLength];
  uint32_t vendor_id;
  char vendor_name[kMaxStringLength];
  uint32_t subvendor_id;
  uint64_t device_id;
  uint32_t rev_id;
  char asic_serial[kMaxStringLength];
  uint32_t oam_id;
  uint32_t num_of_compute_units;
  uint64_t target_graphics_version;
  uint32_t subsystem_id;
  uint32_t reserved[21];
};

/// amdsmi_power_info_t of 24.x (ROCm 6.1-6.3). Powers in W; unsupported members are UINT32_MAX.
struct PowerInfoV24 {
  uint32_t current_socket_power;  ///< W, instantaneous (MI300 and newer)
  uint32_t average_socket_power;  ///< W, averaged (Navi, MI200 and older)
  uint32_t gfx_voltage;           ///< mV
  uint32_t soc_voltage;           ///< mV
  uint32_t mem_voltage;           ///< mV
  uint32_t power_limit;           ///< W
  uint32_t reserved[11];
};

/// amdsmi_power_info_t of 25.x (ROCm 6.4). socket_power is filled only on a virtualisation host (µW there).
struct PowerInfoV25 {
  uint64_t socket_power;          ///< µW, host only
  uint32_t current_socket_power;  ///< W, instantaneous (MI300 and newer)
  uint32_t average_socket_power;  ///< W, averaged (Navi, MI200 and older)
  uint32_t gfx_voltage;           ///< mV
  uint32_t soc_voltage;           ///< mV
  uint32_t mem_voltage;           ///< mV
  uint32_t power_limit;           ///< W
  uint32_t reserved[2];
};

/// amdsmi_power_info_t of 26.x (ROCm 7). Powers in W; members a board does not support are UINT32_MAX.
struct PowerInfoV26 {
  uint64_t socket_power;          ///< W
  uint32_t current_socket_power;  ///< W, instantaneous (MI300 and newer)
  uint32_t average_socket_power;  ///< W, averaged (Navi, MI200 and older)
  uint64_t gfx_voltage;           ///< mV
  uint64_t soc_voltage;           ///< mV
  uint64_t mem_voltage;           ///< mV
  uint32_t power_limit;           ///< W
  uint64_t reserved[18];
};

/// amdsmi_power_cap_info_t (same layout since 23.x). Caps in µW on bare-metal Linux since 24.5.2, in W
/// before.
struct PowerCapInfo {
  uint64_t power_cap;          ///< µW
  uint64_t default_power_cap;  ///< µW
  uint64_t dpm_cap;            ///< MHz
  uint64_t min_power_cap;      ///< µW
  uint64_t max_power_cap;      ///< µW
  uint64_t reserved[3];
};

/// amdsmi_frequencies_t (24.x to 26.x). amdsmi_get_clk_freq documents the values as Hz; only the first
/// num_supported are valid and `current` is an index into them.
struct Frequencies {
  bool has_deep_sleep;
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[kMaxNumFrequencies];
};

/// amdsmi_engine_usage_t (24.x to 26.x). Activities in %.
struct EngineUsage {
  uint32_t gfx_activity;  ///< graphics engine, %
  uint32_t umc_activity;  ///< memory controller, %
  uint32_t mm_activity;   ///< multimedia, %
  uint32_t reserved[13];
};

#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(Version) == 24 && offsetof(Version, build) == 16);
static_assert(sizeof(AsicInfo) == 896 && offsetof(AsicInfo, device_id) == 520 &&
              offsetof(AsicInfo, target_graphics_version) == 800 && offsetof(AsicInfo, reserved) == 812);
static_assert(sizeof(PowerInfoV24) == 68 && offsetof(PowerInfoV24, average_socket_power) == 4 &&
              offsetof(PowerInfoV24, reserved) == 24);
static_assert(sizeof(PowerInfoV25) == 40 && offsetof(PowerInfoV25, current_socket_power) == 8 &&
              offsetof(PowerInfoV25, average_socket_power) == 12 && offsetof(PowerInfoV25, reserved) == 32);
static_assert(sizeof(PowerInfoV26) == 192 && offsetof(PowerInfoV26, current_socket_power) == 8 &&
              offsetof(PowerInfoV26, average_socket_power) == 12 && offsetof(PowerInfoV26, reserved) == 48);
static_assert(sizeof(PowerCapInfo) == 64 && offsetof(PowerCapInfo, max_power_cap) == 32);
static_assert(sizeof(Frequencies) == 280 && offsetof(Frequencies, num_supported) == 4 &&
              offsetof(Frequencies, frequency) == 16);
static_assert(sizeof(EngineUsage) == 64 && offsetof(EngineUsage, umc_activity) == 4);
#endif

// Function types, one per symbol, named after the symbol, with amdsmi.h's parameter order (the same in
// 24.x, 25.x and 26.x). Units as in AMD SMI: energy counter in ticks of `counter_resolution` µJ, power caps
// in µW, clocks in Hz (reads) or MHz (amdsmi_set_gpu_clk_range), temperatures in °C.
using InitFn = Status (*)(uint64_t init_flags);
using ShutDownFn = Status (*)();
using StatusCodeToStringFn = Status (*)(Status status, const char** status_string);
using GetLibVersionFn = Status (*)(Version* version);
using GetSocketHandlesFn = Status (*)(uint32_t* socket_count, SocketHandle* socket_handles);
using GetProcessorHandlesFn = Status (*)(SocketHandle socket_handle, uint32_t* processor_count,
                                         ProcessorHandle* processor_handles);
using GetProcessorTypeFn = Status (*)(ProcessorHandle processor_handle, ProcessorType* processor_type);
using GetGpuDeviceUuidFn = Status (*)(ProcessorHandle processor_handle, unsigned int* uuid_length,
                                      char* uuid);
using GetGpuAsicInfoFn = Status (*)(ProcessorHandle processor_handle, AsicInfo* info);
using GetEnergyCountFn = Status (*)(ProcessorHandle processor_handle, uint64_t* energy_accumulator,
                                    float* counter_resolution, uint64_t* timestamp);
/// `info` is an amdsmi_power_info_t of the library's ABI: PowerInfoV24, PowerInfoV25 or PowerInfoV26.
using GetPowerInfoFn = Status (*)(ProcessorHandle processor_handle, void* info);
using GetPowerCapInfoFn = Status (*)(ProcessorHandle processor_handle, uint32_t sensor_ind,
                                     PowerCapInfo* info);
using SetPowerCapFn = Status (*)(ProcessorHandle processor_handle, uint32_t sensor_ind, uint64_t cap);
using GetClkFreqFn = Status (*)(ProcessorHandle processor_handle, ClkType clk_type, Frequencies* f);
using SetGpuClkRangeFn = Status (*)(ProcessorHandle processor_handle, uint64_t minclkvalue,
                                    uint64_t maxclkvalue, ClkType clk_type);
using SetGpuPerfLevelFn = Status (*)(ProcessorHandle processor_handle, PerfLevel perf_lvl);
using GetTempMetricFn = Status (*)(ProcessorHandle processor_handle, TemperatureType sensor_type,
                                   TemperatureMetric metric, int64_t* temperature);
using GetGpuActivityFn = Status (*)(ProcessorHandle processor_handle, EngineUsage* info);

/// The X-macro list of every symbol joule resolves: X(symbol, function type). All are required.
#define JOULE_AMD_SMI_FUNCTIONS(X)                       \
  X(amdsmi_init, InitFn)                                 \
  X(amdsmi_shut_down, ShutDownFn)                        \
  X(amdsmi_status_code_to_string, StatusCodeToStringFn)  \
  X(amdsmi_get_lib_version, GetLibVersionFn)             \
  X(amdsmi_get_socket_handles, GetSocketHandlesFn)       \
  X(amdsmi_get_processor_handles, GetProcessorHandlesFn) \
  X(amdsmi_get_processor_type, GetProcessorTypeFn)       \
  X(amdsmi_get_gpu_device_uuid, GetGpuDeviceUuidFn)      \
  X(amdsmi_get_gpu_asic_info, GetGpuAsicInfoFn)          \
  X(amdsmi_get_energy_count, GetEnergyCountFn)           \
  X(amdsmi_get_power_info, GetPowerInfoFn)               \
  X(amdsmi_get_power_cap_info, GetPowerCapInfoFn)        \
  X(amdsmi_set_power_cap, SetPowerCapFn)                 \
  X(amdsmi_get_clk_freq, GetClkFreqFn)                   \
  X(amdsmi_set_gpu_clk_range, SetGpuClkRangeFn)          \
  X(amdsmi_set_gpu_perf_level, SetGpuPerfLevelFn)        \
  X(amdsmi_get_temp_metric, GetTempMetricFn)             \
  X(amdsmi_get_gpu_activity, GetGpuActivityFn)

/// @return the enumerator's name in amdsmi.h, e.g. "AMDSMI_STATUS_NO_PERM", or "" if unknown.
constexpr const char* status_name(Status status) {
  switch (status) {
    case Status::kSuccess:
      return "AMDSMI_STATUS_SUCCESS";
    case Status::kInval:
      return "AMDSMI_STATUS_INVAL";
    case Status::kNotSupported:
      return "AMDSMI_STATUS_NOT_SUPPORTED";
    case Status::kNotYetImplemented:
      return "AMDSMI_STATUS_NOT_YET_IMPLEMENTED";
    case Status::kFailLoadModule:
      return "AMDSMI_STATUS_FAIL_LOAD_MODULE";
    case Status::kFailLoadSymbol:
      return "AMDSMI_STATUS_FAIL_LOAD_SYMBOL";
    case Status::kDrmError:
      return "AMDSMI_STATUS_DRM_ERROR";
    case Status::kApiFailed:
      return "AMDSMI_STATUS_API_FAILED";
    case Status::kTimeout:
      return "AMDSMI_STATUS_TIMEOUT";
    case Status::kRetry:
      return "AMDSMI_STATUS_RETRY";
    case Status::kNoPerm:
      return "AMDSMI_STATUS_NO_PERM";
    case Status::kInterrupt:
      return "AMDSMI_STATUS_INTERRUPT";
    case Status::kIo:
      return "AMDSMI_STATUS_IO";
    case Status::kAddressFault:
      return "AMDSMI_STATUS_ADDRESS_FAULT";
    case Status::kFileError:
      return "AMDSMI_STATUS_FILE_ERROR";
    case Status::kOutOfResources:
      return "AMDSMI_STATUS_OUT_OF_RESOURCES";
    case Status::kInternalException:
      return "AMDSMI_STATUS_INTERNAL_EXCEPTION";
    case Status::kInputOutOfBounds:
      return "AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS";
    case Status::kInitError:
      return "AMDSMI_STATUS_INIT_ERROR";
    case Status::kRefcountOverflow:
      return "AMDSMI_STATUS_REFCOUNT_OVERFLOW";
    case Status::kDirectoryNotFound:
      return "AMDSMI_STATUS_DIRECTORY_NOT_FOUND";
    case Status::kBusy:
      return "AMDSMI_STATUS_BUSY";
    case Status::kNotFound:
      return "AMDSMI_STATUS_NOT_FOUND";
    case Status::kNotInit:
      return "AMDSMI_STATUS_NOT_INIT";
    case Status::kNoSlot:
      return "AMDSMI_STATUS_NO_SLOT";
    case Status::kDriverNotLoaded:
      return "AMDSMI_STATUS_DRIVER_NOT_LOADED";
    case Status::kMoreData:
      return "AMDSMI_STATUS_MORE_DATA";
    case Status::kNoData:
      return "AMDSMI_STATUS_NO_DATA";
    case Status::kInsufficientSize:
      return "AMDSMI_STATUS_INSUFFICIENT_SIZE";
    case Status::kUnexpectedSize:
      return "AMDSMI_STATUS_UNEXPECTED_SIZE";
    case Status::kUnexpectedData:
      return "AMDSMI_STATUS_UNEXPECTED_DATA";
    case Status::kNonAmdCpu:
      return "AMDSMI_STATUS_NON_AMD_CPU";
    case Status::kNoEnergyDrv:
      return "AMDSMI_STATUS_NO_ENERGY_DRV";
    case Status::kNoMsrDrv:
      return "AMDSMI_STATUS_NO_MSR_DRV";
    case Status::kNoHsmpDrv:
      return "AMDSMI_STATUS_NO_HSMP_DRV";
    case Status::kNoHsmpSup:
      return "AMDSMI_STATUS_NO_HSMP_SUP";
    case Status::kNoHsmpMsgSup:
      return "AMDSMI_STATUS_NO_HSMP_MSG_SUP";
    case Status::kHsmpTimeout:
      return "AMDSMI_STATUS_HSMP_TIMEOUT";
    case Status::kNoDrv:
      return "AMDSMI_STATUS_NO_DRV";
    case Status::kFileNotFound:
      return "AMDSMI_STATUS_FILE_NOT_FOUND";
    case Status::kArgPtrNull:
      return "AMDSMI_STATUS_ARG_PTR_NULL";
    case Status::kAmdgpuRestartErr:
      return "AMDSMI_STATUS_AMDGPU_RESTART_ERR";
    case Status::kSettingUnavailable:
      return "AMDSMI_STATUS_SETTING_UNAVAILABLE";
    case Status::kCorruptedEeprom:
      return "AMDSMI_STATUS_CORRUPTED_EEPROM";
    case Status::kMapError:
      return "AMDSMI_STATUS_MAP_ERROR";
    case Status::kUnknownError:
      return "AMDSMI_STATUS_UNKNOWN_ERROR";
  }
  return "";
}

}  // namespace joule::device::amd_smi
