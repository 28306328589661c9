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

/// Whose folder open_checked_folder() checks: the words of its messages and what it allows.
struct FolderRole {
  std::string_view folder = "the socket folder";           ///< names the folder itself
  std::string_view created = "the socket folder";          ///< names a folder it cannot create
  std::string_view above = "a folder above the socket's";  ///< names a folder above it
  std::string_view replaced = "the socket's folder";  ///< what whoever can write a folder above could replace
  std::string_view flag = "--socket";                 ///< the flag that chooses another
  std::string_view example = "/run/joule";            ///< a safe choice
  mode_t mode = 0755;                                 ///< the mode a missing folder is created with
  /// Folders above may be writable by their group (Ubuntu's /var/log is root:syslog 0775); never by others
  /// unless sticky. The folder itself never.
  bool group_may_write_above = false;
};

/// The socket's folder (Listener) and the audit log's (AuditLog).
inline constexpr FolderRole kSocketFolder{};
inline constexpr FolderRole kAuditLogFolder{.folder = "the audit log's folder",
                                            .created = "folder",
                                            .above = "a folder above the audit log's",
                                            .replaced = "the audit log's folder",
                                            .flag = "--audit-log",
                                            .example = "/var/log/joule",
                                            .mode = 0750,
                                            .group_may_write_above = true};

/// Opens `folder` (created with role.mode, its missing parents 0755) as a directory handle, after checking it
/// and every folder above it: each must belong to root or to `daemon_uid`, and none may be writable by its
/// group or by others unless it is sticky (then other users cannot rename or remove the daemon's files in
/// it); see FolderRole::group_may_write_above.
/// @return kPermissionDenied naming the first unsafe folder, its owner or mode, and how to fix it; kIo.
Result<UniqueFd> open_checked_folder(const std::string& folder, uid_t daemon_uid,
                                     const FolderRole& role = kSocketFolder);

/// How open_own_file_at() names the file in its refusals.
struct OwnFileRole {
  std::string_view what;  ///< "the lock file", "the audit log"
  std::string_view verb;  ///< what a planted link would make the daemon do to another file: "overwrite"
  std::string_view flag;  ///< the flag that chooses another: "--socket"
};

/// Opens (or creates, with `create_mode`) `name` in `folder_fd` with `flags` (plus O_CREAT, O_NOFOLLOW,
/// O_NONBLOCK, O_CLOEXEC), refusing a symbolic link and any file why_not_own_file() refuses, judged both
/// before opening (the kernel may refuse O_CREAT on another user's name in a sticky folder, hiding the
/// reason) and on what was opened (nothing can be swapped in between). `path` names the file in messages.
/// @return kPermissionDenied ("ROLE PATH is a symbolic link: …" / "ROLE PATH was not made by the daemon
/// (why); …"), kIo naming the path and the system error.
Result<UniqueFd> open_own_file_at(int folder_fd, const std::string& name, const std::string& path, int flags,
                                  mode_t create_mode, uid_t daemon_uid, const OwnFileRole& role);

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

/// What a private file is, for read_private_file()'s messages.
struct PrivateFileRole {
  const char* what;    ///< e.g. "token file": "the token file /etc/joule/tokens is …"
  const char* secret;  ///< why others must not read it, e.g. "its tokens are secrets"
};

/// Reads a file of secrets (the daemon's token file, its TLS private key): a regular file reached without a
/// symbolic link, one link, owned by root or `daemon_uid`, neither readable nor writable by its group or by
/// others (mode 0600 or 0400), at most `max_bytes`.
/// @return its text; kNotFound; kPermissionDenied naming the file, its owner or mode, and the command that
/// fixes it; kParse over `max_bytes`; kIo.
Result<std::string> read_private_file(const std::string& path, PrivateFileRole role, uid_t daemon_uid,
                                      size_t max_bytes);

}  // namespace joule::daemon
