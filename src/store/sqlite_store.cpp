// SPDX-License-Identifier: Apache-2.0
// The SQLite store. SQLite lets one writer at a time into a database, so every transaction starts with
// BEGIN IMMEDIATE (taking the write lock at once: what get_for_update promises) and this process's
// transactions queue on a mutex (the gate) rather than polling the file lock. Other processes (or other
// Store objects) on the same file wait in the busy handler; a transaction still locked out after the lock
// timeout is rolled back and retried until the retry timeout.
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "store/backends.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/retry.hpp"
#include "store/sqlite_db.hpp"

namespace joule::store {

namespace {

using std::chrono::steady_clock;

// The statements, prepared once per connection.
constexpr std::string_view kBegin = "BEGIN IMMEDIATE";
constexpr std::string_view kCommit = "COMMIT";
constexpr std::string_view kRollback = "ROLLBACK";
constexpr std::string_view kSelectDocument =
    "SELECT body, version FROM documents WHERE kind = ?1 AND key = ?2";
constexpr std::string_view kInsertDocument =
    "INSERT INTO documents (kind, key, version, body, updated_at) "
    "VALUES (?1, ?2, 1, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) ON CONFLICT (kind, key) DO NOTHING";
constexpr std::string_view kUpdateDocument =
    "UPDATE documents SET body = ?3, version = version + 1, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', "
    "'now') "
    "WHERE kind = ?1 AND key = ?2";
constexpr std::string_view kDeleteDocument = "DELETE FROM documents WHERE kind = ?1 AND key = ?2";
// substr/length rather than LIKE, which would treat % and _ in the prefix as wildcards.
constexpr std::string_view kSelectKeys =
    "SELECT key FROM documents WHERE kind = ?1 AND key >= ?2 AND substr(key, 1, length(?2)) = ?2 ORDER BY "
    "key";
constexpr std::string_view kSelectItem =
    "SELECT grp, body FROM items WHERE kind = ?1 AND key = ?2 AND number = ?3";
constexpr std::string_view kUpsertItem =
    "INSERT INTO items (kind, key, number, grp, body) VALUES (?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT (kind, key, number) DO UPDATE SET grp = excluded.grp, body = excluded.body";
// LIMIT -1: no limit. Two statements rather than "(?3 IS NULL OR grp = ?3)", which would keep SQLite from
// using the group index.
constexpr std::string_view kSelectItems =
    "SELECT number, grp, body FROM items WHERE kind = ?1 AND key = ?2 AND number < ?3 ORDER BY number DESC "
    "LIMIT ?4";
constexpr std::string_view kSelectGroupItems =
    "SELECT number, grp, body FROM items WHERE kind = ?1 AND key = ?2 AND grp = ?5 AND number < ?3 "
    "ORDER BY number DESC LIMIT ?4";
constexpr std::string_view kDeleteItems = "DELETE FROM items WHERE kind = ?1 AND key = ?2";
constexpr std::string_view kEraseOldResponses =
    "DELETE FROM responses WHERE request_id IN (SELECT request_id FROM responses WHERE created_at < "
    "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ?1 || ' seconds') ORDER BY created_at LIMIT ?2)";
constexpr std::string_view kSelectResponse = "SELECT response FROM responses WHERE request_id = ?1";
constexpr std::string_view kUpsertResponse =
    "INSERT INTO responses (request_id, response, created_at) VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', "
    "'now')) "
    "ON CONFLICT (request_id) DO UPDATE SET response = excluded.response";

class SqliteTransaction final : public Transaction {
 public:
  explicit SqliteTransaction(sqlite::Connection& connection) : connection_(connection) {}

  Result<std::optional<Document>> get_for_update(std::string_view kind, std::string_view key) override {
    auto statement = connection_.statement(kSelectDocument);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind).bind(2, key);
    auto row = statement->step();
    if (!row) {
      return failed(row.error());
    }
    if (!*row) {
      return std::optional<Document>();
    }
    return std::optional<Document>(Document{std::string(kind), std::string(key),
                                            std::string(statement->text(0)), statement->integer(1)});
  }

  Result<bool> insert(std::string_view kind, std::string_view key, std::string_view body) override {
    auto changed = JOULE_TRY(change(kInsertDocument, kind, key, body));
    return changed > 0;
  }

  Result<void> update(std::string_view kind, std::string_view key, std::string_view body) override {
    auto changed = JOULE_TRY(change(kUpdateDocument, kind, key, body));
    if (changed == 0) {
      return fail(ErrorCode::kNotFound, "no {} '{}' to update", kind, key);
    }
    return {};
  }

  Result<bool> erase(std::string_view kind, std::string_view key) override {
    auto changed = JOULE_TRY(change(kDeleteDocument, kind, key, std::nullopt));
    return changed > 0;
  }

  Result<std::vector<std::string>> keys(std::string_view kind, std::string_view prefix) override {
    auto statement = connection_.statement(kSelectKeys);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind).bind(2, prefix);
    std::vector<std::string> keys;
    for (;;) {
      auto row = statement->step();
      if (!row) {
        return failed(row.error());
      }
      if (!*row) {
        return keys;
      }
      keys.emplace_back(statement->text(0));
    }
  }

  Result<std::optional<Item>> get_item(std::string_view kind, std::string_view key, int64_t number) override {
    auto statement = connection_.statement(kSelectItem);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind).bind(2, key).bind(3, number);
    auto row = statement->step();
    if (!row) {
      return failed(row.error());
    }
    if (!*row) {
      return std::optional<Item>();
    }
    return std::optional<Item>(Item{number, statement->integer(0), std::string(statement->text(1))});
  }

  Result<void> put_item(std::string_view kind, std::string_view key, const Item& item) override {
    auto statement = connection_.statement(kUpsertItem);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind).bind(2, key).bind(3, item.number).bind(4, item.group).bind(5, item.body);
    if (auto done = statement->run(); !done) {
      return failed(done.error());
    }
    return {};
  }

  Result<std::vector<Item>> items(std::string_view kind, std::string_view key,
                                  const ItemQuery& query) override {
    auto statement = connection_.statement(query.group ? kSelectGroupItems : kSelectItems);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind)
        .bind(2, key)
        .bind(3, query.before.value_or(std::numeric_limits<int64_t>::max()))
        .bind(4, query.limit == 0 ? int64_t{-1} : static_cast<int64_t>(query.limit));
    if (query.group) {
      statement->bind(5, *query.group);
    }
    std::vector<Item> items;
    for (;;) {
      auto row = statement->step();
      if (!row) {
        return failed(row.error());
      }
      if (!*row) {
        return items;
      }
      items.push_back(Item{statement->integer(0), statement->integer(1), std::string(statement->text(2))});
    }
  }

  Result<int64_t> erase_items(std::string_view kind, std::string_view key) override {
    return change(kDeleteItems, kind, key, std::nullopt);
  }

  Result<std::optional<std::string>> find_response(std::string_view request_id) override {
    // Transactions are serialized by the write lock, so no lock on the request id is needed.
    auto statement = connection_.statement(kSelectResponse);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, request_id);
    auto row = statement->step();
    if (!row) {
      return failed(row.error());
    }
    if (!*row) {
      return std::optional<std::string>();
    }
    return std::optional<std::string>(std::string(statement->text(0)));
  }

  Result<void> save_response(std::string_view request_id, std::string_view response) override {
    auto statement = connection_.statement(kUpsertResponse);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, request_id).bind(2, response);
    if (auto done = statement->run(); !done) {
      return failed(done.error());
    }
    return {};
  }

  Result<int64_t> erase_responses_older_than(std::chrono::seconds age, size_t max_rows) override {
    auto statement = connection_.statement(kEraseOldResponses);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, static_cast<int64_t>(age.count())).bind(2, static_cast<int64_t>(max_rows));
    if (auto done = statement->run(); !done) {
      return failed(done.error());
    }
    return connection_.changes();
  }

  /// Whether a statement failed because another connection held a lock (the transaction must start over).
  bool conflicted() const { return conflicted_; }
  /// The first statement failure, if any: the transaction must not commit even if `work` ignored it.
  const std::optional<Error>& failure() const { return failure_; }

 private:
  Result<int64_t> change(std::string_view sql, std::string_view kind, std::string_view key,
                         std::optional<std::string_view> body) {
    auto statement = connection_.statement(sql);
    if (!statement) {
      return failed(statement.error());
    }
    statement->bind(1, kind).bind(2, key);
    if (body) {
      statement->bind(3, *body);
    }
    if (auto done = statement->run(); !done) {
      return failed(done.error());
    }
    return connection_.changes();
  }

  tl::unexpected<Error> failed(Error error) {
    conflicted_ = conflicted_ || connection_.last_failure_was_busy();
    if (!failure_) {
      failure_ = error;
    }
    return tl::make_unexpected(std::move(error));
  }

  sqlite::Connection& connection_;
  bool conflicted_ = false;
  std::optional<Error> failure_;
};

Result<void> execute_cached(sqlite::Connection& connection, std::string_view sql) {
  auto statement = JOULE_TRY(connection.statement(sql));
  return statement.run();
}

/// Ends a transaction with ROLLBACK unless it was committed (also when `work` throws).
class RollbackGuard {
 public:
  explicit RollbackGuard(sqlite::Connection& connection) : connection_(&connection) {}
  RollbackGuard(const RollbackGuard&) = delete;
  RollbackGuard& operator=(const RollbackGuard&) = delete;
  ~RollbackGuard() {
    if (connection_ != nullptr) {
      (void)execute_cached(*connection_, kRollback);
    }
  }
  void release() { connection_ = nullptr; }

 private:
  sqlite::Connection* connection_;
};

/// Brings the database to kSchemaVersion in one write transaction (which also keeps concurrent first opens
/// from racing). @return the version, or kState if the database is newer; busy = another process holds the
/// lock.
Result<int> migrate(sqlite::Connection& connection) {
  JOULE_TRY(execute_cached(connection, kBegin));
  RollbackGuard guard(connection);
  JOULE_TRY(
      connection.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER "
                         "PRIMARY KEY, applied_at TEXT NOT NULL "
                         "DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"));
  int64_t version = 0;
  {
    auto statement =
        JOULE_TRY(connection.statement("SELECT coalesce(max(version), 0) FROM schema_migrations"));
    JOULE_TRY(statement.step());
    version = statement.integer(0);
  }
  if (version > kSchemaVersion) {
    return tl::make_unexpected(
        Error(ErrorCode::kState, newer_schema_message(connection.description(), static_cast<int>(version))));
  }
  for (const auto& step : kMigrations) {
    if (step.version <= version) {
      continue;
    }
    if (auto applied = connection.execute(std::string(step.sqlite).c_str()); !applied) {
      return tl::make_unexpected(
          applied.error().with_context(fmt::format("schema migration {}", step.version)));
    }
    auto record = JOULE_TRY(connection.statement("INSERT INTO schema_migrations (version) VALUES (?1)"));
    record.bind(1, static_cast<int64_t>(step.version));
    JOULE_TRY(record.run());
  }
  JOULE_TRY(execute_cached(connection, kCommit));
  guard.release();
  return kSchemaVersion;
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, const OpenOptions& options)
      : description_("sqlite:" + path),
        options_(options),
        // Transactions pass the gate one at a time, so one connection does all the work; a second one only
        // stands in while a broken one is replaced.
        pool_(2, [this, path = std::move(path)] {
          return sqlite::Connection::open(path, description_, options_.lock_timeout);
        }) {}

  Result<void> open() {
    const auto deadline = steady_clock::now() + options_.retry_timeout;
    Backoff backoff(std::chrono::microseconds(100), std::chrono::milliseconds(50));
    for (;;) {
      auto lease = JOULE_TRY(pool_.acquire());
      auto version = migrate(*lease);
      if (version) {
        schema_version_ = *version;
        return {};
      }
      if (!(lease)->last_failure_was_busy() || steady_clock::now() >= deadline) {
        return tl::make_unexpected(version.error());
      }
      backoff.sleep();
    }
  }

  Result<void> run(const std::function<Result<void>(Transaction&)>& work) override {
    const auto start = steady_clock::now();
    Backoff backoff(std::chrono::microseconds(100), std::chrono::milliseconds(50));
    std::lock_guard gate(gate_);
    auto lease = JOULE_TRY(pool_.acquire());
    sqlite::Connection& connection = *lease;
    for (;;) {
      std::optional<Error> conflict;
      if (auto begun = execute_cached(connection, kBegin); !begun) {
        if (!connection.last_failure_was_busy()) {
          return begun;
        }
        conflict = begun.error();
      } else {
        RollbackGuard guard(connection);
        SqliteTransaction transaction(connection);
        auto result = work(transaction);
        if (transaction.conflicted()) {
          conflict = *transaction.failure();
        } else if (!result) {
          return result;
        } else if (transaction.failure()) {
          return tl::make_unexpected(*transaction.failure());
        } else if (auto committed = execute_cached(connection, kCommit); committed) {
          guard.release();
          return {};
        } else if (connection.last_failure_was_busy()) {
          conflict = committed.error();
        } else {
          return committed;
        }
      }
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - start);
      if (waited >= options_.retry_timeout) {
        return fail(ErrorCode::kIo, "{} (gave up after {} ms of retries)", conflict->message(),
                    waited.count());
      }
      backoff.sleep();
    }
  }

  std::string description() const override { return description_; }
  int schema_version() const override { return schema_version_; }

 private:
  const std::string description_;
  const OpenOptions options_;
  std::mutex gate_;
  Pool<sqlite::Connection> pool_;
  int schema_version_ = 0;
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path, const OpenOptions& options) {
  auto store = std::make_unique<SqliteStore>(path, options);
  JOULE_TRY(store->open());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace joule::store
