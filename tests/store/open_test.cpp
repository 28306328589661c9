// SPDX-License-Identifier: Apache-2.0
// open_store()'s choice of backend from the URL, and password masking.
#include <gtest/gtest.h>

#include "joule/store/store.hpp"

#include "test_util.hpp"

namespace joule::store {
namespace {

constexpr const char* kForms =
    "use sqlite:PATH (or a file name ending in .db or .sqlite), "
    "postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE "
    "(or postgres://…), or memory:";

TEST(OpenStore, RefusesAnUnknownSchemeListingTheAcceptedForms) {
  JOULE_EXPECT_ERROR(open_store("mysql://localhost/joule"), ErrorCode::kInvalidArgument,
                     std::string("unknown store URL 'mysql://localhost/joule': ") + kForms);
  JOULE_EXPECT_ERROR(open_store("state.json"), ErrorCode::kInvalidArgument,
                     std::string("unknown store URL 'state.json': ") + kForms);
  JOULE_EXPECT_ERROR(open_store("memory"), ErrorCode::kInvalidArgument,
                     std::string("unknown store URL 'memory': ") + kForms);
  JOULE_EXPECT_ERROR(open_store(""), ErrorCode::kInvalidArgument,
                     std::string("the store URL is empty: ") + kForms);
}

TEST(OpenStore, MasksThePasswordOfAnUnknownUrl) {
  JOULE_EXPECT_ERROR(open_store("mysql://joule:hunter2@db/state.db"), ErrorCode::kInvalidArgument,
                     std::string("unknown store URL 'mysql://joule:***@db/state.db': ") + kForms);
}

TEST(OpenStore, RefusesSqliteWithoutAPath) {
  JOULE_EXPECT_ERROR(open_store("sqlite:"), ErrorCode::kInvalidArgument,
                     "store URL 'sqlite:' names no file: use sqlite:PATH");
}

TEST(OpenStore, OpensMemoryStores) {
  auto store = open_store("memory:");
  ASSERT_TRUE(store.has_value());
  EXPECT_EQ((*store)->description(), "memory:");
  EXPECT_EQ((*store)->schema_version(), kSchemaVersion);
}

TEST(OpenStore, TakesAPathEndingInDbOrSqliteAsSqlite) {
  const test::TempDir directory;
  for (const std::string name : {"a.db", "b.sqlite", "c.sqlite3"}) {
    const std::string path = directory.path() + "/" + name;
    auto store = open_store(path);
    ASSERT_TRUE(store.has_value()) << store.error().message();
    EXPECT_EQ((*store)->description(), "sqlite:" + path);
  }
}

TEST(MaskPassword, HidesPasswordsInUrls) {
  EXPECT_EQ(mask_password("postgresql://joule:s3cret@db.example:5432/joule"),
            "postgresql://joule:***@db.example:5432/joule");
  EXPECT_EQ(mask_password("postgres://joule:p%40ss:word@db/joule?sslmode=require"),
            "postgres://joule:***@db/joule?sslmode=require");
  EXPECT_EQ(mask_password("postgresql://db/joule?user=joule&password=s3cret&sslmode=require"),
            "postgresql://db/joule?user=joule&password=***&sslmode=require");
  EXPECT_EQ(mask_password("postgresql://joule:a@db/j?password=b"),
            "postgresql://joule:***@db/j?password=***");
}

TEST(MaskPassword, LeavesUrlsWithoutPasswordsAlone) {
  for (const char* url :
       {"postgresql://joule@db/joule", "postgresql://db:5432/joule", "postgresql://joule:@db/j",
        "postgresql:///joule?host=/run/postgresql", "postgresql://db/j?password=", "sqlite:/tmp/a.db",
        "memory:", "state.db", "postgresql://db/a@b"}) {
    EXPECT_EQ(mask_password(url), url);
  }
}

}  // namespace
}  // namespace joule::store
