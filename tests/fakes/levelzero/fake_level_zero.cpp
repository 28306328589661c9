// SPDX-License-Identifier: Apache-2.0
// A fake libze_loader.so.1 for tests: exports the Level Zero Sysman functions joule uses, with behaviour read
// from the key=value file named by JOULE_FAKE_LEVEL_ZERO_CONFIG (format in README.md beside this file). The
// configuration is read again, and every device's state reset, on every zesInit / zeInit; the devices of an
// earlier initialisation are kept (their handles answer ZE_RESULT_ERROR_INVALID_NULL_HANDLE) so nothing
// dangles. The energy counter integrates the configured power over the fake's clock: real time, or with
// `clock_step_us` a virtual clock that advances that much on every counter read (tests stay instant).
//
// Build variants (compile definitions):
//   JOULE_FAKE_LEVEL_ZERO_NO_ZES_INIT        no zesInit/zesDriverGet/zesDeviceGet (a loader before 1.5)
//   JOULE_FAKE_LEVEL_ZERO_OMIT_ENERGY        no zesPowerGetEnergyCounter (required by joule)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "device/levelzero/levelzero_api.hpp"
#include "fakes/fake_library.hpp"

namespace lz = joule::device::level_zero;
using lz::ZeResult;

// Declare every exported function from the same lists and types the backend uses, so a definition below
// whose signature drifts from levelzero_api.hpp fails to compile.
extern "C" {
#define JOULE_FAKE_DECLARE(symbol, type) \
  __attribute__((visibility("default"))) std::remove_pointer_t<lz::type> symbol;
JOULE_LEVEL_ZERO_DEVICE_FUNCTIONS(JOULE_FAKE_DECLARE)
JOULE_LEVEL_ZERO_ZES_INIT_FUNCTIONS(JOULE_FAKE_DECLARE)
JOULE_LEVEL_ZERO_CORE_INIT_FUNCTIONS(JOULE_FAKE_DECLARE)
JOULE_LEVEL_ZERO_OPTIONAL_FUNCTIONS(JOULE_FAKE_DECLARE)
#undef JOULE_FAKE_DECLARE
}

namespace {

using joule::fake::parse_double;
using joule::fake::parse_mhz_list;

struct Device;

// What a Sysman handle points at: a device's resource.
enum class Kind { kPower, kFreqGpu, kFreqMemory, kTempGpu, kTempGlobal, kEngine };
struct Resource {
  Device* device = nullptr;
  Kind kind = Kind::kPower;
};

struct Device {
  std::string model_name;
  std::string core_name;
  std::string uuid_hex;  // 32 hex digits, or "" (all zero)
  uint32_t type = 1;     // ZE_DEVICE_TYPE_GPU
  lz::PciAddress pci{0, 3, 0, 0};
  double power_w = 100;
  std::optional<lz::PowerDomain> power_domain = lz::PowerDomain::kCard;  // nullopt: no power domain
  bool ext_properties = true;  // false: the driver ignores zes_power_ext_properties_t (pre-1.4)
  bool can_control = true;
  bool limit_locked = false;
  lz::LimitUnit limit_unit = lz::LimitUnit::kPower;
  double limit_w = 300;
  double limit_min_w = 100;  // -1: unknown
  double limit_max_w = 300;  // -1: unknown
  double limit_default_w = 250;
  std::vector<uint64_t> gpu_clocks_mhz = {300, 800, 1300, 1600};
  bool gpu_freq = true;
  bool gpu_freq_can_control = true;
  std::optional<double> memory_clock_mhz = 1200;  // nullopt: no memory frequency domain
  std::optional<double> temperature_gpu_c = 55;
  std::optional<double> temperature_global_c = 61;
  std::optional<double> busy_pct = 75;  // nullopt: no engine group
  uint32_t throttle_reasons = 0;
  uint64_t energy_reset_at_read = 0;  // the counter drops to 0 at this energy read (1-based; 0: never)
  std::map<std::string, ZeResult> failures;

  // Run-time state.
  double energy_uj = 0;
  uint64_t energy_reads = 0;
  double active_us = 0;
  uint64_t last_us = 0;
  double range_min_mhz = 0;
  double range_max_mhz = 0;
  Resource power{this, Kind::kPower};
  Resource freq_gpu{this, Kind::kFreqGpu};
  Resource freq_memory{this, Kind::kFreqMemory};
  Resource temp_gpu{this, Kind::kTempGpu};
  Resource temp_global{this, Kind::kTempGlobal};
  Resource engine{this, Kind::kEngine};

  double effective_power_w() const { return std::min(power_w, limit_w); }
};

struct State {
  std::mutex mutex;
  bool initialised = false;
  bool sysman_enabled = false;  // zeInit path: ZES_ENABLE_SYSMAN was 1 at zeInit
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Device>> retired;  // devices of earlier initialisations
  std::map<std::string, ZeResult> failures;
  std::string log_path;
  uint32_t api_version = (1u << 16) | 5u;
  uint64_t clock_step_us = 0;  // 0: real time
  uint64_t virtual_us = 1'000'000;
  int driver = 0;  // the one driver handle points here
};

State& state() {
  static State instance;
  return instance;
}

void log_call(const State& s, const std::string& line) {
  joule::fake::log_line(s.log_path, line);
}

// The fake's clock in µs: real steady time, or the virtual clock advanced by one step per call.
uint64_t fake_now_us(State& s) {
  if (s.clock_step_us != 0) {
    s.virtual_us += s.clock_step_us;
    return s.virtual_us;
  }
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Integrates power and busy time up to `now_us`.
void advance(Device& device, uint64_t now_us) {
  if (now_us > device.last_us) {
    const auto dt_us = static_cast<double>(now_us - device.last_us);
    device.energy_uj += device.effective_power_w() * dt_us;  // W × µs = µJ
    device.active_us += device.busy_pct.value_or(0) / 100 * dt_us;
  }
  device.last_us = now_us;
}

std::optional<ZeResult> parse_result(std::string text) {
  static const std::pair<const char*, ZeResult> kNames[] = {
      {"SUCCESS", ZeResult::kSuccess},
      {"ERROR_DEVICE_LOST", ZeResult::kErrorDeviceLost},
      {"ERROR_INSUFFICIENT_PERMISSIONS", ZeResult::kErrorInsufficientPermissions},
      {"ERROR_NOT_AVAILABLE", ZeResult::kErrorNotAvailable},
      {"ERROR_DEPENDENCY_UNAVAILABLE", ZeResult::kErrorDependencyUnavailable},
      {"ERROR_UNINITIALIZED", ZeResult::kErrorUninitialized},
      {"ERROR_UNSUPPORTED_FEATURE", ZeResult::kErrorUnsupportedFeature},
      {"ERROR_UNSUPPORTED_VERSION", ZeResult::kErrorUnsupportedVersion},
      {"ERROR_INVALID_ARGUMENT", ZeResult::kErrorInvalidArgument},
      {"ERROR_UNKNOWN", ZeResult::kErrorUnknown},
  };
  return joule::fake::parse_status(std::move(text), "ZE_RESULT_", kNames);
}

std::string set_optional(std::optional<double>& field, const std::string& value) {
  double number = 0;
  if (value == "none") {
    field.reset();
    return "";
  }
  if (!parse_double(value, number)) {
    return "not a number (or none)";
  }
  field = number;
  return "";
}

bool parse_bool(const std::string& value) {
  return value == "1" || value == "true";
}

// Applies one per-device key. @return "" or what is wrong.
std::string apply_device_key(Device& device, const std::string& key, const std::string& value) {
  double number = 0;
  auto set_number = [&](double& field) -> std::string {
    if (!parse_double(value, number)) {
      return "not a number";
    }
    field = number;
    return "";
  };
  if (key == "name") {
    device.model_name = value;
  } else if (key == "core_name") {
    device.core_name = value;
  } else if (key == "uuid") {
    device.uuid_hex = value;
  } else if (key == "type") {
    device.type = value == "gpu" ? 1 : 2;
  } else if (key == "pci_bus") {
    return parse_double(value, number) ? (device.pci.bus = static_cast<uint32_t>(number), "")
                                       : "not a number";
  } else if (key == "power_w") {
    return set_number(device.power_w);
  } else if (key == "power_domain") {
    if (value == "none") {
      device.power_domain.reset();
    } else {
      device.power_domain = value == "card"      ? lz::PowerDomain::kCard
                            : value == "package" ? lz::PowerDomain::kPackage
                            : value == "stack"   ? lz::PowerDomain::kStack
                                                 : lz::PowerDomain::kUnknown;
    }
  } else if (key == "ext_properties") {
    device.ext_properties = parse_bool(value);
  } else if (key == "can_control") {
    device.can_control = parse_bool(value);
  } else if (key == "limit_locked") {
    device.limit_locked = parse_bool(value);
  } else if (key == "limit_unit") {
    device.limit_unit = value == "current" ? lz::LimitUnit::kCurrent : lz::LimitUnit::kPower;
  } else if (key == "limit_w") {
    return set_number(device.limit_w);
  } else if (key == "limit_min_w") {
    return set_number(device.limit_min_w);
  } else if (key == "limit_max_w") {
    return set_number(device.limit_max_w);
  } else if (key == "limit_default_w") {
    return set_number(device.limit_default_w);
  } else if (key == "gpu_clocks_mhz") {
    if (value == "none") {
      device.gpu_freq = false;
      return "";
    }
    return parse_mhz_list(value, device.gpu_clocks_mhz, 256);
  } else if (key == "gpu_freq_can_control") {
    device.gpu_freq_can_control = parse_bool(value);
  } else if (key == "memory_clock_mhz") {
    return set_optional(device.memory_clock_mhz, value);
  } else if (key == "temperature_gpu_c") {
    return set_optional(device.temperature_gpu_c, value);
  } else if (key == "temperature_global_c") {
    return set_optional(device.temperature_global_c, value);
  } else if (key == "busy_pct") {
    return set_optional(device.busy_pct, value);
  } else if (key == "energy_reset_at_read") {
    return parse_double(value, number) ? (device.energy_reset_at_read = static_cast<uint64_t>(number), "")
                                       : "not a number";
  } else if (key == "throttle_reasons") {
    return parse_double(value, number) ? (device.throttle_reasons = static_cast<uint32_t>(number), "")
                                       : "not a number";
  } else {
    return joule::fake::apply_failure_key(key, value, device.failures, parse_result).value_or("unknown key");
  }
  return "";
}

std::string load_config(State& s) {
  for (auto& device : s.devices) {
    s.retired.push_back(std::move(device));
  }
  s.devices.clear();
  s.failures.clear();
  s.log_path.clear();
  s.api_version = (1u << 16) | 5u;
  s.clock_step_us = 0;
  s.virtual_us = 1'000'000;
  joule::fake::ConfigEntries entries;
  if (std::string problem = joule::fake::read_amd_config("JOULE_FAKE_LEVEL_ZERO_CONFIG", entries);
      !problem.empty()) {
    return problem;
  }
  const size_t count = joule::fake::device_count(entries);
  for (size_t i = 0; i < count; ++i) {
    auto device = std::make_unique<Device>();
    device->model_name = "Fake Intel Data Center GPU Max " + std::to_string(i);
    device->core_name = "Intel(R) Fake GPU " + std::to_string(i);
    char uuid[40];
    std::snprintf(uuid, sizeof uuid, "8680e20b0800000000%02x000000000001", static_cast<unsigned>(i % 256));
    device->uuid_hex = uuid;
    device->pci.bus = static_cast<uint32_t>(3 + i);
    s.devices.push_back(std::move(device));
  }
  std::string problem = joule::fake::apply_device_entries(
      entries, count,
      [&s](const std::string& key, const std::string& value) -> std::string {
        if (key == "log") {
          s.log_path = value;
          return "";
        }
        if (key == "api_version") {  // "MAJOR.MINOR"
          unsigned major = 0;
          unsigned minor = 0;
          if (std::sscanf(value.c_str(), "%u.%u", &major, &minor) != 2) {
            return "expected MAJOR.MINOR";
          }
          s.api_version = (major << 16) | (minor & 0xffffu);
          return "";
        }
        if (key == "clock_step_us") {
          double number = 0;
          if (!parse_double(value, number) || number < 0) {
            return "not a number of microseconds";
          }
          s.clock_step_us = static_cast<uint64_t>(number);
          return "";
        }
        return joule::fake::apply_failure_key(key, value, s.failures, parse_result).value_or("unknown key");
      },
      [&s](size_t index, const std::string& key, const std::string& value) {
        return apply_device_key(*s.devices[index], key, value);
      });
  if (!problem.empty()) {
    return problem;
  }
  const uint64_t now = fake_now_us(s);
  for (auto& device : s.devices) {
    device->last_us = now;
    device->range_min_mhz =
        device->gpu_clocks_mhz.empty() ? 0 : static_cast<double>(device->gpu_clocks_mhz.front());
    device->range_max_mhz =
        device->gpu_clocks_mhz.empty() ? 0 : static_cast<double>(device->gpu_clocks_mhz.back());
  }
  return "";
}

// Init, shared by zesInit and zeInit: reloads the configuration, then fails as configured.
ZeResult fake_init(State& s, const char* symbol, uint32_t flags) {
  if (const std::string problem = load_config(s); !problem.empty()) {
    std::fprintf(stderr, "fake libze_loader: JOULE_FAKE_LEVEL_ZERO_CONFIG: %s\n", problem.c_str());
    return ZeResult::kErrorUnknown;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    log_call(s, std::string(symbol) + " failed");
    return it->second;
  }
  s.initialised = true;
  log_call(s, std::string(symbol) + " " + std::to_string(flags));
  return ZeResult::kSuccess;
}

ZeResult global_check(State& s, const char* symbol) {
  if (!s.initialised || !s.sysman_enabled) {
    return ZeResult::kErrorUninitialized;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    return it->second;
  }
  return ZeResult::kSuccess;
}

ZeResult device_failure(State& s, const Device& device, const char* symbol) {
  if (const auto it = device.failures.find(symbol); it != device.failures.end()) {
    return it->second;
  }
  return global_check(s, symbol);
}

Device* find_device(State& s, void* handle) {
  for (auto& device : s.devices) {
    if (device.get() == handle) {
      return device.get();
    }
  }
  return nullptr;
}

Resource* find_resource(State& s, void* handle) {
  for (auto& device : s.devices) {
    for (Resource* resource : {&device->power, &device->freq_gpu, &device->freq_memory, &device->temp_gpu,
                               &device->temp_global, &device->engine}) {
      if (resource == handle) {
        return resource;
      }
    }
  }
  return nullptr;
}

size_t index_of(const State& s, const Device* device) {
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (s.devices[i].get() == device) {
      return i;
    }
  }
  return s.devices.size();
}

// Fills an enumeration: *count = how many; with an array, up to *count handles.
ZeResult enumerate(const std::vector<Resource*>& resources, uint32_t* count, void** handles) {
  if (count == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  if (handles != nullptr) {
    const size_t n = std::min<size_t>(*count, resources.size());
    for (size_t i = 0; i < n; ++i) {
      handles[i] = resources[i];
    }
  }
  *count = static_cast<uint32_t>(resources.size());
  return ZeResult::kSuccess;
}

int32_t w_to_mw(double watts) {
  return watts < 0 ? -1 : static_cast<int32_t>(std::llround(watts * 1000));
}

}  // namespace

// The start of a device call: lock, find the device, apply configured failures.
#define JOULE_FAKE_DEVICE_CALL(symbol, handle)                                                    \
  State& s = state();                                                                             \
  std::lock_guard lock(s.mutex);                                                                  \
  Device* device = find_device(s, handle);                                                        \
  if (device == nullptr) {                                                                        \
    return s.initialised ? ZeResult::kErrorInvalidNullHandle : ZeResult::kErrorUninitialized;     \
  }                                                                                               \
  if (const ZeResult failed = device_failure(s, *device, symbol); failed != ZeResult::kSuccess) { \
    return failed;                                                                                \
  }

// The start of a resource call: as above, for a power/frequency/temperature/engine handle.
#define JOULE_FAKE_RESOURCE_CALL(symbol, handle)                                                  \
  State& s = state();                                                                             \
  std::lock_guard lock(s.mutex);                                                                  \
  Resource* resource = find_resource(s, handle);                                                  \
  if (resource == nullptr) {                                                                      \
    return s.initialised ? ZeResult::kErrorInvalidNullHandle : ZeResult::kErrorUninitialized;     \
  }                                                                                               \
  Device* device = resource->device;                                                              \
  if (const ZeResult failed = device_failure(s, *device, symbol); failed != ZeResult::kSuccess) { \
    return failed;                                                                                \
  }

extern "C" {

#ifndef JOULE_FAKE_LEVEL_ZERO_NO_ZES_INIT
ZeResult zesInit(uint32_t flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const ZeResult result = fake_init(s, "zesInit", flags);
  s.sysman_enabled = result == ZeResult::kSuccess;
  return result;
}

ZeResult zesDriverGet(uint32_t* count, lz::DriverHandle* drivers) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const ZeResult failed = global_check(s, "zesDriverGet"); failed != ZeResult::kSuccess) {
    return failed;
  }
  if (count == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  if (drivers != nullptr && *count >= 1) {
    drivers[0] = &s.driver;
  }
  *count = 1;
  return ZeResult::kSuccess;
}

ZeResult zesDeviceGet(lz::DriverHandle driver, uint32_t* count, lz::DeviceHandle* devices) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const ZeResult failed = global_check(s, "zesDeviceGet"); failed != ZeResult::kSuccess) {
    return failed;
  }
  if (driver != &s.driver) {
    return ZeResult::kErrorInvalidNullHandle;
  }
  if (count == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  if (devices != nullptr) {
    const size_t n = std::min<size_t>(*count, s.devices.size());
    for (size_t i = 0; i < n; ++i) {
      devices[i] = s.devices[i].get();
    }
  }
  *count = static_cast<uint32_t>(s.devices.size());
  return ZeResult::kSuccess;
}
#endif

ZeResult zeInit(uint32_t flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const ZeResult result = fake_init(s, "zeInit", flags);
  // As in Intel's driver: Sysman comes up with the core driver only if ZES_ENABLE_SYSMAN=1 at zeInit.
  const char* sysman = std::getenv("ZES_ENABLE_SYSMAN");
  s.sysman_enabled = result == ZeResult::kSuccess && sysman != nullptr && std::strcmp(sysman, "1") == 0;
  return result;
}

ZeResult zeDriverGet(uint32_t* count, lz::DriverHandle* drivers) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialised) {
    return ZeResult::kErrorUninitialized;
  }
  if (count == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  if (drivers != nullptr && *count >= 1) {
    drivers[0] = &s.driver;
  }
  *count = 1;
  return ZeResult::kSuccess;
}

ZeResult zeDeviceGet(lz::DriverHandle driver, uint32_t* count, lz::DeviceHandle* devices) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialised) {
    return ZeResult::kErrorUninitialized;
  }
  if (driver != &s.driver || count == nullptr) {
    return ZeResult::kErrorInvalidNullHandle;
  }
  if (devices != nullptr) {
    const size_t n = std::min<size_t>(*count, s.devices.size());
    for (size_t i = 0; i < n; ++i) {
      devices[i] = s.devices[i].get();
    }
  }
  *count = static_cast<uint32_t>(s.devices.size());
  return ZeResult::kSuccess;
}

ZeResult zeDriverGetApiVersion(lz::DriverHandle driver, uint32_t* version) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.initialised) {
    return ZeResult::kErrorUninitialized;
  }
  if (driver != &s.driver || version == nullptr) {
    return ZeResult::kErrorInvalidNullHandle;
  }
  *version = s.api_version;
  return ZeResult::kSuccess;
}

ZeResult zelLoaderGetVersions(size_t* num_elems, lz::LoaderComponentVersion* versions) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (num_elems == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  if (versions != nullptr && *num_elems >= 1) {
    versions[0] = lz::LoaderComponentVersion{};
    std::snprintf(versions[0].component_name, sizeof versions[0].component_name, "%s", "loader");
    versions[0].spec_version = s.api_version;
    versions[0].component_lib_version = {1, 99, 0};
  }
  *num_elems = 1;
  return ZeResult::kSuccess;
}

ZeResult zesDeviceGetProperties(lz::DeviceHandle handle, lz::DeviceProperties* properties) {
  JOULE_FAKE_DEVICE_CALL("zesDeviceGetProperties", handle)
  if (properties == nullptr || properties->stype != lz::StructureType::kDeviceProperties) {
    return ZeResult::kErrorInvalidArgument;
  }
  void* next = properties->pNext;
  *properties = lz::DeviceProperties{};
  properties->stype = lz::StructureType::kDeviceProperties;
  properties->pNext = next;
  properties->core.stype = lz::kZeStructureTypeDeviceProperties;
  properties->core.type = device->type;
  properties->core.vendorId = 0x8086;
  for (size_t i = 0; i < lz::kMaxDeviceUuidSize && 2 * i + 1 < device->uuid_hex.size(); ++i) {
    properties->core.uuid[i] =
        static_cast<uint8_t>(std::strtoul(device->uuid_hex.substr(2 * i, 2).c_str(), nullptr, 16));
  }
  std::snprintf(properties->core.name, sizeof properties->core.name, "%s", device->core_name.c_str());
  std::snprintf(properties->modelName, sizeof properties->modelName, "%s", device->model_name.c_str());
  std::snprintf(properties->vendorName, sizeof properties->vendorName, "%s", "Intel(R) Corporation");
  return ZeResult::kSuccess;
}

ZeResult zesDevicePciGetProperties(lz::DeviceHandle handle, lz::PciProperties* properties) {
  JOULE_FAKE_DEVICE_CALL("zesDevicePciGetProperties", handle)
  if (properties == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  properties->address = device->pci;
  properties->maxSpeed = lz::PciSpeed{4, 16, -1};
  return ZeResult::kSuccess;
}

ZeResult zesDeviceEnumPowerDomains(lz::DeviceHandle handle, uint32_t* count, lz::PowerHandle* power) {
  JOULE_FAKE_DEVICE_CALL("zesDeviceEnumPowerDomains", handle)
  std::vector<Resource*> list;
  if (device->power_domain) {
    list.push_back(&device->power);
  }
  return enumerate(list, count, power);
}

ZeResult zesPowerGetProperties(lz::PowerHandle handle, lz::PowerProperties* properties) {
  JOULE_FAKE_RESOURCE_CALL("zesPowerGetProperties", handle)
  if (properties == nullptr || resource->kind != Kind::kPower) {
    return ZeResult::kErrorInvalidArgument;
  }
  properties->onSubdevice = device->power_domain == lz::PowerDomain::kStack ? 1 : 0;
  properties->subdeviceId = 0;
  properties->canControl = device->can_control ? 1 : 0;
  properties->isEnergyThresholdSupported = 0;
  properties->defaultLimit = w_to_mw(device->limit_default_w);
  properties->minLimit = w_to_mw(device->limit_min_w);
  properties->maxLimit = w_to_mw(device->limit_max_w);
  auto* ext = static_cast<lz::PowerExtProperties*>(properties->pNext);
  if (device->ext_properties && ext != nullptr && ext->stype == lz::StructureType::kPowerExtProperties) {
    ext->domain = *device->power_domain;
    if (ext->defaultLimit != nullptr) {
      ext->defaultLimit->level = lz::PowerLevel::kSustained;
      ext->defaultLimit->limitUnit = lz::LimitUnit::kPower;
      ext->defaultLimit->limit = w_to_mw(device->limit_default_w);
    }
  }
  return ZeResult::kSuccess;
}

#ifndef JOULE_FAKE_LEVEL_ZERO_OMIT_ENERGY
ZeResult zesPowerGetEnergyCounter(lz::PowerHandle handle, lz::PowerEnergyCounter* energy) {
  JOULE_FAKE_RESOURCE_CALL("zesPowerGetEnergyCounter", handle)
  if (energy == nullptr || resource->kind != Kind::kPower) {
    return ZeResult::kErrorInvalidArgument;
  }
  const uint64_t now = fake_now_us(s);
  advance(*device, now);
  if (++device->energy_reads == device->energy_reset_at_read) {
    device->energy_uj = 0;  // as after a driver reload
  }
  energy->energy = static_cast<uint64_t>(device->energy_uj);
  energy->timestamp = now;
  return ZeResult::kSuccess;
}
#endif

ZeResult zesPowerGetLimitsExt(lz::PowerHandle handle, uint32_t* count, lz::PowerLimitExtDesc* limits) {
  JOULE_FAKE_RESOURCE_CALL("zesPowerGetLimitsExt", handle)
  if (count == nullptr || resource->kind != Kind::kPower) {
    return ZeResult::kErrorInvalidArgument;
  }
  // A peak limit first, then the sustained one, as on Intel's discrete GPUs.
  if (limits != nullptr && *count >= 1) {
    limits[0] = lz::PowerLimitExtDesc{};
    limits[0].stype = lz::StructureType::kPowerLimitExtDesc;
    limits[0].level = lz::PowerLevel::kPeak;
    limits[0].limitUnit = lz::LimitUnit::kPower;
    limits[0].limitValueLocked = 1;
    limits[0].limit = w_to_mw(device->limit_max_w * 1.2);
  }
  if (limits != nullptr && *count >= 2) {
    limits[1] = lz::PowerLimitExtDesc{};
    limits[1].stype = lz::StructureType::kPowerLimitExtDesc;
    limits[1].level = lz::PowerLevel::kSustained;
    limits[1].limitUnit = device->limit_unit;
    limits[1].enabled = 1;
    limits[1].interval = 28;
    limits[1].limitValueLocked = device->limit_locked ? 1 : 0;
    limits[1].limit = w_to_mw(device->limit_w);
  }
  *count = 2;
  return ZeResult::kSuccess;
}

ZeResult zesPowerSetLimitsExt(lz::PowerHandle handle, uint32_t* count, lz::PowerLimitExtDesc* limits) {
  JOULE_FAKE_RESOURCE_CALL("zesPowerSetLimitsExt", handle)
  if (count == nullptr || limits == nullptr || resource->kind != Kind::kPower) {
    return ZeResult::kErrorInvalidArgument;
  }
  if (!device->can_control) {
    return ZeResult::kErrorInsufficientPermissions;
  }
  for (uint32_t i = 0; i < *count; ++i) {
    if (limits[i].level != lz::PowerLevel::kSustained || limits[i].limit < w_to_mw(device->limit_min_w) ||
        (device->limit_max_w >= 0 && limits[i].limit > w_to_mw(device->limit_max_w))) {
      return ZeResult::kErrorInvalidArgument;
    }
  }
  advance(*device, fake_now_us(s));  // energy so far at the old power, the rest at the new
  for (uint32_t i = 0; i < *count; ++i) {
    device->limit_w = limits[i].limit / 1000.0;
    log_call(s, "zesPowerSetLimitsExt " + std::to_string(index_of(s, device)) + " " +
                    std::to_string(limits[i].limit));
  }
  return ZeResult::kSuccess;
}

ZeResult zesDeviceEnumFrequencyDomains(lz::DeviceHandle handle, uint32_t* count, lz::FreqHandle* freq) {
  JOULE_FAKE_DEVICE_CALL("zesDeviceEnumFrequencyDomains", handle)
  std::vector<Resource*> list;
  if (device->memory_clock_mhz) {
    list.push_back(&device->freq_memory);  // memory first: the backend must pick by type
  }
  if (device->gpu_freq) {
    list.push_back(&device->freq_gpu);
  }
  return enumerate(list, count, freq);
}

ZeResult zesFrequencyGetProperties(lz::FreqHandle handle, lz::FreqProperties* properties) {
  JOULE_FAKE_RESOURCE_CALL("zesFrequencyGetProperties", handle)
  if (properties == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  const bool gpu = resource->kind == Kind::kFreqGpu;
  properties->type = gpu ? lz::FreqDomain::kGpu : lz::FreqDomain::kMemory;
  properties->onSubdevice = 0;
  properties->canControl = gpu && device->gpu_freq_can_control ? 1 : 0;
  properties->isThrottleEventSupported = 0;
  if (gpu) {
    properties->min =
        device->gpu_clocks_mhz.empty() ? 0 : static_cast<double>(device->gpu_clocks_mhz.front());
    properties->max = device->gpu_clocks_mhz.empty() ? 0 : static_cast<double>(device->gpu_clocks_mhz.back());
  } else {
    properties->min = properties->max = *device->memory_clock_mhz;
  }
  return ZeResult::kSuccess;
}

ZeResult zesFrequencyGetAvailableClocks(lz::FreqHandle handle, uint32_t* count, double* clocks) {
  JOULE_FAKE_RESOURCE_CALL("zesFrequencyGetAvailableClocks", handle)
  if (count == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  std::vector<double> list;
  if (resource->kind == Kind::kFreqGpu) {
    for (const uint64_t mhz : device->gpu_clocks_mhz) {
      list.push_back(static_cast<double>(mhz));
    }
  } else {
    list.push_back(*device->memory_clock_mhz);
  }
  if (clocks != nullptr) {
    std::copy_n(list.begin(), std::min<size_t>(*count, list.size()), clocks);
  }
  *count = static_cast<uint32_t>(list.size());
  return ZeResult::kSuccess;
}

ZeResult zesFrequencySetRange(lz::FreqHandle handle, const lz::FreqRange* range) {
  JOULE_FAKE_RESOURCE_CALL("zesFrequencySetRange", handle)
  if (range == nullptr || resource->kind != Kind::kFreqGpu || range->min > range->max) {
    return ZeResult::kErrorInvalidArgument;
  }
  if (!device->gpu_freq_can_control) {
    return ZeResult::kErrorUnsupportedFeature;
  }
  device->range_min_mhz = range->min;
  device->range_max_mhz = range->max;
  log_call(s, "zesFrequencySetRange " + std::to_string(index_of(s, device)) + " " +
                  std::to_string(std::lround(range->min)) + " " + std::to_string(std::lround(range->max)));
  return ZeResult::kSuccess;
}

ZeResult zesFrequencyGetState(lz::FreqHandle handle, lz::FreqState* state_out) {
  JOULE_FAKE_RESOURCE_CALL("zesFrequencyGetState", handle)
  if (state_out == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  state_out->currentVoltage = -1;
  state_out->tdp = -1;
  state_out->efficient = -1;
  if (resource->kind == Kind::kFreqGpu) {
    // The clock runs at the highest available clock inside the range.
    double actual = -1;
    for (const uint64_t mhz : device->gpu_clocks_mhz) {
      const auto clock = static_cast<double>(mhz);
      if (clock >= device->range_min_mhz && clock <= device->range_max_mhz) {
        actual = clock;
      }
    }
    state_out->request = actual;
    state_out->actual = actual;
    state_out->throttleReasons = device->throttle_reasons;
  } else {
    state_out->request = state_out->actual = *device->memory_clock_mhz;
    state_out->throttleReasons = 0;
  }
  return ZeResult::kSuccess;
}

ZeResult zesDeviceEnumTemperatureSensors(lz::DeviceHandle handle, uint32_t* count, lz::TempHandle* temp) {
  JOULE_FAKE_DEVICE_CALL("zesDeviceEnumTemperatureSensors", handle)
  std::vector<Resource*> list;
  if (device->temperature_global_c) {
    list.push_back(&device->temp_global);  // global first: the backend must prefer the GPU sensor
  }
  if (device->temperature_gpu_c) {
    list.push_back(&device->temp_gpu);
  }
  return enumerate(list, count, temp);
}

ZeResult zesTemperatureGetProperties(lz::TempHandle handle, lz::TempProperties* properties) {
  JOULE_FAKE_RESOURCE_CALL("zesTemperatureGetProperties", handle)
  if (properties == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  properties->type = resource->kind == Kind::kTempGpu ? lz::TempSensors::kGpu : lz::TempSensors::kGlobal;
  properties->onSubdevice = 0;
  properties->maxTemperature = 105;
  return ZeResult::kSuccess;
}

ZeResult zesTemperatureGetState(lz::TempHandle handle, double* temperature) {
  JOULE_FAKE_RESOURCE_CALL("zesTemperatureGetState", handle)
  if (temperature == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  *temperature =
      resource->kind == Kind::kTempGpu ? *device->temperature_gpu_c : *device->temperature_global_c;
  return ZeResult::kSuccess;
}

ZeResult zesDeviceEnumEngineGroups(lz::DeviceHandle handle, uint32_t* count, lz::EngineHandle* engine) {
  JOULE_FAKE_DEVICE_CALL("zesDeviceEnumEngineGroups", handle)
  std::vector<Resource*> list;
  if (device->busy_pct) {
    list.push_back(&device->engine);
  }
  return enumerate(list, count, engine);
}

ZeResult zesEngineGetProperties(lz::EngineHandle handle, lz::EngineProperties* properties) {
  JOULE_FAKE_RESOURCE_CALL("zesEngineGetProperties", handle)
  if (properties == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  properties->type = lz::EngineGroup::kAll;
  properties->onSubdevice = 0;
  return ZeResult::kSuccess;
}

ZeResult zesEngineGetActivity(lz::EngineHandle handle, lz::EngineStats* stats) {
  JOULE_FAKE_RESOURCE_CALL("zesEngineGetActivity", handle)
  if (stats == nullptr) {
    return ZeResult::kErrorInvalidNullPointer;
  }
  const uint64_t now = fake_now_us(s);
  advance(*device, now);
  stats->activeTime = static_cast<uint64_t>(device->active_us);
  stats->timestamp = now;
  return ZeResult::kSuccess;
}

}  // extern "C"
