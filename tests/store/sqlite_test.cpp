// SPDX-License-Identifier: Apache-2.0
// What only the SQLite store does: WAL mode, its file errors, and waiting for another process's write lock.
#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_test_util.hpp"

namespace joule::store {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

/// A raw connection that holds the database's write lock, as another process's transaction would.
class WriteLock {
 public:
  explicit WriteLock(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  }
  ~WriteLock() {
    release();
    sqlite3_close(db_);
  }
  WriteLock(const WriteLock&) = delete;
  WriteLock& operator=(const WriteLock&) = delete;
  void release() {
    if (held_) {
      sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
      held_ = false;
    }
  }

 private:
  sqlite3* db_ = nullptr;
  bool held_ = true;
};

TEST(SqliteStore, UsesWriteAheadLogging) {
  test::SqliteDatabase database;
  auto store = test::open_or_throw(database.url());
  EXPECT_EQ(database.execute("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(store->description(), database.url());
}

TEST(SqliteStore, ReportsAFileThatIsNotADatabase) {
  const test::TempDir directory;
  const std::string path =
      directory.write("notes.db", "These are my notes, not a database. They go on for a while.\n");
  JOULE_EXPECT_ERROR(open_store("sqlite:" + path), ErrorCode::kIo,
                     "sqlite:" + path + ": file is not a database");
}

TEST(SqliteStore, ReportsAMissingFolder) {
  const test::TempDir directory;
  const std::string path = directory.path() + "/no/such/folder/state.db";
  JOULE_EXPECT_ERROR(open_store("sqlite:" + path), ErrorCode::kIo,
                     "sqlite:" + path + ": unable to open database file (No such file or directory)");
}

TEST(SqliteStore, WaitsForAnotherWriter) {
  test::SqliteDatabase database;
  OpenOptions options;
  options.lock_timeout = std::chrono::milliseconds(20);  // shorter than the lock is held: run() must retry
  auto store = test::open_or_throw(database.url(), options);
  WriteLock lock(database.path());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    lock.release();
  });
  const auto start = std::chrono::steady_clock::now();
  const auto done = store->run(
      [](Transaction& transaction) { return transaction.insert("job", "a", "{}").map([](bool) {}); });
  const auto waited = std::chrono::steady_clock::now() - start;
  releaser.join();
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_GE(waited, std::chrono::milliseconds(250));
}

TEST(SqliteStore, GivesUpWhenLockedForTooLong) {
  test::SqliteDatabase database;
  OpenOptions options;
  options.lock_timeout = std::chrono::milliseconds(20);
  options.retry_timeout = std::chrono::milliseconds(200);
  auto store = test::open_or_throw(database.url(), options);
  WriteLock lock(database.path());
  int calls = 0;
  const auto done = store->run([&](Transaction& /*transaction*/) -> Result<void> {
    ++calls;
    return {};
  });
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code(), ErrorCode::kIo);
  EXPECT_THAT(done.error().message(), StartsWith(database.url() + ": database is locked (gave up after "));
  EXPECT_THAT(done.error().message(), HasSubstr(" ms of retries)"));
  EXPECT_EQ(calls, 0);  // the write lock is taken before `work` runs
}

TEST(SqliteStore, OpeningWaitsForAnotherWriterToo) {
  test::SqliteDatabase database;
  (void)test::open_or_throw(database.url());
  WriteLock lock(database.path());
  OpenOptions options;
  options.lock_timeout = std::chrono::milliseconds(20);
  options.retry_timeout = std::chrono::milliseconds(100);
  auto refused = open_store(database.url(), options);
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message(), StartsWith(database.url() + ": database is locked"));
  lock.release();
  EXPECT_TRUE(open_store(database.url(), options).has_value());
}

}  // namespace
}  // namespace joule::store
