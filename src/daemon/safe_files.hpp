// SPDX-License-Identifier: Apache-2.0
// The daemon's files beside its socket (lock, state, temporary state), opened so that nothing another user
// can plant in or around the socket's folder redirects a write of the daemon (root) to another file, or feeds
// it a state file to replay (private to joule_daemon; docs/daemon.md, "Security of the socket folder").
//
// Every file is reached through a handle on the checked folder (openat, renameat, unlinkat), never through
// its path again, and never through a symbolic link.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <sys/stat.h>
#include <sys/types.h>

#include "joule/core/error.hpp"

namespace joule::daemon {

/// An open file descriptor, closed when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

/// Opens `folder` (created mode 0755 with its missing parents) as a directory handle, after checking it and
/// every folder above it: each must belong to root or to `daemon_uid`, and none may be writable by its group
/// or by others unless it is sticky (then other users cannot rename or remove the daemon's files in it).
/// @return kPermissionDenied naming the first unsafe folder, its owner or mode, and how to fix it; kIo.
Result<UniqueFd> open_checked_folder(const std::string& folder, uid_t daemon_uid);

/// @return why a file the daemon is about to trust is not one it can have made itself: not a regular file,
/// owned by another uid than `daemon_uid`, more than one hard link, or writable by its group or by others;
/// nullopt if none of these.
std::optional<std::string> why_not_own_file(const struct stat& info, uid_t daemon_uid);

/// Writes `content` to `name` in `folder_fd` atomically: into `name.tmp.PID`, created afresh with O_EXCL and
/// O_NOFOLLOW (a file or link already there is removed first, never opened), mode 0600, flushed, then renamed
/// over `name`. `path` names the file in errors.
/// @return kIo (or kPermissionDenied) naming the file and the system error; any old file is left in place.
Result<void> write_file_atomic_at(int folder_fd, const std::string& name, std::string_view content,
                                  const std::string& path);

/// @return "mode 0644"-style text for the permission bits of `mode`.
std::string mode_text(mode_t mode);

}  // namespace joule::daemon
