// SPDX-License-Identifier: Apache-2.0
// What the fake vendor libraries (tests/fakes/{nvml,rocm,amdsmi}) share: reading their key=value
// configuration file, the "device.<N|*>.<key>" scheme of the AMD fakes, their call log, the number and
// status parsing of their keys, and the AMD fakes' power model. Header-only: each fake is a shared library of
// its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace joule::fake {

using ConfigEntries = std::vector<std::pair<std::string, std::string>>;

inline std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) {
    return "";
  }
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

/// The key=value lines of the file named by an environment variable ('#' starts a comment line).
struct ConfigFile {
  const char* path = nullptr;  // the variable's value; nullptr or "" when unset (then no entries)
  bool readable = true;        // false: the file could not be opened
  int bad_line = 0;            // the first line without '=' (1-based); 0: none
  ConfigEntries entries;       // in file order, keys and values trimmed
};

/// Reads the configuration file named by `env_var` (a missing variable is an empty configuration).
inline ConfigFile read_config_file(const char* env_var) {
  ConfigFile config;
  config.path = std::getenv(env_var);
  if (config.path == nullptr || *config.path == '\0') {
    return config;
  }
  std::ifstream file(config.path);
  if (!file) {
    config.readable = false;
    return config;
  }
  std::string line;
  int number = 0;
  while (std::getline(file, line)) {
    ++number;
    line = trim(line);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const size_t equals = line.find('=');
    if (equals == std::string::npos) {
      config.bad_line = number;
      return config;
    }
    config.entries.emplace_back(trim(line.substr(0, equals)), trim(line.substr(equals + 1)));
  }
  return config;
}

/// The AMD fakes' reading: reads `env_var`'s file. @return "" or the problem ("cannot read …", "line N: no
/// '='").
inline std::string read_amd_config(const char* env_var, ConfigEntries& entries) {
  ConfigFile config = read_config_file(env_var);
  if (!config.readable) {
    return std::string("cannot read ") + config.path;
  }
  if (config.bad_line != 0) {
    return "line " + std::to_string(config.bad_line) + ": no '='";
  }
  entries = std::move(config.entries);
  return "";
}

/// @return the value of the last "devices=N" entry, else 1.
inline size_t device_count(const ConfigEntries& entries) {
  size_t count = 1;
  for (const auto& [key, value] : entries) {
    if (key == "devices") {
      count = std::strtoul(value.c_str(), nullptr, 10);
    }
  }
  return count;
}

/// Applies the AMD fakes' entries to `count` devices: "device.N.key" through `apply_device(N, key, value)`
/// (every device for "device.*.key", applied first so that it is a default "device.N.key" overrides
/// wherever it appears), any other key but "devices" through `apply_global(key, value)`. Each returns ""
/// or what is wrong. @return "" or "'key=value': problem" of the first bad entry.
inline std::string apply_device_entries(
    const ConfigEntries& entries, size_t count,
    const std::function<std::string(const std::string& key, const std::string& value)>& apply_global,
    const std::function<std::string(size_t device, const std::string& key, const std::string& value)>&
        apply_device) {
  for (const bool wildcard_pass : {true, false}) {
    for (const auto& [key, value] : entries) {
      std::string problem;
      const bool is_wildcard = key.rfind("device.*.", 0) == 0;
      if (key == "devices" || is_wildcard != wildcard_pass) {
        continue;
      }
      if (key.rfind("device.", 0) == 0) {
        const auto dot = key.find('.', 7);
        if (dot == std::string::npos) {
          problem = "expected device.<N|*>.<key>";
        } else {
          const std::string which = key.substr(7, dot - 7);
          const std::string field = key.substr(dot + 1);
          if (which == "*") {
            for (size_t index = 0; index < count; ++index) {
              problem = apply_device(index, field, value);
            }
          } else {
            const size_t index = std::strtoul(which.c_str(), nullptr, 10);
            problem = index < count ? apply_device(index, field, value) : "no such device";
          }
        }
      } else {
        problem = apply_global(key, value);
      }
      if (!problem.empty()) {
        return "'" + key + "=" + value + "': " + problem;
      }
    }
  }
  return "";
}

/// Applies a "fail.<symbol>=STATUS" key (STATUS read by `parse_status`) to `failures`: the call <symbol> then
/// returns STATUS. @return nullopt if `key` is no such key, else "" or "unknown status".
template <class Status>
std::optional<std::string> apply_failure_key(const std::string& key, const std::string& value,
                                             std::map<std::string, Status>& failures,
                                             std::optional<Status> (*parse_status)(std::string)) {
  if (key.rfind("fail.", 0) != 0) {
    return std::nullopt;
  }
  const auto status = parse_status(value);
  if (!status) {
    return "unknown status";
  }
  failures[key.substr(5)] = *status;
  return "";
}

/// Appends one line to the call log at `log_path` (none if empty), so tests can check what the backend asked
/// for.
inline void log_line(const std::string& log_path, const std::string& line) {
  if (log_path.empty()) {
    return;
  }
  std::ofstream(log_path, std::ios::app) << line << '\n';
}

inline bool parse_double(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0';
}

/// Parses "500,1000,1500" (MHz, low to high) into `out`. @return "" or what is wrong (also more than
/// `max_count` clocks).
inline std::string parse_mhz_list(const std::string& value, std::vector<uint64_t>& out, size_t max_count) {
  out.clear();
  std::stringstream list(value);
  std::string item;
  double number = 0;
  while (std::getline(list, item, ',')) {
    if (!parse_double(item, number) || number < 0) {
      return "not a comma-separated list of MHz";
    }
    out.push_back(static_cast<uint64_t>(number));
  }
  return out.size() <= max_count ? "" : "more than " + std::to_string(max_count) + " clocks";
}

/// A status by its name in `names` (with or without `prefix`, e.g. "RSMI_STATUS_"), or by its number.
template <class Status, size_t N>
std::optional<Status> parse_status(std::string text, std::string_view prefix,
                                   const std::pair<const char*, Status> (&names)[N]) {
  if (text.rfind(prefix, 0) == 0) {
    text = text.substr(prefix.size());
  }
  for (const auto& [name, status] : names) {
    if (text == name) {
      return status;
    }
  }
  char* end = nullptr;
  const unsigned long long number = std::strtoull(text.c_str(), &end, 0);
  if (!text.empty() && *end == '\0' && number <= 0xFFFFFFFFull) {
    return static_cast<Status>(static_cast<uint32_t>(number));
  }
  return std::nullopt;
}

/// Watts as an integer number of microwatts, rounded.
inline uint64_t w_to_uw(double power_w) {
  return static_cast<uint64_t>(std::llround(power_w * 1e6));
}

/// The AMD fakes' power model of one board: it draws power_w, at most its cap, and its energy counter
/// integrates that over real elapsed time, so that the backends' counter checks really measure something.
struct PowerBoard {
  double power_w = 100;     // what the board draws when its cap allows it
  double energy_scale = 1;  // the counter reports true energy × this (100: wildly off)
  double power_cap_w = 300;
  double power_cap_min_w = 100;
  double power_cap_max_w = 300;
  double power_cap_default_w = 300;

  // Run-time state.
  double energy_uj = 0;  // true energy since init
  std::chrono::steady_clock::time_point last_update;

  double effective_power_w() const { return std::min(power_w, power_cap_w); }
  void integrate(std::chrono::steady_clock::time_point now) {
    energy_uj += effective_power_w() * 1e6 * std::chrono::duration<double>(now - last_update).count();
    last_update = now;
  }

  /// Applies the configuration keys of the model but power_w (the fakes differ there): energy_scale and
  /// power_cap{,_min,_max,_default}_w. @return nullopt for another key, else "" or what is wrong.
  std::optional<std::string> apply_key(const std::string& key, const std::string& value) {
    double* field = key == "energy_scale"          ? &energy_scale
                    : key == "power_cap_w"         ? &power_cap_w
                    : key == "power_cap_min_w"     ? &power_cap_min_w
                    : key == "power_cap_max_w"     ? &power_cap_max_w
                    : key == "power_cap_default_w" ? &power_cap_default_w
                                                   : nullptr;
    if (field == nullptr) {
      return std::nullopt;
    }
    double number = 0;
    if (!parse_double(value, number)) {
      return "not a number";
    }
    *field = number;
    return "";
  }
};

/// The init of an AMD fake: the first (reference count 0 → 1) reloads the configuration with `load` (which
/// returns "" or the problem, printed to stderr after `library`: then init fails with `config_error`), fails
/// as configured by "fail.<symbol>" (logging "<symbol> failed"), and starts every board's energy count now.
/// @return the status init fails with, or nullopt (the caller counts the init and logs it).
template <class State, class Status>
std::optional<Status> first_init(State& s, const char* symbol, const char* library,
                                 std::string (*load)(State&), Status config_error) {
  if (s.init_count != 0) {
    return std::nullopt;
  }
  if (const std::string problem = load(s); !problem.empty()) {
    std::fprintf(stderr, "%s: %s\n", library, problem.c_str());
    return config_error;
  }
  if (const auto it = s.failures.find(symbol); it != s.failures.end()) {
    log_line(s.log_path, std::string(symbol) + " failed");
    return it->second;
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto& device : s.devices) {
    device.last_update = now;
  }
  return std::nullopt;
}

}  // namespace joule::fake
