// SPDX-License-Identifier: Apache-2.0
#include "listener.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "joule/core/log.hpp"

namespace joule::daemon {

namespace {

constexpr mode_t kSocketMode = 0666;
// Only the daemon's user opens the lock: anyone who could open it could also flock it and keep the daemon
// from starting.
constexpr mode_t kLockMode = 0600;
constexpr int kBacklog = 128;

std::string system_error() {
  return std::strerror(errno);
}

// @return true if some process accepts connections on the socket file `path`.
bool answers(const sockaddr_un& address) {
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    return false;
  }
  const bool connected = ::connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(probe);
  return connected;
}

std::string read_small_file(int fd) {
  char buffer[64] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

// Opens (or creates) the lock file `name` in `folder_fd`, refusing a link or a file the daemon's user did
// not make: the daemon truncates and writes it, which must never reach another file.
Result<UniqueFd> open_lock(int folder_fd, const std::string& name, const std::string& lock_path,
                           uid_t daemon_uid) {
  auto lock = JOULE_TRY(open_own_file_at(folder_fd, name, lock_path, O_RDWR, kLockMode, daemon_uid,
                                         {"the lock file", "overwrite", "--socket"}));
  struct stat info {};
  if (::fstat(lock.get(), &info) == 0 && (info.st_mode & 07777) != kLockMode) {
    ::fchmod(lock.get(), kLockMode);  // a lock made 0644 by an earlier release
  }
  return lock;
}

}  // namespace

Result<Listener> Listener::open(const std::string& path, uid_t daemon_uid) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return fail(ErrorCode::kInvalidArgument, "--socket '{}': a socket path must have 1 to {} bytes", path,
                sizeof(address.sun_path) - 1);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  const std::filesystem::path as_path(path);
  if (!as_path.has_filename()) {
    return fail(ErrorCode::kInvalidArgument, "--socket '{}': a socket path must end with a file name", path);
  }
  Listener listener;
  listener.path_ = path;
  listener.name_ = as_path.filename().string();
  auto folder = JOULE_TRY(open_checked_folder(as_path.parent_path().string(), daemon_uid));
  listener.folder_ = std::move(folder);
  const int folder_fd = listener.folder_.get();
  // The lock makes "is another daemon serving this path?" race-free between two starting daemons.
  const std::string lock_path = path + ".lock";
  auto lock = JOULE_TRY(open_lock(folder_fd, listener.name_ + ".lock", lock_path, daemon_uid));
  listener.lock_fd_ = lock.release();
  if (::flock(listener.lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const std::string pid = read_small_file(listener.lock_fd_);
    return fail(ErrorCode::kState,
                "another joule daemon{} is serving {} (it holds {}); stop it or choose another "
                "--socket",
                pid.empty() ? "" : " (pid " + pid + ")", path, lock_path);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(listener.lock_fd_, 0) != 0 || ::pwrite(listener.lock_fd_, pid.data(), pid.size(), 0) < 0) {
    log().warn("cannot write the pid to {}: {}", lock_path, system_error());
  }
  struct stat existing {};
  if (::fstatat(folder_fd, listener.name_.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      return fail(ErrorCode::kState, "{} exists and is not a socket; remove it or choose another --socket",
                  path);
    }
    if (existing.st_uid != daemon_uid) {
      // Someone else's socket where clients look for the daemon's: it could be listening to catch them.
      return fail(
          ErrorCode::kPermissionDenied,
          "{} is a socket of uid {}, not of the daemon's user (uid {}): another user made it; remove it "
          "(after checking who made it) or choose another --socket",
          path, existing.st_uid, daemon_uid);
    }
    if (answers(address)) {
      return fail(ErrorCode::kState, "a process already answers on {}; stop it or choose another --socket",
                  path);
    }
    // Nobody answers: a daemon that died without cleaning up left it.
    if (::unlinkat(folder_fd, listener.name_.c_str(), 0) != 0) {
      return fail(ErrorCode::kIo, "cannot remove the stale socket {}: {}", path, system_error());
    }
    log().info("removed the stale socket {}", path);
  }
  listener.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener.fd_ < 0) {
    return fail(ErrorCode::kIo, "cannot create a Unix socket: {}", system_error());
  }
  // bind() never follows a link in the last component (it fails with EADDRINUSE on any existing name).
  if (::bind(listener.fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return fail(ErrorCode::kIo, "cannot bind {}: {}", path, system_error());
  }
  // bind() went by path: the socket must now be in the checked folder, as the daemon's.
  struct stat created {};
  if (::fstatat(folder_fd, listener.name_.c_str(), &created, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(created.st_mode) || created.st_uid != daemon_uid) {
    return fail(ErrorCode::kIo,
                "the socket {} is not in the checked folder after bind: its path changed meanwhile", path);
  }
  listener.device_ = created.st_dev;
  listener.inode_ = created.st_ino;
  // The mode after bind depends on the umask; anyone may connect, the daemon judges credentials. Through the
  // folder's handle: nobody else can replace a file in it.
  if (::fchmodat(folder_fd, listener.name_.c_str(), kSocketMode, 0) != 0) {
    return fail(ErrorCode::kIo, "cannot make {} mode 0666: {}", path, system_error());
  }
  if (::listen(listener.fd_, kBacklog) != 0) {
    return fail(ErrorCode::kIo, "cannot listen on {}: {}", path, system_error());
  }
  return listener;
}

Listener::Listener(Listener&& other) noexcept
    : path_(std::move(other.path_)),
      name_(std::move(other.name_)),
      folder_(std::move(other.folder_)),
      fd_(std::exchange(other.fd_, -1)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      device_(other.device_),
      inode_(std::exchange(other.inode_, 0)) {}

Listener::~Listener() {
  if (fd_ >= 0) {
    ::close(fd_);
    // Remove the file only if it is still ours: never another daemon's socket that replaced it.
    struct stat current {};
    if (inode_ != 0 && folder_.valid() &&
        ::fstatat(folder_.get(), name_.c_str(), &current, AT_SYMLINK_NOFOLLOW) == 0 &&
        current.st_dev == device_ && current.st_ino == inode_) {
      ::unlinkat(folder_.get(), name_.c_str(), 0);
    }
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
  }
}

}  // namespace joule::daemon
