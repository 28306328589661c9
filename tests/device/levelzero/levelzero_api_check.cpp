// SPDX-License-Identifier: Apache-2.0
// Compile-time proof that src/device/levelzero/levelzero_api.hpp matches the installed level_zero/zes_api.h:
// the size and every member offset joule reads or writes of each structure, the enumerator values and the
// `stype` values. Built only when the header is installed (Debian: libze-dev).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <gtest/gtest.h>
#include <level_zero/zes_api.h>

#include "device/levelzero/levelzero_api.hpp"

namespace {

namespace lz = joule::device::level_zero;

#define JOULE_CHECK_LAYOUT(ours, theirs)                                 \
  static_assert(sizeof(ours) == sizeof(theirs), #ours ": size differs"); \
  static_assert(alignof(ours) == alignof(theirs), #ours ": alignment differs");
#define JOULE_CHECK_MEMBER(ours, theirs, member) \
  static_assert(offsetof(ours, member) == offsetof(theirs, member), #ours "::" #member ": offset differs");
#define JOULE_CHECK_VALUE(ours, theirs) \
  static_assert(static_cast<uint64_t>(ours) == static_cast<uint64_t>(theirs), #ours " != " #theirs);

JOULE_CHECK_LAYOUT(lz::ZeDeviceProperties, ze_device_properties_t)
JOULE_CHECK_MEMBER(lz::ZeDeviceProperties, ze_device_properties_t, type)
JOULE_CHECK_MEMBER(lz::ZeDeviceProperties, ze_device_properties_t, timerResolution)
JOULE_CHECK_MEMBER(lz::ZeDeviceProperties, ze_device_properties_t, uuid)
JOULE_CHECK_MEMBER(lz::ZeDeviceProperties, ze_device_properties_t, name)
JOULE_CHECK_LAYOUT(lz::DeviceProperties, zes_device_properties_t)
JOULE_CHECK_MEMBER(lz::DeviceProperties, zes_device_properties_t, core)
JOULE_CHECK_MEMBER(lz::DeviceProperties, zes_device_properties_t, numSubdevices)
JOULE_CHECK_MEMBER(lz::DeviceProperties, zes_device_properties_t, modelName)
JOULE_CHECK_MEMBER(lz::DeviceProperties, zes_device_properties_t, driverVersion)
JOULE_CHECK_LAYOUT(lz::PciProperties, zes_pci_properties_t)
JOULE_CHECK_MEMBER(lz::PciProperties, zes_pci_properties_t, address)
JOULE_CHECK_MEMBER(lz::PciProperties, zes_pci_properties_t, maxSpeed)
JOULE_CHECK_MEMBER(lz::PciProperties, zes_pci_properties_t, haveReplayCounters)
JOULE_CHECK_LAYOUT(lz::PowerProperties, zes_power_properties_t)
JOULE_CHECK_MEMBER(lz::PowerProperties, zes_power_properties_t, onSubdevice)
JOULE_CHECK_MEMBER(lz::PowerProperties, zes_power_properties_t, canControl)
JOULE_CHECK_MEMBER(lz::PowerProperties, zes_power_properties_t, defaultLimit)
JOULE_CHECK_MEMBER(lz::PowerProperties, zes_power_properties_t, minLimit)
JOULE_CHECK_MEMBER(lz::PowerProperties, zes_power_properties_t, maxLimit)
JOULE_CHECK_LAYOUT(lz::PowerEnergyCounter, zes_power_energy_counter_t)
JOULE_CHECK_MEMBER(lz::PowerEnergyCounter, zes_power_energy_counter_t, timestamp)
JOULE_CHECK_LAYOUT(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, level)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, limitUnit)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, enabled)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, interval)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, limitValueLocked)
JOULE_CHECK_MEMBER(lz::PowerLimitExtDesc, zes_power_limit_ext_desc_t, limit)
JOULE_CHECK_LAYOUT(lz::PowerExtProperties, zes_power_ext_properties_t)
JOULE_CHECK_MEMBER(lz::PowerExtProperties, zes_power_ext_properties_t, domain)
JOULE_CHECK_MEMBER(lz::PowerExtProperties, zes_power_ext_properties_t, defaultLimit)
JOULE_CHECK_LAYOUT(lz::FreqProperties, zes_freq_properties_t)
JOULE_CHECK_MEMBER(lz::FreqProperties, zes_freq_properties_t, type)
JOULE_CHECK_MEMBER(lz::FreqProperties, zes_freq_properties_t, canControl)
JOULE_CHECK_MEMBER(lz::FreqProperties, zes_freq_properties_t, min)
JOULE_CHECK_MEMBER(lz::FreqProperties, zes_freq_properties_t, max)
JOULE_CHECK_LAYOUT(lz::FreqRange, zes_freq_range_t)
JOULE_CHECK_LAYOUT(lz::FreqState, zes_freq_state_t)
JOULE_CHECK_MEMBER(lz::FreqState, zes_freq_state_t, actual)
JOULE_CHECK_MEMBER(lz::FreqState, zes_freq_state_t, throttleReasons)
JOULE_CHECK_LAYOUT(lz::TempProperties, zes_temp_properties_t)
JOULE_CHECK_MEMBER(lz::TempProperties, zes_temp_properties_t, type)
JOULE_CHECK_MEMBER(lz::TempProperties, zes_temp_properties_t, maxTemperature)
JOULE_CHECK_LAYOUT(lz::EngineProperties, zes_engine_properties_t)
JOULE_CHECK_MEMBER(lz::EngineProperties, zes_engine_properties_t, type)
JOULE_CHECK_MEMBER(lz::EngineProperties, zes_engine_properties_t, onSubdevice)
JOULE_CHECK_LAYOUT(lz::EngineStats, zes_engine_stats_t)
JOULE_CHECK_MEMBER(lz::EngineStats, zes_engine_stats_t, timestamp)

// Enums are passed by value and stored in structures: their size must agree.
static_assert(sizeof(lz::ZeResult) == sizeof(ze_result_t));
static_assert(sizeof(lz::StructureType) == sizeof(zes_structure_type_t));
static_assert(sizeof(lz::Bool) == sizeof(ze_bool_t));

JOULE_CHECK_VALUE(lz::ZeResult::kErrorDeviceLost, ZE_RESULT_ERROR_DEVICE_LOST)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorInsufficientPermissions, ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorNotAvailable, ZE_RESULT_ERROR_NOT_AVAILABLE)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorDependencyUnavailable, ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorUninitialized, ZE_RESULT_ERROR_UNINITIALIZED)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorUnsupportedVersion, ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorUnsupportedFeature, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorInvalidArgument, ZE_RESULT_ERROR_INVALID_ARGUMENT)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorInvalidNullHandle, ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorInvalidNullPointer, ZE_RESULT_ERROR_INVALID_NULL_POINTER)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorInvalidEnumeration, ZE_RESULT_ERROR_INVALID_ENUMERATION)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorUnsupportedEnumeration, ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)
JOULE_CHECK_VALUE(lz::ZeResult::kWarningActionRequired, ZE_RESULT_WARNING_ACTION_REQUIRED)
JOULE_CHECK_VALUE(lz::ZeResult::kErrorUnknown, ZE_RESULT_ERROR_UNKNOWN)
JOULE_CHECK_VALUE(lz::StructureType::kDeviceProperties, ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kPciProperties, ZES_STRUCTURE_TYPE_PCI_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kEngineProperties, ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kFreqProperties, ZES_STRUCTURE_TYPE_FREQ_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kPowerProperties, ZES_STRUCTURE_TYPE_POWER_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kTempProperties, ZES_STRUCTURE_TYPE_TEMP_PROPERTIES)
JOULE_CHECK_VALUE(lz::StructureType::kFreqState, ZES_STRUCTURE_TYPE_FREQ_STATE)
JOULE_CHECK_VALUE(lz::StructureType::kPowerLimitExtDesc, ZES_STRUCTURE_TYPE_POWER_LIMIT_EXT_DESC)
JOULE_CHECK_VALUE(lz::StructureType::kPowerExtProperties, ZES_STRUCTURE_TYPE_POWER_EXT_PROPERTIES)
JOULE_CHECK_VALUE(lz::kZeStructureTypeDeviceProperties, ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES)
JOULE_CHECK_VALUE(lz::PowerDomain::kCard, ZES_POWER_DOMAIN_CARD)
JOULE_CHECK_VALUE(lz::PowerDomain::kPackage, ZES_POWER_DOMAIN_PACKAGE)
JOULE_CHECK_VALUE(lz::PowerDomain::kStack, ZES_POWER_DOMAIN_STACK)
JOULE_CHECK_VALUE(lz::PowerLevel::kSustained, ZES_POWER_LEVEL_SUSTAINED)
JOULE_CHECK_VALUE(lz::PowerLevel::kPeak, ZES_POWER_LEVEL_PEAK)
JOULE_CHECK_VALUE(lz::LimitUnit::kCurrent, ZES_LIMIT_UNIT_CURRENT)
JOULE_CHECK_VALUE(lz::LimitUnit::kPower, ZES_LIMIT_UNIT_POWER)
JOULE_CHECK_VALUE(lz::FreqDomain::kGpu, ZES_FREQ_DOMAIN_GPU)
JOULE_CHECK_VALUE(lz::FreqDomain::kMemory, ZES_FREQ_DOMAIN_MEMORY)
JOULE_CHECK_VALUE(lz::TempSensors::kGlobal, ZES_TEMP_SENSORS_GLOBAL)
JOULE_CHECK_VALUE(lz::TempSensors::kGpu, ZES_TEMP_SENSORS_GPU)
JOULE_CHECK_VALUE(lz::EngineGroup::kAll, ZES_ENGINE_GROUP_ALL)
JOULE_CHECK_VALUE(lz::EngineGroup::kComputeAll, ZES_ENGINE_GROUP_COMPUTE_ALL)
JOULE_CHECK_VALUE(lz::EngineGroup::kRenderComputeAll3d, ZES_ENGINE_GROUP_3D_RENDER_COMPUTE_ALL)
JOULE_CHECK_VALUE(lz::throttle::kAvePwrCap, ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP)
JOULE_CHECK_VALUE(lz::throttle::kThermalLimit, ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT)
JOULE_CHECK_VALUE(lz::throttle::kHwRange, ZES_FREQ_THROTTLE_REASON_FLAG_HW_RANGE)
JOULE_CHECK_VALUE(lz::kMaxDeviceUuidSize, ZE_MAX_DEVICE_UUID_SIZE)
JOULE_CHECK_VALUE(lz::kMaxDeviceName, ZE_MAX_DEVICE_NAME)
JOULE_CHECK_VALUE(lz::kStringPropertySize, ZES_STRING_PROPERTY_SIZE)
JOULE_CHECK_VALUE(lz::api_major(ZE_API_VERSION_1_4), 1)
JOULE_CHECK_VALUE(lz::api_minor(ZE_API_VERSION_1_4), 4)
#undef JOULE_CHECK_LAYOUT
#undef JOULE_CHECK_MEMBER
#undef JOULE_CHECK_VALUE

}  // namespace

// The checks above are static_asserts; this test only records in the results that they were compiled.
TEST(LevelZeroApi, MatchesInstalledHeader) {
  SUCCEED() << "levelzero_api.hpp agrees with level_zero/zes_api.h";
}
