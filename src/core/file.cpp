// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <utility>

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

namespace {

std::string output_subject(std::string_view flag, const std::string& path) {
  return flag.empty() ? path : fmt::format("{} {}", flag, path);
}

// The open descriptor a path names: "-" and /dev/stdout 1, /dev/stderr 2, /dev/fd/N and /proc/self/fd/N N.
// Written to as they are: opening /proc/self/fd/1 anew would truncate a file the shell opened with `>`,
// and replacing that file would leave the shell's descriptor on a removed one.
std::optional<int> named_descriptor(const std::string& path) {
  if (path == "-" || path == "/dev/stdout") {
    return 1;
  }
  if (path == "/dev/stderr") {
    return 2;
  }
  for (const std::string_view prefix : {std::string_view("/dev/fd/"), std::string_view("/proc/self/fd/")}) {
    if (path.size() > prefix.size() && std::string_view(path).substr(0, prefix.size()) == prefix) {
      const std::string_view digits = std::string_view(path).substr(prefix.size());
      int fd = -1;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fd);
      if (ec == std::errc() && end == digits.data() + digits.size() && fd >= 0) {
        return fd;
      }
    }
  }
  return std::nullopt;
}

std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) {
    return "directory";
  }
  if (S_ISBLK(mode)) {
    return "block device";
  }
  if (S_ISSOCK(mode)) {
    return "socket";
  }
  if (S_ISLNK(mode)) {
    return "symbolic link";
  }
  if (S_ISCHR(mode)) {
    return "character device";
  }
  if (S_ISFIFO(mode)) {
    return "FIFO";
  }
  return "regular file";
}

// The folder and the name of a path: "out.json" → (".", "out.json"), "/x" → ("/", "x"), "d/" → ("d", "").
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return {".", path};
  }
  return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

std::string random_hex() {
  std::random_device device;
  const uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
  return fmt::format("{:016x}", value);
}

Error output_errno(int errno_value, const std::string& subject, std::string_view what) {
  const Error plain = errno_error(errno_value, "", "");
  return Error(plain.code(), fmt::format("{}: {}: {}", subject, what, std::strerror(errno_value)));
}

// Writes all of `content` to `fd`. @return 0, or the errno of the failed write (ENOSPC when a write took
// nothing).
int write_all(int fd, std::string_view content) {
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (n == 0) {
      return ENOSPC;
    }
    written += static_cast<size_t>(n);
  }
  return 0;
}

// Opens `folder` as a handle for the *at() calls, with a message for a missing folder or a file in the way.
Result<int> open_output_folder(const std::string& folder, const std::string& subject) {
  const int fd = ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    return fd;
  }
  const int saved = errno;
  struct stat info {};
  if (saved == ENOENT) {
    return fail(ErrorCode::kNotFound, "{}: the folder {} does not exist (create it first)", subject, folder);
  }
  if (saved == ENOTDIR) {
    if (::stat(folder.c_str(), &info) == 0) {
      return fail(ErrorCode::kNotFound, "{}: {} is a {}, not a folder", subject, folder,
                  file_kind(info.st_mode));
    }
    return fail(ErrorCode::kNotFound, "{}: a part of {} is a file, not a folder", subject, folder);
  }
  return tl::make_unexpected(output_errno(saved, subject, fmt::format("cannot open the folder {}", folder)));
}

}  // namespace

Result<OutputFile> OutputFile::open(const std::string& path, std::string_view flag, OutputMode mode) {
  OutputFile out;
  out.path_ = path;
  out.flag_ = std::string(flag);
  const std::string subject = out.describe();
  if (path.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "{}: the path is empty; give a file name, or - for standard output",
                flag.empty() ? std::string_view("output") : flag);
  }
  if (const auto fd = named_descriptor(path)) {
    const int flags = ::fcntl(*fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) {
      return fail(ErrorCode::kInvalidArgument, "{}: descriptor {} is not open for writing", subject, *fd);
    }
    out.kind_ = OutputKind::kDescriptor;
    out.fd_ = *fd;
    return out;
  }
  std::string target = path;  // the file to replace: a link's target for a link
  struct stat info {};
  const bool exists = ::lstat(path.c_str(), &info) == 0;
  if (!exists && errno != ENOENT && errno != ENOTDIR) {
    return tl::make_unexpected(output_errno(errno, subject, "cannot look it up"));
  }
  if (exists) {
    if (S_ISLNK(info.st_mode)) {
      // Followed: a link is never replaced by a file; what it points to is written (or replaced).
      if (::stat(path.c_str(), &info) != 0) {
        if (errno == ENOENT) {
          return fail(ErrorCode::kInvalidArgument,
                      "{}: is a symbolic link to a missing file; give the path of the file to write",
                      subject);
        }
        return tl::make_unexpected(output_errno(errno, subject, "cannot follow the symbolic link"));
      }
      if (S_ISREG(info.st_mode) && mode == OutputMode::kReplace) {
        char* resolved = ::realpath(path.c_str(), nullptr);
        if (resolved == nullptr) {
          return tl::make_unexpected(output_errno(errno, subject, "cannot follow the symbolic link"));
        }
        target = resolved;
        std::free(resolved);  // NOLINT(cppcoreguidelines-no-malloc): realpath's buffer
      }
    }
    if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
      if (::access(path.c_str(), W_OK) != 0) {
        return tl::make_unexpected(output_errno(errno, subject, "cannot write"));
      }
      out.kind_ = OutputKind::kPassThrough;
      return out;
    }
    if (S_ISDIR(info.st_mode)) {
      return fail(ErrorCode::kInvalidArgument, "{}: is a directory; give the path of a file (in it, say)",
                  subject);
    }
    if (!S_ISREG(info.st_mode)) {
      return fail(ErrorCode::kInvalidArgument, "{}: is a {}, not a file joule can write", subject,
                  file_kind(info.st_mode));
    }
  }
  const auto [folder, name] = split_path(target);
  if (name.empty()) {
    return fail(ErrorCode::kInvalidArgument, "{}: ends with '/'; give a file name", subject);
  }
  const int folder_fd = JOULE_TRY(open_output_folder(folder, subject));
  if (mode == OutputMode::kAppend) {
    ::close(folder_fd);
    // Read and write, so that read_head() can check the header; write-only where reading is not allowed.
    int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd < 0 && errno == EACCES) {
      fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
    }
    if (fd < 0) {
      return tl::make_unexpected(output_errno(errno, subject, "cannot open it for appending"));
    }
    out.kind_ = OutputKind::kAppend;
    out.fd_ = fd;
    return out;
  }
  out.kind_ = OutputKind::kReplace;
  out.folder_fd_ = folder_fd;
  out.target_name_ = name;
  // A random name, created exclusively and never through a link: nobody can plant a file or a link at it
  // ahead of time. The name is cut so that it stays within NAME_MAX.
  constexpr size_t kMostNameBytes = 200;
  constexpr int kAttempts = 16;
  int fd = -1;
  for (int attempt = 0; attempt < kAttempts && fd < 0; ++attempt) {
    out.temporary_name_ = fmt::format(".{}.{}.tmp", name.substr(0, kMostNameBytes), random_hex());
    fd = ::openat(folder_fd, out.temporary_name_.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) {
      break;
    }
  }
  if (fd < 0) {
    const int saved = errno;
    out.temporary_name_.clear();
    if (saved == ENOENT) {  // the folder is there (it was opened): its file system takes no new file (/proc)
      return fail(ErrorCode::kIo, "{}: cannot create a file in {}: its file system takes no new files",
                  subject, folder);
    }
    return tl::make_unexpected(
        output_errno(saved, subject, fmt::format("cannot create a file in {}", folder)));
  }
  out.fd_ = fd;
  // A replaced file keeps its permissions (a private file stays private); a new one gets 0666 less the umask.
  if (exists && ::fchmod(fd, info.st_mode & 0777) != 0) {
    return tl::make_unexpected(output_errno(errno, subject, "cannot set the mode of the temporary file"));
  }
  return out;
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      flag_(std::move(other.flag_)),
      kind_(other.kind_),
      fd_(std::exchange(other.fd_, -1)),
      folder_fd_(std::exchange(other.folder_fd_, -1)),
      target_name_(std::move(other.target_name_)),
      temporary_name_(std::exchange(other.temporary_name_, {})),
      written_(other.written_) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    flag_ = std::move(other.flag_);
    kind_ = other.kind_;
    fd_ = std::exchange(other.fd_, -1);
    folder_fd_ = std::exchange(other.folder_fd_, -1);
    target_name_ = std::move(other.target_name_);
    temporary_name_ = std::exchange(other.temporary_name_, {});
    written_ = other.written_;
  }
  return *this;
}

OutputFile::~OutputFile() {
  release();
}

void OutputFile::release() noexcept {
  if (kind_ != OutputKind::kDescriptor && fd_ >= 0) {
    ::close(fd_);
  }
  fd_ = -1;
  if (folder_fd_ >= 0) {
    if (!written_ && !temporary_name_.empty()) {
      ::unlinkat(folder_fd_, temporary_name_.c_str(), 0);
    }
    ::close(folder_fd_);
    folder_fd_ = -1;
  }
  temporary_name_.clear();
}

std::string OutputFile::describe() const {
  return output_subject(flag_, path_);
}

Result<void> OutputFile::write(std::string_view content) {
  const std::string subject = describe();
  switch (kind_) {
    case OutputKind::kDescriptor: {
      // What the process printed before through its buffered streams comes first.
      if (fd_ == 1 || fd_ == 2) {
        std::cout.flush();
        std::cerr.flush();
        std::fflush(fd_ == 1 ? stdout : stderr);
      }
      if (const int failed = write_all(fd_, content); failed != 0) {
        return tl::make_unexpected(output_errno(failed, subject, "cannot write"));
      }
      return {};
    }
    case OutputKind::kPassThrough: {
      // No O_CREAT, no O_TRUNC: whatever is there now is opened as it is, never created or emptied.
      const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) {
        return tl::make_unexpected(output_errno(errno, subject, "cannot open"));
      }
      struct stat info {};
      if (::fstat(fd, &info) != 0 || !(S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode))) {
        ::close(fd);
        return fail(ErrorCode::kIo, "{}: was replaced by a {} meanwhile; nothing was written", subject,
                    file_kind(info.st_mode));
      }
      const int failed = write_all(fd, content);
      const bool closed = ::close(fd) == 0;
      if (failed != 0 || !closed) {
        return tl::make_unexpected(output_errno(failed != 0 ? failed : errno, subject, "cannot write"));
      }
      return {};
    }
    case OutputKind::kAppend: {
      if (fd_ < 0) {
        return fail(ErrorCode::kState, "{}: not open", subject);
      }
      // One write(2) on an O_APPEND descriptor: the kernel places it at the end whole, so the rows of
      // processes appending at the same time do not interleave.
      const ssize_t n = ::write(fd_, content.data(), content.size());
      if (n < 0) {
        return tl::make_unexpected(output_errno(errno, subject, "cannot append"));
      }
      if (static_cast<size_t>(n) != content.size()) {
        return fail(ErrorCode::kIo, "{}: cannot append: the disk took only {} of {} bytes", subject, n,
                    content.size());
      }
      return {};
    }
    case OutputKind::kReplace:
      break;
  }
  if (written_ || fd_ < 0) {
    return fail(ErrorCode::kState, "{}: already written", subject);
  }
  const auto abandon = [&](int errno_value, std::string_view what) {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    ::unlinkat(folder_fd_, temporary_name_.c_str(), 0);
    temporary_name_.clear();
    return tl::make_unexpected(output_errno(errno_value, subject, what));
  };
  if (const int failed = write_all(fd_, content); failed != 0) {
    return abandon(failed, "cannot write");
  }
  if (::fsync(fd_) != 0) {
    return abandon(errno, "cannot flush");
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    return abandon(errno, "cannot flush");
  }
  // A device node or a link put at the path since open() is left alone, never replaced by a file.
  struct stat now {};
  if (::fstatat(folder_fd_, target_name_.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(now.st_mode)) {
    const std::string_view kind = file_kind(now.st_mode);
    ::unlinkat(folder_fd_, temporary_name_.c_str(), 0);
    temporary_name_.clear();
    return fail(ErrorCode::kIo, "{}: was replaced by a {} meanwhile; nothing was written", subject, kind);
  }
  if (::renameat(folder_fd_, temporary_name_.c_str(), folder_fd_, target_name_.c_str()) != 0) {
    return abandon(errno, "cannot replace it");
  }
  written_ = true;
  return {};
}

Result<std::string> OutputFile::read_head(size_t max_bytes) const {
  std::string head;
  if (kind_ != OutputKind::kAppend || fd_ < 0) {
    return head;
  }
  head.resize(max_bytes);
  size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::pread(fd_, head.data() + got, max_bytes - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return tl::make_unexpected(output_errno(errno, describe(), "cannot read"));
    }
    if (n == 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  head.resize(got);
  return head;
}

Result<void> write_file_atomic(const std::string& path, std::string_view content) {
  auto out = JOULE_TRY(OutputFile::open(path));
  return out.write(content);
}

}  // namespace joule
