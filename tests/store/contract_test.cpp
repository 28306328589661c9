// SPDX-License-Identifier: Apache-2.0
// The Store contract, run against every backend (instantiated in contract_local_test.cpp and
// contract_postgres_test.cpp): what the memory store does, the SQLite and PostgreSQL stores must do too.
#include "store/contract_test.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace joule::store {
namespace {

using ::testing::ElementsAre;

using Work = std::function<Result<void>(Transaction&)>;

/// Runs `work` and expects it to succeed.
void run_ok(Store& store, const Work& work) {
  const auto done = store.run(work);
  ASSERT_TRUE(done.has_value()) << done.error().message();
}

std::optional<Document> get(Store& store, const std::string& kind, const std::string& key) {
  auto document = store.transact<std::optional<Document>>(
      [&](Transaction& transaction) { return transaction.get_for_update(kind, key); });
  EXPECT_TRUE(document.has_value()) << document.error().message();
  return document ? *document : std::nullopt;
}

std::optional<std::string> response(Store& store, const std::string& request_id) {
  auto found = store.transact<std::optional<std::string>>(
      [&](Transaction& transaction) { return transaction.find_response(request_id); });
  EXPECT_TRUE(found.has_value()) << found.error().message();
  return found ? *found : std::nullopt;
}

/// Adds one to the counter document (kind "counter"), in its own transaction.
Result<void> increment(Store& store, const std::string& key) {
  return store.run([&](Transaction& transaction) -> Result<void> {
    auto counter = transaction.get_for_update("counter", key);
    if (!counter) {
      return tl::make_unexpected(counter.error());
    }
    if (!*counter) {
      return fail(ErrorCode::kNotFound, "no counter {}", key);
    }
    return transaction.update("counter", key, std::to_string(std::stoll((*counter)->body) + 1));
  });
}

/// `threads` threads × `each` increments of counter `key`, spread round-robin over `stores`.
void increment_concurrently(const std::vector<Store*>& stores, const std::string& key, int threads,
                            int each) {
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Store& store = *stores[static_cast<std::size_t>(t) % stores.size()];
      for (int i = 0; i < each; ++i) {
        if (auto done = increment(store, key); !done) {
          ADD_FAILURE() << done.error().message();
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(StoreContract, OpensAtTheCurrentSchemaVersion) {
  EXPECT_EQ(store_->schema_version(), kSchemaVersion);
}

TEST_P(StoreContract, CreatesReadsUpdatesAndErasesDocuments) {
  run_ok(*store_, [](Transaction& transaction) -> Result<void> {
    auto inserted = transaction.insert("job", "mnist-1", R"({"state":"new"})");
    EXPECT_TRUE(inserted.value_or(false));
    return {};
  });
  auto document = get(*store_, "job", "mnist-1");
  ASSERT_TRUE(document.has_value());
  EXPECT_EQ(document->kind, "job");
  EXPECT_EQ(document->key, "mnist-1");
  EXPECT_EQ(document->body, R"({"state":"new"})");
  EXPECT_EQ(document->version, 1);

  run_ok(*store_,
         [](Transaction& transaction) { return transaction.update("job", "mnist-1", R"({"state":"run"})"); });
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.update("job", "mnist-1", R"({"state":"end"})"); });
  document = get(*store_, "job", "mnist-1");
  ASSERT_TRUE(document.has_value());
  EXPECT_EQ(document->body, R"({"state":"end"})");
  EXPECT_EQ(document->version, 3);

  EXPECT_FALSE(get(*store_, "job", "other").has_value());
  EXPECT_FALSE(get(*store_, "task", "mnist-1").has_value());  // the kind is part of the identity

  auto erased =
      store_->transact<bool>([](Transaction& transaction) { return transaction.erase("job", "mnist-1"); });
  ASSERT_TRUE(erased.has_value());
  EXPECT_TRUE(*erased);
  EXPECT_FALSE(get(*store_, "job", "mnist-1").has_value());
  erased =
      store_->transact<bool>([](Transaction& transaction) { return transaction.erase("job", "mnist-1"); });
  ASSERT_TRUE(erased.has_value());
  EXPECT_FALSE(*erased);
}

TEST_P(StoreContract, InsertingAnExistingDocumentChangesNothing) {
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("job", "a", "1").map([](bool) {}); });
  auto again =
      store_->transact<bool>([](Transaction& transaction) { return transaction.insert("job", "a", "2"); });
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(*again);
  const auto document = get(*store_, "job", "a");
  ASSERT_TRUE(document.has_value());
  EXPECT_EQ(document->body, "1");
  EXPECT_EQ(document->version, 1);
}

TEST_P(StoreContract, UpdatingAMissingDocumentIsNotFound) {
  JOULE_EXPECT_ERROR(
      store_->run([](Transaction& transaction) { return transaction.update("job", "ghost", "{}"); }),
      ErrorCode::kNotFound, "no job 'ghost' to update");
}

TEST_P(StoreContract, ListsKeysByPrefixSortedByteByByte) {
  run_ok(*store_, [](Transaction& transaction) -> Result<void> {
    for (const char* key : {"b1", "a2", "z", "\xC3\xA9t\xC3\xA9", "a1", "a%", "a_x", "A0"}) {
      JOULE_TRY(transaction.insert("job", key, "{}"));
    }
    return transaction.insert("task", "a3", "{}").map([](bool) {});
  });
  const auto keys = [&](const std::string& kind, const std::string& prefix) {
    auto found = store_->transact<std::vector<std::string>>(
        [&](Transaction& transaction) { return transaction.keys(kind, prefix); });
    EXPECT_TRUE(found.has_value()) << found.error().message();
    return found.value_or(std::vector<std::string>{});
  };
  EXPECT_THAT(keys("job", "a"), ElementsAre("a%", "a1", "a2", "a_x"));
  EXPECT_THAT(keys("job", ""), ElementsAre("A0", "a%", "a1", "a2", "a_x", "b1", "z", "\xC3\xA9t\xC3\xA9"));
  EXPECT_THAT(keys("job", "a_"), ElementsAre("a_x"));  // not a LIKE wildcard
  EXPECT_THAT(keys("job", "a%"), ElementsAre("a%"));
  EXPECT_THAT(keys("job", "\xC3\xA9"), ElementsAre("\xC3\xA9t\xC3\xA9"));
  EXPECT_THAT(keys("job", "zz"), ElementsAre());
  EXPECT_THAT(keys("task", ""), ElementsAre("a3"));
  EXPECT_THAT(keys("nothing", ""), ElementsAre());
}

TEST_P(StoreContract, AFailedTransactionLeavesNothingBehind) {
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("job", "kept", "old").map([](bool) {}); });
  JOULE_EXPECT_ERROR(store_->run([](Transaction& transaction) -> Result<void> {
    EXPECT_TRUE(transaction.insert("job", "new", "{}").value_or(false));
    EXPECT_TRUE(transaction.update("job", "kept", "changed").has_value());
    EXPECT_TRUE(transaction.save_response("request-1", "ok").has_value());
    EXPECT_TRUE(transaction.erase("job", "kept").value_or(false));
    return fail(ErrorCode::kParse, "line 3: expected a number");
  }),
                     ErrorCode::kParse, "line 3: expected a number");
  EXPECT_FALSE(get(*store_, "job", "new").has_value());
  const auto kept = get(*store_, "job", "kept");
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->body, "old");
  EXPECT_EQ(kept->version, 1);
  EXPECT_FALSE(response(*store_, "request-1").has_value());
}

TEST_P(StoreContract, AnExceptionRollsBackAndTheStoreStaysUsable) {
  EXPECT_THROW((void)store_->run([](Transaction& transaction) -> Result<void> {
    (void)transaction.insert("job", "thrown", "{}");
    throw std::runtime_error("boom");
  }),
               std::runtime_error);
  EXPECT_FALSE(get(*store_, "job", "thrown").has_value());
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("job", "after", "{}").map([](bool) {}); });
  EXPECT_TRUE(get(*store_, "job", "after").has_value());
}

TEST_P(StoreContract, StoresResponsesForRetriedRequests) {
  EXPECT_FALSE(response(*store_, "req-1").has_value());
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.save_response("req-1", R"({"limit":250})"); });
  EXPECT_EQ(response(*store_, "req-1"), R"({"limit":250})");
  EXPECT_FALSE(response(*store_, "req-2").has_value());
  // Saving again replaces it (as the memory store does).
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.save_response("req-1", R"({"limit":300})"); });
  EXPECT_EQ(response(*store_, "req-1"), R"({"limit":300})");
}

std::vector<Item> items(Store& store, const std::string& kind, const std::string& key,
                        const ItemQuery& query) {
  auto found = store.transact<std::vector<Item>>(
      [&](Transaction& transaction) { return transaction.items(kind, key, query); });
  EXPECT_TRUE(found.has_value()) << found.error().message();
  return found ? *found : std::vector<Item>();
}

std::vector<int64_t> numbers(const std::vector<Item>& items) {
  std::vector<int64_t> out;
  for (const auto& item : items) {
    out.push_back(item.number);
  }
  return out;
}

TEST_P(StoreContract, PutsGetsReplacesAndErasesItems) {
  run_ok(*store_, [](Transaction& transaction) -> Result<void> {
    for (int64_t number = 1; number <= 3; ++number) {
      if (auto put = transaction.put_item("trial", "job-a",
                                          {number, 10 * number, fmt::format("{{\"n\":{}}}", number)});
          !put) {
        return put;
      }
    }
    return transaction.put_item("trial", "job-b", {1, 0, "other job"});
  });
  const auto item = store_->transact<std::optional<Item>>(
      [](Transaction& transaction) { return transaction.get_item("trial", "job-a", 2); });
  ASSERT_TRUE(item.has_value());
  ASSERT_TRUE(item->has_value());
  EXPECT_EQ(**item, (Item{2, 20, R"({"n":2})"}));
  run_ok(*store_, [](Transaction& transaction) {
    return transaction.put_item("trial", "job-a", {2, 7, "replaced"});
  });
  EXPECT_EQ(numbers(items(*store_, "trial", "job-a", {})), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(items(*store_, "trial", "job-a", {})[1], (Item{2, 7, "replaced"}));
  const auto missing = store_->transact<std::optional<Item>>(
      [](Transaction& transaction) { return transaction.get_item("trial", "job-a", 4); });
  ASSERT_TRUE(missing.has_value());
  EXPECT_FALSE(missing->has_value());
  const auto erased = store_->transact<int64_t>(
      [](Transaction& transaction) { return transaction.erase_items("trial", "job-a"); });
  EXPECT_EQ(erased, 3);
  EXPECT_TRUE(items(*store_, "trial", "job-a", {}).empty());
  EXPECT_EQ(numbers(items(*store_, "trial", "job-b", {})), (std::vector<int64_t>{1}));
}

TEST_P(StoreContract, SelectsItemsByGroupBelowANumberNewestFirst) {
  run_ok(*store_, [](Transaction& transaction) -> Result<void> {
    for (int64_t number = 1; number <= 20; ++number) {
      if (auto put = transaction.put_item("trial", "j", {number, number % 3, std::to_string(number)}); !put) {
        return put;
      }
    }
    return {};
  });
  EXPECT_EQ(numbers(items(*store_, "trial", "j", {2, std::nullopt, 0})),
            (std::vector<int64_t>{20, 17, 14, 11, 8, 5, 2}));
  EXPECT_EQ(numbers(items(*store_, "trial", "j", {2, std::nullopt, 3})), (std::vector<int64_t>{20, 17, 14}));
  EXPECT_EQ(numbers(items(*store_, "trial", "j", {2, 14, 2})), (std::vector<int64_t>{11, 8}));
  EXPECT_EQ(numbers(items(*store_, "trial", "j", {std::nullopt, 5, 0})), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(numbers(items(*store_, "trial", "j", {std::nullopt, std::nullopt, 2})),
            (std::vector<int64_t>{20, 19}));
  EXPECT_TRUE(items(*store_, "trial", "j", {7, std::nullopt, 0}).empty());
  EXPECT_TRUE(items(*store_, "other", "j", {}).empty());
}

TEST_P(StoreContract, ItemsRollBackWithTheirTransaction) {
  run_ok(*store_, [](Transaction& transaction) {
    return transaction.put_item("trial", "j", {1, 0, "kept"});
  });
  JOULE_EXPECT_ERROR(store_->run([](Transaction& transaction) -> Result<void> {
    EXPECT_TRUE(transaction.put_item("trial", "j", {1, 5, "changed"}).has_value());
    EXPECT_TRUE(transaction.put_item("trial", "j", {2, 0, "new"}).has_value());
    return fail(ErrorCode::kState, "refused");
  }),
                     ErrorCode::kState, "refused");
  EXPECT_EQ(items(*store_, "trial", "j", {}), (std::vector<Item>{{1, 0, "kept"}}));
}

TEST_P(StoreContract, PrunesStoredResponsesByAgeOldestFirst) {
  for (int i = 0; i < 5; ++i) {
    run_ok(*store_, [i](Transaction& transaction) {
      return transaction.save_response(fmt::format("old-{}", i), "r");
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // distinct millisecond timestamps
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  run_ok(*store_, [](Transaction& transaction) { return transaction.save_response("new", "r"); });
  const auto erase = [&](std::chrono::seconds age, size_t rows) {
    auto erased = store_->transact<int64_t>(
        [&](Transaction& transaction) { return transaction.erase_responses_older_than(age, rows); });
    EXPECT_TRUE(erased.has_value()) << erased.error().message();
    return erased.value_or(-1);
  };
  EXPECT_EQ(erase(std::chrono::seconds(3600), 100), 0);
  EXPECT_EQ(erase(std::chrono::seconds(1), 2), 2);
  EXPECT_FALSE(response(*store_, "old-0").has_value());
  EXPECT_FALSE(response(*store_, "old-1").has_value());
  EXPECT_TRUE(response(*store_, "old-2").has_value());
  EXPECT_EQ(erase(std::chrono::seconds(1), 100), 3);
  EXPECT_EQ(response(*store_, "new"), "r");
}

TEST_P(StoreContract, TransactReturnsTheValueOfWork) {
  auto value = store_->transact<int>([](Transaction& transaction) -> Result<int> {
    JOULE_TRY(transaction.insert("job", "v", "{}"));
    return 42;
  });
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(*value, 42);
}

TEST_P(StoreContract, KeepsLargeAndUnusualBodiesIntact) {
  std::string body = "{\"text\":\"";
  while (body.size() < (1U << 20)) {
    body +=
        "quote \\\" apostrophe ' backslash \\\\ newline \\n tab \t unicode \xE2\x9A\xA1 \xF0\x9F\x94\x8B; ";
  }
  body += "\"}";
  run_ok(*store_,
         [&](Transaction& transaction) { return transaction.insert("blob", "big", body).map([](bool) {}); });
  const auto document = get(*store_, "blob", "big");
  ASSERT_TRUE(document.has_value());
  EXPECT_EQ(document->body.size(), body.size());
  EXPECT_TRUE(document->body == body);
  run_ok(*store_, [](Transaction& transaction) {
    return transaction.save_response("r'; DROP TABLE responses; --", "x");
  });
  EXPECT_EQ(response(*store_, "r'; DROP TABLE responses; --"), "x");
}

TEST_P(StoreContract, ConcurrentIncrementsAreNeverLost) {
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("counter", "c", "0").map([](bool) {}); });
  increment_concurrently({store_.get()}, "c", 16, 200);
  const auto counter = get(*store_, "counter", "c");
  ASSERT_TRUE(counter.has_value());
  EXPECT_EQ(counter->body, "3200");
  EXPECT_EQ(counter->version, 3201);
}

TEST_P(DurableStoreContract, TwoStoresOnOneDatabaseSerializeTheirTransactions) {
  auto other = test::open_or_throw(database_->url());
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("counter", "c", "0").map([](bool) {}); });
  increment_concurrently({store_.get(), other.get()}, "c", 8, 200);
  const auto counter = get(*other, "counter", "c");
  ASSERT_TRUE(counter.has_value());
  EXPECT_EQ(counter->body, "1600");
}

TEST_P(StoreContract, ConcurrentInsertsOfOneKeyHaveOneWinner) {
  std::atomic<int> winners{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      auto inserted = store_->transact<bool>(
          [&](Transaction& transaction) { return transaction.insert("job", "same", std::to_string(t)); });
      ASSERT_TRUE(inserted.has_value()) << inserted.error().message();
      winners += *inserted ? 1 : 0;
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreContract, ARequestRetriedConcurrentlyIsAppliedOnce) {
  // The pattern of an idempotent request handler: look for the stored response first.
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("counter", "c", "0").map([](bool) {}); });
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&] {
      auto answer = store_->transact<std::string>([&](Transaction& transaction) -> Result<std::string> {
        auto stored = transaction.find_response("request-7");
        if (!stored) {
          return tl::make_unexpected(stored.error());
        }
        if (*stored) {
          return **stored;
        }
        auto counter = transaction.get_for_update("counter", "c");
        if (!counter || !*counter) {
          return fail(ErrorCode::kInternal, "no counter");
        }
        if (auto updated =
                transaction.update("counter", "c", std::to_string(std::stoll((*counter)->body) + 1));
            !updated) {
          return tl::make_unexpected(updated.error());
        }
        JOULE_TRY(transaction.save_response("request-7", "done"));
        return std::string("done");
      });
      ASSERT_TRUE(answer.has_value()) << answer.error().message();
      EXPECT_EQ(*answer, "done");
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
  const auto counter = get(*store_, "counter", "c");
  ASSERT_TRUE(counter.has_value());
  EXPECT_EQ(counter->body, "1");
}

TEST_P(DurableStoreContract, DataOutlivesTheStoreAndReopeningMigratesNothing) {
  run_ok(*store_, [](Transaction& transaction) -> Result<void> {
    (void)transaction.insert("job", "kept", "{}");
    return transaction.save_response("r", "saved");
  });
  store_.reset();
  for (int i = 0; i < 2; ++i) {
    store_ = test::open_or_throw(database_->url());
    EXPECT_EQ(store_->schema_version(), kSchemaVersion);
    EXPECT_TRUE(get(*store_, "job", "kept").has_value());
    EXPECT_EQ(response(*store_, "r"), "saved");
    store_.reset();
  }
  EXPECT_EQ(database_->execute("SELECT count(*) FROM schema_migrations"), std::to_string(kSchemaVersion));
  EXPECT_EQ(database_->execute("SELECT max(version) FROM schema_migrations"), std::to_string(kSchemaVersion));
  EXPECT_NE(database_->execute("SELECT applied_at FROM schema_migrations"), "");
}

TEST_P(DurableStoreContract, OpeningAVersion1DatabaseAddsItemsAndKeepsDocuments) {
  run_ok(*store_,
         [](Transaction& transaction) { return transaction.insert("job", "old", "{}").map([](bool) {}); });
  store_.reset();
  // What a database written by the previous release looks like.
  database_->execute("DROP TABLE items");
  database_->execute("DROP INDEX responses_by_age");
  database_->execute("DELETE FROM schema_migrations WHERE version > 1");
  store_ = test::open_or_throw(database_->url());
  EXPECT_EQ(store_->schema_version(), kSchemaVersion);
  EXPECT_TRUE(get(*store_, "job", "old").has_value());
  run_ok(*store_, [](Transaction& transaction) {
    return transaction.put_item("trial", "old", {1, 0, "{}"});
  });
  EXPECT_EQ(items(*store_, "trial", "old", {}).size(), 1U);
  EXPECT_EQ(database_->execute("SELECT max(version) FROM schema_migrations"), std::to_string(kSchemaVersion));
}

TEST_P(DurableStoreContract, ConcurrentFirstOpensAllSucceed) {
  // SQLite refuses to turn a new file to WAL while another connection does (SQLITE_BUSY at once, about once
  // in 12 rounds of six openers): enough rounds that a regression shows in nearly every run.
  const int rounds = GetParam() == "sqlite" ? 40 : 3;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto fresh = test::make_test_database(GetParam());
    std::vector<std::thread> openers;
    std::vector<std::unique_ptr<Store>> stores(6);
    for (std::size_t i = 0; i < stores.size(); ++i) {
      openers.emplace_back([&, i] {
        auto store = open_store(fresh->url());
        ASSERT_TRUE(store.has_value()) << store.error().message();
        stores[i] = std::move(*store);
      });
    }
    for (auto& opener : openers) {
      opener.join();
    }
    for (const auto& store : stores) {
      ASSERT_NE(store, nullptr);
      EXPECT_EQ(store->schema_version(), kSchemaVersion);
    }
    EXPECT_EQ(fresh->execute("SELECT count(*) FROM schema_migrations"), std::to_string(kSchemaVersion));
    run_ok(*stores[0],
           [](Transaction& transaction) { return transaction.insert("job", "x", "{}").map([](bool) {}); });
    EXPECT_TRUE(get(*stores[5], "job", "x").has_value());
  }
}

TEST_P(DurableStoreContract, RefusesADatabaseWithANewerSchema) {
  const std::string description = store_->description();
  store_.reset();
  database_->execute(fmt::format("INSERT INTO schema_migrations (version) VALUES ({})", kSchemaVersion + 1));
  JOULE_EXPECT_ERROR(
      open_store(database_->url()), ErrorCode::kState,
      fmt::format("{}: the database's schema is at version {}, newer than this joule knows ({}): "
                  "upgrade joule, or use another database",
                  description, kSchemaVersion + 1, kSchemaVersion));
}

TEST_P(StoreContract, ATypicalTransactionIsFast) {
  // What a request does: read one small document, update it and save the response.
  run_ok(*store_, [](Transaction& transaction) {
    return transaction.insert("job", "j", R"({"step":0,"power_limit":250})").map([](bool) {});
  });
  std::vector<double> micros;
  for (int i = 0; i < 400; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run_ok(*store_, [i](Transaction& transaction) -> Result<void> {
      auto job = transaction.get_for_update("job", "j");
      if (!job || !*job) {
        return fail(ErrorCode::kInternal, "no job");
      }
      if (auto updated = transaction.update("job", "j", fmt::format(R"({{"step":{},"power_limit":250}})", i));
          !updated) {
        return updated;
      }
      return transaction.save_response(fmt::format("request-{}", i), R"({"power_limit":250})");
    });
    micros.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(micros.begin(), micros.end());
  const double median = micros[micros.size() / 2];
  const double p99 = micros[micros.size() * 99 / 100];
  std::cout << GetParam() << ": read + update + save response: median " << median << " us, p99 " << p99
            << " us\n";
  RecordProperty("median_us", static_cast<int>(median));
  // The target is well under 1 ms for SQLite; PostgreSQL pays a few loopback round trips.
  EXPECT_LT(median, GetParam() == "postgres" ? 5000.0 : 1000.0);
}

}  // namespace
}  // namespace joule::store
