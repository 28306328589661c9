// SPDX-License-Identifier: Apache-2.0
// What the benchmarks that run the built `joule` binary read of it from /proc: its memory and CPU time.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace joule::bench {

/// @return the value in kB of `field` (e.g. "VmRSS", "VmHWM") in /proc/PID/status, or -1.
inline long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

/// @return user + system CPU seconds of `pid` from /proc/PID/stat.
inline double cpu_seconds(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t after_name = text.rfind(')');
  if (after_name == std::string::npos) {
    return 0;
  }
  std::istringstream fields(text.substr(after_name + 2));
  std::string field;
  double utime = 0;
  double stime = 0;
  // Fields after the name start at 3 (state); utime and stime are fields 14 and 15.
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) {
      utime = std::stod(field);
    } else if (index == 15) {
      stime = std::stod(field);
    }
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace joule::bench
