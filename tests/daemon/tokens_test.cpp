// SPDX-License-Identifier: Apache-2.0
// The bearer tokens of the daemon's network listener (joule/daemon/tokens.hpp): the file format, every bad
// line with its message (never quoting a token), and the file's ownership and mode.
#include "joule/daemon/tokens.hpp"

#include <string>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.hpp"

namespace joule::daemon {
namespace {

using device::daemon_protocol::Right;

const std::string kTrainerToken = "3f9c0d2e6b8a41f7a5c3e9d1b7f4a2c6e8d0b3f5a7c9e1d3b5f7a9c1e3d5f7a9";
const std::string kAutopilotToken = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b";
const std::string kOpsToken = "Zm9yIHRoZSBvcHMgdGVhbSBvbmx5Lg==_-.~+/";

TEST(DaemonTokens, ParsesNamesScopesAndTokens) {
  auto table = TokenTable::parse("# NAME SCOPE TOKEN\n\ntrainer-17   read     " + kTrainerToken +
                                     "\nautopilot\tcontrol\t" + kAutopilotToken + "\r\n  ops@site.b admin " +
                                     kOpsToken + "\n",
                                 "tokens");
  ASSERT_TRUE(table) << table.error().message();
  EXPECT_EQ(table->size(), 3u);
  EXPECT_EQ(table->describe(), "trainer-17 (read), autopilot (control), ops@site.b (admin)");
  const auto trainer = table->find(kTrainerToken);
  ASSERT_TRUE(trainer);
  EXPECT_EQ(trainer->name, "trainer-17");
  EXPECT_EQ(trainer->scope, Scope::kRead);
  EXPECT_EQ(table->find(kAutopilotToken)->scope, Scope::kControl);
  EXPECT_EQ(table->find(kOpsToken)->name, "ops@site.b");
  // Not a token: a prefix, a longer string, one character off, empty.
  EXPECT_FALSE(table->find(kTrainerToken.substr(0, 63)));
  EXPECT_FALSE(table->find(kTrainerToken + "0"));
  std::string off = kTrainerToken;
  off[40] = 'x';
  EXPECT_FALSE(table->find(off));
  EXPECT_FALSE(table->find(""));
}

TEST(DaemonTokens, ScopesMapOntoRights) {
  EXPECT_EQ(right_of(Scope::kRead), Right::kRead);
  EXPECT_EQ(right_of(Scope::kControl), Right::kControl);
  EXPECT_EQ(right_of(Scope::kAdmin), Right::kControl);
  for (const Scope scope : {Scope::kRead, Scope::kControl, Scope::kAdmin}) {
    EXPECT_EQ(scope_from_string(to_string(scope)), scope);
  }
  EXPECT_FALSE(scope_from_string("Read"));
  EXPECT_FALSE(scope_from_string("write"));
}

TEST(DaemonTokens, EveryBadLineIsNamedWithoutQuotingAToken) {
  const auto error_of = [](const std::string& text) {
    auto table = TokenTable::parse(text, "/etc/joule/tokens");
    EXPECT_FALSE(table) << text;
    if (table) {
      return std::string();
    }
    EXPECT_EQ(table.error().code(), ErrorCode::kParse);
    // No token of the file is ever in a message.
    for (const auto& token : {kTrainerToken, kAutopilotToken, kOpsToken}) {
      EXPECT_EQ(table.error().message().find(token), std::string::npos) << table.error().message();
    }
    return table.error().message();
  };
  EXPECT_EQ(
      error_of(""),
      "/etc/joule/tokens: no token (each line is NAME SCOPE TOKEN, or NAME SCOPE certificate; # starts a "
      "comment)");
  EXPECT_EQ(
      error_of("# only a comment\n\n"),
      "/etc/joule/tokens: no token (each line is NAME SCOPE TOKEN, or NAME SCOPE certificate; # starts a "
      "comment)");
  EXPECT_EQ(error_of("trainer " + kTrainerToken + "\n"),
            "/etc/joule/tokens:1: expected NAME SCOPE TOKEN, found 2 words");
  EXPECT_EQ(error_of("\n\ntrainer read " + kTrainerToken + " extra\n"),
            "/etc/joule/tokens:3: expected NAME SCOPE TOKEN, found 4 words");
  EXPECT_EQ(error_of("trainer write " + kTrainerToken + "\n"),
            "/etc/joule/tokens:1: unknown scope \"write\" for trainer (read, control or admin)");
  // A token written in the scope's column is not printed.
  EXPECT_EQ(error_of("trainer " + kTrainerToken + " read\n"),
            "/etc/joule/tokens:1: unknown scope a 64-character word for trainer (read, control or admin)");
  EXPECT_EQ(error_of("tr/ainer read " + kTrainerToken + "\n"),
            "/etc/joule/tokens:1: the name \"tr/ainer\" may only hold letters, digits and . _ @ -");
  EXPECT_EQ(error_of(std::string(32, 'a') + " read " + kTrainerToken + "\n"),
            "/etc/joule/tokens:1: a name of 32 characters (at most 31)");
  // A token in the name's column (and the name in the token's) is not printed either.
  EXPECT_EQ(error_of(kTrainerToken + " read trainer\n"),
            "/etc/joule/tokens:1: a name of 64 characters (at most 31)");
  EXPECT_EQ(error_of("trainer read short-token\n"),
            "/etc/joule/tokens:1: the token of trainer has 11 characters: 32 to 256 are accepted (make one "
            "with `openssl rand -hex 32`)");
  EXPECT_EQ(error_of("trainer read " + std::string(257, 'a') + "\n"),
            "/etc/joule/tokens:1: the token of trainer has 257 characters: 32 to 256 are accepted (make one "
            "with `openssl rand -hex 32`)");
  EXPECT_EQ(
      error_of("trainer read " + kTrainerToken.substr(0, 10) + "\x01" + kTrainerToken.substr(10) + "\n"),
      "/etc/joule/tokens:1: the token of trainer holds a character that is not printable ASCII (its "
      "character 11)");
  EXPECT_EQ(error_of("trainer read " + kTrainerToken + "\ntrainer control " + kAutopilotToken + "\n"),
            "/etc/joule/tokens:2: trainer is named twice (first on line 1)");
  EXPECT_EQ(error_of("trainer read " + kTrainerToken + "\n# again\nbackup control " + kTrainerToken + "\n"),
            "/etc/joule/tokens:3: the token of backup is also trainer's (line 1): each client needs its own "
            "token");
}

class DaemonTokenFile : public ::testing::Test {
 protected:
  std::string write(const std::string& content, mode_t mode) {
    const std::string path = dir_.write("tokens", content);
    ::chmod(path.c_str(), mode);
    return path;
  }
  test::TempDir dir_;
};

TEST_F(DaemonTokenFile, LoadsAPrivateFileOfItsOwnUser) {
  const std::string path = write("trainer read " + kTrainerToken + "\n", 0600);
  auto table = TokenTable::load(path, ::geteuid());
  ASSERT_TRUE(table) << table.error().message();
  EXPECT_EQ(table->find(kTrainerToken)->name, "trainer");
  ::chmod(path.c_str(), 0400);
  EXPECT_TRUE(TokenTable::load(path, ::geteuid()));
}

TEST_F(DaemonTokenFile, RefusesAFileOthersCanReadOrWrite) {
  const std::string path = write("trainer read " + kTrainerToken + "\n", 0644);
  const std::string fix = "`chown root: " + path + " && chmod 600 " + path + "`";
  JOULE_EXPECT_ERROR(
      TokenTable::load(path, ::geteuid()), ErrorCode::kPermissionDenied,
      "the token file " + path + " is readable by every user (mode 0644): its tokens are secrets; " + fix);
  ::chmod(path.c_str(), 0640);
  JOULE_EXPECT_ERROR(
      TokenTable::load(path, ::geteuid()), ErrorCode::kPermissionDenied,
      "the token file " + path + " is readable by its group (mode 0640): its tokens are secrets; " + fix);
  ::chmod(path.c_str(), 0620);
  const auto writable = TokenTable::load(path, ::geteuid());
  ASSERT_FALSE(writable);
  EXPECT_EQ(writable.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(writable.error().message().find("the token file " + path + " is refused: "), std::string::npos)
      << writable.error().message();
}

TEST_F(DaemonTokenFile, RefusesAnotherUsersFileALinkAndWhatIsMissing) {
  const std::string path = write("trainer read " + kTrainerToken + "\n", 0600);
  // Owned by us, not by the daemon's user (uid + 1 stands for another daemon user).
  const auto other = TokenTable::load(path, ::geteuid() + 1);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), ErrorCode::kPermissionDenied);
  const std::string link = dir_.path() + "/link";
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  JOULE_EXPECT_ERROR(TokenTable::load(link, ::geteuid()), ErrorCode::kPermissionDenied,
                     "the token file " + link + " is a symbolic link: refused (name the file itself)");
  JOULE_EXPECT_ERROR(TokenTable::load(dir_.path() + "/missing", ::geteuid()), ErrorCode::kNotFound,
                     "the token file " + dir_.path() + "/missing does not exist");
  // A parse error names the file and the line.
  const std::string bad = write("trainer read short\n", 0600);
  JOULE_EXPECT_ERROR(TokenTable::load(bad, ::geteuid()), ErrorCode::kParse,
                     bad +
                         ":1: the token of trainer has 5 characters: 32 to 256 are accepted (make one with "
                         "`openssl rand -hex 32`)");
}

TEST_F(DaemonTokenFile, RefusesAnOversizedFile) {
  const std::string path = write(std::string(TokenTable::kMaxFileBytes + 1, '#'), 0600);
  JOULE_EXPECT_ERROR(TokenTable::load(path, ::geteuid()), ErrorCode::kParse,
                     "the token file " + path + " holds 1048577 bytes, more than the 1048576 accepted");
}

TEST(DaemonTokens, ACertificateLineNamesAClientThatProvesItselfWithItsCertificate) {
  const auto table =
      TokenTable::parse("agent read certificate\ntrainer control " + kTrainerToken + "\n", "t");
  ASSERT_TRUE(table) << table.error().message();
  EXPECT_EQ(table->describe(), "agent (read, certificate), trainer (control)");
  ASSERT_TRUE(table->find_certificate("agent"));
  EXPECT_EQ(table->find_certificate("agent")->scope, Scope::kRead);
  EXPECT_FALSE(table->find_certificate("trainer"));  // a token's client is not a certificate's
  EXPECT_FALSE(table->find("certificate"));          // the word is no token
  EXPECT_FALSE(table->find(""));
  EXPECT_EQ(table->find(kTrainerToken)->name, "trainer");
  const auto twice = TokenTable::parse("agent read certificate\nagent control certificate\n", "t");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message(), "t:2: agent is named twice (first on line 1)");
}

}  // namespace
}  // namespace joule::daemon
