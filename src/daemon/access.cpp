// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/access.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

namespace joule::daemon {

namespace {

constexpr size_t kLookupBufferBytes = size_t{16} * 1024;
constexpr int kMaxGroups = 65536;

std::optional<uint32_t> parse_id(const std::string& text) {
  uint32_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return id;
}

struct PasswdEntry {
  std::string name;
  uint32_t gid = 0;
};

std::optional<PasswdEntry> passwd_by_uid(uint32_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(kLookupBufferBytes);
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return PasswdEntry{entry.pw_name, entry.pw_gid};
}

}  // namespace

UserDatabase UserDatabase::system() {
  UserDatabase database;
  database.uid_of = [](const std::string& name) -> std::optional<uint32_t> {
    passwd entry{};
    passwd* found = nullptr;
    std::vector<char> buffer(kLookupBufferBytes);
    if (getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
      return std::nullopt;
    }
    return entry.pw_uid;
  };
  database.gid_of = [](const std::string& name) -> std::optional<uint32_t> {
    group entry{};
    group* found = nullptr;
    std::vector<char> buffer(kLookupBufferBytes);
    if (getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
      return std::nullopt;
    }
    return entry.gr_gid;
  };
  database.name_of = [](uint32_t uid) -> std::optional<std::string> {
    auto entry = passwd_by_uid(uid);
    return entry ? std::optional<std::string>(entry->name) : std::nullopt;
  };
  database.groups_of = [](uint32_t uid) -> std::vector<uint32_t> {
    const auto entry = passwd_by_uid(uid);
    if (!entry) {
      return {};
    }
    int count = 64;
    std::vector<gid_t> groups;
    while (count <= kMaxGroups) {
      groups.resize(static_cast<size_t>(count));
      int found = count;
      if (getgrouplist(entry->name.c_str(), entry->gid, groups.data(), &found) >= 0) {
        groups.resize(static_cast<size_t>(found));
        return {groups.begin(), groups.end()};
      }
      count = std::max(found, count * 2);  // too small: `found` holds the size needed
    }
    return {entry->gid};
  };
  return database;
}

Result<AccessPolicy> AccessPolicy::create(const AccessRules& rules, uint32_t daemon_uid,
                                          UserDatabase database) {
  AccessPolicy policy;
  policy.others_ = rules.others;
  policy.daemon_uid_ = daemon_uid;
  const auto resolve = [&database](const std::vector<std::string>& names, bool groups, std::string_view flag,
                                   std::vector<Named>& out) -> Result<void> {
    for (const auto& name : names) {
      std::optional<uint32_t> id = parse_id(name);
      if (!id) {
        id = groups ? database.gid_of(name) : database.uid_of(name);
      }
      if (!id) {
        return fail(ErrorCode::kNotFound, "{} {}: no such {} (give a name from {} or a numeric id)", flag,
                    name, groups ? "group" : "user", groups ? "/etc/group" : "/etc/passwd");
      }
      out.push_back(Named{*id, fmt::format("{} {}", flag, name)});
    }
    return {};
  };
  for (const auto& [names, groups, flag, out] :
       {std::tuple{&rules.control_users, false, "--allow-user", &policy.control_users_},
        std::tuple{&rules.control_groups, true, "--allow-group", &policy.control_groups_},
        std::tuple{&rules.read_users, false, "--read-user", &policy.read_users_},
        std::tuple{&rules.read_groups, true, "--read-group", &policy.read_groups_}}) {
    JOULE_TRY(resolve(*names, groups, flag, *out));
  }
  policy.database_ = std::move(database);
  return policy;
}

Grant AccessPolicy::grant(const PeerCredentials& peer) const {
  Grant grant;
  const auto name = database_.name_of ? database_.name_of(peer.uid) : std::nullopt;
  grant.user = name ? *name : fmt::format("uid {}", peer.uid);
  if (peer.uid == 0) {
    grant.right = Right::kControl;
    grant.reason = "root";
    return grant;
  }
  if (peer.uid == daemon_uid_) {
    grant.right = Right::kControl;
    grant.reason = "the daemon's own user";
    return grant;
  }
  std::vector<uint32_t> groups =
      database_.groups_of ? database_.groups_of(peer.uid) : std::vector<uint32_t>{};
  groups.push_back(peer.gid);
  const auto user_rule = [&peer](const std::vector<Named>& rules) -> const Named* {
    const auto found =
        std::find_if(rules.begin(), rules.end(), [&peer](const Named& n) { return n.id == peer.uid; });
    return found == rules.end() ? nullptr : &*found;
  };
  const auto group_rule = [&groups](const std::vector<Named>& rules) -> const Named* {
    const auto found = std::find_if(rules.begin(), rules.end(), [&groups](const Named& n) {
      return std::find(groups.begin(), groups.end(), n.id) != groups.end();
    });
    return found == rules.end() ? nullptr : &*found;
  };
  for (const auto& [rules, by_group, right] :
       {std::tuple{&control_users_, false, Right::kControl},
        std::tuple{&control_groups_, true, Right::kControl}, std::tuple{&read_users_, false, Right::kRead},
        std::tuple{&read_groups_, true, Right::kRead}}) {
    const Named* rule = by_group ? group_rule(*rules) : user_rule(*rules);
    // The strongest rule wins; the default for others may be stronger than a read rule.
    if (rule != nullptr && right >= others_) {
      grant.right = right;
      grant.reason = rule->flag;
      return grant;
    }
  }
  grant.right = others_;
  grant.reason =
      fmt::format("default for other users (--others {})", device::daemon_protocol::to_string(others_));
  return grant;
}

std::string AccessPolicy::refusal(const Grant& grant, std::string_view op, Right needed) {
  const std::string how =
      needed == Right::kControl
          ? "run as root, or ask the administrator to start `joule daemon` with --allow-user " + grant.user +
                " or --allow-group GROUP for a group you are in"
          : "ask the administrator to start `joule daemon` with --read-user " + grant.user +
                ", --read-group GROUP or --others read";
  return fmt::format("{} needs the '{}' right; {} has '{}' ({}): {}", op,
                     device::daemon_protocol::to_string(needed), grant.user,
                     device::daemon_protocol::to_string(grant.right), grant.reason, how);
}

std::string AccessPolicy::describe() const {
  const auto list = [](const std::vector<Named>& users, const std::vector<Named>& groups) {
    std::vector<std::string> parts;
    parts.reserve(users.size() + groups.size());
    for (const auto& user : users) {
      parts.push_back(fmt::format("uid {}", user.id));
    }
    for (const auto& group : groups) {
      parts.push_back(fmt::format("gid {}", group.id));
    }
    return parts;
  };
  std::vector<std::string> control = {"root", fmt::format("uid {} (the daemon's user)", daemon_uid_)};
  if (daemon_uid_ == 0) {
    control.pop_back();
  }
  for (auto& part : list(control_users_, control_groups_)) {
    control.push_back(std::move(part));
  }
  std::vector<std::string> read = list(read_users_, read_groups_);
  return fmt::format("control: {}; read: {}; others: {}", fmt::join(control, ", "),
                     read.empty() ? std::string("(no rule)") : fmt::format("{}", fmt::join(read, ", ")),
                     device::daemon_protocol::to_string(others_));
}

}  // namespace joule::daemon
