// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/audit.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/core/clock.hpp"
#include "joule/core/log.hpp"

#include "safe_files.hpp"

namespace joule::daemon {

namespace {

constexpr mode_t kLogFileMode = 0640;
constexpr double kMaxAuditIntervalS = 86'400;

// Quotes free text so that a line stays one line and splits on spaces unambiguously.
std::string quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// 12345 → "12,345": a summary's count is read by people.
std::string with_thousands_separators(uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      grouped += ',';
    }
    grouped += digits[i];
  }
  return grouped;
}

}  // namespace

Result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path, AuditLimits limits) {
  if (!(limits.interval_s > 0 && limits.interval_s <= kMaxAuditIntervalS)) {
    return fail(ErrorCode::kInvalidArgument,
                "the audit log's refusal interval {} s must be above 0 and at most {}", limits.interval_s,
                kMaxAuditIntervalS);
  }
  if (path.empty()) {
    return std::unique_ptr<AuditLog>(new AuditLog("stderr", STDERR_FILENO, false, limits));
  }
  const std::filesystem::path as_path(path);
  if (!as_path.has_filename()) {
    return fail(ErrorCode::kInvalidArgument,
                "--audit-log '{}': the audit log's path must end with a file name", path);
  }
  // As the lock file beside the socket: a link planted at the log's path made the daemon (root) append to
  // any file (docs/daemon.md).
  const auto daemon_uid = ::geteuid();
  auto folder = open_checked_folder(as_path.parent_path().string(), daemon_uid, kAuditLogFolder);
  if (!folder) {
    if (folder.error().code() == ErrorCode::kIo) {
      return fail(ErrorCode::kIo, "--audit-log {}: {}", path, folder.error().message());
    }
    return tl::make_unexpected(folder.error());
  }
  auto file =
      JOULE_TRY(open_own_file_at(folder->get(), as_path.filename().string(), path, O_WRONLY | O_APPEND,
                                 kLogFileMode, daemon_uid, {"the audit log", "append to", "--audit-log"}));
  // Blocking writes from here on (O_NONBLOCK only kept a planted FIFO from blocking the open).
  const int flags = ::fcntl(file.get(), F_GETFL);
  if (flags >= 0) {
    ::fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  // The constructor is private: an audit log exists only opened.
  return std::unique_ptr<AuditLog>(new AuditLog(path, file.release(), true, limits));
}

AuditLog::AuditLog(std::string path, int fd, bool owned, AuditLimits limits)
    : path_(std::move(path)),
      fd_(fd),
      owned_(owned),
      limits_(limits),
      interval_(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(limits.interval_s))) {}

AuditLog::~AuditLog() {
  flush_summaries(true);
  if (owned_) {
    ::close(fd_);
  }
}

namespace {

// Whose refusals an entry counts in: a uid, a network client by name, or (before it is known) the network
// address without its port, so that new connections from one host share one budget.
std::string refusal_key(const AuditEntry& entry) {
  if (!entry.client.empty()) {
    return "client " + entry.client;
  }
  if (!entry.address.empty()) {
    const auto colon = entry.address.rfind(':');
    return "address " + entry.address.substr(0, colon);
  }
  return fmt::format("uid {}", entry.uid);
}

}  // namespace

std::string AuditLog::format(const AuditEntry& entry, int64_t unix_ns) {
  std::string line = format_iso8601_utc(unix_ns);
  line += " action=" + entry.action;
  if (entry.gpu >= 0) {
    line += fmt::format(" gpu={}", entry.gpu);
  }
  for (const auto& [key, value] : {std::pair{"setting", &entry.setting}, std::pair{"old", &entry.old_value},
                                   std::pair{"new", &entry.new_value}}) {
    if (!value->empty()) {
      line += fmt::format(" {}={}", key, *value);
    }
  }
  if (entry.address.empty()) {
    line += fmt::format(" conn={} uid={} pid={}", entry.connection, entry.uid, entry.pid);
  } else {
    line += fmt::format(" conn={}{} addr={}", entry.connection,
                        entry.client.empty() ? std::string() : " client=" + entry.client, entry.address);
  }
  if (!entry.reason.empty()) {
    line += " reason=" + entry.reason;
  }
  if (!entry.detail.empty()) {
    line += " detail=" + quote(entry.detail);
  }
  return line + "\n";
}

void AuditLog::record(const AuditEntry& entry) {
  const auto wall_now = std::chrono::system_clock::now();
  const auto now = std::chrono::steady_clock::now();
  if (observer_) {
    observer_(entry);  // every entry, written or only counted
  }
  std::lock_guard lock(mutex_);
  if (entry.action == "refused") {
    const std::string who = refusal_key(entry);
    auto found = refusals_.find(who);
    if (found != refusals_.end() && now >= found->second.start + interval_) {
      write_summary(who, found->second, now);
      refusals_.erase(found);
      found = refusals_.end();
    }
    if (found == refusals_.end()) {
      AuditEntry identity;
      identity.uid = entry.uid;
      identity.client = entry.client;
      identity.address = entry.address;
      found = refusals_.emplace(who, RefusalWindow{now, 0, 0, std::move(identity)}).first;
    }
    if (found->second.written >= limits_.refusals_per_user) {
      ++found->second.suppressed;
      return;
    }
    ++found->second.written;
  }
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(wall_now.time_since_epoch()).count();
  write_line(format(entry, now_ns));
}

void AuditLog::flush_summaries(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  for (auto it = refusals_.begin(); it != refusals_.end();) {
    if (all || now >= it->second.start + interval_) {
      write_summary(it->first, it->second, now);
      it = refusals_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<std::chrono::steady_clock::time_point> AuditLog::next_summary() const {
  std::lock_guard lock(mutex_);
  std::optional<SteadyTime> next;
  for (const auto& [who, window] : refusals_) {
    if (!next || window.start + interval_ < *next) {
      next = window.start + interval_;
    }
  }
  return next;
}

void AuditLog::write_summary(const std::string& who, const RefusalWindow& window, SteadyTime now) {
  if (window.suppressed == 0) {
    return;
  }
  const double elapsed_s =
      std::min(std::chrono::duration<double>(now - window.start).count(), limits_.interval_s);
  AuditEntry summary = window.who;
  summary.action = "refused-summary";
  summary.detail = fmt::format(
      "{}: {} more refusal{} in the last {:.3g} s (--audit-refusals-per-user {}: the first {} of each "
      "{:.3g} s "
      "are written one by one, the rest counted here)",
      who, with_thousands_separators(window.suppressed), window.suppressed == 1 ? "" : "s", elapsed_s,
      limits_.refusals_per_user, limits_.refusals_per_user, limits_.interval_s);
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  write_line(format(summary, now_ns));
}

void AuditLog::write_line(const std::string& line) {
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      if (!failed_) {
        failed_ = true;
        log().error("cannot write the audit log {}: {}", path_, std::strerror(errno));
      }
      return;
    }
    written += static_cast<size_t>(n);
  }
}

}  // namespace joule::daemon
