// SPDX-License-Identifier: Apache-2.0
// A fake libnvidia-ml.so.1: exports the NVML functions joule resolves, with behaviour scripted by the file
// named in JOULE_FAKE_NVML_CONFIG (format in README.md). State lives for one NVML session: the first
// nvmlInit_v2 (re)reads the file, later calls see and change that state until the last nvmlShutdown.
//
// Build-time switches drop symbols, to test how joule copes with old drivers:
//   FAKE_NVML_OMIT_INIT, FAKE_NVML_OMIT_ENERGY, FAKE_NVML_OMIT_ARCHITECTURE, FAKE_NVML_OMIT_FIELD_VALUES,
//   FAKE_NVML_OMIT_CLOCKS_EVENT_REASONS (only the new name; the old ...ThrottleReasons stays),
//   FAKE_NVML_OMIT_TELEMETRY (temperature, clock info, utilisation and both clocks-event-reason names),
//   FAKE_NVML_OMIT_MIG (every MIG call), FAKE_NVML_OMIT_PROCESSES (the per-process calls).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "device/nvml/nvml_api.hpp"
#include "fakes/fake_library.hpp"

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

using namespace joule::device::nvml;  // NOLINT(google-build-using-namespace): this file stands in for nvml.h

// The device handle NVML keeps opaque is, here, the scripted GPU itself.
struct joule::device::nvml::nvmlDevice_st {
  unsigned int index = 0;
  std::string name;
  std::string uuid;
  nvmlDeviceArchitecture_t architecture = NVML_DEVICE_ARCH_VOLTA;
  unsigned int power_mw = 100000;
  std::optional<unsigned int> power_instant_mw;  ///< defaults to power_mw
  unsigned long long energy_start_mj = 0;
  std::optional<unsigned long long> energy_step_mj;  ///< defaults to power_mw / 10 (100 ms at power_mw)
  unsigned long long energy_reads = 0;
  unsigned int min_power_limit_mw = 100000;
  unsigned int max_power_limit_mw = 300000;
  unsigned int default_power_limit_mw = 300000;
  std::optional<unsigned int> power_limit_mw;  ///< defaults to default_power_limit_mw
  std::vector<unsigned int> memory_clocks_mhz = {877};
  std::vector<unsigned int> graphics_clocks_mhz = {1530, 1455, 1380, 1305, 1230, 1155, 1080, 1005};
  std::map<unsigned int, std::vector<unsigned int>> graphics_clocks_by_memory_mhz;
  unsigned int locked_min_mhz = 0;  ///< 0 while no lock is set
  unsigned int locked_max_mhz = 0;
  unsigned int locked_memory_min_mhz = 0;  ///< 0 while no memory clock lock is set
  unsigned int locked_memory_max_mhz = 0;
  unsigned int temperature_c = 45;
  unsigned int sm_clock_mhz = 1530;  ///< held within the SM clock lock while one is set
  unsigned int memory_clock_mhz = 877;
  unsigned int gpu_utilization_pct = 0;
  unsigned int memory_utilization_pct = 0;
  unsigned long long clocks_event_reasons = 0;
  // Grace Hopper / Blackwell module scope (fields 186 and 191 with NVML_POWER_SCOPE_MODULE); unset: the
  // fields answer NVML_ERROR_NOT_SUPPORTED, as on every other GPU.
  std::optional<unsigned int> module_power_mw;
  unsigned long long module_energy_start_mj = 0;
  std::optional<unsigned long long> module_energy_step_mj;  ///< defaults to module_power_mw / 10
  unsigned long long module_energy_reads = 0;
  // MIG: a GPU in MIG mode owns its instances, each a device of its own whose `parent` is set.
  bool mig_mode = false;
  unsigned int mig_slots = 7;
  std::vector<std::unique_ptr<nvmlDevice_st>> migs;  ///< slot k is migs[k]
  nvmlDevice_st* parent = nullptr;                   ///< set for a MIG instance
  bool destroyed = false;                            ///< a MIG instance destroyed (test export)
  unsigned int gpu_instance_id = 0;
  unsigned int compute_instance_id = 0;
  unsigned int compute_slices = 1;
  unsigned int gpu_slices = 1;
  unsigned int sm_count = 14;
  // Per-process accounting: samples (pid, µs, SM %) and the running compute processes.
  std::vector<nvmlProcessUtilizationSample_t> process_samples;
  std::vector<unsigned int> running_processes;
  std::map<std::string, nvmlReturn_t> statuses;  ///< per-call results scripted for this GPU
};

namespace {

using Gpu = nvmlDevice_st;

// Calls whose result can be scripted, globally ("get_energy=…") or per GPU ("gpu0.get_energy=…").
constexpr std::string_view kStatusKeys[] = {"init",
                                            "get_count",
                                            "get_handle",
                                            "get_name",
                                            "get_uuid",
                                            "get_architecture",
                                            "get_energy",
                                            "get_power",
                                            "get_power_instant",
                                            "get_constraints",
                                            "get_default_limit",
                                            "get_power_limit",
                                            "set_power_limit",
                                            "get_memory_clocks",
                                            "get_graphics_clocks",
                                            "lock_clocks",
                                            "reset_clocks",
                                            "get_temperature",
                                            "get_sm_clock",
                                            "get_memory_clock",
                                            "get_utilization",
                                            "get_clocks_event_reasons",
                                            "get_module_power",
                                            "get_module_energy",
                                            "get_mig_mode",
                                            "get_max_mig_count",
                                            "get_mig_handle",
                                            "get_instance_id",
                                            "get_attributes",
                                            "get_process_utilization",
                                            "get_running_processes"};

bool is_status_key(std::string_view key) {
  return std::find(std::begin(kStatusKeys), std::end(kStatusKeys), key) != std::end(kStatusKeys);
}

// Calls only the library as a whole makes.
bool is_global_only(std::string_view key) {
  return key == "init" || key == "get_count";
}

struct State {
  std::mutex mutex;
  int init_count = 0;
  std::map<std::string, nvmlReturn_t> statuses;
  std::vector<std::unique_ptr<Gpu>> gpus;
};

State& state() {
  static State instance;
  return instance;
}

const nvmlReturn_t kAllReturns[] = {
    NVML_SUCCESS,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_ALREADY_INITIALIZED,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INSUFFICIENT_POWER,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_IRQ_ISSUE,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_CORRUPTED_INFOROM,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_RESET_REQUIRED,
    NVML_ERROR_OPERATING_SYSTEM,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_IN_USE,
    NVML_ERROR_MEMORY,
    NVML_ERROR_NO_DATA,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_FREQ_NOT_SUPPORTED,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_DEPRECATED,
    NVML_ERROR_NOT_READY,
    NVML_ERROR_GPU_NOT_FOUND,
    NVML_ERROR_INVALID_STATE,
    NVML_ERROR_UNKNOWN,
};

// "ok" or the lower-case suffix of an NVML_ERROR_ name ("no_permission").
std::optional<nvmlReturn_t> parse_status(const std::string& text) {
  if (text == "ok" || text == "success") {
    return NVML_SUCCESS;
  }
  std::string upper = "NVML_ERROR_";
  for (const char c : text) {
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  for (const nvmlReturn_t code : kAllReturns) {
    if (return_code_name(code) == upper) {
      return code;
    }
  }
  return std::nullopt;
}

std::optional<nvmlDeviceArchitecture_t> parse_architecture(const std::string& text) {
  static const std::map<std::string, nvmlDeviceArchitecture_t> names = {
      {"kepler", NVML_DEVICE_ARCH_KEPLER},  {"maxwell", NVML_DEVICE_ARCH_MAXWELL},
      {"pascal", NVML_DEVICE_ARCH_PASCAL},  {"volta", NVML_DEVICE_ARCH_VOLTA},
      {"turing", NVML_DEVICE_ARCH_TURING},  {"ampere", NVML_DEVICE_ARCH_AMPERE},
      {"ada", NVML_DEVICE_ARCH_ADA},        {"hopper", NVML_DEVICE_ARCH_HOPPER},
      {"unknown", NVML_DEVICE_ARCH_UNKNOWN}};
  const auto found = names.find(text);
  if (found == names.end()) {
    return std::nullopt;
  }
  return found->second;
}

std::optional<unsigned long long> parse_number(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

std::optional<unsigned int> parse_uint(const std::string& text) {
  const auto value = parse_number(text);
  if (!value || *value > 0xffffffffull) {
    return std::nullopt;
  }
  return static_cast<unsigned int>(*value);
}

// A bit mask, decimal or 0x-prefixed hex.
std::optional<unsigned long long> parse_mask(const std::string& text) {
  if (text.rfind("0x", 0) != 0) {
    return parse_number(text);
  }
  const std::string digits = text.substr(2);
  if (digits.empty() || digits.size() > 16 ||
      digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(digits, nullptr, 16);
}

std::optional<std::vector<unsigned int>> parse_list(const std::string& text) {
  std::vector<unsigned int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const auto value = parse_uint(item);
    if (!value) {
      return std::nullopt;
    }
    values.push_back(*value);
  }
  return values;
}

// "pid@time_us:sm_pct,…": per-process utilisation samples.
std::optional<std::vector<nvmlProcessUtilizationSample_t>> parse_samples(const std::string& text) {
  std::vector<nvmlProcessUtilizationSample_t> samples;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const size_t at = item.find('@');
    const size_t colon = item.find(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at) {
      return std::nullopt;
    }
    const auto pid = parse_uint(item.substr(0, at));
    const auto time_us = parse_number(item.substr(at + 1, colon - at - 1));
    const auto sm = parse_uint(item.substr(colon + 1));
    if (!pid || !time_us || !sm) {
      return std::nullopt;
    }
    nvmlProcessUtilizationSample_t sample{};
    sample.pid = *pid;
    sample.timeStamp = *time_us;
    sample.smUtil = *sm;
    samples.push_back(sample);
  }
  return samples;
}

std::optional<bool> parse_bool(const std::string& text) {
  if (text == "1" || text == "true") {
    return true;
  }
  if (text == "0" || text == "false") {
    return false;
  }
  return std::nullopt;
}

// MIG instance `slot` of `parent`, before the script's settings.
Gpu make_default_mig(Gpu& parent, unsigned int slot) {
  Gpu mig;
  mig.index = slot;
  mig.parent = &parent;
  mig.name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb";
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "MIG-fa4e%04x-0000-4000-8000-%012x", parent.index, slot);
  mig.uuid = uuid;
  mig.gpu_instance_id = slot + 1;
  return mig;
}

template <class Field, class Parsed>
bool assign(Field& field, const std::optional<Parsed>& parsed) {
  if (!parsed) {
    return false;
  }
  field = *parsed;
  return true;
}

// Applies one per-GPU setting. @return false if the key is unknown or the value malformed.
bool set_gpu_value(Gpu& gpu, const std::string& key, const std::string& value) {
  if (is_status_key(key) && !is_global_only(key)) {
    const auto status = parse_status(value);
    gpu.statuses[key] = status.value_or(NVML_ERROR_UNKNOWN);
    return status.has_value();
  }
  // Per-GPU values ("gpuN.<key>=<value>"), each with its parser.
  using Setter = bool (*)(Gpu&, const std::string&);
  static const std::map<std::string, Setter> setters = {
      {"name", [](Gpu& out, const std::string& text) { return assign(out.name, std::optional(text)); }},
      {"uuid", [](Gpu& out, const std::string& text) { return assign(out.uuid, std::optional(text)); }},
      {"architecture",
       [](Gpu& out, const std::string& text) { return assign(out.architecture, parse_architecture(text)); }},
      {"power_mw", [](Gpu& out, const std::string& text) { return assign(out.power_mw, parse_uint(text)); }},
      {"power_instant_mw",
       [](Gpu& out, const std::string& text) { return assign(out.power_instant_mw, parse_uint(text)); }},
      {"energy_start_mj",
       [](Gpu& out, const std::string& text) { return assign(out.energy_start_mj, parse_number(text)); }},
      {"energy_step_mj",
       [](Gpu& out, const std::string& text) { return assign(out.energy_step_mj, parse_number(text)); }},
      {"min_power_limit_mw",
       [](Gpu& out, const std::string& text) { return assign(out.min_power_limit_mw, parse_uint(text)); }},
      {"max_power_limit_mw",
       [](Gpu& out, const std::string& text) { return assign(out.max_power_limit_mw, parse_uint(text)); }},
      {"default_power_limit_mw",
       [](Gpu& out, const std::string& text) {
         return assign(out.default_power_limit_mw, parse_uint(text));
       }},
      {"power_limit_mw",
       [](Gpu& out, const std::string& text) { return assign(out.power_limit_mw, parse_uint(text)); }},
      {"memory_clocks_mhz",
       [](Gpu& out, const std::string& text) { return assign(out.memory_clocks_mhz, parse_list(text)); }},
      {"graphics_clocks_mhz",
       [](Gpu& out, const std::string& text) { return assign(out.graphics_clocks_mhz, parse_list(text)); }},
      {"temperature_c",
       [](Gpu& out, const std::string& text) { return assign(out.temperature_c, parse_uint(text)); }},
      {"sm_clock_mhz",
       [](Gpu& out, const std::string& text) { return assign(out.sm_clock_mhz, parse_uint(text)); }},
      {"memory_clock_mhz",
       [](Gpu& out, const std::string& text) { return assign(out.memory_clock_mhz, parse_uint(text)); }},
      {"gpu_utilization_pct",
       [](Gpu& out, const std::string& text) { return assign(out.gpu_utilization_pct, parse_uint(text)); }},
      {"memory_utilization_pct",
       [](Gpu& out, const std::string& text) {
         return assign(out.memory_utilization_pct, parse_uint(text));
       }},
      {"clocks_event_reasons",
       [](Gpu& out, const std::string& text) { return assign(out.clocks_event_reasons, parse_mask(text)); }},
      {"module_power_mw",
       [](Gpu& out, const std::string& text) { return assign(out.module_power_mw, parse_uint(text)); }},
      {"module_energy_start_mj",
       [](Gpu& out, const std::string& text) {
         return assign(out.module_energy_start_mj, parse_number(text));
       }},
      {"module_energy_step_mj",
       [](Gpu& out, const std::string& text) {
         return assign(out.module_energy_step_mj, parse_number(text));
       }},
      {"mig_mode", [](Gpu& out, const std::string& text) { return assign(out.mig_mode, parse_bool(text)); }},
      {"mig_slots",
       [](Gpu& out, const std::string& text) { return assign(out.mig_slots, parse_uint(text)); }},
      {"gpu_instance_id",
       [](Gpu& out, const std::string& text) { return assign(out.gpu_instance_id, parse_uint(text)); }},
      {"compute_instance_id",
       [](Gpu& out, const std::string& text) { return assign(out.compute_instance_id, parse_uint(text)); }},
      {"compute_slices",
       [](Gpu& out, const std::string& text) { return assign(out.compute_slices, parse_uint(text)); }},
      {"gpu_slices",
       [](Gpu& out, const std::string& text) { return assign(out.gpu_slices, parse_uint(text)); }},
      {"sm_count", [](Gpu& out, const std::string& text) { return assign(out.sm_count, parse_uint(text)); }},
      {"process_samples",
       [](Gpu& out, const std::string& text) { return assign(out.process_samples, parse_samples(text)); }},
      {"running_processes",
       [](Gpu& out, const std::string& text) { return assign(out.running_processes, parse_list(text)); }},
  };
  if (const auto setter = setters.find(key); setter != setters.end()) {
    return setter->second(gpu, value);
  }
  // "migK.<key>": MIG instance K (slot K) of this GPU, created on first mention.
  if (key.rfind("mig", 0) == 0 && key.find('.') != std::string::npos && gpu.parent == nullptr) {
    const auto slot = parse_uint(key.substr(3, key.find('.') - 3));
    if (!slot || *slot >= 64) {
      return false;
    }
    while (gpu.migs.size() <= *slot) {
      gpu.migs.push_back(
          std::make_unique<Gpu>(make_default_mig(gpu, static_cast<unsigned int>(gpu.migs.size()))));
    }
    return set_gpu_value(*gpu.migs[*slot], key.substr(key.find('.') + 1), value);
  }
  // "graphics_clocks_mhz.<memory MHz>": the SM clocks offered at that memory clock.
  const std::string by_memory = "graphics_clocks_mhz.";
  if (key.rfind(by_memory, 0) == 0) {
    const auto memory_mhz = parse_uint(key.substr(by_memory.size()));
    return memory_mhz && assign(gpu.graphics_clocks_by_memory_mhz[*memory_mhz], parse_list(value));
  }
  return false;
}

Gpu make_default_gpu(unsigned int index) {
  Gpu gpu;
  gpu.index = index;
  gpu.name = "Tesla V100-SXM2-32GB";
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012x", index);
  gpu.uuid = uuid;
  return gpu;
}

// Reads the configuration into `out`. Problems go to stderr, since the fake has no other channel. (Unused in
// the build without nvmlInit_v2.)
[[maybe_unused]] bool load_config(State& out) {
  out.statuses.clear();
  out.gpus.clear();
  const joule::fake::ConfigFile config = joule::fake::read_config_file("JOULE_FAKE_NVML_CONFIG");
  if (!config.readable) {
    std::fprintf(stderr, "fake libnvidia-ml.so.1: cannot read JOULE_FAKE_NVML_CONFIG=%s\n", config.path);
    return false;
  }
  if (config.bad_line != 0) {
    std::fprintf(stderr, "fake libnvidia-ml.so.1: %s:%d: expected key=value\n", config.path, config.bad_line);
    return false;
  }
  const auto& entries = config.entries;
  // The GPU count is "gpus=N", else one more than the highest gpuN mentioned, else 1.
  std::optional<unsigned int> count;
  unsigned int mentioned = 1;
  for (const auto& [key, value] : entries) {
    if (key == "gpus") {
      count = parse_uint(value);
      if (!count) {
        std::fprintf(stderr, "fake libnvidia-ml.so.1: gpus=%s is not a count\n", value.c_str());
        return false;
      }
    } else if (key.rfind("gpu", 0) == 0) {
      const auto index = parse_uint(key.substr(3, key.find('.') - 3));
      if (index && *index + 1 > mentioned) {
        mentioned = *index + 1;
      }
    }
  }
  for (unsigned int i = 0; i < count.value_or(mentioned); ++i) {
    out.gpus.push_back(std::make_unique<Gpu>(make_default_gpu(i)));
  }
  for (const auto& [key, value] : entries) {
    bool ok = false;
    if (key == "gpus") {
      ok = true;
    } else if (is_status_key(key)) {
      const auto status = parse_status(value);
      ok = status.has_value();
      out.statuses[key] = status.value_or(NVML_ERROR_UNKNOWN);
    } else if (key.rfind("gpu", 0) == 0 && key.find('.') != std::string::npos) {
      const auto index = parse_uint(key.substr(3, key.find('.') - 3));
      ok = index && *index < out.gpus.size() &&
           set_gpu_value(*out.gpus[*index], key.substr(key.find('.') + 1), value);
    }
    if (!ok) {
      std::fprintf(stderr, "fake libnvidia-ml.so.1: %s: bad setting '%s=%s'\n", config.path, key.c_str(),
                   value.c_str());
      return false;
    }
  }
  return true;
}

// The scripted result of `call` on `gpu` (per-GPU first, then global), NVML_SUCCESS if none.
nvmlReturn_t scripted(const State& s, const Gpu* gpu, const char* call) {
  if (gpu != nullptr) {
    if (const auto found = gpu->statuses.find(call); found != gpu->statuses.end()) {
      return found->second;
    }
  }
  if (const auto found = s.statuses.find(call); found != s.statuses.end()) {
    return found->second;
  }
  return NVML_SUCCESS;
}

// A handle of this session: a GPU, or a MIG instance not destroyed.
bool valid(const State& s, nvmlDevice_t device) {
  for (const auto& gpu : s.gpus) {
    if (gpu.get() == device) {
      return true;
    }
    for (const auto& mig : gpu->migs) {
      if (mig.get() == device) {
        return !mig->destroyed;
      }
    }
  }
  return false;
}

// Common checks of every device call: initialized, a handle from this session, and the scripted result.
nvmlReturn_t enter(const State& s, nvmlDevice_t device, const char* call) {
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (!valid(s, device)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return scripted(s, device, call);
}

nvmlReturn_t copy_string(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (text.size() + 1 > length) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

// NVML's list convention: *count is the capacity in and the length out.
nvmlReturn_t copy_list(const std::vector<unsigned int>& values, unsigned int* count, unsigned int* out) {
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const auto size = static_cast<unsigned int>(values.size());
  if (*count < size) {
    *count = size;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (out == nullptr && size > 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::copy(values.begin(), values.end(), out);
  *count = size;
  return NVML_SUCCESS;
}

// Both names of the clocks-event-reasons call (unused when the build omits both).
[[maybe_unused]] nvmlReturn_t read_clocks_event_reasons(nvmlDevice_t device, unsigned long long* reasons) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_clocks_event_reasons"); status != NVML_SUCCESS) {
    return status;
  }
  if (reasons == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *reasons = device->clocks_event_reasons;
  return NVML_SUCCESS;
}

}  // namespace

// NVML's names, not ours.
// NOLINTBEGIN(readability-identifier-naming)

#ifndef FAKE_NVML_OMIT_INIT
FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0 && !load_config(s)) {
    return NVML_ERROR_UNKNOWN;
  }
  if (const nvmlReturn_t status = scripted(s, nullptr, "init"); status != NVML_SUCCESS) {
    return status;
  }
  ++s.init_count;
  return NVML_SUCCESS;
}
#endif

FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  --s.init_count;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_DEPRECATED:
      return "(fake) Deprecated";
    default:
      return "Unknown Error";
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* device_count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (device_count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (const nvmlReturn_t status = scripted(s, nullptr, "get_count"); status != NVML_SUCCESS) {
    return status;
  }
  *device_count = static_cast<unsigned int>(s.gpus.size());
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (device == nullptr || index >= s.gpus.size()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  Gpu* gpu = s.gpus[index].get();
  if (const nvmlReturn_t status = scripted(s, gpu, "get_handle"); status != NVML_SUCCESS) {
    return status;
  }
  *device = gpu;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_name"); status != NVML_SUCCESS) {
    return status;
  }
  return copy_string(device->name, name, length);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_uuid"); status != NVML_SUCCESS) {
    return status;
  }
  return copy_string(device->uuid, uuid, length);
}

#ifndef FAKE_NVML_OMIT_ARCHITECTURE
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_architecture"); status != NVML_SUCCESS) {
    return status;
  }
  if (arch == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *arch = device->architecture;
  return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_ENERGY
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                  unsigned long long* energy) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (!valid(s, device) || energy == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  // Like the real driver, GPUs before Volta have no counter unless the script says otherwise.
  nvmlReturn_t status = scripted(s, device, "get_energy");
  if (device->statuses.count("get_energy") == 0 && s.statuses.count("get_energy") == 0 &&
      device->architecture < NVML_DEVICE_ARCH_VOLTA) {
    status = NVML_ERROR_NOT_SUPPORTED;
  }
  if (status != NVML_SUCCESS) {
    return status;
  }
  // Read k (from 0) returns energy_start_mj + k × energy_step_mj.
  *energy =
      device->energy_start_mj + device->energy_reads * device->energy_step_mj.value_or(device->power_mw / 10);
  ++device->energy_reads;
  return NVML_SUCCESS;
}
#endif

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_power"); status != NVML_SUCCESS) {
    return status;
  }
  if (power == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *power = device->power_mw;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_FIELD_VALUES
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int values_count,
                                                       nvmlFieldValue_t* values) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (!valid(s, device) || values_count < 0 || (values == nullptr && values_count > 0)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  // As in NVML, the call succeeds and each field carries its own result.
  for (int i = 0; i < values_count; ++i) {
    nvmlFieldValue_t& field = values[i];
    field.timestamp = 0;
    field.latencyUsec = 0;
    if (field.scopeId == NVML_POWER_SCOPE_MODULE &&
        (field.fieldId == NVML_FI_DEV_POWER_INSTANT || field.fieldId == NVML_FI_DEV_ENERGY)) {
      // Module scope: only on a scripted Grace Hopper / Blackwell module.
      const bool power = field.fieldId == NVML_FI_DEV_POWER_INSTANT;
      field.nvmlReturn = !device->module_power_mw.has_value()
                             ? NVML_ERROR_NOT_SUPPORTED
                             : scripted(s, device, power ? "get_module_power" : "get_module_energy");
      if (field.nvmlReturn != NVML_SUCCESS) {
        continue;
      }
      if (power) {
        field.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        field.value.uiVal = *device->module_power_mw;
      } else {
        field.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        field.value.ullVal = device->module_energy_start_mj +
                             device->module_energy_reads *
                                 device->module_energy_step_mj.value_or(*device->module_power_mw / 10);
        ++device->module_energy_reads;
      }
      continue;
    }
    if (field.fieldId != NVML_FI_DEV_POWER_INSTANT || field.scopeId != NVML_POWER_SCOPE_GPU) {
      field.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    field.nvmlReturn = scripted(s, device, "get_power_instant");
    if (field.nvmlReturn == NVML_SUCCESS) {
      field.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
      field.value.uiVal = device->power_instant_mw.value_or(device->power_mw);
    }
  }
  return NVML_SUCCESS;
}
#endif

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                           unsigned int* min_limit,
                                                                           unsigned int* max_limit) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_constraints"); status != NVML_SUCCESS) {
    return status;
  }
  if (min_limit == nullptr || max_limit == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *min_limit = device->min_power_limit_mw;
  *max_limit = device->max_power_limit_mw;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                                       unsigned int* default_limit) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_default_limit"); status != NVML_SUCCESS) {
    return status;
  }
  if (default_limit == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *default_limit = device->default_power_limit_mw;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_power_limit"); status != NVML_SUCCESS) {
    return status;
  }
  if (limit == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *limit = device->power_limit_mw.value_or(device->default_power_limit_mw);
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "set_power_limit"); status != NVML_SUCCESS) {
    return status;
  }
  if (limit < device->min_power_limit_mw || limit > device->max_power_limit_mw) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  device->power_limit_mw = limit;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int* count,
                                                                 unsigned int* clocks_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_memory_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  return copy_list(device->memory_clocks_mhz, count, clocks_mhz);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device,
                                                                   unsigned int memory_clock_mhz,
                                                                   unsigned int* count,
                                                                   unsigned int* clocks_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_graphics_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  const auto& memory = device->memory_clocks_mhz;
  if (std::find(memory.begin(), memory.end(), memory_clock_mhz) == memory.end()) {
    return NVML_ERROR_NOT_FOUND;
  }
  const auto specific = device->graphics_clocks_by_memory_mhz.find(memory_clock_mhz);
  return copy_list(specific != device->graphics_clocks_by_memory_mhz.end() ? specific->second
                                                                           : device->graphics_clocks_mhz,
                   count, clocks_mhz);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int min_clock_mhz,
                                                           unsigned int max_clock_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "lock_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  if (min_clock_mhz > max_clock_mhz) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  device->locked_min_mhz = min_clock_mhz;
  device->locked_max_mhz = max_clock_mhz;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "reset_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  device->locked_min_mhz = 0;
  device->locked_max_mhz = 0;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_MEMORY_LOCKS
// As the driver: the range must hold a supported memory clock.
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned int min_clock_mhz,
                                                              unsigned int max_clock_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "lock_memory_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  const auto& memory = device->memory_clocks_mhz;
  if (min_clock_mhz > max_clock_mhz || std::none_of(memory.begin(), memory.end(), [&](unsigned int mhz) {
        return mhz >= min_clock_mhz && mhz <= max_clock_mhz;
      })) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  device->locked_memory_min_mhz = min_clock_mhz;
  device->locked_memory_max_mhz = max_clock_mhz;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "reset_memory_clocks"); status != NVML_SUCCESS) {
    return status;
  }
  device->locked_memory_min_mhz = 0;
  device->locked_memory_max_mhz = 0;
  return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_TELEMETRY
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                       unsigned int* temp) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_temperature"); status != NVML_SUCCESS) {
    return status;
  }
  if (temp == nullptr || sensor != NVML_TEMPERATURE_GPU) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *temp = device->temperature_c;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                     unsigned int* clock) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (clock == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      if (const nvmlReturn_t status = enter(s, device, "get_sm_clock"); status != NVML_SUCCESS) {
        return status;
      }
      *clock = device->locked_max_mhz == 0
                   ? device->sm_clock_mhz
                   : std::clamp(device->sm_clock_mhz, device->locked_min_mhz, device->locked_max_mhz);
      return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
      if (const nvmlReturn_t status = enter(s, device, "get_memory_clock"); status != NVML_SUCCESS) {
        return status;
      }
      // A lock holds the clock at the highest supported one inside it, as the driver does.
      *clock = device->memory_clock_mhz;
      if (device->locked_memory_max_mhz != 0) {
        unsigned int highest = 0;
        for (const unsigned int mhz : device->memory_clocks_mhz) {
          if (mhz >= device->locked_memory_min_mhz && mhz <= device->locked_memory_max_mhz) {
            highest = std::max(highest, mhz);
          }
        }
        *clock = highest;
      }
      return NVML_SUCCESS;
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                            nvmlUtilization_t* utilization) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_utilization"); status != NVML_SUCCESS) {
    return status;
  }
  if (utilization == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  utilization->gpu = device->gpu_utilization_pct;
  utilization->memory = device->memory_utilization_pct;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_CLOCKS_EVENT_REASONS
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                     unsigned long long* reasons) {
  return read_clocks_event_reasons(device, reasons);
}
#endif

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                        unsigned long long* reasons) {
  return read_clocks_event_reasons(device, reasons);
}
#endif

#ifndef FAKE_NVML_OMIT_PROCESSES
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                              nvmlProcessUtilizationSample_t* utilization,
                                                              unsigned int* count,
                                                              unsigned long long last_seen_time_stamp) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_process_utilization"); status != NVML_SUCCESS) {
    return status;
  }
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::vector<nvmlProcessUtilizationSample_t> newer;
  for (const auto& sample : device->process_samples) {
    if (sample.timeStamp > last_seen_time_stamp) {
      newer.push_back(sample);
    }
  }
  if (newer.empty()) {
    return NVML_ERROR_NOT_FOUND;  // as NVML: no sample newer than the timestamp
  }
  if (utilization == nullptr || *count < newer.size()) {
    *count = static_cast<unsigned int>(newer.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(newer.begin(), newer.end(), utilization);
  *count = static_cast<unsigned int>(newer.size());
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                      unsigned int* count,
                                                                      nvmlProcessInfo_t* infos) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_running_processes"); status != NVML_SUCCESS) {
    return status;
  }
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const auto size = static_cast<unsigned int>(device->running_processes.size());
  if (*count < size || (infos == nullptr && size > 0)) {
    *count = size;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < size; ++i) {
    infos[i] = nvmlProcessInfo_t{device->running_processes[i], 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
  }
  *count = size;
  return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_MIG
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current_mode,
                                                   unsigned int* pending_mode) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_mig_mode"); status != NVML_SUCCESS) {
    return status;
  }
  if (current_mode == nullptr || pending_mode == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (device->parent != nullptr) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *current_mode = device->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  *pending_mode = *current_mode;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_max_mig_count"); status != NVML_SUCCESS) {
    return status;
  }
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *count = device->mig_mode ? device->mig_slots : 0;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                                  nvmlDevice_t* mig_device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_mig_handle"); status != NVML_SUCCESS) {
    return status;
  }
  if (mig_device == nullptr || !device->mig_mode || index >= device->mig_slots) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (index >= device->migs.size() || device->migs[index]->destroyed) {
    return NVML_ERROR_NOT_FOUND;
  }
  *mig_device = device->migs[index].get();
  return NVML_SUCCESS;
}

namespace {

// A field only a MIG instance's handle has (its parent, its ids): one lock, one failure point, one check.
template <typename Out, typename Read>
nvmlReturn_t read_mig_field(nvmlDevice_t mig_device, Out* out, Read read) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, mig_device, "get_instance_id"); status != NVML_SUCCESS) {
    return status;
  }
  if (out == nullptr || mig_device->parent == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *out = read(mig_device);
  return NVML_SUCCESS;
}

}  // namespace

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                                           nvmlDevice_t* device) {
  return read_mig_field(mig_device, device, [](nvmlDevice_t mig) { return mig->parent; });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return read_mig_field(device, id, [](nvmlDevice_t mig) { return mig->gpu_instance_id; });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return read_mig_field(device, id, [](nvmlDevice_t mig) { return mig->compute_instance_id; });
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                         nvmlDeviceAttributes_t* attributes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (const nvmlReturn_t status = enter(s, device, "get_attributes"); status != NVML_SUCCESS) {
    return status;
  }
  // As NVML documents: MIG device handles only.
  if (attributes == nullptr || device->parent == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *attributes = nvmlDeviceAttributes_t{};
  attributes->multiprocessorCount = device->sm_count;
  attributes->gpuInstanceSliceCount = device->gpu_slices;
  attributes->computeInstanceSliceCount = device->compute_slices;
  return NVML_SUCCESS;
}
#endif

// NOLINTEND(readability-identifier-naming)

// Introspection for tests (not NVML API): how many nvmlInit_v2 calls are not yet matched by nvmlShutdown.
FAKE_NVML_EXPORT int joule_fake_nvml_init_count() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.init_count;
}

// Introspection for tests: the SM clock lock of physical GPU `index` (0, 0 when unlocked).
// @return 0, or -1 if there is no such GPU in the current session.
FAKE_NVML_EXPORT int joule_fake_nvml_locked_clocks(unsigned int index, unsigned int* min_mhz,
                                                   unsigned int* max_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (index >= s.gpus.size() || min_mhz == nullptr || max_mhz == nullptr) {
    return -1;
  }
  *min_mhz = s.gpus[index]->locked_min_mhz;
  *max_mhz = s.gpus[index]->locked_max_mhz;
  return 0;
}

// Introspection for tests: the memory clock lock of physical GPU `index` (0, 0 when unlocked).
// @return 0, or -1 if there is no such GPU in the current session.
FAKE_NVML_EXPORT int joule_fake_nvml_locked_memory_clocks(unsigned int index, unsigned int* min_mhz,
                                                          unsigned int* max_mhz) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (index >= s.gpus.size() || min_mhz == nullptr || max_mhz == nullptr) {
    return -1;
  }
  *min_mhz = s.gpus[index]->locked_memory_min_mhz;
  *max_mhz = s.gpus[index]->locked_memory_max_mhz;
  return 0;
}

// Test control (not NVML API): MIG instance `slot` of physical GPU `index` is destroyed (gpu_instance_id < 0:
// its handle turns invalid and its slot empty) or reconfigured (its GPU instance id becomes gpu_instance_id).
// @return 0, or -1 if there is no such instance.
FAKE_NVML_EXPORT int joule_fake_nvml_mig_instance(unsigned int index, unsigned int slot,
                                                  int gpu_instance_id) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (index >= s.gpus.size() || slot >= s.gpus[index]->migs.size()) {
    return -1;
  }
  Gpu& mig = *s.gpus[index]->migs[slot];
  if (gpu_instance_id < 0) {
    mig.destroyed = true;
  } else {
    mig.gpu_instance_id = static_cast<unsigned int>(gpu_instance_id);
  }
  return 0;
}

// The definitions must have exactly the types joule's loader casts dlsym results to.
#ifndef FAKE_NVML_OMIT_INIT
static_assert(std::is_same_v<decltype(&nvmlInit_v2), InitFn>);
#endif
#ifndef FAKE_NVML_OMIT_ARCHITECTURE
static_assert(std::is_same_v<decltype(&nvmlDeviceGetArchitecture), DeviceGetArchitectureFn>);
#endif
#ifndef FAKE_NVML_OMIT_ENERGY
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetTotalEnergyConsumption), DeviceGetTotalEnergyConsumptionFn>);
#endif
#ifndef FAKE_NVML_OMIT_FIELD_VALUES
static_assert(std::is_same_v<decltype(&nvmlDeviceGetFieldValues), DeviceGetFieldValuesFn>);
#endif
#ifndef FAKE_NVML_OMIT_TELEMETRY
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperature), DeviceGetTemperatureFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetClockInfo), DeviceGetClockInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUtilizationRates), DeviceGetUtilizationRatesFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksThrottleReasons),
                             DeviceGetCurrentClocksEventReasonsFn>);
#ifndef FAKE_NVML_OMIT_CLOCKS_EVENT_REASONS
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksEventReasons), DeviceGetCurrentClocksEventReasonsFn>);
#endif
#endif
#ifndef FAKE_NVML_OMIT_MEMORY_LOCKS
static_assert(std::is_same_v<decltype(&nvmlDeviceSetMemoryLockedClocks), DeviceSetMemoryLockedClocksFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceResetMemoryLockedClocks), DeviceResetMemoryLockedClocksFn>);
#endif
#ifndef FAKE_NVML_OMIT_PROCESSES
static_assert(std::is_same_v<decltype(&nvmlDeviceGetProcessUtilization), DeviceGetProcessUtilizationFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses_v3), DeviceGetComputeRunningProcessesFn>);
#endif
#ifndef FAKE_NVML_OMIT_MIG
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigMode), DeviceGetMigModeFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMaxMigDeviceCount), DeviceGetMaxMigDeviceCountFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetMigDeviceHandleByIndex), DeviceGetMigDeviceHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetDeviceHandleFromMigDeviceHandle),
                             DeviceGetDeviceHandleFromMigDeviceHandleFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceId), DeviceGetInstanceIdFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetComputeInstanceId), DeviceGetInstanceIdFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetAttributes_v2), DeviceGetAttributesFn>);
#endif
static_assert(std::is_same_v<decltype(&nvmlShutdown), ShutdownFn>);
static_assert(std::is_same_v<decltype(&nvmlErrorString), ErrorStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), DeviceGetCountFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2), DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetName), DeviceGetNameFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID), DeviceGetUuidFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerUsage), DeviceGetPowerUsageFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerManagementLimitConstraints),
                             DeviceGetPowerManagementLimitConstraintsFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerManagementDefaultLimit),
                             DeviceGetPowerManagementDefaultLimitFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerManagementLimit), DeviceGetPowerManagementLimitFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceSetPowerManagementLimit), DeviceSetPowerManagementLimitFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetSupportedMemoryClocks), DeviceGetSupportedMemoryClocksFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetSupportedGraphicsClocks), DeviceGetSupportedGraphicsClocksFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceSetGpuLockedClocks), DeviceSetGpuLockedClocksFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceResetGpuLockedClocks), DeviceResetGpuLockedClocksFn>);
