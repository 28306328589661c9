// SPDX-License-Identifier: Apache-2.0
// The slice of the Level Zero Sysman C API (level_zero/zes_api.h, with the few core calls of ze_api.h that
// the old initialisation path needs) that joule uses, declared here so joule builds without Intel's headers
// and loads libze_loader.so.1 with dlopen at run time.
//
// Level Zero keeps its structures binary compatible within major version 1: new members arrive as
// extension structures chained through pNext, recognised by their `stype`. The layouts below are those of
// Level Zero 1.x as in Intel's public zes_api.h (Debian's libze-dev 1.8.12, spec 1.4, and the loader's
// current header, spec 1.17, agree on every one of them); the static_asserts pin their sizes and offsets on
// LP64, and tests/device/levelzero/levelzero_api_check.cpp compares them with the real header when it is
// installed. The backend refuses an API whose major version is not 1 (kSupportedApiMajor).
// The fake loader in tests/fakes/levelzero/ implements these same declarations.
#pragma once

#include <cstddef>
#include <cstdint>

namespace joule::device::level_zero {

/// The Level Zero API major version whose structure layouts these declarations reproduce.
inline constexpr uint32_t kSupportedApiMajor = 1;

/// ZE_MAJOR_VERSION / ZE_MINOR_VERSION of a ze_api_version_t (major << 16 | minor).
constexpr uint32_t api_major(uint32_t version) {
  return version >> 16;
}
constexpr uint32_t api_minor(uint32_t version) {
  return version & 0xffffu;
}

/// ze_result_t (a C enum whose largest value is 0x7fffffff: 4 bytes). The values joule names.
enum class ZeResult : uint32_t {
  kSuccess = 0,
  kNotReady = 1,
  kErrorDeviceLost = 0x70000001,
  kErrorOutOfHostMemory = 0x70000002,
  kErrorOutOfDeviceMemory = 0x70000003,
  kErrorDeviceRequiresReset = 0x70000006,
  kErrorDeviceInLowPowerState = 0x70000007,
  kErrorInsufficientPermissions = 0x70010000,
  kErrorNotAvailable = 0x70010001,
  kErrorDependencyUnavailable = 0x70020000,
  kErrorUninitialized = 0x78000001,
  kErrorUnsupportedVersion = 0x78000002,
  kErrorUnsupportedFeature = 0x78000003,
  kErrorInvalidArgument = 0x78000004,
  kErrorInvalidNullHandle = 0x78000005,
  kErrorHandleObjectInUse = 0x78000006,
  kErrorInvalidNullPointer = 0x78000007,
  kErrorInvalidSize = 0x78000008,
  kErrorUnsupportedSize = 0x78000009,
  kErrorInvalidEnumeration = 0x7800000c,
  kErrorUnsupportedEnumeration = 0x7800000d,
  kWarningActionRequired = 0x7800001b,
  kErrorSurvivabilityModeDetected = 0x78000020,
  kErrorUnknown = 0x7ffffffe,
};

/// zes_structure_type_t (only the values joule writes into `stype`).
enum class StructureType : uint32_t {
  kDeviceProperties = 0x1,     ///< ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
  kPciProperties = 0x2,        ///< ZES_STRUCTURE_TYPE_PCI_PROPERTIES
  kEngineProperties = 0x5,     ///< ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES
  kFreqProperties = 0x9,       ///< ZES_STRUCTURE_TYPE_FREQ_PROPERTIES
  kPowerProperties = 0xd,      ///< ZES_STRUCTURE_TYPE_POWER_PROPERTIES
  kTempProperties = 0x14,      ///< ZES_STRUCTURE_TYPE_TEMP_PROPERTIES
  kFreqState = 0x1b,           ///< ZES_STRUCTURE_TYPE_FREQ_STATE
  kPowerLimitExtDesc = 0x27,   ///< ZES_STRUCTURE_TYPE_POWER_LIMIT_EXT_DESC
  kPowerExtProperties = 0x28,  ///< ZES_STRUCTURE_TYPE_POWER_EXT_PROPERTIES
};

/// ze_structure_type_t of the core device properties nested in zes_device_properties_t.
inline constexpr uint32_t kZeStructureTypeDeviceProperties = 0x3;  ///< ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES

/// zes_power_domain_t.
enum class PowerDomain : uint32_t {
  kUnknown = 0,  ///< ZES_POWER_DOMAIN_UNKNOWN
  kCard = 1,     ///< ZES_POWER_DOMAIN_CARD: the whole board
  kPackage = 2,  ///< ZES_POWER_DOMAIN_PACKAGE: the GPU package (no board components)
  kStack = 3,    ///< ZES_POWER_DOMAIN_STACK: one stack (tile) of a multi-stack package
};

/// zes_power_level_t.
enum class PowerLevel : uint32_t {
  kUnknown = 0,        ///< ZES_POWER_LEVEL_UNKNOWN
  kSustained = 1,      ///< ZES_POWER_LEVEL_SUSTAINED: the TDP-like limit joule sets
  kBurst = 2,          ///< ZES_POWER_LEVEL_BURST
  kPeak = 3,           ///< ZES_POWER_LEVEL_PEAK
  kInstantaneous = 4,  ///< ZES_POWER_LEVEL_INSTANTANEOUS
};

/// zes_limit_unit_t.
enum class LimitUnit : uint32_t {
  kUnknown = 0,  ///< ZES_LIMIT_UNIT_UNKNOWN
  kCurrent = 1,  ///< ZES_LIMIT_UNIT_CURRENT: mA
  kPower = 2,    ///< ZES_LIMIT_UNIT_POWER: mW
};

/// zes_freq_domain_t.
enum class FreqDomain : uint32_t {
  kGpu = 0,     ///< ZES_FREQ_DOMAIN_GPU: the GPU core (joule's "SM clock")
  kMemory = 1,  ///< ZES_FREQ_DOMAIN_MEMORY
};

/// zes_temp_sensors_t (only the values joule looks for).
enum class TempSensors : uint32_t {
  kGlobal = 0,  ///< ZES_TEMP_SENSORS_GLOBAL: the hottest sensor of the device
  kGpu = 1,     ///< ZES_TEMP_SENSORS_GPU: the hottest sensor of the GPU die
  kMemory = 2,  ///< ZES_TEMP_SENSORS_MEMORY
};

/// zes_engine_group_t (only the values joule looks for).
enum class EngineGroup : uint32_t {
  kAll = 0,                  ///< ZES_ENGINE_GROUP_ALL: every engine combined
  kComputeAll = 1,           ///< ZES_ENGINE_GROUP_COMPUTE_ALL
  kRenderComputeAll3d = 11,  ///< ZES_ENGINE_GROUP_3D_RENDER_COMPUTE_ALL
};

/// zes_freq_throttle_reason_flag_t bits of zes_freq_state_t::throttleReasons.
namespace throttle {
inline constexpr uint32_t kAvePwrCap = 1u << 0;     ///< ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP
inline constexpr uint32_t kBurstPwrCap = 1u << 1;   ///< ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP
inline constexpr uint32_t kCurrentLimit = 1u << 2;  ///< ZES_FREQ_THROTTLE_REASON_FLAG_CURRENT_LIMIT
inline constexpr uint32_t kThermalLimit = 1u << 3;  ///< ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT
inline constexpr uint32_t kPsuAlert = 1u << 4;      ///< ZES_FREQ_THROTTLE_REASON_FLAG_PSU_ALERT
inline constexpr uint32_t kSwRange = 1u << 5;       ///< ZES_FREQ_THROTTLE_REASON_FLAG_SW_RANGE
inline constexpr uint32_t kHwRange = 1u << 6;       ///< ZES_FREQ_THROTTLE_REASON_FLAG_HW_RANGE
}  // namespace throttle

/// ze_bool_t.
using Bool = uint8_t;

/// zes_driver_handle_t, zes_device_handle_t, zes_pwr_handle_t, zes_freq_handle_t, zes_temp_handle_t,
/// zes_engine_handle_t: opaque pointers (the ze_* handles of the old initialisation path are the same
/// objects: with ZES_ENABLE_SYSMAN=1 a core device handle is also a Sysman device handle).
using DriverHandle = void*;
using DeviceHandle = void*;
using PowerHandle = void*;
using FreqHandle = void*;
using TempHandle = void*;
using EngineHandle = void*;

inline constexpr std::size_t kMaxDeviceUuidSize = 16;   ///< ZE_MAX_DEVICE_UUID_SIZE
inline constexpr std::size_t kMaxDeviceName = 256;      ///< ZE_MAX_DEVICE_NAME
inline constexpr std::size_t kStringPropertySize = 64;  ///< ZES_STRING_PROPERTY_SIZE

/// ze_device_properties_t (core). joule reads uuid and name.
struct ZeDeviceProperties {
  uint32_t stype;  ///< ze_structure_type_t: kZeStructureTypeDeviceProperties
  void* pNext;
  uint32_t type;  ///< ze_device_type_t (1: GPU)
  uint32_t vendorId;
  uint32_t deviceId;
  uint32_t flags;
  uint32_t subdeviceId;
  uint32_t coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts;
  uint32_t maxCommandQueuePriority;
  uint32_t numThreadsPerEU;
  uint32_t physicalEUSimdWidth;
  uint32_t numEUsPerSubslice;
  uint32_t numSubslicesPerSlice;
  uint32_t numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits;
  uint32_t kernelTimestampValidBits;
  uint8_t uuid[kMaxDeviceUuidSize];
  char name[kMaxDeviceName];
};

/// zes_device_properties_t.
struct DeviceProperties {
  StructureType stype;  ///< kDeviceProperties
  void* pNext;
  ZeDeviceProperties core;
  uint32_t numSubdevices;
  char serialNumber[kStringPropertySize];
  char boardNumber[kStringPropertySize];
  char brandName[kStringPropertySize];
  char modelName[kStringPropertySize];
  char vendorName[kStringPropertySize];
  char driverVersion[kStringPropertySize];
};

/// zes_pci_address_t, zes_pci_speed_t, zes_pci_properties_t.
struct PciAddress {
  uint32_t domain;
  uint32_t bus;
  uint32_t device;
  uint32_t function;
};
struct PciSpeed {
  int32_t gen;
  int32_t width;
  int64_t maxBandwidth;
};
struct PciProperties {
  StructureType stype;  ///< kPciProperties
  void* pNext;
  PciAddress address;
  PciSpeed maxSpeed;
  Bool haveBandwidthCounters;
  Bool havePacketCounters;
  Bool haveReplayCounters;
};

/// zes_power_properties_t. The limits (deprecated since 1.4 but still filled) are mW, -1 when unknown.
struct PowerProperties {
  StructureType stype;  ///< kPowerProperties
  void* pNext;          ///< may point at a PowerExtProperties
  Bool onSubdevice;
  uint32_t subdeviceId;
  Bool canControl;
  Bool isEnergyThresholdSupported;
  int32_t defaultLimit;  ///< mW
  int32_t minLimit;      ///< mW
  int32_t maxLimit;      ///< mW
};

/// zes_power_energy_counter_t.
struct PowerEnergyCounter {
  uint64_t energy;     ///< µJ, monotonic
  uint64_t timestamp;  ///< µs
};

/// zes_power_limit_ext_desc_t (1.4+): one power limit.
struct PowerLimitExtDesc {
  StructureType stype;  ///< kPowerLimitExtDesc
  const void* pNext;
  PowerLevel level;
  uint32_t source;  ///< zes_power_source_t
  LimitUnit limitUnit;
  Bool enabledStateLocked;
  Bool enabled;
  Bool intervalValueLocked;
  int32_t interval;  ///< ms
  Bool limitValueLocked;
  int32_t limit;  ///< mW when limitUnit is kPower
};

/// zes_power_ext_properties_t (1.4+), chained from PowerProperties::pNext.
struct PowerExtProperties {
  StructureType stype;  ///< kPowerExtProperties
  void* pNext;
  PowerDomain domain;
  PowerLimitExtDesc* defaultLimit;  ///< [out] filled where the caller points it at a descriptor
};

/// zes_freq_properties_t. Frequencies in MHz.
struct FreqProperties {
  StructureType stype;  ///< kFreqProperties
  void* pNext;
  FreqDomain type;
  Bool onSubdevice;
  uint32_t subdeviceId;
  Bool canControl;
  Bool isThrottleEventSupported;
  double min;  ///< MHz
  double max;  ///< MHz
};

/// zes_freq_range_t. MHz; -1 means "no limit" on that side.
struct FreqRange {
  double min;
  double max;
};

/// zes_freq_state_t. MHz; negative values are unknown.
struct FreqState {
  StructureType stype;  ///< kFreqState
  const void* pNext;
  double currentVoltage;  ///< V
  double request;
  double tdp;
  double efficient;
  double actual;
  uint32_t throttleReasons;  ///< throttle:: bits
};

/// zes_temp_properties_t.
struct TempProperties {
  StructureType stype;  ///< kTempProperties
  void* pNext;
  TempSensors type;
  Bool onSubdevice;
  uint32_t subdeviceId;
  double maxTemperature;
  Bool isCriticalTempSupported;
  Bool isThreshold1Supported;
  Bool isThreshold2Supported;
};

/// zes_engine_properties_t.
struct EngineProperties {
  StructureType stype;  ///< kEngineProperties
  void* pNext;
  EngineGroup type;
  Bool onSubdevice;
  uint32_t subdeviceId;
};

/// zes_engine_stats_t. Both in µs.
struct EngineStats {
  uint64_t activeTime;
  uint64_t timestamp;
};

/// zel_component_version_t of the loader (ze_loader.h): a component's name and the API version it speaks.
struct LoaderVersion {
  int32_t major;
  int32_t minor;
  int32_t patch;
};
inline constexpr std::size_t kLoaderComponentNameSize = 64;  ///< ZEL_COMPONENT_STRING_SIZE
struct LoaderComponentVersion {
  char component_name[kLoaderComponentNameSize];
  uint32_t spec_version;  ///< ze_api_version_t
  LoaderVersion component_lib_version;
};

#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(ZeDeviceProperties) == 368 && offsetof(ZeDeviceProperties, maxMemAllocSize) == 40 &&
              offsetof(ZeDeviceProperties, timerResolution) == 80 &&
              offsetof(ZeDeviceProperties, uuid) == 96 && offsetof(ZeDeviceProperties, name) == 112);
static_assert(sizeof(DeviceProperties) == 776 && offsetof(DeviceProperties, core) == 16 &&
              offsetof(DeviceProperties, numSubdevices) == 384 &&
              offsetof(DeviceProperties, modelName) == 580);
static_assert(sizeof(PciProperties) == 56 && offsetof(PciProperties, maxSpeed) == 32 &&
              offsetof(PciProperties, haveBandwidthCounters) == 48);
static_assert(sizeof(PowerProperties) == 40 && offsetof(PowerProperties, subdeviceId) == 20 &&
              offsetof(PowerProperties, defaultLimit) == 28 && offsetof(PowerProperties, maxLimit) == 36);
static_assert(sizeof(PowerEnergyCounter) == 16);
static_assert(sizeof(PowerLimitExtDesc) == 48 && offsetof(PowerLimitExtDesc, level) == 16 &&
              offsetof(PowerLimitExtDesc, enabledStateLocked) == 28 &&
              offsetof(PowerLimitExtDesc, interval) == 32 && offsetof(PowerLimitExtDesc, limit) == 40);
static_assert(sizeof(PowerExtProperties) == 32 && offsetof(PowerExtProperties, defaultLimit) == 24);
static_assert(sizeof(FreqProperties) == 48 && offsetof(FreqProperties, min) == 32);
static_assert(sizeof(FreqState) == 64 && offsetof(FreqState, actual) == 48 &&
              offsetof(FreqState, throttleReasons) == 56);
static_assert(sizeof(TempProperties) == 48 && offsetof(TempProperties, maxTemperature) == 32);
static_assert(sizeof(EngineProperties) == 32 && offsetof(EngineProperties, subdeviceId) == 24);
static_assert(sizeof(LoaderComponentVersion) == 80 && offsetof(LoaderComponentVersion, spec_version) == 64);
#endif

// Function types, one per symbol, named after the symbol, with zes_api.h's parameter order. Units as in
// Sysman: energy in µJ with µs timestamps, power limits in mW, frequencies in MHz (double), °C (double).
using ZesInitFn = ZeResult (*)(uint32_t flags);
using ZesDriverGetFn = ZeResult (*)(uint32_t* count, DriverHandle* drivers);
using ZesDeviceGetFn = ZeResult (*)(DriverHandle driver, uint32_t* count, DeviceHandle* devices);
using ZeInitFn = ZeResult (*)(uint32_t flags);
using ZeDriverGetFn = ZeResult (*)(uint32_t* count, DriverHandle* drivers);
using ZeDeviceGetFn = ZeResult (*)(DriverHandle driver, uint32_t* count, DeviceHandle* devices);
using ZeDriverGetApiVersionFn = ZeResult (*)(DriverHandle driver, uint32_t* version);
using ZelLoaderGetVersionsFn = ZeResult (*)(std::size_t* num_elems, LoaderComponentVersion* versions);
using ZesDeviceGetPropertiesFn = ZeResult (*)(DeviceHandle device, DeviceProperties* properties);
using ZesDevicePciGetPropertiesFn = ZeResult (*)(DeviceHandle device, PciProperties* properties);
using ZesDeviceEnumPowerDomainsFn = ZeResult (*)(DeviceHandle device, uint32_t* count, PowerHandle* power);
using ZesPowerGetPropertiesFn = ZeResult (*)(PowerHandle power, PowerProperties* properties);
using ZesPowerGetEnergyCounterFn = ZeResult (*)(PowerHandle power, PowerEnergyCounter* energy);
using ZesPowerGetLimitsExtFn = ZeResult (*)(PowerHandle power, uint32_t* count, PowerLimitExtDesc* limits);
using ZesPowerSetLimitsExtFn = ZeResult (*)(PowerHandle power, uint32_t* count, PowerLimitExtDesc* limits);
using ZesDeviceEnumFrequencyDomainsFn = ZeResult (*)(DeviceHandle device, uint32_t* count, FreqHandle* freq);
using ZesFrequencyGetPropertiesFn = ZeResult (*)(FreqHandle freq, FreqProperties* properties);
using ZesFrequencyGetAvailableClocksFn = ZeResult (*)(FreqHandle freq, uint32_t* count, double* clocks_mhz);
using ZesFrequencySetRangeFn = ZeResult (*)(FreqHandle freq, const FreqRange* limits);
using ZesFrequencyGetStateFn = ZeResult (*)(FreqHandle freq, FreqState* state);
using ZesDeviceEnumTemperatureSensorsFn = ZeResult (*)(DeviceHandle device, uint32_t* count,
                                                       TempHandle* temp);
using ZesTemperatureGetPropertiesFn = ZeResult (*)(TempHandle temp, TempProperties* properties);
using ZesTemperatureGetStateFn = ZeResult (*)(TempHandle temp, double* temperature_c);
using ZesDeviceEnumEngineGroupsFn = ZeResult (*)(DeviceHandle device, uint32_t* count, EngineHandle* engine);
using ZesEngineGetPropertiesFn = ZeResult (*)(EngineHandle engine, EngineProperties* properties);
using ZesEngineGetActivityFn = ZeResult (*)(EngineHandle engine, EngineStats* stats);

/// The X-macro list of the Sysman calls joule makes on a device: X(symbol, function type). All are required
/// (every Level Zero loader since 1.4 exports them).
#define JOULE_LEVEL_ZERO_DEVICE_FUNCTIONS(X)                            \
  X(zesDeviceGetProperties, ZesDeviceGetPropertiesFn)                   \
  X(zesDevicePciGetProperties, ZesDevicePciGetPropertiesFn)             \
  X(zesDeviceEnumPowerDomains, ZesDeviceEnumPowerDomainsFn)             \
  X(zesPowerGetProperties, ZesPowerGetPropertiesFn)                     \
  X(zesPowerGetEnergyCounter, ZesPowerGetEnergyCounterFn)               \
  X(zesPowerGetLimitsExt, ZesPowerGetLimitsExtFn)                       \
  X(zesPowerSetLimitsExt, ZesPowerSetLimitsExtFn)                       \
  X(zesDeviceEnumFrequencyDomains, ZesDeviceEnumFrequencyDomainsFn)     \
  X(zesFrequencyGetProperties, ZesFrequencyGetPropertiesFn)             \
  X(zesFrequencyGetAvailableClocks, ZesFrequencyGetAvailableClocksFn)   \
  X(zesFrequencySetRange, ZesFrequencySetRangeFn)                       \
  X(zesFrequencyGetState, ZesFrequencyGetStateFn)                       \
  X(zesDeviceEnumTemperatureSensors, ZesDeviceEnumTemperatureSensorsFn) \
  X(zesTemperatureGetProperties, ZesTemperatureGetPropertiesFn)         \
  X(zesTemperatureGetState, ZesTemperatureGetStateFn)                   \
  X(zesDeviceEnumEngineGroups, ZesDeviceEnumEngineGroupsFn)             \
  X(zesEngineGetProperties, ZesEngineGetPropertiesFn)                   \
  X(zesEngineGetActivity, ZesEngineGetActivityFn)

/// Sysman's own initialisation (Level Zero 1.5+): used when the loader exports all three.
#define JOULE_LEVEL_ZERO_ZES_INIT_FUNCTIONS(X) \
  X(zesInit, ZesInitFn)                        \
  X(zesDriverGet, ZesDriverGetFn)              \
  X(zesDeviceGet, ZesDeviceGetFn)

/// The old path (ZES_ENABLE_SYSMAN=1, then the core driver's initialisation): required when zesInit is
/// absent. zeDriverGetApiVersion is also what the version check reads on this path.
#define JOULE_LEVEL_ZERO_CORE_INIT_FUNCTIONS(X) \
  X(zeInit, ZeInitFn)                           \
  X(zeDriverGet, ZeDriverGetFn)                 \
  X(zeDeviceGet, ZeDeviceGetFn)                 \
  X(zeDriverGetApiVersion, ZeDriverGetApiVersionFn)

/// Optional: the loader's own version report (loaders since 1.4), read for the API version on the zesInit
/// path, where no driver-level version call exists.
#define JOULE_LEVEL_ZERO_OPTIONAL_FUNCTIONS(X) X(zelLoaderGetVersions, ZelLoaderGetVersionsFn)

/// @return the enumerator's name in ze_api.h, e.g. "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS", or "" if
/// joule does not know it.
constexpr const char* result_name(ZeResult result) {
  switch (result) {
    case ZeResult::kSuccess:
      return "ZE_RESULT_SUCCESS";
    case ZeResult::kNotReady:
      return "ZE_RESULT_NOT_READY";
    case ZeResult::kErrorDeviceLost:
      return "ZE_RESULT_ERROR_DEVICE_LOST";
    case ZeResult::kErrorOutOfHostMemory:
      return "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY";
    case ZeResult::kErrorOutOfDeviceMemory:
      return "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY";
    case ZeResult::kErrorDeviceRequiresReset:
      return "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET";
    case ZeResult::kErrorDeviceInLowPowerState:
      return "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE";
    case ZeResult::kErrorInsufficientPermissions:
      return "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS";
    case ZeResult::kErrorNotAvailable:
      return "ZE_RESULT_ERROR_NOT_AVAILABLE";
    case ZeResult::kErrorDependencyUnavailable:
      return "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE";
    case ZeResult::kErrorUninitialized:
      return "ZE_RESULT_ERROR_UNINITIALIZED";
    case ZeResult::kErrorUnsupportedVersion:
      return "ZE_RESULT_ERROR_UNSUPPORTED_VERSION";
    case ZeResult::kErrorUnsupportedFeature:
      return "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE";
    case ZeResult::kErrorInvalidArgument:
      return "ZE_RESULT_ERROR_INVALID_ARGUMENT";
    case ZeResult::kErrorInvalidNullHandle:
      return "ZE_RESULT_ERROR_INVALID_NULL_HANDLE";
    case ZeResult::kErrorHandleObjectInUse:
      return "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE";
    case ZeResult::kErrorInvalidNullPointer:
      return "ZE_RESULT_ERROR_INVALID_NULL_POINTER";
    case ZeResult::kErrorInvalidSize:
      return "ZE_RESULT_ERROR_INVALID_SIZE";
    case ZeResult::kErrorUnsupportedSize:
      return "ZE_RESULT_ERROR_UNSUPPORTED_SIZE";
    case ZeResult::kErrorInvalidEnumeration:
      return "ZE_RESULT_ERROR_INVALID_ENUMERATION";
    case ZeResult::kErrorUnsupportedEnumeration:
      return "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION";
    case ZeResult::kWarningActionRequired:
      return "ZE_RESULT_WARNING_ACTION_REQUIRED";
    case ZeResult::kErrorSurvivabilityModeDetected:
      return "ZE_RESULT_ERROR_SURVIVABILITY_MODE_DETECTED";
    case ZeResult::kErrorUnknown:
      return "ZE_RESULT_ERROR_UNKNOWN";
  }
  return "";
}

}  // namespace joule::device::level_zero
