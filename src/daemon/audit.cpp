// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/audit.hpp"

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

namespace joule::daemon {

namespace {

constexpr mode_t kLogFileMode = 0640;
constexpr mode_t kLogDirMode = 0750;

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

}  // namespace

Result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path) {
  if (path.empty()) {
    return std::unique_ptr<AuditLog>(new AuditLog("stderr", STDERR_FILENO, false));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent)) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      return fail(ErrorCode::kIo, "--audit-log {}: cannot create folder {}: {}", path, parent.string(),
                  error.message());
    }
    ::chmod(parent.c_str(), kLogDirMode);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, kLogFileMode);
  if (fd < 0) {
    return fail(ErrorCode::kIo, "--audit-log {}: cannot open for appending: {}", path, std::strerror(errno));
  }
  // The constructor is private: an audit log exists only opened.
  return std::unique_ptr<AuditLog>(new AuditLog(path, fd, true));
}

AuditLog::~AuditLog() {
  if (owned_) {
    ::close(fd_);
  }
}

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
  line += fmt::format(" conn={} uid={} pid={}", entry.connection, entry.uid, entry.pid);
  if (!entry.reason.empty()) {
    line += " reason=" + entry.reason;
  }
  if (!entry.detail.empty()) {
    line += " detail=" + quote(entry.detail);
  }
  return line + "\n";
}

void AuditLog::record(const AuditEntry& entry) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string line = format(entry, now_ns);
  if (observer_) {
    observer_(entry);
  }
  std::lock_guard lock(mutex_);
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
