// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/core/strings.hpp"

namespace joule {

Error errno_error(int errno_value, std::string_view what, const std::string& path) {
  ErrorCode code = ErrorCode::kIo;
  if (errno_value == ENOENT || errno_value == ENOTDIR) {
    code = ErrorCode::kNotFound;
  } else if (errno_value == EACCES || errno_value == EPERM) {
    code = ErrorCode::kPermissionDenied;
  }
  return Error(code, fmt::format("{} {}: {}", what, path, std::strerror(errno_value)));
}

namespace {

// "16 MiB" for whole MiB (the limits as defined), else bytes (limits set by tests).
std::string describe_size(size_t bytes) {
  if (bytes >= read_limits::kMib && bytes % read_limits::kMib == 0) {
    return fmt::format("{} MiB", bytes / read_limits::kMib);
  }
  return fmt::format("{} bytes", bytes);
}

// The limit in force: JOULE_MAX_FILE_MIB if set, else the kind's own. Read on every call, not cached: a
// getenv costs little next to the open and read, and tests and embedding programs may change it.
Result<size_t> effective_limit(const ReadLimit& limit) {
  const char* value = std::getenv(std::string(kMaxFileMibVariable).c_str());
  if (value == nullptr || *value == '\0') {
    return limit.max_bytes;
  }
  const std::string_view text(value);
  uint64_t mib = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mib);
  constexpr uint64_t kMostMib = std::numeric_limits<size_t>::max() / read_limits::kMib;
  if (ec != std::errc() || end != text.data() + text.size() || mib < 1 || mib > kMostMib) {
    return fail(ErrorCode::kInvalidArgument, "{} must be a whole number of MiB from 1 to {}, got {}",
                kMaxFileMibVariable, kMostMib, quoted_excerpt(text));
  }
  return static_cast<size_t>(mib) * read_limits::kMib;
}

Error too_large(const std::string& path, const ReadLimit& limit, size_t max_bytes) {
  return Error(
      ErrorCode::kInvalidArgument,
      fmt::format("{}: more than {}, the most joule reads from a {} (real ones are far smaller: is it "
                  "the right file? {} raises the limit)",
                  path, describe_size(max_bytes), limit.kind, kMaxFileMibVariable));
}

// Closes the descriptor on every path out of read_text_file().
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<std::string> read_text_file(const std::string& path, const ReadLimit& limit) {
  const auto max_bytes = JOULE_TRY(effective_limit(limit));
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever if none comes.
  const Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    return tl::make_unexpected(errno_error(errno, "cannot open", path));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return tl::make_unexpected(errno_error(errno, "cannot read", path));
  }
  if (S_ISDIR(info.st_mode)) {
    return tl::make_unexpected(errno_error(EISDIR, "cannot read", path));
  }
  const bool regular = S_ISREG(info.st_mode);
  if (regular && static_cast<uint64_t>(info.st_size) > max_bytes) {
    return tl::make_unexpected(too_large(path, limit, max_bytes));
  }
  // Back to blocking reads: a pipe whose writer is slow must be waited for, not read as empty.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return tl::make_unexpected(errno_error(errno, "cannot read", path));
  }
  std::string content;
  if (regular) {
    content.reserve(static_cast<size_t>(info.st_size));
  }
  char buffer[65536];
  while (true) {
    // One byte past the limit tells a file at the limit from one over it (sysfs and /proc files report a
    // size that is not their length, and a file can grow while it is read).
    const size_t room = max_bytes - std::min(content.size(), max_bytes) + 1;
    const ssize_t n = ::read(fd.get(), buffer, std::min(sizeof buffer, room));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return tl::make_unexpected(errno_error(errno, "cannot read", path));
    }
    if (n == 0) {
      break;
    }
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > max_bytes) {
      return tl::make_unexpected(too_large(path, limit, max_bytes));
    }
  }
  return content;
}

Result<std::string> read_text_file(const std::string& path) {
  return read_text_file(path, read_limits::kDefault);
}

Result<void> write_file_atomic(const std::string& path, std::string_view content) {
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return tl::make_unexpected(errno_error(errno, "cannot create", temporary));
  }
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int saved = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      return tl::make_unexpected(errno_error(saved, "cannot write", temporary));
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    const int saved = synced ? errno : sync_errno;
    ::unlink(temporary.c_str());
    return tl::make_unexpected(errno_error(saved, "cannot flush", temporary));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    return tl::make_unexpected(errno_error(saved, "cannot replace", path));
  }
  return {};
}

}  // namespace joule
