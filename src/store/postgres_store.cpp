// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL store: a pool of connections; each transaction runs BEGIN … COMMIT (READ COMMITTED) on one
// of them. get_for_update is SELECT … FOR UPDATE, so transactions on the same document (in this process or
// in another `joule serve` on the same database) wait for each other and then see each other's commits.
// Deadlocks, serialization failures and lock timeouts roll back and run `work` again; a dropped connection
// is replaced and the transaction run again, a bounded number of times.
#include <charconv>
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "store/backends.hpp"
#include "store/libpq.hpp"
#include "store/migrations.hpp"
#include "store/pg_db.hpp"
#include "store/pool.hpp"
#include "store/retry.hpp"

namespace joule::store {

namespace {

using std::chrono::steady_clock;

constexpr std::size_t kDefaultConnections = 16;
/// How many times one run() replaces a dropped connection before it gives up.
constexpr int kMaxReconnects = 4;

// Advisory lock keys (two int4 halves): 'joul' + what is locked.
constexpr const char* kLockMigrations = "SELECT pg_advisory_xact_lock(1785688428, 0)";
// Locks a request id until the transaction ends: a row lock cannot cover a response not stored yet.
constexpr const char* kLockRequest = "SELECT pg_advisory_xact_lock(1785688429, hashtext($1))";

constexpr const char* kSelectDocument =
    "SELECT body, version FROM documents WHERE kind = $1 AND key = $2 FOR UPDATE";
constexpr const char* kInsertDocument =
    "INSERT INTO documents (kind, key, version, body) VALUES ($1, $2, 1, $3) ON CONFLICT DO NOTHING";
constexpr const char* kUpdateDocument =
    "UPDATE documents SET body = $3, version = version + 1, updated_at = now() WHERE kind = $1 AND key = $2";
constexpr const char* kDeleteDocument = "DELETE FROM documents WHERE kind = $1 AND key = $2";
// starts_with rather than LIKE, which would treat % and _ in the prefix as wildcards; the key column's
// "C" collation sorts byte by byte.
constexpr const char* kSelectKeys =
    "SELECT key FROM documents WHERE kind = $1 AND starts_with(key, $2) ORDER BY key";
constexpr const char* kSelectItem =
    "SELECT grp, body FROM items WHERE kind = $1 AND key = $2 AND number = $3";
constexpr const char* kUpsertItem =
    "INSERT INTO items (kind, key, number, grp, body) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (kind, key, number) DO UPDATE SET grp = excluded.grp, body = excluded.body";
// LIMIT NULL: no limit.
constexpr const char* kSelectItems =
    "SELECT number, grp, body FROM items WHERE kind = $1 AND key = $2 AND number < $3 ORDER BY number DESC "
    "LIMIT $4";
constexpr const char* kSelectGroupItems =
    "SELECT number, grp, body FROM items WHERE kind = $1 AND key = $2 AND grp = $5 AND number < $3 "
    "ORDER BY number DESC LIMIT $4";
constexpr const char* kDeleteItems = "DELETE FROM items WHERE kind = $1 AND key = $2";
constexpr const char* kEraseOldResponses =
    "DELETE FROM responses WHERE request_id IN (SELECT request_id FROM responses WHERE created_at < now() - "
    "make_interval(secs => $1::bigint) ORDER BY created_at LIMIT $2)";
constexpr const char* kSelectResponse = "SELECT response FROM responses WHERE request_id = $1";
constexpr const char* kUpsertResponse =
    "INSERT INTO responses (request_id, response) VALUES ($1, $2) "
    "ON CONFLICT (request_id) DO UPDATE SET response = excluded.response";

int64_t to_int64(std::string_view text) {
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

class PgTransaction final : public Transaction {
 public:
  explicit PgTransaction(pg::Connection& connection) : connection_(connection) {}

  Result<std::optional<Document>> get_for_update(std::string_view kind, std::string_view key) override {
    auto rows = JOULE_TRY(execute(kSelectDocument, {kind, key}));
    if (rows.size() == 0) {
      return std::optional<Document>();
    }
    int64_t version = 0;
    const auto text = rows.text(0, 1);
    std::from_chars(text.data(), text.data() + text.size(), version);
    return std::optional<Document>(
        Document{std::string(kind), std::string(key), std::string(rows.text(0, 0)), version});
  }

  Result<bool> insert(std::string_view kind, std::string_view key, std::string_view body) override {
    auto rows = JOULE_TRY(execute(kInsertDocument, {kind, key, body}));
    return rows.affected() > 0;
  }

  Result<void> update(std::string_view kind, std::string_view key, std::string_view body) override {
    auto rows = JOULE_TRY(execute(kUpdateDocument, {kind, key, body}));
    if (rows.affected() == 0) {
      return fail(ErrorCode::kNotFound, "no {} '{}' to update", kind, key);
    }
    return {};
  }

  Result<bool> erase(std::string_view kind, std::string_view key) override {
    auto rows = JOULE_TRY(execute(kDeleteDocument, {kind, key}));
    return rows.affected() > 0;
  }

  Result<std::vector<std::string>> keys(std::string_view kind, std::string_view prefix) override {
    auto rows = JOULE_TRY(execute(kSelectKeys, {kind, prefix}));
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(rows.size()));
    for (int row = 0; row < rows.size(); ++row) {
      keys.emplace_back(rows.text(row, 0));
    }
    return keys;
  }

  Result<std::optional<Item>> get_item(std::string_view kind, std::string_view key, int64_t number) override {
    const std::string number_text = std::to_string(number);
    auto rows = JOULE_TRY(execute(kSelectItem, {kind, key, number_text}));
    if (rows.size() == 0) {
      return std::optional<Item>();
    }
    return std::optional<Item>(Item{number, to_int64(rows.text(0, 0)), std::string(rows.text(0, 1))});
  }

  Result<void> put_item(std::string_view kind, std::string_view key, const Item& item) override {
    const std::string number_text = std::to_string(item.number);
    const std::string group_text = std::to_string(item.group);
    JOULE_TRY(execute(kUpsertItem, {kind, key, number_text, group_text, item.body}));
    return {};
  }

  Result<std::vector<Item>> items(std::string_view kind, std::string_view key,
                                  const ItemQuery& query) override {
    const std::string before = std::to_string(query.before.value_or(std::numeric_limits<int64_t>::max()));
    // "ALL" is not a bigint; a limit beyond any count works the same.
    const std::string limit = std::to_string(query.limit == 0 ? std::numeric_limits<int64_t>::max()
                                                              : static_cast<int64_t>(query.limit));
    const std::string group = query.group ? std::to_string(*query.group) : std::string();
    auto rows = JOULE_TRY(query.group ? execute(kSelectGroupItems, {kind, key, before, limit, group})
                                      : execute(kSelectItems, {kind, key, before, limit}));
    std::vector<Item> items;
    items.reserve(static_cast<std::size_t>(rows.size()));
    for (int row = 0; row < rows.size(); ++row) {
      items.push_back(
          Item{to_int64(rows.text(row, 0)), to_int64(rows.text(row, 1)), std::string(rows.text(row, 2))});
    }
    return items;
  }

  Result<int64_t> erase_items(std::string_view kind, std::string_view key) override {
    auto rows = JOULE_TRY(execute(kDeleteItems, {kind, key}));
    return static_cast<int64_t>(rows.affected());
  }

  Result<std::optional<std::string>> find_response(std::string_view request_id) override {
    // Two commands: under READ COMMITTED, the SELECT's snapshot is taken after the lock is granted, so it
    // sees the response of a transaction we waited for.
    JOULE_TRY(execute(kLockRequest, {request_id}));
    auto rows = JOULE_TRY(execute(kSelectResponse, {request_id}));
    if (rows.size() == 0) {
      return std::optional<std::string>();
    }
    return std::optional<std::string>(std::string(rows.text(0, 0)));
  }

  Result<void> save_response(std::string_view request_id, std::string_view response) override {
    JOULE_TRY(execute(kUpsertResponse, {request_id, response}));
    return {};
  }

  Result<int64_t> erase_responses_older_than(std::chrono::seconds age, size_t max_rows) override {
    const std::string age_text = std::to_string(age.count());
    const std::string rows_text = std::to_string(max_rows);
    auto rows = JOULE_TRY(execute(kEraseOldResponses, {age_text, rows_text}));
    return static_cast<int64_t>(rows.affected());
  }

  /// How the first failed command failed (kNone if none did).
  pg::Failure failure_kind() const { return failure_kind_; }
  const std::optional<Error>& failure() const { return failure_; }

 private:
  Result<pg::Rows> execute(const char* sql, std::initializer_list<std::string_view> parameters) {
    auto rows = connection_.execute(sql, parameters);
    if (!rows && !failure_) {
      // After a failure PostgreSQL refuses everything until ROLLBACK, so the first one is what matters.
      failure_ = rows.error();
      failure_kind_ = connection_.last_failure();
    }
    return rows;
  }

  pg::Connection& connection_;
  pg::Failure failure_kind_ = pg::Failure::kNone;
  std::optional<Error> failure_;
};

/// What one attempt at a transaction came to.
struct Outcome {
  enum class State { kDone, kConflict, kConnectionLost } state;
  Result<void> result;
};

Outcome attempt(pg::Connection& connection, const std::function<Result<void>(Transaction&)>& work) {
  const auto rollback = [&connection] { (void)connection.execute("ROLLBACK"); };
  if (auto begun = connection.execute("BEGIN"); !begun) {
    const bool lost = connection.last_failure() == pg::Failure::kConnectionLost;
    return {lost ? Outcome::State::kConnectionLost : Outcome::State::kDone,
            tl::make_unexpected(begun.error())};
  }
  PgTransaction transaction(connection);
  Result<void> result;
  try {
    result = work(transaction);
  } catch (...) {
    rollback();
    throw;
  }
  if (transaction.failure()) {
    const auto kind = transaction.failure_kind();
    rollback();
    if (kind == pg::Failure::kConnectionLost) {
      return {Outcome::State::kConnectionLost, tl::make_unexpected(*transaction.failure())};
    }
    if (kind == pg::Failure::kConflict) {
      return {Outcome::State::kConflict, tl::make_unexpected(*transaction.failure())};
    }
    // A failed command aborts the transaction: never commit, even if `work` went on.
    return {Outcome::State::kDone,
            result ? Result<void>(tl::make_unexpected(*transaction.failure())) : result};
  }
  if (!result) {
    rollback();
    return {Outcome::State::kDone, result};
  }
  auto committed = connection.execute("COMMIT");
  if (committed) {
    return {Outcome::State::kDone, {}};
  }
  switch (connection.last_failure()) {
    case pg::Failure::kConflict:
      return {Outcome::State::kConflict, tl::make_unexpected(committed.error())};
    case pg::Failure::kConnectionLost:
      // The COMMIT may have reached the server: running `work` again could apply it twice.
      return {Outcome::State::kDone,
              fail(ErrorCode::kIo, "{} (while committing: the transaction may or may not have been applied)",
                   committed.error().message())};
    default:
      return {Outcome::State::kDone, tl::make_unexpected(committed.error())};
  }
}

/// Brings the schema to kSchemaVersion in one transaction, under an advisory lock so that servers starting
/// together do not race. @return the version; `kind` says how a failure failed.
Result<int> migrate(pg::Connection& connection, const std::string& description, pg::Failure& kind) {
  kind = pg::Failure::kNone;
  auto step = [&](Result<void> done) -> Result<void> {
    if (!done) {
      kind = connection.last_failure();
    }
    return done;
  };
  auto command = [&](const char* sql, std::initializer_list<std::string_view> parameters = {}) {
    auto rows = connection.execute(sql, parameters);
    if (!rows) {
      kind = connection.last_failure();
    }
    return rows;
  };
  JOULE_TRY(command("BEGIN"));
  auto migrated = [&]() -> Result<int> {
    JOULE_TRY(command(kLockMigrations));
    JOULE_TRY(step(connection.execute_script(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
        "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")));
    auto rows = JOULE_TRY(command("SELECT coalesce(max(version), 0) FROM schema_migrations"));
    int version = 0;
    const auto text = rows.text(0, 0);
    std::from_chars(text.data(), text.data() + text.size(), version);
    if (version > kSchemaVersion) {
      return tl::make_unexpected(Error(ErrorCode::kState, newer_schema_message(description, version)));
    }
    for (const auto& migration : kMigrations) {
      if (migration.version <= version) {
        continue;
      }
      if (auto applied = step(connection.execute_script(std::string(migration.postgres).c_str())); !applied) {
        return tl::make_unexpected(
            applied.error().with_context(fmt::format("schema migration {}", migration.version)));
      }
      const std::string number = std::to_string(migration.version);
      JOULE_TRY(command("INSERT INTO schema_migrations (version) VALUES ($1)", {number}));
    }
    JOULE_TRY(command("COMMIT"));
    return kSchemaVersion;
  }();
  if (!migrated) {
    (void)connection.execute("ROLLBACK");
  }
  return migrated;
}

class PostgresStore final : public Store {
 public:
  PostgresStore(pg::Target target, const OpenOptions& options)
      : target_(std::move(target)),
        options_(options),
        pool_(options.max_connections > 0 ? static_cast<std::size_t>(options.max_connections)
                                          : kDefaultConnections,
              [this] { return pg::Connection::open(target_, options_.lock_timeout); }) {}

  Result<void> open() {
    const auto start = steady_clock::now();
    Backoff backoff(std::chrono::milliseconds(1), std::chrono::milliseconds(100));
    for (;;) {
      auto lease = JOULE_TRY(pool_.acquire());
      pg::Failure kind = pg::Failure::kNone;
      auto version = migrate(*lease, target_.description, kind);
      if (version) {
        schema_version_ = *version;
        return {};
      }
      if (kind != pg::Failure::kConflict || steady_clock::now() - start >= options_.retry_timeout) {
        return tl::make_unexpected(version.error());
      }
      backoff.sleep();
    }
  }

  Result<void> run(const std::function<Result<void>(Transaction&)>& work) override {
    const auto start = steady_clock::now();
    Backoff backoff(std::chrono::microseconds(500), std::chrono::milliseconds(100));
    int reconnects = 0;
    for (;;) {
      Outcome outcome{Outcome::State::kDone, {}};
      {
        auto lease = pool_.acquire();
        if (!lease) {
          // Connecting failed: try again a few times, the server may be restarting (but a refused login
          // will not get better).
          if (lease.error().code() != ErrorCode::kIo || reconnects >= kMaxReconnects) {
            return tl::make_unexpected(lease.error());
          }
          ++reconnects;
          std::this_thread::sleep_for(std::chrono::milliseconds(100) * reconnects);
          continue;
        }
        outcome = attempt(**lease, work);
        if (outcome.state == Outcome::State::kConnectionLost) {
          lease->discard();
          pool_.clear_idle();  // the server probably dropped them all (restart, failover)
        }
      }
      switch (outcome.state) {
        case Outcome::State::kDone:
          return outcome.result;
        case Outcome::State::kConnectionLost:
          if (++reconnects > kMaxReconnects) {
            return fail(ErrorCode::kIo, "{} (gave up after {} new connections)",
                        outcome.result.error().message(), kMaxReconnects);
          }
          break;
        case Outcome::State::kConflict: {
          const auto waited =
              std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - start);
          if (waited >= options_.retry_timeout) {
            return fail(ErrorCode::kIo, "{} (gave up after {} ms of retries)",
                        outcome.result.error().message(), waited.count());
          }
          backoff.sleep();
          break;
        }
      }
    }
  }

  std::string description() const override { return target_.description; }
  int schema_version() const override { return schema_version_; }

 private:
  const pg::Target target_;
  const OpenOptions options_;
  Pool<pg::Connection> pool_;
  int schema_version_ = 0;
};

}  // namespace

Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url, const OpenOptions& options) {
  pg::Target target{url, mask_password(url), {}};
  // Check the URI's syntax first, so a typo is kInvalidArgument rather than a failed connection.
  const pg::LibPq& pq = *JOULE_TRY(pg::libpq());
  char* parse_error = nullptr;
  PQconninfoOption* parsed = pq.conninfo_parse(url.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string message = parse_error != nullptr ? parse_error : "out of memory";
    pq.freemem(parse_error);
    // Scrub with the password unknown: mask the whole URI as it may be echoed.
    target.password = url;
    return fail(ErrorCode::kInvalidArgument, "{}: {}", target.description,
                pg::clean_message(message, target));
  }
  for (const PQconninfoOption* option = parsed; option->keyword != nullptr; ++option) {
    if (std::string_view(option->keyword) == "password" && option->val != nullptr) {
      target.password = option->val;
    }
  }
  pq.conninfo_free(parsed);

  auto store = std::make_unique<PostgresStore>(std::move(target), options);
  JOULE_TRY(store->open());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace joule::store
