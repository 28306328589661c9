// SPDX-License-Identifier: Apache-2.0
// A fake libamd_smi.so for tests: exports the AMD SMI functions joule uses, with behaviour read from the
// key=value file named by JOULE_FAKE_AMDSMI_CONFIG (format in README.md beside this file). Its state lives
// for the process (or until the library is unloaded) and is reset whenever amdsmi_init moves the reference
// count from 0 to 1. The energy counter integrates the configured power over real elapsed time, so the
// backend's counter check really measures something. Each GPU sits on its own socket, as on Instinct systems.
//
// The ABI it presents follows the library version in JOULE_FAKE_AMDSMI_VERSION ("MAJOR.MINOR.RELEASE",
// default 26.1.0; read at each first amdsmi_init): 24.x writes amdsmi_version_t with the year first, the
// 24.x amdsmi_power_info_t and, before 24.5.2, power caps in W; 25.x its own amdsmi_power_info_t; any other
// major version the 26.x structures.
//
// Build variant (compile definition) leaving out one symbol:
//   JOULE_FAKE_AMDSMI_OMIT_POWER_INFO    amdsmi_get_power_info (required by joule)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "device/amdsmi/amdsmi_api.hpp"
#include "fakes/fake_library.hpp"

namespace smi = joule::device::amd_smi;
using smi::Status;

// Declare every exported function from the same list and types the backend uses, so a definition below whose
// signature drifts from amdsmi_api.hpp fails to compile ("conflicting declaration of C function").
extern "C" {
#define JOULE_FAKE_DECLARE(symbol, type) \
  __attribute__((visibility("default"))) std::remove_pointer_t<smi::type> symbol;
JOULE_AMD_SMI_FUNCTIONS(JOULE_FAKE_DECLARE)
#undef JOULE_FAKE_DECLARE
}

namespace {

using joule::fake::parse_double;
using joule::fake::parse_mhz_list;
using joule::fake::w_to_uw;
using SteadyClock = std::chrono::steady_clock;
constexpr uint32_t kNotAvailable = std::numeric_limits<uint32_t>::max();

struct Device : joule::fake::PowerBoard {
  std::string name;
  std::string uuid;
  bool power_available = true;           // power_w=none: every power field is N/A
  bool instantaneous_power = true;       // false: only average_socket_power, like MI200 and older
  double energy_resolution_uj = 15.259;  // µJ per counter tick
  std::vector<uint64_t> sclk_mhz = {500, 1000, 1500};  // low to high, as AMD SMI lists DPM levels
  std::vector<uint64_t> mclk_mhz = {900, 1600};
  std::optional<int64_t> temperature_edge_c = 45;  // nullopt: NOT_SUPPORTED, like MI300
  std::optional<int64_t> temperature_hotspot_c = 60;
  uint32_t gfx_activity_pct = 87;
  uint32_t umc_activity_pct = 42;
  std::map<std::string, Status> failures;  // symbol → status it returns

  // Run-time state.
  smi::PerfLevel perf_level = smi::PerfLevel::kAuto;
  size_t sclk_current = 0;  // index of the current SM clock level (the highest until a lock)
};

// The handles given out: a socket handle points at a Socket, a processor handle at a Device.
struct Socket {
  size_t device = 0;
};

struct State {
  std::mutex mutex;
  int init_count = 0;
  std::vector<Device> devices;
  std::vector<Socket> sockets;
  std::map<std::string, Status> failures;  // applies to every device
  std::string log_path;
  uint32_t lib_version[3] = {smi::kLibMajor26, 1, 0};  // major, minor, release
};

bool caps_in_w(const State& s) {
  const uint32_t* v = s.lib_version;
  return v[0] == smi::kLibMajor24 && (v[1] < 5 || (v[1] == 5 && v[2] < 2));
}

// Reads JOULE_FAKE_AMDSMI_VERSION into `s`. @return "" or what is wrong.
std::string load_version(State& s) {
  const char* text = std::getenv("JOULE_FAKE_AMDSMI_VERSION");
  if (text == nullptr || *text == '\0') {
    return "";
  }
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  char rest = 0;
  if (std::sscanf(text, "%u.%u.%u%c", &major, &minor, &release, &rest) != 3) {
    return std::string("JOULE_FAKE_AMDSMI_VERSION='") + text + "' is not MAJOR.MINOR.RELEASE";
  }
  s.lib_version[0] = major;
  s.lib_version[1] = minor;
  s.lib_version[2] = release;
  return "";
}

State& state() {
  static State instance;
  return instance;
}

// Appends one line to the configured call log, so tests can check what the backend asked for.
void log_call(const State& s, const std::string& line) {
  joule::fake::log_line(s.log_path, line);
}

std::optional<Status> parse_status(std::string text) {
  static const std::pair<const char*, Status> kNames[] = {
      {"SUCCESS", Status::kSuccess},
      {"INVAL", Status::kInval},
      {"NOT_SUPPORTED", Status::kNotSupported},
      {"NOT_YET_IMPLEMENTED", Status::kNotYetImplemented},
      {"NO_PERM", Status::kNoPerm},
      {"IO", Status::kIo},
      {"FILE_ERROR", Status::kFileError},
      {"INPUT_OUT_OF_BOUNDS", Status::kInputOutOfBounds},
      {"INIT_ERROR", Status::kInitError},
      {"BUSY", Status::kBusy},
      {"NOT_FOUND", Status::kNotFound},
      {"NOT_INIT", Status::kNotInit},
      {"DRIVER_NOT_LOADED", Status::kDriverNotLoaded},
      {"NO_DATA", Status::kNoData},
      {"UNKNOWN_ERROR", Status::kUnknownError},
  };
  return joule::fake::parse_status(std::move(text), "AMDSMI_STATUS_", kNames);
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
  auto set_optional_int = [&](std::optional<int64_t>& field) -> std::string {
    if (value == "none") {
      field.reset();
      return "";
    }
    if (!parse_double(value, number)) {
      return "not a number (or none)";
    }
    field = static_cast<int64_t>(number);
    return "";
  };
  auto set_pct = [&](uint32_t& field) -> std::string {
    if (value == "none") {
      field = kNotAvailable;
      return "";
    }
    if (!parse_double(value, number) || number < 0) {
      return "not a percentage (or none)";
    }
    field = static_cast<uint32_t>(number);
    return "";
  };
  if (key == "name") {
    device.name = value;
    return "";
  }
  if (key == "uuid") {
    device.uuid = value;
    return "";
  }
  if (key == "power_w") {
    device.power_available = value != "none";
    return device.power_available ? set_number(device.power_w) : "";
  }
  if (key == "instantaneous_power") {
    device.instantaneous_power = value == "1" || value == "true";
    return "";
  }
  if (auto problem = device.apply_key(key, value)) {
    return *problem;
  }
  if (key == "energy_resolution_uj")
    return set_number(device.energy_resolution_uj);
  if (key == "sclk_mhz")
    return parse_mhz_list(value, device.sclk_mhz, smi::kMaxNumFrequencies);
  if (key == "mclk_mhz")
    return parse_mhz_list(value, device.mclk_mhz, smi::kMaxNumFrequencies);
  if (key == "temperature_edge_c")
    return set_optional_int(device.temperature_edge_c);
  if (key == "temperature_hotspot_c")
    return set_optional_int(device.temperature_hotspot_c);
  if (key == "gfx_activity_pct")
    return set_pct(device.gfx_activity_pct);
  if (key == "umc_activity_pct")
    return set_pct(device.umc_activity_pct);
  return joule::fake::apply_failure_key(key, value, device.failures, parse_status).value_or("unknown key");
}

// (Re)loads the configuration into `s`. @return "" or the problem, with the line number.
std::string load_config(State& s) {
  s.devices.clear();
  s.failures.clear();
  s.log_path.clear();
  s.lib_version[0] = smi::kLibMajor26;
  s.lib_version[1] = 1;
  s.lib_version[2] = 0;
  if (std::string problem = load_version(s); !problem.empty()) {
    return problem;
  }
  joule::fake::ConfigEntries entries;
  if (std::string problem = joule::fake::read_amd_config("JOULE_FAKE_AMDSMI_CONFIG", entries);
      !problem.empty()) {
    return problem;
  }
  const size_t count = joule::fake::device_count(entries);
  s.devices.resize(count);
  s.sockets.resize(count);
  for (size_t i = 0; i < count; ++i) {
    s.devices[i].name = "Fake AMD Instinct " + std::to_string(i);
    char byte[8];
    std::snprintf(byte, sizeof byte, "%02X", static_cast<unsigned>(i % 256));
    s.devices[i].uuid = std::string("A1FF74A1-0000-1000-80") + byte + "-C24D1EB30C3F";
    s.sockets[i].device = i;
  }
  std::string problem = joule::fake::apply_device_entries(
      entries, count,
      [&s](const std::string& key, const std::string& value) -> std::string {
        if (key == "log") {
          s.log_path = value;
          return "";
        }
        if (key == "lib_major") {
          s.lib_version[0] = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10));
          return "";
        }
        return joule::fake::apply_failure_key(key, value, s.failures, parse_status).value_or("unknown key");
      },
      [&s](size_t index, const std::string& key, const std::string& value) {
        return apply_device_key(s.devices[index], key, value);
      });
  if (!problem.empty()) {
    return problem;
  }
  for (auto& device : s.devices) {
    device.sclk_current = device.sclk_mhz.empty() ? 0 : device.sclk_mhz.size() - 1;
  }
  return "";
}

Status global_failure(State& s, const char* symbol) {
  if (s.init_count == 0) {
    return Status::kNotInit;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    return it->second;
  }
  return Status::kSuccess;
}

// The status a device call returns before doing anything: not initialised, a handle that is not one of ours,
// or a configured failure. Sets `device` on success.
Status precheck(State& s, const char* symbol, smi::ProcessorHandle handle, Device*& device) {
  if (s.init_count == 0) {
    return Status::kNotInit;
  }
  device = nullptr;
  for (auto& candidate : s.devices) {
    if (&candidate == handle) {
      device = &candidate;
    }
  }
  if (device == nullptr) {
    return Status::kInval;
  }
  if (const auto it = device->failures.find(symbol); it != device->failures.end()) {
    return it->second;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    return it->second;
  }
  return Status::kSuccess;
}

size_t index_of(const State& s, const Device* device) {
  return static_cast<size_t>(device - s.devices.data());
}

// Copies `values` (MHz, low to high) into an amdsmi_frequencies_t in Hz.
void fill_frequencies(const std::vector<uint64_t>& values_mhz, size_t current, smi::Frequencies* out) {
  *out = smi::Frequencies{};
  out->num_supported = static_cast<uint32_t>(values_mhz.size());
  out->current = static_cast<uint32_t>(current);
  for (size_t i = 0; i < values_mhz.size(); ++i) {
    out->frequency[i] = values_mhz[i] * 1'000'000;
  }
}

// Fills the amdsmi_power_info_t members every ABI has. Unsupported members are UINT32_MAX, as amdsmi.h
// documents.
template <class Info>
void fill_power(const Device& device, Info& info) {
  const auto watts = static_cast<uint32_t>(std::llround(device.effective_power_w()));
  info.current_socket_power = device.power_available && device.instantaneous_power ? watts : kNotAvailable;
  info.average_socket_power = device.power_available ? watts : kNotAvailable;
  info.gfx_voltage = info.soc_voltage = info.mem_voltage = kNotAvailable;
  info.power_limit = static_cast<uint32_t>(std::llround(device.power_cap_w));
}

}  // namespace

#define JOULE_FAKE_DEVICE_CALL(symbol)                                                                   \
  State& s = state();                                                                                    \
  std::lock_guard lock(s.mutex);                                                                         \
  Device* device = nullptr;                                                                              \
  if (const Status status = precheck(s, symbol, processor_handle, device); status != Status::kSuccess) { \
    return status;                                                                                       \
  }

extern "C" {

Status amdsmi_init(uint64_t init_flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const auto failed =
          joule::fake::first_init(s, "amdsmi_init", "fake libamd_smi: JOULE_FAKE_AMDSMI_CONFIG", load_config,
                                  Status::kInternalException)) {
    return *failed;
  }
  ++s.init_count;
  log_call(s, "amdsmi_init " + std::to_string(init_flags));
  return Status::kSuccess;
}

Status amdsmi_shut_down() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return Status::kNotInit;
  }
  --s.init_count;
  log_call(s, "amdsmi_shut_down");
  return Status::kSuccess;
}

Status amdsmi_status_code_to_string(Status status, const char** status_string) {
  if (status_string == nullptr) {
    return Status::kInval;
  }
  switch (status) {
    case Status::kSuccess:
      *status_string = "(fake) Success";
      break;
    case Status::kInval:
      *status_string = "(fake) Invalid parameters";
      break;
    case Status::kNotSupported:
      *status_string = "(fake) Command not supported";
      break;
    case Status::kNoPerm:
      *status_string = "(fake) Permission Denied";
      break;
    case Status::kInitError:
      *status_string = "(fake) An error occurred when initializing internal data structures";
      break;
    case Status::kBusy:
      *status_string = "(fake) Device busy";
      break;
    default:
      *status_string = "(fake) Some other failure";
      break;
  }
  return Status::kSuccess;
}

Status amdsmi_get_lib_version(smi::Version* version) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = global_failure(s, "amdsmi_get_lib_version"); status != Status::kSuccess) {
    return status;
  }
  if (version == nullptr) {
    return Status::kInval;
  }
  // 24.x: {year, major, minor, release}, so "24.6.3" is year 24, major 6, minor 3, release 0; later:
  // {major, minor, release, padding}. Either way the words come in the order the version is written.
  const uint32_t* v = s.lib_version;
  *version = smi::Version{{v[0], v[1], v[2], 0}, "fake"};
  return Status::kSuccess;
}

Status amdsmi_get_socket_handles(uint32_t* socket_count, smi::SocketHandle* socket_handles) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = global_failure(s, "amdsmi_get_socket_handles"); status != Status::kSuccess) {
    return status;
  }
  if (socket_count == nullptr) {
    return Status::kInval;
  }
  if (socket_handles != nullptr) {
    const size_t n = std::min<size_t>(*socket_count, s.sockets.size());
    for (size_t i = 0; i < n; ++i) {
      socket_handles[i] = &s.sockets[i];
    }
  }
  *socket_count = static_cast<uint32_t>(s.sockets.size());
  return Status::kSuccess;
}

Status amdsmi_get_processor_handles(smi::SocketHandle socket_handle, uint32_t* processor_count,
                                    smi::ProcessorHandle* processor_handles) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = global_failure(s, "amdsmi_get_processor_handles"); status != Status::kSuccess) {
    return status;
  }
  const Socket* socket = nullptr;
  for (const auto& candidate : s.sockets) {
    if (&candidate == socket_handle) {
      socket = &candidate;
    }
  }
  if (socket == nullptr || processor_count == nullptr) {
    return Status::kInval;
  }
  if (processor_handles != nullptr && *processor_count >= 1) {
    processor_handles[0] = &s.devices[socket->device];
  }
  *processor_count = 1;
  return Status::kSuccess;
}

Status amdsmi_get_processor_type(smi::ProcessorHandle processor_handle, smi::ProcessorType* processor_type) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_processor_type")
  if (processor_type == nullptr) {
    return Status::kInval;
  }
  *processor_type = smi::ProcessorType::kAmdGpu;
  return Status::kSuccess;
}

Status amdsmi_get_gpu_device_uuid(smi::ProcessorHandle processor_handle, unsigned int* uuid_length,
                                  char* uuid) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_gpu_device_uuid")
  if (uuid_length == nullptr || uuid == nullptr || *uuid_length < smi::kGpuUuidSize) {
    return Status::kInval;
  }
  const std::string& value = device->uuid;
  if (value.size() >= *uuid_length) {
    return Status::kInsufficientSize;
  }
  std::memcpy(uuid, value.c_str(), value.size() + 1);
  *uuid_length = static_cast<unsigned int>(value.size());
  return Status::kSuccess;
}

Status amdsmi_get_gpu_asic_info(smi::ProcessorHandle processor_handle, smi::AsicInfo* info) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_gpu_asic_info")
  if (info == nullptr) {
    return Status::kInval;
  }
  *info = smi::AsicInfo{};
  std::snprintf(info->market_name, sizeof info->market_name, "%s", device->name.c_str());
  info->vendor_id = 0x1002;
  std::snprintf(info->vendor_name, sizeof info->vendor_name, "%s", "Advanced Micro Devices Inc. [AMD/ATI]");
  info->oam_id = kNotAvailable;
  return Status::kSuccess;
}

Status amdsmi_get_energy_count(smi::ProcessorHandle processor_handle, uint64_t* energy_accumulator,
                               float* counter_resolution, uint64_t* timestamp) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_energy_count")
  if (energy_accumulator == nullptr || counter_resolution == nullptr || timestamp == nullptr) {
    return Status::kInval;
  }
  const auto now = SteadyClock::now();
  device->integrate(now);
  const auto resolution_uj = static_cast<float>(device->energy_resolution_uj);
  *energy_accumulator =
      static_cast<uint64_t>(device->energy_uj * device->energy_scale / static_cast<double>(resolution_uj));
  *counter_resolution = resolution_uj;
  *timestamp = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  return Status::kSuccess;
}

#ifndef JOULE_FAKE_AMDSMI_OMIT_POWER_INFO
Status amdsmi_get_power_info(smi::ProcessorHandle processor_handle, void* info) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_power_info")
  if (info == nullptr) {
    return Status::kInval;
  }
  if (s.lib_version[0] == smi::kLibMajor24) {
    auto* v24 = static_cast<smi::PowerInfoV24*>(info);
    *v24 = smi::PowerInfoV24{};
    fill_power(*device, *v24);
  } else if (s.lib_version[0] == smi::kLibMajor25) {
    auto* v25 = static_cast<smi::PowerInfoV25*>(info);
    *v25 = smi::PowerInfoV25{};
    fill_power(*device, *v25);
    v25->socket_power = 123'456'789;  // µW, a host's reading: a bare-metal reader must ignore it
  } else {
    auto* v26 = static_cast<smi::PowerInfoV26*>(info);
    *v26 = smi::PowerInfoV26{};
    fill_power(*device, *v26);
    const auto watts = static_cast<uint32_t>(std::llround(device->effective_power_w()));
    v26->socket_power = device->power_available ? watts : kNotAvailable;
  }
  return Status::kSuccess;
}
#endif

Status amdsmi_get_power_cap_info(smi::ProcessorHandle processor_handle, uint32_t sensor_ind,
                                 smi::PowerCapInfo* info) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_power_cap_info")
  if (info == nullptr || sensor_ind != 0) {
    return Status::kInval;
  }
  *info = smi::PowerCapInfo{};
  // µW, except in 24.x before 24.5.2, which reported whole W.
  const auto unit = [&s](double watts) {
    return caps_in_w(s) ? static_cast<uint64_t>(std::llround(watts)) : w_to_uw(watts);
  };
  info->power_cap = unit(device->power_cap_w);
  info->default_power_cap = unit(device->power_cap_default_w);
  info->dpm_cap = device->sclk_mhz.empty() ? 0 : device->sclk_mhz.back();
  info->min_power_cap = unit(device->power_cap_min_w);
  info->max_power_cap = unit(device->power_cap_max_w);
  return Status::kSuccess;
}

Status amdsmi_set_power_cap(smi::ProcessorHandle processor_handle, uint32_t sensor_ind, uint64_t cap) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_set_power_cap")
  if (sensor_ind != 0 || cap < w_to_uw(device->power_cap_min_w) || cap > w_to_uw(device->power_cap_max_w)) {
    return Status::kInval;
  }
  device->integrate(SteadyClock::now());  // energy so far at the old power, the rest at the new
  device->power_cap_w = static_cast<double>(cap) / 1e6;
  log_call(s, "amdsmi_set_power_cap " + std::to_string(index_of(s, device)) + " " + std::to_string(cap));
  return Status::kSuccess;
}

Status amdsmi_get_clk_freq(smi::ProcessorHandle processor_handle, smi::ClkType clk_type,
                           smi::Frequencies* f) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_clk_freq")
  if (f == nullptr) {
    return Status::kInval;
  }
  if (clk_type == smi::ClkType::kSys) {
    fill_frequencies(device->sclk_mhz, device->sclk_current, f);
  } else if (clk_type == smi::ClkType::kMem) {
    fill_frequencies(device->mclk_mhz, device->mclk_mhz.empty() ? 0 : device->mclk_mhz.size() - 1, f);
  } else {
    return Status::kNotSupported;
  }
  return Status::kSuccess;
}

Status amdsmi_set_gpu_clk_range(smi::ProcessorHandle processor_handle, uint64_t minclkvalue,
                                uint64_t maxclkvalue, smi::ClkType clk_type) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_set_gpu_clk_range")
  if (clk_type != smi::ClkType::kSys || minclkvalue > maxclkvalue) {
    return Status::kInval;
  }
  device->perf_level = smi::PerfLevel::kManual;
  // The current level becomes the highest one inside the range.
  for (size_t i = 0; i < device->sclk_mhz.size(); ++i) {
    if (device->sclk_mhz[i] <= maxclkvalue) {
      device->sclk_current = i;
    }
  }
  log_call(s, "amdsmi_set_gpu_clk_range " + std::to_string(index_of(s, device)) + " " +
                  std::to_string(minclkvalue) + " " + std::to_string(maxclkvalue));
  return Status::kSuccess;
}

Status amdsmi_set_gpu_perf_level(smi::ProcessorHandle processor_handle, smi::PerfLevel perf_lvl) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_set_gpu_perf_level")
  device->perf_level = perf_lvl;
  if (perf_lvl == smi::PerfLevel::kAuto && !device->sclk_mhz.empty()) {
    device->sclk_current = device->sclk_mhz.size() - 1;
  }
  log_call(s, "amdsmi_set_gpu_perf_level " + std::to_string(index_of(s, device)) + " " +
                  std::to_string(static_cast<uint32_t>(perf_lvl)));
  return Status::kSuccess;
}

Status amdsmi_get_temp_metric(smi::ProcessorHandle processor_handle, smi::TemperatureType sensor_type,
                              smi::TemperatureMetric metric, int64_t* temperature) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_temp_metric")
  if (temperature == nullptr) {
    return Status::kInval;
  }
  if (metric != smi::TemperatureMetric::kCurrent) {
    return Status::kNotSupported;
  }
  const std::optional<int64_t>& value =
      sensor_type == smi::TemperatureType::kEdge      ? device->temperature_edge_c
      : sensor_type == smi::TemperatureType::kHotspot ? device->temperature_hotspot_c
                                                      : std::nullopt;
  if (!value) {
    return Status::kNotSupported;
  }
  *temperature = *value;
  return Status::kSuccess;
}

Status amdsmi_get_gpu_activity(smi::ProcessorHandle processor_handle, smi::EngineUsage* info) {
  JOULE_FAKE_DEVICE_CALL("amdsmi_get_gpu_activity")
  if (info == nullptr) {
    return Status::kInval;
  }
  *info = smi::EngineUsage{};
  info->gfx_activity = device->gfx_activity_pct;
  info->umc_activity = device->umc_activity_pct;
  info->mm_activity = kNotAvailable;
  return Status::kSuccess;
}

}  // extern "C"
