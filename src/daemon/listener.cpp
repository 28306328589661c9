// SPDX-License-Identifier: Apache-2.0
#include "listener.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

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
constexpr mode_t kFolderMode = 0755;
constexpr mode_t kLockMode = 0644;
constexpr int kBacklog = 128;

std::string system_error() {
  return std::strerror(errno);
}

// Creates each missing folder of `folder` with mode 0755 (regardless of the umask); existing ones are
// left as they are.
Result<void> make_folders(const std::filesystem::path& folder) {
  if (folder.empty() || std::filesystem::exists(folder)) {
    return {};
  }
  if (auto parent = make_folders(folder.parent_path()); !parent) {
    return parent;
  }
  if (::mkdir(folder.c_str(), kFolderMode) != 0 && errno != EEXIST) {
    return fail(ErrorCode::kIo, "cannot create the socket folder {}: {}", folder.string(), system_error());
  }
  ::chmod(folder.c_str(), kFolderMode);
  return {};
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

}  // namespace

Result<Listener> Listener::open(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return fail(ErrorCode::kInvalidArgument, "--socket '{}': a socket path must have 1 to {} bytes", path,
                sizeof(address.sun_path) - 1);
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  if (auto folders = make_folders(std::filesystem::path(path).parent_path()); !folders) {
    return tl::make_unexpected(folders.error());
  }
  Listener listener;
  listener.path_ = path;
  // The lock makes "is another daemon serving this path?" race-free between two starting daemons.
  const std::string lock_path = path + ".lock";
  listener.lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kLockMode);
  if (listener.lock_fd_ < 0) {
    return fail(ErrorCode::kIo, "cannot open the lock file {}: {}", lock_path, system_error());
  }
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
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      return fail(ErrorCode::kState, "{} exists and is not a socket; remove it or choose another --socket",
                  path);
    }
    if (answers(address)) {
      return fail(ErrorCode::kState, "a process already answers on {}; stop it or choose another --socket",
                  path);
    }
    // Nobody answers: a daemon that died without cleaning up left it.
    if (::unlink(path.c_str()) != 0) {
      return fail(ErrorCode::kIo, "cannot remove the stale socket {}: {}", path, system_error());
    }
    log().info("removed the stale socket {}", path);
  }
  listener.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener.fd_ < 0) {
    return fail(ErrorCode::kIo, "cannot create a Unix socket: {}", system_error());
  }
  if (::bind(listener.fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return fail(ErrorCode::kIo, "cannot bind {}: {}", path, system_error());
  }
  struct stat created {};
  if (::stat(path.c_str(), &created) == 0) {
    listener.device_ = created.st_dev;
    listener.inode_ = created.st_ino;
  }
  // The mode after bind depends on the umask; anyone may connect, the daemon judges credentials.
  if (::chmod(path.c_str(), kSocketMode) != 0) {
    return fail(ErrorCode::kIo, "cannot make {} mode 0666: {}", path, system_error());
  }
  if (::listen(listener.fd_, kBacklog) != 0) {
    return fail(ErrorCode::kIo, "cannot listen on {}: {}", path, system_error());
  }
  return listener;
}

Listener::Listener(Listener&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      device_(other.device_),
      inode_(std::exchange(other.inode_, 0)) {}

Listener::~Listener() {
  if (fd_ >= 0) {
    ::close(fd_);
    // Remove the file only if it is still ours: never another daemon's socket that replaced it.
    struct stat current {};
    if (inode_ != 0 && ::lstat(path_.c_str(), &current) == 0 && current.st_dev == device_ &&
        current.st_ino == inode_) {
      ::unlink(path_.c_str());
    }
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
  }
}

}  // namespace joule::daemon
