// SPDX-License-Identifier: Apache-2.0
// The daemon's listening Unix socket: folder, lock file, stale-socket removal, permissions, cleanup.
#pragma once

#include <string>

#include <sys/types.h>

#include "joule/core/error.hpp"

namespace joule::daemon {

/// A bound, listening, non-blocking Unix stream socket that removes its file when destroyed (if the file
/// is still the one it created). Holds `<path>.lock` (flock) for its lifetime.
class Listener {
 public:
  /// @return kInvalidArgument (path too long), kState (another daemon holds the lock, or a process answers
  /// on the socket), kIo (any system call failing, with the path and the system error).
  static Result<Listener> open(const std::string& path);
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&&) = delete;
  Listener(const Listener&) = delete;
  ~Listener();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  Listener() = default;

  std::string path_;
  int fd_ = -1;
  int lock_fd_ = -1;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace joule::daemon
