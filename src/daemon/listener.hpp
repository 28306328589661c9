// SPDX-License-Identifier: Apache-2.0
// The daemon's listening Unix socket: folder, lock file, stale-socket removal, permissions, cleanup. The
// folder is checked (safe_files.hpp) and every file in it is reached through a handle on it.
#pragma once

#include <string>

#include <sys/types.h>

#include "joule/core/error.hpp"

#include "safe_files.hpp"

namespace joule::daemon {

/// A bound, listening, non-blocking Unix stream socket that removes its file when destroyed (if the file
/// is still the one it created). Holds `<path>.lock` (flock) for its lifetime.
class Listener {
 public:
  /// @param daemon_uid the daemon's effective uid: the socket's folder and every folder above it must belong
  /// to root or to it, and the files it finds beside the socket (lock, stale socket) must be its own.
  /// @return kInvalidArgument (path too long), kPermissionDenied (an unsafe folder, or a file another user
  /// planted: one line naming it and how to fix it), kState (another daemon holds the lock, or a process
  /// answers on the socket), kIo (any system call failing, with the path and the system error).
  static Result<Listener> open(const std::string& path, uid_t daemon_uid);
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&&) = delete;
  Listener(const Listener&) = delete;
  ~Listener();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  /// @return a handle on the socket's checked folder (O_PATH), valid as long as the listener.
  int folder_fd() const { return folder_.get(); }

 private:
  Listener() = default;

  std::string path_;
  std::string name_;  // the socket's file name in folder_
  UniqueFd folder_;
  int fd_ = -1;
  int lock_fd_ = -1;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace joule::daemon
