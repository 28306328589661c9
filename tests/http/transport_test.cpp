// SPDX-License-Identifier: Apache-2.0
// The HTTP transport module's loader (src/http/transport.hpp): where it looks, what it refuses (a file others
// may write, a module of another build, a library without the entry point), and that each refusal is named.
#include "http/transport.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/http/connection.hpp"

namespace joule::http::transport {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A scratch folder holding one file called like the module.
class ModuleFolder {
 public:
  explicit ModuleFolder(const std::string& name)
      : path_(fs::temp_directory_path() / fmt::format("joule-transport-{}-{}", name, ::getpid())) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ModuleFolder() { fs::remove_all(path_); }
  ModuleFolder(const ModuleFolder&) = delete;
  ModuleFolder& operator=(const ModuleFolder&) = delete;

  std::string put(const std::string& source) const {
    const fs::path module = path_ / kModuleFileName;
    fs::copy_file(source, module, fs::copy_options::overwrite_existing);
    ::chmod(module.c_str(), 0755);
    return module.string();
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

TEST(HttpTransport, LoadsThisBuildsModuleAndItSendsRequests) {
  const auto api = transport::api();
  ASSERT_TRUE(api) << api.error().message();
  EXPECT_STREQ((*api)->build_id, JOULE_TRANSPORT_BUILD_ID);
  // Twice the same (loaded once).
  EXPECT_EQ(*transport::api(), *api);
  // A copy elsewhere loads too (as an installed one would), and is the same build.
  ModuleFolder folder("copy");
  folder.put(JOULE_TEST_MODULE);
  const auto copy = load_from({"/nonexistent/joule", folder.path()});
  ASSERT_TRUE(copy) << copy.error().message();
  EXPECT_STREQ((*copy)->build_id, JOULE_TRANSPORT_BUILD_ID);
}

TEST(HttpTransport, LooksInTheBuildTreeOnlyFromTheBuildTreeAfterJouleModuleDir) {
  ::unsetenv("JOULE_MODULE_DIR");
  // This test runs from the build tree: its own module folder, nothing installed.
  const auto folders = module_folders();
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(fs::path(folders[0]) / kModuleFileName, fs::path(JOULE_TEST_MODULE));
  ::setenv("JOULE_MODULE_DIR", "/opt/joule/lib/joule", 1);
  EXPECT_EQ(module_folders(), (std::vector<std::string>{"/opt/joule/lib/joule", folders[0]}));
  ::unsetenv("JOULE_MODULE_DIR");
}

TEST(HttpTransport, NamesEveryPlaceTriedWhenNoneHasTheModule) {
  const auto loaded = load_from({"/nonexistent/a", "/nonexistent/b"});
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code(), ErrorCode::kLibraryMissing);
  EXPECT_EQ(
      loaded.error().message(),
      "joule's HTTP module (libjoule_http_transport.so) could not be loaded, so no HTTP request can be "
      "sent; tried: /nonexistent/a/libjoule_http_transport.so (not there); "
      "/nonexistent/b/libjoule_http_transport.so (not there). Reinstall joule (or rebuild it, in a build "
      "tree)");
}

TEST(HttpTransport, RefusesAModuleEveryUserMayWrite) {
  ModuleFolder folder("writable");
  const std::string module = folder.put(JOULE_TEST_MODULE);
  ::chmod(module.c_str(), 0757);
  const auto loaded = load_from({folder.path()});
  ASSERT_FALSE(loaded);
  EXPECT_THAT(loaded.error().message(), HasSubstr(module + " (writable by every user: refused)"));
  if (::geteuid() == 0) {
    // A root process also refuses one its group may write.
    ::chmod(module.c_str(), 0775);
    const auto as_root = load_from({folder.path()});
    ASSERT_FALSE(as_root);
    EXPECT_THAT(
        as_root.error().message(),
        HasSubstr(module + " (not owned and only writable by root, and this process runs as root: refused)"));
  }
}

TEST(HttpTransport, RefusesAModuleOfAnotherBuildAndTriesTheNextPlace) {
  ModuleFolder other("other");
  const std::string other_module = other.put(JOULE_TEST_OTHER_BUILD_MODULE);
  ModuleFolder missing_entry("noentry");
  const std::string no_entry_module = missing_entry.put(JOULE_TEST_NO_ENTRY_MODULE);
  ModuleFolder good("good");
  good.put(JOULE_TEST_MODULE);

  const auto refused = load_from({other.path(), missing_entry.path()});
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message(),
              HasSubstr(other_module + " (from another build of joule: joule 0.0.0 from another build)"));
  EXPECT_THAT(refused.error().message(),
              HasSubstr(no_entry_module + " (has no joule_http_transport_v1: not joule's HTTP module)"));

  const auto loaded = load_from({other.path(), missing_entry.path(), good.path()});
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_STREQ((*loaded)->build_id, JOULE_TRANSPORT_BUILD_ID);
}

TEST(HttpTransport, RefusesWhatIsNotALoadableFile) {
  ModuleFolder folder("garbage");
  const fs::path module = fs::path(folder.path()) / kModuleFileName;
  fs::create_directories(module);
  auto loaded = load_from({folder.path()});
  ASSERT_FALSE(loaded);
  EXPECT_THAT(loaded.error().message(), HasSubstr(module.string() + " (not a regular file)"));
  fs::remove(module);
  {
    std::FILE* file = std::fopen(module.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs(std::string(4096, 'x').c_str(), file);  // long enough to be read as a header
    std::fclose(file);
  }
  loaded = load_from({folder.path()});
  ASSERT_FALSE(loaded);
  EXPECT_THAT(loaded.error().message(), HasSubstr(module.string() + " ("));
  EXPECT_THAT(loaded.error().message(), HasSubstr("invalid ELF header"));
}

TEST(HttpTransport, BasicAuthorizationIsBase64OfUserColonPassword) {
  // RFC 4648's test vectors, through "user:password" (RFC 7617's example first).
  EXPECT_EQ(basic_authorization("Aladdin", "open sesame").second, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
  EXPECT_EQ(basic_authorization("", "").second, "Basic Og==");    // ":"
  EXPECT_EQ(basic_authorization("f", "").second, "Basic Zjo=");   // "f:"
  EXPECT_EQ(basic_authorization("fo", "").second, "Basic Zm86");  // "fo:"
  EXPECT_EQ(basic_authorization("foo", "bar").second, "Basic Zm9vOmJhcg==");
  EXPECT_EQ(basic_authorization("me", "pw").second, "Basic bWU6cHc=");
  // Bytes above 0x7F (UTF-8) are encoded as bytes.
  EXPECT_EQ(basic_authorization("\xC3\xA9", "\xFF").second, "Basic w6k6/w==");
  EXPECT_EQ(basic_authorization("u", "p").first, "Authorization");
}

}  // namespace
}  // namespace joule::http::transport
