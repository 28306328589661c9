// SPDX-License-Identifier: Apache-2.0
// A GPU for restore tests across processes: every setting change is appended as one line to a file, with a
// single write(2) (safe from an exit hook or the restorer thread of a dying child), so that the parent can
// read what a killed, interrupted or exiting child did to it. read_lines() reads the file back.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "joule/device/gpu.hpp"

namespace joule::test {

struct FileGpuOptions {
  uint32_t power_limit_mw = 250'000;  ///< the limit in force at start
  std::string limit_prefix;           ///< a power limit change is written as limit_prefix + the limit in mW
  std::vector<uint32_t> supported_sm_clocks_mhz;
  bool write_clock_changes = false;  ///< also write "lock MIN MAX" and "reset-clocks"
};

/// Constraints: 100–300 W, default 250 W. Energy 0, power 100 W.
class FileGpu final : public device::Gpu {
 public:
  /// @param fd an open file (O_APPEND) that outlives this GPU.
  FileGpu(int fd, FileGpuOptions options) : Gpu(make_info()), fd_(fd), options_(std::move(options)) {
    limit_mw_ = options_.power_limit_mw;
  }

  /// Appends `line` and a newline in one write.
  void append(const std::string& line) const {
    const std::string text = line + "\n";
    [[maybe_unused]] const ssize_t written = ::write(fd_, text.data(), text.size());
  }

 protected:
  Result<uint64_t> do_energy_mj() override { return 0; }
  Result<uint32_t> do_power_mw() override { return 100'000; }
  Result<device::PowerLimitConstraints> do_power_limit_constraints() override {
    return device::PowerLimitConstraints{100'000, 300'000, 250'000};
  }
  Result<uint32_t> do_power_limit_mw() override { return limit_mw_; }
  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    limit_mw_ = power_limit_mw;
    append(options_.limit_prefix + std::to_string(power_limit_mw));
    return {};
  }
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    return options_.supported_sm_clocks_mhz;
  }
  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    if (options_.write_clock_changes) {
      append("lock " + std::to_string(min_mhz) + " " + std::to_string(max_mhz));
    }
    return {};
  }
  Result<void> do_reset_sm_clocks() override {
    if (options_.write_clock_changes) {
      append("reset-clocks");
    }
    return {};
  }

 private:
  static device::GpuInfo make_info() {
    device::GpuInfo info;
    info.backend = "file";
    info.name = "File GPU";
    info.has_energy_counter = true;
    return info;
  }
  int fd_;
  FileGpuOptions options_;
  uint32_t limit_mw_;
};

/// @return the lines of `path` (none if it does not exist).
inline std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream stream(path);
  for (std::string line; std::getline(stream, line);) {
    lines.push_back(line);
  }
  return lines;
}

}  // namespace joule::test
