// SPDX-License-Identifier: Apache-2.0
// joule/daemon/audit.hpp — the daemon's audit log: one line per change of a GPU setting, per restore and
// per refused control request.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  uint32_t uid = 0;  ///< a Unix-socket peer's (left out for a network peer)
  int32_t pid = 0;
  std::string client;   ///< a network peer's name (its token's or certificate's); empty before it is known
  std::string address;  ///< a network peer's address, e.g. "10.0.0.7:51234"; empty: a Unix-socket peer
  std::string reason;   ///< "request", "reset", "disconnected", "lease-expired", "shutdown"
  std::string detail;   ///< free text (an error message), quoted
};

/// How many refusal lines one uid may put in the audit log: any user can send refused requests as fast as
/// the daemon answers them, and each would be a line (a flood grew the log by 58.7 MB/s).
struct AuditLimits {
  /// Refusals of one uid written one by one per interval (--audit-refusals-per-user; 0: none, only the
  /// summary). The rest are counted and written as one summary line when the interval ends:
  ///
  ///   … action=refused-summary conn=0 uid=1000 pid=0 detail="uid 1000: 12,345 more refusals in the last 10 s
  ///   …"
  size_t refusals_per_user = 20;
  /// The interval, s (> 0, ≤ 86400).
  double interval_s = 10;
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
  /// Opens `path` for appending (created 0640, its folder 0750 if missing); an empty path means stderr. The
  /// file is opened as the daemon's lock file is (docs/daemon.md): through a handle on its folder, which must
  /// belong to root (or the daemon's user) and be writable by no one else unless sticky, as every folder
  /// above it (which may be writable by its group, as Ubuntu's /var/log is); never through a symbolic link;
  /// and only if it is the daemon's user's own regular file, one link, writable by no one else.
  /// @return kPermissionDenied (an unsafe folder, a link, another user's file: one line naming it and the
  /// fix), kInvalidArgument (bad limits, a path without a file name), kIo naming the path and the error.
  static Result<std::unique_ptr<AuditLog>> open(const std::string& path, AuditLimits limits = {});
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  /// Writes one line stamped with the current UTC time. A failed write is reported once on joule::log().
  /// Refusals (action "refused") are limited per uid (AuditLimits): beyond the limit they are counted, not
  /// written. The observer sees every entry.
  void record(const AuditEntry& entry);

  /// Writes the summary line of every uid whose interval has ended by now (all of them with `all`, e.g. at
  /// shutdown: then the line gives the time since the interval began).
  void flush_summaries(bool all = false);
  /// @return when the earliest interval ends (call flush_summaries() then), or nullopt if none is open.
  std::optional<std::chrono::steady_clock::time_point> next_summary() const;

  /// @return the line record() would write for `entry` at `unix_ns`.
  static std::string format(const AuditEntry& entry, int64_t unix_ns);

  /// @return the file, or "stderr".
  const std::string& path() const { return path_; }
  const AuditLimits& limits() const { return limits_; }

  /// Calls `observer` with every entry record() writes (e.g. DaemonMetrics::audited), on the recording
  /// thread. Set it before the log is used; it must not throw.
  void set_observer(std::function<void(const AuditEntry&)> observer) { observer_ = std::move(observer); }

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  // One peer's refusals in the current interval: a uid's, a network client's, or an unauthenticated
  // network address's.
  struct RefusalWindow {
    SteadyTime start;
    size_t written = 0;
    uint64_t suppressed = 0;
    AuditEntry who;  // its uid, client and address
  };

  AuditLog(std::string path, int fd, bool owned, AuditLimits limits);
  void write_line(const std::string& line);  // mutex_ held
  // Writes the summary of `who` (if it left any refusal out) at `now`; mutex_ held.
  void write_summary(const std::string& who, const RefusalWindow& window, SteadyTime now);

  std::string path_;
  int fd_;
  bool owned_;
  AuditLimits limits_;
  std::chrono::nanoseconds interval_;
  mutable std::mutex mutex_;
  bool failed_ = false;                            // guarded by mutex_
  std::map<std::string, RefusalWindow> refusals_;  // by peer ("uid 1000", "client x"), guarded by mutex_
  std::function<void(const AuditEntry&)> observer_;
};

}  // namespace joule::daemon
