// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

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

Result<std::string> read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return tl::make_unexpected(errno_error(errno, "cannot open", path));
  }
  std::string content;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int saved = errno;
      ::close(fd);
      return tl::make_unexpected(errno_error(saved, "cannot read", path));
    }
    if (n == 0) {
      break;
    }
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
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
