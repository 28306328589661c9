// SPDX-License-Identifier: Apache-2.0
#include "safe_files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "joule/core/file.hpp"

namespace joule::daemon {

namespace {

namespace fs = std::filesystem;

constexpr mode_t kFolderMode = 0755;
constexpr mode_t kPrivateFileMode = 0600;

std::string system_error() {
  return std::strerror(errno);
}

std::string whom(uid_t daemon_uid) {
  return daemon_uid == 0 ? std::string("root")
                         : fmt::format("root or to the daemon's user (uid {})", daemon_uid);
}

std::string as_whom(uid_t daemon_uid) {
  return daemon_uid == 0 ? std::string("root") : fmt::format("uid {}", daemon_uid);
}

// Creates each missing folder of `folder`, the last with `mode` and the others 0755 (regardless of the
// umask); existing ones, and whatever else already has one of their names, are left for the check that
// follows. `role` names the folder in errors.
Result<void> make_folders(const fs::path& folder, mode_t mode, const FolderRole& role) {
  struct stat info {};
  if (folder.empty() || ::lstat(folder.c_str(), &info) == 0) {
    return {};
  }
  if (auto parent = make_folders(folder.parent_path(), kFolderMode, role); !parent) {
    return parent;
  }
  if (::mkdir(folder.c_str(), mode) != 0) {
    if (errno == EEXIST) {
      return {};
    }
    return fail(ErrorCode::kIo, "cannot create {} {}: {}", role.created, folder.string(), system_error());
  }
  // On a handle of what was created, never by path: a chmod by path would follow a link put there meanwhile.
  const UniqueFd made(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (made.valid()) {
    ::fchmod(made.get(), mode);
  }
  return {};
}

// The rule of open_checked_folder() for one folder; `what` names it ("the socket folder /run/joule"), `last`
// says whether it is the folder itself or one above it.
Result<void> check_folder(const struct stat& info, const std::string& what, const std::string& path,
                          bool last, uid_t daemon_uid, const FolderRole& role) {
  const std::string risk =
      last ? fmt::format("could plant files that the daemon opens as {}", as_whom(daemon_uid))
           : fmt::format("could replace {}", role.replaced);
  if (info.st_uid != 0 && info.st_uid != daemon_uid) {
    return fail(ErrorCode::kPermissionDenied,
                "{} belongs to uid {}, not to {}: its owner {}; choose a folder of root's for {} (e.g. {})",
                what, info.st_uid, whom(daemon_uid), risk, role.flag, role.example);
  }
  const bool by_group = (info.st_mode & S_IWGRP) != 0 && (last || !role.group_may_write_above);
  const bool by_others = (info.st_mode & S_IWOTH) != 0;
  if ((by_group || by_others) && (info.st_mode & S_ISVTX) == 0) {
    return fail(ErrorCode::kPermissionDenied,
                "{} is writable by {} ({}) and not sticky: {} {}; make it {:04o} (chmod go-w {}) or sticky "
                "(chmod +t {}), or choose another {}",
                what,
                by_group && by_others ? "its group and others"
                : by_group            ? "its group"
                                      : "others",
                mode_text(info.st_mode), by_others ? "any user" : "any member of its group", risk,
                static_cast<unsigned>(role.mode), path, path, role.flag);
  }
  return {};
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

int UniqueFd::release() {
  return std::exchange(fd_, -1);
}

std::string mode_text(mode_t mode) {
  return fmt::format("mode {:04o}", static_cast<unsigned>(mode & 07777));
}

Result<UniqueFd> open_checked_folder(const std::string& folder, uid_t daemon_uid, const FolderRole& role) {
  std::error_code error;
  const fs::path absolute = fs::absolute(folder.empty() ? fs::path(".") : fs::path(folder), error);
  if (error) {
    return fail(ErrorCode::kIo, "cannot resolve {} {}: {}", role.folder, folder, error.message());
  }
  JOULE_TRY(make_folders(absolute, role.mode, role));
  // Links in the given path are resolved once, here; the walk below then refuses to follow any, so what it
  // checks is what it opens.
  const fs::path canonical = fs::canonical(absolute, error);
  if (error) {
    return fail(ErrorCode::kIo, "cannot resolve {} {}: {}", role.folder, absolute.string(), error.message());
  }
  UniqueFd current(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!current.valid()) {
    return fail(ErrorCode::kIo, "cannot open /: {}", system_error());
  }
  fs::path walked = "/";
  const fs::path relative = canonical.relative_path();
  const auto check = [&](int fd, bool last) -> Result<void> {
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      return fail(ErrorCode::kIo, "cannot inspect {}: {}", walked.string(), system_error());
    }
    if (!S_ISDIR(info.st_mode)) {
      return fail(ErrorCode::kIo, "{} is not a folder", walked.string());
    }
    const std::string what = last ? fmt::format("{} {}", role.folder, walked.string())
                                  : fmt::format("{} ({})", walked.string(), role.above);
    return check_folder(info, what, walked.string(), last, daemon_uid, role);
  };
  JOULE_TRY(check(current.get(), relative.empty()));
  for (auto part = relative.begin(); part != relative.end(); ++part) {
    walked /= *part;
    UniqueFd next(::openat(current.get(), part->c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      // A link or a missing folder where the resolved path had a folder: something changed it meanwhile.
      return fail(ErrorCode::kIo, "cannot open the folder {} without following links: {}", walked.string(),
                  system_error());
    }
    JOULE_TRY(check(next.get(), std::next(part) == relative.end()));
    current = std::move(next);
  }
  return current;
}

std::optional<std::string> why_not_own_file(const struct stat& info, uid_t daemon_uid) {
  if (!S_ISREG(info.st_mode)) {
    return std::string("it is not a regular file");
  }
  if (info.st_uid != daemon_uid) {
    return fmt::format("it belongs to uid {}, not to the daemon's user ({})", info.st_uid,
                       as_whom(daemon_uid));
  }
  if (info.st_nlink != 1) {
    return fmt::format("it has {} hard links (it may be another file of {} under a second name)",
                       info.st_nlink, as_whom(daemon_uid));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("other users may write it ({})", mode_text(info.st_mode));
  }
  return std::nullopt;
}

Result<UniqueFd> open_own_file_at(int folder_fd, const std::string& name, const std::string& path, int flags,
                                  mode_t create_mode, uid_t daemon_uid, const OwnFileRole& role) {
  const auto planted_link = [&] {
    return fail(ErrorCode::kPermissionDenied,
                "{} {} is a symbolic link: someone planted it to make the daemon {} another file; it is not "
                "followed: remove it (after checking who made it) or choose another {}",
                role.what, path, role.verb, role.flag);
  };
  const auto not_own = [&](const std::string& why) {
    return fail(ErrorCode::kPermissionDenied,
                "{} {} was not made by the daemon ({}); it is left untouched: remove it (after checking who "
                "made it) or choose another {}",
                role.what, path, why, role.flag);
  };
  struct stat info {};
  if (::fstatat(folder_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(info.st_mode)) {
      return planted_link();
    }
    if (const auto why = why_not_own_file(info, daemon_uid)) {
      return not_own(*why);
    }
  }
  // O_NONBLOCK: a FIFO swapped in meanwhile must not block the open (it is then refused as not a regular
  // file); it changes nothing for a regular file.
  UniqueFd file(
      ::openat(folder_fd, name.c_str(), flags | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, create_mode));
  if (!file.valid()) {
    if (errno == ELOOP) {
      return planted_link();
    }
    return fail(ErrorCode::kIo, "cannot open {} {}: {}", role.what, path, system_error());
  }
  if (::fstat(file.get(), &info) != 0) {
    return fail(ErrorCode::kIo, "cannot inspect {} {}: {}", role.what, path, system_error());
  }
  if (const auto why = why_not_own_file(info, daemon_uid)) {
    return not_own(*why);
  }
  return file;
}

Result<void> write_file_atomic_at(int folder_fd, const std::string& name, std::string_view content,
                                  const std::string& path) {
  const std::string temporary = fmt::format("{}.tmp.{}", name, ::getpid());
  const std::string temporary_path = fmt::format("{}.tmp.{}", path, ::getpid());
  constexpr int kCreate = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd file(::openat(folder_fd, temporary.c_str(), kCreate, kPrivateFileMode));
  if (!file.valid() && errno == EEXIST) {
    // Left by an earlier process with this pid, or planted: unlinkat removes the name itself (a link, never
    // its target), and the file is then created afresh.
    if (::unlinkat(folder_fd, temporary.c_str(), 0) != 0 && errno != ENOENT) {
      return tl::make_unexpected(errno_error(errno, "cannot remove the leftover", temporary_path));
    }
    file = UniqueFd(::openat(folder_fd, temporary.c_str(), kCreate, kPrivateFileMode));
  }
  if (!file.valid()) {
    return tl::make_unexpected(errno_error(errno, "cannot create", temporary_path));
  }
  const auto abandon = [&](int saved, std::string_view what, const std::string& on) {
    ::unlinkat(folder_fd, temporary.c_str(), 0);
    return tl::make_unexpected(errno_error(saved, what, on));
  };
  // The mode whatever the umask: the next daemon replays the file only if it is 0600 or 0644.
  if (::fchmod(file.get(), kPrivateFileMode) != 0) {
    return abandon(errno, "cannot set the mode of", temporary_path);
  }
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(file.get(), content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return abandon(errno, "cannot write", temporary_path);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0) {
    return abandon(errno, "cannot flush", temporary_path);
  }
  if (::close(file.release()) != 0) {
    return abandon(errno, "cannot flush", temporary_path);
  }
  if (::renameat(folder_fd, temporary.c_str(), folder_fd, name.c_str()) != 0) {
    return abandon(errno, "cannot replace", path);
  }
  return {};
}

Result<std::string> read_private_file(const std::string& path, PrivateFileRole role, uid_t daemon_uid,
                                      size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return fail(ErrorCode::kNotFound, "the {} {} does not exist", role.what, path);
    }
    if (error == ELOOP) {
      return fail(ErrorCode::kPermissionDenied,
                  "the {} {} is a symbolic link: refused (name the file itself)", role.what, path);
    }
    return fail(ErrorCode::kIo, "cannot open the {} {}: {}", role.what, path, std::strerror(error));
  }
  const UniqueFd file(fd);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) {
    return fail(ErrorCode::kIo, "cannot stat the {} {}: {}", role.what, path, std::strerror(errno));
  }
  const std::string fix = fmt::format("`chown root: {0} && chmod 600 {0}`", path);
  if (const auto why = why_not_own_file(info, daemon_uid)) {
    return fail(ErrorCode::kPermissionDenied, "the {} {} is refused: {}; {}", role.what, path, *why, fix);
  }
  if ((info.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    return fail(ErrorCode::kPermissionDenied, "the {} {} is readable by {} ({}): {}; {}", role.what, path,
                (info.st_mode & S_IROTH) != 0 ? "every user" : "its group", mode_text(info.st_mode),
                role.secret, fix);
  }
  if (static_cast<size_t>(info.st_size) > max_bytes) {
    return fail(ErrorCode::kParse, "the {} {} holds {} bytes, more than the {} accepted", role.what, path,
                info.st_size, max_bytes);
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::read(file.get(), text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      return fail(ErrorCode::kIo, "cannot read the {} {}: {}", role.what, path, std::strerror(errno));
    }
    if (got == 0) {
      break;
    }
    done += static_cast<size_t>(got);
  }
  text.resize(done);
  return text;
}

}  // namespace joule::daemon
