// SPDX-License-Identifier: Apache-2.0
// Who may read and control through the daemon, from peer credentials and the user database.
#include "joule/daemon/access.hpp"

#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>

#include "test_util.hpp"

namespace joule::test {
namespace {

using daemon::AccessPolicy;
using daemon::AccessRules;
using daemon::PeerCredentials;
using daemon::Right;
using daemon::UserDatabase;

// alice 1000 (groups 1000, 50 "gpu"), bob 1001 (groups 1001), carol 1002 (groups 1002, 60 "monitor").
UserDatabase fake_users() {
  UserDatabase database;
  const std::map<std::string, uint32_t> users = {{"alice", 1000}, {"bob", 1001}, {"carol", 1002}};
  const std::map<std::string, uint32_t> groups = {{"gpu", 50}, {"monitor", 60}};
  database.uid_of = [users](const std::string& name) -> std::optional<uint32_t> {
    const auto found = users.find(name);
    return found == users.end() ? std::nullopt : std::optional<uint32_t>(found->second);
  };
  database.gid_of = [groups](const std::string& name) -> std::optional<uint32_t> {
    const auto found = groups.find(name);
    return found == groups.end() ? std::nullopt : std::optional<uint32_t>(found->second);
  };
  database.name_of = [users](uint32_t uid) -> std::optional<std::string> {
    for (const auto& [name, id] : users) {
      if (id == uid) {
        return name;
      }
    }
    return std::nullopt;
  };
  database.groups_of = [](uint32_t uid) -> std::vector<uint32_t> {
    switch (uid) {
      case 1000:
        return {1000, 50};
      case 1001:
        return {1001};
      case 1002:
        return {1002, 60};
      default:
        return {};
    }
  };
  return database;
}

AccessPolicy policy(const AccessRules& rules, uint32_t daemon_uid = 0) {
  auto created = AccessPolicy::create(rules, daemon_uid, fake_users());
  if (!created) {
    throw std::runtime_error(created.error().message());
  }
  return std::move(*created);
}

TEST(DaemonAccess, RootAndTheDaemonsOwnUserAlwaysControl) {
  AccessRules rules;
  rules.others = Right::kNone;
  const auto root_daemon = policy(rules);
  EXPECT_EQ(root_daemon.grant({0, 0, 1}).right, Right::kControl);
  EXPECT_EQ(root_daemon.grant({0, 0, 1}).reason, "root");
  EXPECT_EQ(root_daemon.grant({1000, 1000, 2}).right, Right::kNone);
  const auto user_daemon = policy(rules, 1001);
  EXPECT_EQ(user_daemon.grant({1001, 1001, 3}).right, Right::kControl);
  EXPECT_EQ(user_daemon.grant({1001, 1001, 3}).reason, "the daemon's own user");
}

TEST(DaemonAccess, OthersReadByDefault) {
  const auto access = policy({});
  const auto grant = access.grant({1001, 1001, 7});
  EXPECT_EQ(grant.right, Right::kRead);
  EXPECT_EQ(grant.user, "bob");
  EXPECT_EQ(grant.reason, "default for other users (--others read)");
  EXPECT_EQ(access.grant({4242, 4242, 7}).user, "uid 4242");
}

TEST(DaemonAccess, UsersAndGroupsByNameOrNumber) {
  AccessRules rules;
  rules.control_users = {"bob"};
  rules.control_groups = {"gpu"};
  rules.read_groups = {"60"};
  rules.others = Right::kNone;
  const auto access = policy(rules);
  EXPECT_EQ(access.grant({1001, 1001, 1}).right, Right::kControl);
  EXPECT_EQ(access.grant({1001, 1001, 1}).reason, "--allow-user bob");
  // alice is in "gpu" only as a supplementary group of her uid: the user database's list counts.
  EXPECT_EQ(access.grant({1000, 1000, 1}).right, Right::kControl);
  EXPECT_EQ(access.grant({1000, 1000, 1}).reason, "--allow-group gpu");
  EXPECT_EQ(access.grant({1002, 1002, 1}).right, Right::kRead);
  EXPECT_EQ(access.grant({1002, 1002, 1}).reason, "--read-group 60");
  // A process running with the group as its gid (e.g. sg gpu) is a member too.
  EXPECT_EQ(access.grant({4242, 50, 1}).right, Right::kControl);
  EXPECT_EQ(access.grant({4242, 4242, 1}).right, Right::kNone);
}

TEST(DaemonAccess, TheStrongestRuleWins) {
  AccessRules rules;
  rules.read_users = {"alice"};
  rules.control_groups = {"gpu"};
  rules.others = Right::kNone;
  EXPECT_EQ(policy(rules).grant({1000, 1000, 1}).right, Right::kControl);
  // A read rule does not take away what everyone has.
  AccessRules open;
  open.read_users = {"bob"};
  open.others = Right::kControl;
  EXPECT_EQ(policy(open).grant({1001, 1001, 1}).right, Right::kControl);
}

TEST(DaemonAccess, UnknownNamesAreRefusedAtStart) {
  AccessRules rules;
  rules.control_users = {"mallory"};
  JOULE_EXPECT_ERROR(AccessPolicy::create(rules, 0, fake_users()), ErrorCode::kNotFound,
                     "--allow-user mallory: no such user (give a name from /etc/passwd or a numeric id)");
  AccessRules groups;
  groups.read_groups = {"wheel"};
  JOULE_EXPECT_ERROR(AccessPolicy::create(groups, 0, fake_users()), ErrorCode::kNotFound,
                     "--read-group wheel: no such group (give a name from /etc/group or a numeric id)");
}

TEST(DaemonAccess, RefusalsSayWhatIsMissingAndHowToGetIt) {
  const auto grant = policy({}).grant({1001, 1001, 1});
  EXPECT_EQ(
      AccessPolicy::refusal(grant, "set_power_limit", Right::kControl),
      "set_power_limit needs the 'control' right; bob has 'read' (default for other users (--others read)): "
      "run as root, or ask the administrator to start `joule daemon` with --allow-user bob or --allow-group "
      "GROUP for a group you are in");
  AccessRules closed;
  closed.others = Right::kNone;
  const auto none = policy(closed).grant({1001, 1001, 1});
  EXPECT_EQ(
      AccessPolicy::refusal(none, "power", Right::kRead),
      "power needs the 'read' right; bob has 'none' (default for other users (--others none)): ask the "
      "administrator to start `joule daemon` with --read-user bob, --read-group GROUP or --others read");
}

TEST(DaemonAccess, SystemDatabaseFindsSupplementaryGroups) {
  const auto database = UserDatabase::system();
  EXPECT_EQ(database.uid_of("root"), 0u);
  EXPECT_EQ(database.name_of(0), "root");
  EXPECT_FALSE(database.uid_of("no-such-user-joule"));
  // Find a user listed as a supplementary member of some group in /etc/group, if this system has one.
  setgrent();
  std::optional<std::pair<std::string, uint32_t>> member;
  while (const group* entry = getgrent()) {
    if (entry->gr_mem != nullptr && entry->gr_mem[0] != nullptr) {
      member = std::pair{std::string(entry->gr_mem[0]), static_cast<uint32_t>(entry->gr_gid)};
      break;
    }
  }
  endgrent();
  if (!member) {
    GTEST_SKIP() << "no user with a supplementary group on this system";
  }
  const auto uid = database.uid_of(member->first);
  ASSERT_TRUE(uid);
  const auto groups = database.groups_of(*uid);
  EXPECT_NE(std::find(groups.begin(), groups.end(), member->second), groups.end());
}

}  // namespace
}  // namespace joule::test
