// SPDX-License-Identifier: Apache-2.0
// joule/daemon/audit.hpp — the daemon's audit log: one line per change of a GPU setting, per restore and
// per refused control request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "joule/core/error.hpp"

namespace joule::daemon {

/// One audited event. Every field is printed as key=value; empty fields are left out.
struct AuditEntry {
  std::string action;     ///< "set", "restore", "release", "restore-failed", "refused"
  int gpu = -1;           ///< the daemon's GPU index (-1: none)
  std::string setting;    ///< "power_limit_mw" or "sm_clocks_mhz"
  std::string old_value;  ///< the value in force before, e.g. "250000", "unlocked", "1200-1350"
  std::string new_value;  ///< the value in force after
  uint64_t connection = 0;
  uint32_t uid = 0;
  int32_t pid = 0;
  std::string reason;  ///< "request", "reset", "disconnected", "lease-expired", "shutdown"
  std::string detail;  ///< free text (an error message), quoted
};

/// Appends audit lines to a file (or stderr):
///
///   2026-01-05T10:00:00.123Z action=set gpu=0 setting=power_limit_mw old=250000 new=150000 conn=3 uid=1000
///   pid=4242 reason=request
///
/// (one line). Each line is written with a single write(2) on a file opened O_APPEND, so lines from
/// concurrent writers never interleave and logrotate's copytruncate works. Thread-safe; never throws.
class AuditLog {
 public:
  /// Opens `path` for appending (created 0640, its folder 0750 if missing); an empty path means stderr.
  /// @return kIo naming the path and the system error.
  static Result<std::unique_ptr<AuditLog>> open(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  /// Writes one line stamped with the current UTC time. A failed write is reported once on joule::log().
  void record(const AuditEntry& entry);

  /// @return the line record() would write for `entry` at `unix_ns`.
  static std::string format(const AuditEntry& entry, int64_t unix_ns);

  /// @return the file, or "stderr".
  const std::string& path() const { return path_; }

  /// Calls `observer` with every entry record() writes (e.g. DaemonMetrics::audited), on the recording
  /// thread. Set it before the log is used; it must not throw.
  void set_observer(std::function<void(const AuditEntry&)> observer) { observer_ = std::move(observer); }

 private:
  AuditLog(std::string path, int fd, bool owned) : path_(std::move(path)), fd_(fd), owned_(owned) {}

  std::string path_;
  int fd_;
  bool owned_;
  std::mutex mutex_;
  bool failed_ = false;  // guarded by mutex_
  std::function<void(const AuditEntry&)> observer_;
};

}  // namespace joule::daemon
