// SPDX-License-Identifier: Apache-2.0
// A fake librocm_smi64.so.1 for tests: exports the ROCm SMI functions joule uses, with behaviour read from
// the key=value file named by JOULE_FAKE_ROCM_CONFIG (format in README.md beside this file). Its state lives
// for the process (or until the library is unloaded) and is reset whenever rsmi_init moves the reference
// count from 0 to 1. The energy counter integrates the configured power over real elapsed time, so the
// backend's counter check really measures something.
//
// Build variants (compile definitions) leave out symbols:
//   JOULE_FAKE_ROCM_OMIT_POWER_AVE      rsmi_dev_power_ave_get (required by joule)
//   JOULE_FAKE_ROCM_OMIT_CAP_DEFAULT    rsmi_dev_power_cap_default_get (optional for joule)
//   JOULE_FAKE_ROCM_OMIT_TELEMETRY      rsmi_dev_temp_metric_get, rsmi_dev_busy_percent_get and
//                                       rsmi_dev_memory_busy_percent_get (optional for joule)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "device/rocm/rocm_smi_api.hpp"
#include "fakes/fake_library.hpp"

namespace smi = joule::device::rocm_smi;
using smi::Status;

// Declare every exported function from the same list and types the backend uses, so a definition below
// whose signature drifts from rocm_smi_api.hpp fails to compile ("conflicting declaration of C function").
extern "C" {
#define JOULE_FAKE_DECLARE(symbol, type, required) \
  __attribute__((visibility("default"))) std::remove_pointer_t<smi::type> symbol;
JOULE_ROCM_SMI_FUNCTIONS(JOULE_FAKE_DECLARE)
#undef JOULE_FAKE_DECLARE
}

namespace {

using joule::fake::parse_double;
using joule::fake::parse_mhz_list;
using joule::fake::w_to_uw;
using SteadyClock = std::chrono::steady_clock;

struct Device : joule::fake::PowerBoard {
  std::string name;
  uint64_t unique_id = 0;
  double energy_resolution_uj = 15.3;                  // µJ per counter tick, like MI100/MI200
  std::vector<uint64_t> sclk_mhz = {500, 1000, 1500};  // low to high, as ROCm SMI lists DPM levels
  std::vector<uint64_t> mclk_mhz = {1200};
  std::optional<uint32_t> sclk_current;  // level index; default the highest
  std::optional<uint32_t> mclk_current;
  double temperature_c = 35;  // edge sensor (or junction, without one)
  bool edge_sensor = true;    // false: like MI300, only the junction sensor answers
  uint32_t busy_percent = 0;
  uint32_t memory_busy_percent = 0;
  std::map<std::string, Status> failures;  // symbol → status it returns

  // Run-time state.
  std::optional<std::pair<uint64_t, uint64_t>> locked_sclk_mhz;
  smi::PerfLevel perf_level = smi::PerfLevel::kAuto;
};

struct State {
  std::mutex mutex;
  int init_count = 0;
  std::vector<Device> devices;
  std::map<std::string, Status> failures;  // applies to every device
  std::string log_path;
};

State& state() {
  static State instance;
  return instance;
}

// Appends one line to the configured call log, so tests can check what the backend asked for (in µW, MHz).
void log_call(const State& s, const std::string& line) {
  joule::fake::log_line(s.log_path, line);
}

std::optional<Status> parse_status(std::string text) {
  static const std::pair<const char*, Status> kNames[] = {
      {"SUCCESS", Status::kSuccess},
      {"INVALID_ARGS", Status::kInvalidArgs},
      {"NOT_SUPPORTED", Status::kNotSupported},
      {"FILE_ERROR", Status::kFileError},
      {"PERMISSION", Status::kPermission},
      {"OUT_OF_RESOURCES", Status::kOutOfResources},
      {"INTERNAL_EXCEPTION", Status::kInternalException},
      {"INPUT_OUT_OF_BOUNDS", Status::kInputOutOfBounds},
      {"INIT_ERROR", Status::kInitError},
      {"NOT_YET_IMPLEMENTED", Status::kNotYetImplemented},
      {"NOT_FOUND", Status::kNotFound},
      {"INSUFFICIENT_SIZE", Status::kInsufficientSize},
      {"INTERRUPT", Status::kInterrupt},
      {"UNEXPECTED_SIZE", Status::kUnexpectedSize},
      {"NO_DATA", Status::kNoData},
      {"UNEXPECTED_DATA", Status::kUnexpectedData},
      {"BUSY", Status::kBusy},
      {"REFCOUNT_OVERFLOW", Status::kRefcountOverflow},
      {"UNKNOWN_ERROR", Status::kUnknownError},
  };
  return joule::fake::parse_status(std::move(text), "RSMI_STATUS_", kNames);
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
    device.name = value;
    return "";
  }
  if (key == "unique_id") {
    char* end = nullptr;
    device.unique_id = std::strtoull(value.c_str(), &end, 0);
    return (!value.empty() && *end == '\0') ? "" : "not an integer (use 0x… for hex)";
  }
  if (key == "power_w")
    return set_number(device.power_w);
  if (auto problem = device.apply_key(key, value)) {
    return *problem;
  }
  if (key == "energy_resolution_uj")
    return set_number(device.energy_resolution_uj);
  if (key == "temperature_c") {
    return set_number(device.temperature_c);
  }
  if (key == "edge_sensor") {
    device.edge_sensor = value != "0";
    return "";
  }
  auto set_count = [&](auto& field, double max) -> std::string {
    if (!parse_double(value, number) || number < 0 || number > max || number != std::floor(number)) {
      return "not a whole number from 0 to " + std::to_string(static_cast<uint64_t>(max));
    }
    field = static_cast<uint32_t>(number);
    return "";
  };
  if (key == "busy_percent") {
    return set_count(device.busy_percent, 100);
  }
  if (key == "memory_busy_percent") {
    return set_count(device.memory_busy_percent, 100);
  }
  if (key == "sclk_current") {
    return set_count(device.sclk_current, 0xFFFFFFFF);
  }
  if (key == "mclk_current") {
    return set_count(device.mclk_current, 0xFFFFFFFF);
  }
  if (key == "sclk_mhz" || key == "mclk_mhz") {
    return parse_mhz_list(value, key == "sclk_mhz" ? device.sclk_mhz : device.mclk_mhz,
                          smi::kMaxNumFrequencies);
  }
  return joule::fake::apply_failure_key(key, value, device.failures, parse_status).value_or("unknown key");
}

// (Re)loads the configuration into `s`. @return "" or the problem, with the line number.
std::string load_config(State& s) {
  s.devices.clear();
  s.failures.clear();
  s.log_path.clear();
  joule::fake::ConfigEntries entries;
  if (std::string problem = joule::fake::read_amd_config("JOULE_FAKE_ROCM_CONFIG", entries);
      !problem.empty()) {
    return problem;
  }
  const size_t count = joule::fake::device_count(entries);
  s.devices.resize(count);
  for (size_t i = 0; i < count; ++i) {
    s.devices[i].name = "Fake AMD GPU " + std::to_string(i);
    s.devices[i].unique_id = 0x1f2e3d4c5b6a7000ull + i;
  }
  return joule::fake::apply_device_entries(
      entries, count,
      [&s](const std::string& key, const std::string& value) -> std::string {
        if (key == "log") {
          s.log_path = value;
          return "";
        }
        return joule::fake::apply_failure_key(key, value, s.failures, parse_status).value_or("unknown key");
      },
      [&s](size_t index, const std::string& key, const std::string& value) {
        return apply_device_key(s.devices[index], key, value);
      });
}

// The status a call returns before doing anything: not initialised, bad index, or a configured failure.
Status precheck(State& s, const char* symbol, uint32_t dv_ind) {
  if (s.init_count == 0) {
    return Status::kInitError;
  }
  if (dv_ind >= s.devices.size()) {
    return Status::kInvalidArgs;
  }
  if (const auto it = s.devices[dv_ind].failures.find(symbol); it != s.devices[dv_ind].failures.end()) {
    return it->second;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    return it->second;
  }
  return Status::kSuccess;
}

}  // namespace

extern "C" {

Status rsmi_init(uint64_t /*init_flags*/) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const auto failed =
          joule::fake::first_init(s, "rsmi_init", "fake librocm_smi64: JOULE_FAKE_ROCM_CONFIG", load_config,
                                  Status::kInternalException)) {
    return *failed;
  }
  ++s.init_count;
  log_call(s, "rsmi_init");
  return Status::kSuccess;
}

Status rsmi_shut_down() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return Status::kInitError;
  }
  --s.init_count;
  log_call(s, "rsmi_shut_down");
  return Status::kSuccess;
}

Status rsmi_status_string(Status status, const char** status_string) {
  if (status_string == nullptr) {
    return Status::kInvalidArgs;
  }
  // Like the real library, some texts repeat the status name and some do not.
  switch (status) {
    case Status::kSuccess:
      *status_string = "RSMI_STATUS_SUCCESS: (fake) The call succeeded.";
      break;
    case Status::kInvalidArgs:
      *status_string = "RSMI_STATUS_INVALID_ARGS: (fake) Invalid arguments.";
      break;
    case Status::kNotSupported:
      *status_string = "RSMI_STATUS_NOT_SUPPORTED: (fake) Not supported here.";
      break;
    case Status::kPermission:
      *status_string = "RSMI_STATUS_PERMISSION: (fake) Permission denied.";
      break;
    case Status::kInitError:
      *status_string = "(fake) Initialisation failed";
      break;
    case Status::kBusy:
      *status_string = "(fake) Resource busy";
      break;
    default:
      *status_string = "(fake) Some other failure";
      break;
  }
  return Status::kSuccess;
}

Status rsmi_num_monitor_devices(uint32_t* num_devices) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return Status::kInitError;
  }
  if (const auto it = s.failures.find("rsmi_num_monitor_devices"); it != s.failures.end()) {
    return it->second;
  }
  if (num_devices == nullptr) {
    return Status::kInvalidArgs;
  }
  *num_devices = static_cast<uint32_t>(s.devices.size());
  return Status::kSuccess;
}

Status rsmi_dev_name_get(uint32_t dv_ind, char* name, size_t len) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_name_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (name == nullptr || len == 0) {
    return Status::kInvalidArgs;
  }
  const std::string& value = s.devices[dv_ind].name;
  if (value.size() >= len) {
    return Status::kInsufficientSize;
  }
  std::memcpy(name, value.c_str(), value.size() + 1);
  return Status::kSuccess;
}

Status rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t* id) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_unique_id_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (id == nullptr) {
    return Status::kInvalidArgs;
  }
  *id = s.devices[dv_ind].unique_id;
  return Status::kSuccess;
}

#ifndef JOULE_FAKE_ROCM_OMIT_POWER_AVE
Status rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* power_uw) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_power_ave_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (power_uw == nullptr || sensor_ind != 0) {
    return Status::kInvalidArgs;
  }
  *power_uw = w_to_uw(s.devices[dv_ind].effective_power_w());
  return Status::kSuccess;
}
#endif

Status rsmi_dev_energy_count_get(uint32_t dv_ind, uint64_t* counter, float* counter_resolution_uj,
                                 uint64_t* timestamp_ns) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_energy_count_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (counter == nullptr || counter_resolution_uj == nullptr || timestamp_ns == nullptr) {
    return Status::kInvalidArgs;
  }
  Device& device = s.devices[dv_ind];
  const auto now = SteadyClock::now();
  device.integrate(now);
  const auto resolution_uj = static_cast<float>(device.energy_resolution_uj);
  *counter =
      static_cast<uint64_t>(device.energy_uj * device.energy_scale / static_cast<double>(resolution_uj));
  *counter_resolution_uj = resolution_uj;
  *timestamp_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  return Status::kSuccess;
}

Status rsmi_dev_power_cap_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* cap_uw) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_power_cap_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (cap_uw == nullptr || sensor_ind != 0) {
    return Status::kInvalidArgs;
  }
  *cap_uw = w_to_uw(s.devices[dv_ind].power_cap_w);
  return Status::kSuccess;
}

#ifndef JOULE_FAKE_ROCM_OMIT_CAP_DEFAULT
Status rsmi_dev_power_cap_default_get(uint32_t dv_ind, uint64_t* default_cap_uw) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_power_cap_default_get", dv_ind);
      status != Status::kSuccess) {
    return status;
  }
  if (default_cap_uw == nullptr) {
    return Status::kInvalidArgs;
  }
  *default_cap_uw = w_to_uw(s.devices[dv_ind].power_cap_default_w);
  return Status::kSuccess;
}
#endif

Status rsmi_dev_power_cap_range_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t* max_uw,
                                    uint64_t* min_uw) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_power_cap_range_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (max_uw == nullptr || min_uw == nullptr || sensor_ind != 0) {
    return Status::kInvalidArgs;
  }
  *max_uw = w_to_uw(s.devices[dv_ind].power_cap_max_w);
  *min_uw = w_to_uw(s.devices[dv_ind].power_cap_min_w);
  return Status::kSuccess;
}

Status rsmi_dev_power_cap_set(uint32_t dv_ind, uint32_t sensor_ind, uint64_t cap_uw) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_power_cap_set", dv_ind); status != Status::kSuccess) {
    return status;
  }
  Device& device = s.devices[dv_ind];
  if (sensor_ind != 0 || cap_uw < w_to_uw(device.power_cap_min_w) ||
      cap_uw > w_to_uw(device.power_cap_max_w)) {
    return Status::kInvalidArgs;
  }
  device.integrate(SteadyClock::now());  // energy so far at the old power, the rest at the new
  device.power_cap_w = static_cast<double>(cap_uw) / 1e6;
  log_call(s, "rsmi_dev_power_cap_set " + std::to_string(dv_ind) + " " + std::to_string(cap_uw));
  return Status::kSuccess;
}

Status rsmi_dev_gpu_clk_freq_get(uint32_t dv_ind, smi::ClkType clk_type, smi::Frequencies* frequencies) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_gpu_clk_freq_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (frequencies == nullptr) {
    return Status::kInvalidArgs;
  }
  if (clk_type != smi::ClkType::kSys && clk_type != smi::ClkType::kMem) {
    return Status::kNotSupported;
  }
  const Device& device = s.devices[dv_ind];
  const bool sys = clk_type == smi::ClkType::kSys;
  const auto& clocks = sys ? device.sclk_mhz : device.mclk_mhz;
  const auto& current = sys ? device.sclk_current : device.mclk_current;
  *frequencies = smi::Frequencies{};
  frequencies->num_supported = static_cast<uint32_t>(clocks.size());
  frequencies->current = current.value_or(clocks.empty() ? 0 : static_cast<uint32_t>(clocks.size() - 1));
  for (size_t i = 0; i < clocks.size(); ++i) {
    frequencies->frequency[i] = clocks[i] * 1'000'000;  // the API reports Hz
  }
  return Status::kSuccess;
}

Status rsmi_dev_clk_range_set(uint32_t dv_ind, uint64_t min_clk_mhz, uint64_t max_clk_mhz,
                              smi::ClkType clk_type) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_clk_range_set", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (clk_type != smi::ClkType::kSys || min_clk_mhz > max_clk_mhz) {
    return Status::kInvalidArgs;
  }
  Device& device = s.devices[dv_ind];
  device.locked_sclk_mhz.emplace(min_clk_mhz, max_clk_mhz);
  device.perf_level = smi::PerfLevel::kManual;
  log_call(s, "rsmi_dev_clk_range_set " + std::to_string(dv_ind) + " " + std::to_string(min_clk_mhz) + " " +
                  std::to_string(max_clk_mhz));
  return Status::kSuccess;
}

Status rsmi_dev_perf_level_set_v1(uint32_t dv_ind, smi::PerfLevel perf_level) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_perf_level_set_v1", dv_ind); status != Status::kSuccess) {
    return status;
  }
  Device& device = s.devices[dv_ind];
  device.perf_level = perf_level;
  if (perf_level == smi::PerfLevel::kAuto) {
    device.locked_sclk_mhz.reset();
  }
  log_call(s, "rsmi_dev_perf_level_set_v1 " + std::to_string(dv_ind) + " " +
                  std::to_string(static_cast<uint32_t>(perf_level)));
  return Status::kSuccess;
}

#ifndef JOULE_FAKE_ROCM_OMIT_TELEMETRY
Status rsmi_dev_temp_metric_get(uint32_t dv_ind, uint32_t sensor_type, smi::TempMetric metric,
                                int64_t* temperature) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_temp_metric_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (temperature == nullptr) {
    return Status::kInvalidArgs;
  }
  const bool edge = sensor_type == smi::kTempTypeEdge && s.devices[dv_ind].edge_sensor;
  const bool junction = sensor_type == smi::kTempTypeJunction && !s.devices[dv_ind].edge_sensor;
  if (!(edge || junction) || metric != smi::TempMetric::kCurrent) {
    return Status::kNotSupported;
  }
  *temperature = std::llround(s.devices[dv_ind].temperature_c * 1e3);  // millidegrees Celsius
  return Status::kSuccess;
}

Status rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t* busy_percent) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_busy_percent_get", dv_ind); status != Status::kSuccess) {
    return status;
  }
  if (busy_percent == nullptr) {
    return Status::kInvalidArgs;
  }
  *busy_percent = s.devices[dv_ind].busy_percent;
  return Status::kSuccess;
}

Status rsmi_dev_memory_busy_percent_get(uint32_t dv_ind, uint32_t* busy_percent) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const Status status = precheck(s, "rsmi_dev_memory_busy_percent_get", dv_ind);
      status != Status::kSuccess) {
    return status;
  }
  if (busy_percent == nullptr) {
    return Status::kInvalidArgs;
  }
  *busy_percent = s.devices[dv_ind].memory_busy_percent;
  return Status::kSuccess;
}
#endif

}  // extern "C"
