// SPDX-License-Identifier: Apache-2.0
// joule/daemon/access.hpp — who may read and who may control GPUs through `joule daemon`, judged by the
// peer credentials of each connection (SO_PEERCRED: uid, gid, pid).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/daemon_protocol.hpp"

namespace joule::daemon {

using device::daemon_protocol::Right;

/// The process at the other end of a connection, as the kernel reports it when it connected.
struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
};

/// The rules, as given on the command line. Users and groups are names or numeric ids.
struct AccessRules {
  std::vector<std::string> control_users;   ///< --allow-user: read and control
  std::vector<std::string> control_groups;  ///< --allow-group: read and control, for members
  std::vector<std::string> read_users;      ///< --read-user: read only
  std::vector<std::string> read_groups;     ///< --read-group: read only, for members
  Right others = Right::kRead;              ///< --others: everyone not named above
};

/// What one peer may do, and why (for whoami and refusals).
struct Grant {
  Right right = Right::kNone;
  std::string user;    ///< the peer's user name, or "uid N" if it has none
  std::string reason;  ///< e.g. "root", "--allow-group gpu", "default for other users (--others read)"
};

/// The user database calls the policy makes; replaced in tests.
struct UserDatabase {
  /// @return the uid of user `name`, or nullopt.
  std::function<std::optional<uint32_t>(const std::string& name)> uid_of;
  /// @return the gid of group `name`, or nullopt.
  std::function<std::optional<uint32_t>(const std::string& name)> gid_of;
  /// @return the name of user `uid`, or nullopt.
  std::function<std::optional<std::string>(uint32_t uid)> name_of;
  /// @return every group of user `uid` from the user database (primary and supplementary, getgrouplist).
  std::function<std::vector<uint32_t>(uint32_t uid)> groups_of;

  /// @return the system's (getpwnam_r, getgrnam_r, getpwuid_r, getgrouplist).
  static UserDatabase system();
};

/// Decides the rights of a peer. Immutable after creation; thread-safe.
///
/// - uid 0 (root) and the daemon's own uid: control.
/// - A user named by --allow-user, or a member of a group named by --allow-group: control.
/// - A user named by --read-user, or a member of a group named by --read-group: read.
/// - Anyone else: `others` (default read).
/// The strongest matching rule wins. Group membership counts the peer's process gid and every group the
/// user database lists for its uid (supplementary groups), looked up when the connection is accepted.
class AccessPolicy {
 public:
  /// Resolves the names in `rules`. @return kNotFound naming an unknown user or group.
  static Result<AccessPolicy> create(const AccessRules& rules, uint32_t daemon_uid,
                                     UserDatabase database = UserDatabase::system());

  /// @return the rights of `peer`.
  Grant grant(const PeerCredentials& peer) const;

  /// @return the message refusing `op` to a peer that has `grant` but needs `needed`: names the right,
  /// what the peer has, and the flags that would grant it.
  static std::string refusal(const Grant& grant, std::string_view op, Right needed);

  /// @return a one-line summary, e.g. "control: root, uid 1000, group gpu; read: everyone".
  std::string describe() const;

 private:
  struct Named {
    uint32_t id = 0;
    std::string flag;  // e.g. "--allow-user alice"
  };
  AccessPolicy() = default;

  std::vector<Named> control_users_;
  std::vector<Named> control_groups_;
  std::vector<Named> read_users_;
  std::vector<Named> read_groups_;
  Right others_ = Right::kRead;
  uint32_t daemon_uid_ = 0;
  UserDatabase database_;
};

}  // namespace joule::daemon
