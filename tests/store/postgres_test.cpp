// SPDX-License-Identifier: Apache-2.0
// What only the PostgreSQL store does: retries after deadlocks, lock timeouts and dropped connections, and
// the messages of connections that fail.
#include <atomic>
#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store_test_util.hpp"

namespace joule::store {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using Work = std::function<Result<void>(Transaction&)>;

Result<void> add_one(Transaction& transaction, const std::string& key) {
  auto document = transaction.get_for_update("counter", key);
  if (!document) {
    return tl::make_unexpected(document.error());
  }
  if (!*document) {
    return fail(ErrorCode::kNotFound, "no counter {}", key);
  }
  return transaction.update("counter", key, std::to_string(std::stoll((*document)->body) + 1));
}

class PostgresStore : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = test::open_or_throw(database_.url());
    const auto created = store_->run([](Transaction& transaction) -> Result<void> {
      for (const char* key : {"a", "b"}) {
        JOULE_TRY(transaction.insert("counter", key, "0"));
      }
      return {};
    });
    ASSERT_TRUE(created.has_value()) << created.error().message();
  }

  std::string counter(const std::string& key) {
    return database_.execute("SELECT body FROM documents WHERE kind = 'counter' AND key = '" + key + "'");
  }

  test::PostgresDatabase database_;
  std::unique_ptr<Store> store_;
};

TEST_F(PostgresStore, RetriesTheLoserOfADeadlock) {
  // Two transactions lock a and b in opposite orders, each waiting (on its first attempt) until the other
  // holds its first lock: PostgreSQL aborts one of them (40P01), which runs again.
  std::atomic<int> first_locks{0};
  std::atomic<int> calls{0};
  const auto transfer = [&](const std::string& first, const std::string& second) {
    bool first_attempt = true;
    return store_->run([&](Transaction& transaction) -> Result<void> {
      ++calls;
      if (auto locked = add_one(transaction, first); !locked) {
        return locked;
      }
      if (first_attempt) {
        first_attempt = false;
        ++first_locks;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (first_locks.load() < 2 && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      return add_one(transaction, second);
    });
  };
  Result<void> one;
  Result<void> two;
  std::thread a([&] { one = transfer("a", "b"); });
  std::thread b([&] { two = transfer("b", "a"); });
  a.join();
  b.join();
  ASSERT_TRUE(one.has_value()) << one.error().message();
  ASSERT_TRUE(two.has_value()) << two.error().message();
  EXPECT_GE(calls.load(), 3);
  EXPECT_EQ(counter("a"), "2");
  EXPECT_EQ(counter("b"), "2");
}

TEST_F(PostgresStore, RetriesAfterALockTimeout) {
  OpenOptions options;
  options.lock_timeout = std::chrono::milliseconds(50);
  auto store = test::open_or_throw(database_.url(), options);
  test::PgSession holder(database_.base_url() + "?options=-csearch_path%3D" + database_.schema());
  holder.execute("BEGIN");
  holder.execute("SELECT body FROM documents WHERE kind = 'counter' AND key = 'a' FOR UPDATE");
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    holder.execute("COMMIT");
  });
  int calls = 0;
  const auto done = store->run([&](Transaction& transaction) {
    ++calls;
    return add_one(transaction, "a");
  });
  releaser.join();
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_GE(calls, 2);
  EXPECT_EQ(counter("a"), "1");
}

TEST_F(PostgresStore, GivesUpWhenLockedForTooLong) {
  OpenOptions options;
  options.lock_timeout = std::chrono::milliseconds(20);
  options.retry_timeout = std::chrono::milliseconds(200);
  auto store = test::open_or_throw(database_.url(), options);
  test::PgSession holder(database_.base_url() + "?options=-csearch_path%3D" + database_.schema());
  holder.execute("BEGIN");
  holder.execute("SELECT body FROM documents WHERE kind = 'counter' AND key = 'a' FOR UPDATE");
  const auto done = store->run([&](Transaction& transaction) { return add_one(transaction, "a"); });
  holder.execute("ROLLBACK");
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code(), ErrorCode::kIo);
  EXPECT_THAT(done.error().message(),
              StartsWith(store->description() + ": canceling statement due to lock timeout (gave up after "));
}

TEST_F(PostgresStore, ReplacesConnectionsTheServerDropped) {
  EXPECT_GE(database_.terminate_connections(), 1);
  int calls = 0;
  const auto done = store_->run([&](Transaction& transaction) {
    ++calls;
    return add_one(transaction, "a");
  });
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_EQ(calls, 1);  // the dead connection failed at BEGIN, before `work`
  EXPECT_EQ(counter("a"), "1");
}

TEST_F(PostgresStore, RunsWorkAgainWhenTheConnectionDropsDuringIt) {
  int calls = 0;
  const auto done = store_->run([&](Transaction& transaction) {
    if (++calls == 1) {
      (void)database_.terminate_connections();
    }
    return add_one(transaction, "a");
  });
  ASSERT_TRUE(done.has_value()) << done.error().message();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(counter("a"), "1");
}

TEST_F(PostgresStore, GivesUpWhenTheConnectionKeepsDropping) {
  int calls = 0;
  const auto done = store_->run([&](Transaction& transaction) {
    ++calls;
    (void)database_.terminate_connections();
    return add_one(transaction, "a");
  });
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code(), ErrorCode::kIo);
  EXPECT_THAT(done.error().message(), StartsWith(store_->description() + ": "));
  EXPECT_THAT(done.error().message(), HasSubstr("(gave up after 4 new connections)"));
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(counter("a"), "0");
}

TEST_F(PostgresStore, RefusesTextWithNulBytes) {
  JOULE_EXPECT_ERROR(store_->run([](Transaction& transaction) {
    return transaction.update("counter", "a", std::string("1\0 2", 4));
  }),
                     ErrorCode::kInvalidArgument,
                     store_->description() + ": PostgreSQL text cannot contain NUL bytes");
  EXPECT_EQ(counter("a"), "0");
}

TEST_F(PostgresStore, NeverCommitsAfterAFailedCommandEvenIfWorkIgnoresIt) {
  const auto done = store_->run([](Transaction& transaction) -> Result<void> {
    (void)transaction.update("counter", "a", "5");
    (void)transaction.update("counter", "b", std::string("\0", 1));  // fails; `work` goes on regardless
    return {};
  });
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(counter("a"), "0");
}

TEST_F(PostgresStore, DescriptionMasksThePassword) {
  // The test server trusts every connection, so a password is accepted (and ignored).
  auto store = test::open_or_throw(database_.url() + "&password=hunter22");
  EXPECT_THAT(store->description(), HasSubstr("&password=***"));
  EXPECT_THAT(store->description(), Not(HasSubstr("hunter22")));
}

TEST(PostgresOpen, ReportsAnUnreachableServer) {
  JOULE_EXPECT_ERROR(
      open_store("postgresql://joule@127.0.0.1:1/joule"), ErrorCode::kIo,
      "postgresql://joule@127.0.0.1:1/joule: connection to server at \"127.0.0.1\", port 1 failed: "
      "Connection refused Is the server running on that host and accepting TCP/IP connections?");
}

TEST(PostgresOpen, NeverShowsThePassword) {
  auto refused = open_store("postgres://joule:hunter22@127.0.0.1:1/joule");
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message(),
              StartsWith("postgres://joule:***@127.0.0.1:1/joule: connection to server"));
  EXPECT_THAT(refused.error().message(), Not(HasSubstr("hunter22")));

  auto malformed = open_store("postgresql://joule:hunter22@[::1/joule");
  ASSERT_FALSE(malformed.has_value());
  EXPECT_EQ(malformed.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(malformed.error().message(), StartsWith("postgresql://joule:***@[::1/joule: "));
  EXPECT_THAT(malformed.error().message(), Not(HasSubstr("hunter22")));
}

TEST(PostgresOpen, RefusesMalformedUrls) {
  JOULE_EXPECT_ERROR(open_store("postgresql://127.0.0.1/joule?colour=blue"), ErrorCode::kInvalidArgument,
                     "postgresql://127.0.0.1/joule?colour=blue: invalid URI query parameter: \"colour\"");
}

TEST(PostgresOpen, ReportsAMissingDatabase) {
  std::string url = test::postgres_test_url();
  url = url.substr(0, url.find('?'));
  url = url.substr(0, url.rfind('/')) + "/joule_no_such_database";
  JOULE_EXPECT_ERROR(open_store(url), ErrorCode::kIo,
                     url + ": connection to server at \"127.0.0.1\", port " +
                         url.substr(url.rfind(':') + 1, url.rfind('/') - url.rfind(':') - 1) +
                         " failed: FATAL: database \"joule_no_such_database\" does not exist");
}

}  // namespace
}  // namespace joule::store
