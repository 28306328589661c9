// SPDX-License-Identifier: Apache-2.0
// A fake /sys/class/powercap tree for tests of the RAPL backend (there is no powercap on CI machines), and a
// way to wait until a background reader has read a file, so tests poll events instead of sleeping blindly.
//
//   test::FakePowercap powercap;                       // flat layout, like /sys/class/powercap
//   powercap.add_package(0, "package-0", 1000, 262143328850, test::FakeDram{500});
//   RaplOptions options;  options.powercap_root = powercap.root();  // or JOULE_POWERCAP_ROOT=<root>
//   powercap.set_energy(0, 5000);
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.hpp"

namespace joule::test {

/// A package's DRAM sub-zone. Servers usually have it as intel-rapl:N:0, client parts as intel-rapl:N:2.
struct FakeDram {
  uint64_t energy_uj = 0;
  uint64_t max_range_uj = 65712999613;  // a typical DRAM range
  int subzone = 0;                      // the M of intel-rapl:N:M
};

/// A powercap tree in a temporary directory, removed on destruction. Files are world-readable and directories
/// world-traversable (like sysfs) so that tests can drop privileges; counter writes are atomic (write +
/// rename), so concurrent readers never see a half-written file.
class FakePowercap {
 public:
  enum class Layout {
    kFlat,    ///< <root>/intel-rapl:N, with the kernel's top-level links intel-rapl:N:M →
              ///< intel-rapl:N/intel-rapl:N:M
    kNested,  ///< <root>/intel-rapl/intel-rapl:N (older kernels, some container bind-mounts)
  };

  explicit FakePowercap(Layout layout = Layout::kFlat)
      : layout_(layout), zone_dir_(layout == Layout::kFlat ? dir_.path() : dir_.path() + "/intel-rapl") {
    make_dir(dir_.path());  // mkdtemp made it 0700
    make_dir(zone_dir_);
  }

  /// The powercap root: RaplOptions::powercap_root or JOULE_POWERCAP_ROOT.
  const std::string& root() const { return dir_.path(); }
  /// The directory that holds intel-rapl:N (the root, or <root>/intel-rapl for the nested layout).
  const std::string& zone_dir() const { return zone_dir_; }

  std::string package_dir(int package) const { return zone_dir_ + "/intel-rapl:" + std::to_string(package); }
  std::string subzone_dir(int package, int subzone) const {
    return package_dir(package) + "/intel-rapl:" + std::to_string(package) + ":" + std::to_string(subzone);
  }
  std::string package_energy_path(int package) const { return package_dir(package) + "/energy_uj"; }
  std::string dram_energy_path(int package) const {
    return subzone_dir(package, dram_subzones_.at(package)) + "/energy_uj";
  }

  /// Adds package zone intel-rapl:<index> named `name` (e.g. "package-0", or "psys"), with a DRAM sub-zone if
  /// `dram` is given.
  void add_package(int index, const std::string& name, uint64_t energy_uj, uint64_t max_range_uj,
                   std::optional<FakeDram> dram = std::nullopt) {
    write_zone(package_dir(index), name, energy_uj, max_range_uj);
    if (dram) {
      add_subzone(index, dram->subzone, "dram", dram->energy_uj, dram->max_range_uj);
      dram_subzones_[index] = dram->subzone;
    }
  }

  /// Adds sub-zone intel-rapl:<package>:<subzone> (e.g. "core", "uncore", "dram") inside a package.
  void add_subzone(int package, int subzone, const std::string& name, uint64_t energy_uj,
                   uint64_t max_range_uj) {
    const std::string dir = subzone_dir(package, subzone);
    write_zone(dir, name, energy_uj, max_range_uj);
    if (layout_ == Layout::kFlat) {
      const std::string link =
          zone_dir_ + "/intel-rapl:" + std::to_string(package) + ":" + std::to_string(subzone);
      std::filesystem::create_directory_symlink(dir, link);
    }
  }

  void set_energy(int package, uint64_t energy_uj) const {
    write_file(package_energy_path(package), std::to_string(energy_uj) + "\n");
  }
  void set_dram_energy(int package, uint64_t energy_uj) const {
    write_file(dram_energy_path(package), std::to_string(energy_uj) + "\n");
  }

  /// Writes `content` verbatim to `path` (absolute, or relative to root()), creating folders: for malformed
  /// files and stray entries.
  void write_raw(const std::string& path, const std::string& content) const {
    const std::filesystem::path full = std::filesystem::path(path).is_absolute() ? path : root() + "/" + path;
    make_dir(full.parent_path().string());
    write_file(full.string(), content);
  }

 private:
  void write_zone(const std::string& dir, const std::string& name, uint64_t energy_uj,
                  uint64_t max_range_uj) const {
    make_dir(dir);
    write_file(dir + "/name", name + "\n");
    write_file(dir + "/max_energy_range_uj", std::to_string(max_range_uj) + "\n");
    write_file(dir + "/energy_uj", std::to_string(energy_uj) + "\n");
  }

  static void make_dir(const std::string& dir) {
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms(0755));
  }

  // Writes beside the file and renames over it, so a concurrent reader sees the old or the new content.
  static void write_file(const std::string& path, const std::string& content) {
    const std::string temporary = path + ".fake-tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << content;
      if (!out.flush()) {
        throw std::runtime_error("cannot write " + temporary);
      }
    }
    std::filesystem::permissions(temporary, std::filesystem::perms(0644));
    std::filesystem::rename(temporary, path);
  }

  TempDir dir_;
  Layout layout_;
  std::string zone_dir_;
  std::map<int, int> dram_subzones_;  // package → the M of its dram sub-zone
};

/// Counts completed reads of one file (inotify IN_CLOSE_NOWRITE on its directory, so it survives the fake's
/// rename-writes), to wait until a background thread has read a value instead of sleeping for a guessed time.
class FileReadWatcher {
 public:
  explicit FileReadWatcher(const std::string& path)
      : name_(std::filesystem::path(path).filename().string()), fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_ < 0) {
      throw std::runtime_error(std::string("inotify_init1: ") + std::strerror(errno));
    }
    // IN_OPEN is watched only so that two consecutive closes are never merged into one event (inotify
    // coalesces identical consecutive unread events).
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (inotify_add_watch(fd_, dir.c_str(), IN_OPEN | IN_CLOSE_NOWRITE) < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("inotify_add_watch " + dir + ": " + reason);
    }
  }
  ~FileReadWatcher() { ::close(fd_); }
  FileReadWatcher(const FileReadWatcher&) = delete;
  FileReadWatcher& operator=(const FileReadWatcher&) = delete;

  /// Waits until some read of the file has both started after this call and finished, i.e. the reader has
  /// seen whatever was written before this call. (The first read to finish may have opened the file earlier;
  /// the second cannot have, when there is a single sequential reader.) @return false on timeout.
  bool wait_for_fresh_read(std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    drain();
    reads_ = 0;
    return wait_for_reads(2, timeout);
  }

  /// Waits until `count` reads have finished since the last wait_for_fresh_read (or construction).
  bool wait_for_reads(int count, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (reads_ < count) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return false;
      }
      pollfd entry{fd_, POLLIN, 0};
      if (::poll(&entry, 1, static_cast<int>(left.count()) + 1) > 0) {
        drain();
      }
    }
    return true;
  }

 private:
  // Reads every queued event, counting finished reads of our file.
  void drain() {
    alignas(inotify_event) char buffer[4096];
    while (true) {
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n <= 0) {
        return;
      }
      size_t offset = 0;
      while (offset + sizeof(inotify_event) <= static_cast<size_t>(n)) {
        inotify_event event{};
        std::memcpy(&event, buffer + offset, sizeof event);
        const char* name = buffer + offset + sizeof event;
        if ((event.mask & IN_CLOSE_NOWRITE) != 0 && event.len > 0 &&
            name_ == std::string(name, strnlen(name, event.len))) {
          ++reads_;
        }
        offset += sizeof event + event.len;
      }
    }
  }

  std::string name_;
  int fd_;
  int reads_ = 0;
};

}  // namespace joule::test
