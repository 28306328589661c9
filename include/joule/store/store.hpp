// SPDX-License-Identifier: Apache-2.0
// joule/store/store.hpp — durable state for the optimizer service: JSON documents by (kind, key) and the
// numbered items that belong to them, changed in transactions that lock the documents they read, plus stored
// responses so a retried request is never applied twice. Backends: SQLite (default, one file) and PostgreSQL
// (shared by several `joule serve` processes).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::store {

/// A JSON document (its text) identified by (kind, key), e.g. ("bso_job", "mnist-4f2a…").
struct Document {
  std::string kind;
  std::string key;
  std::string body;     ///< JSON text
  int64_t version = 0;  ///< 1 when created, +1 per update
};

/// A record that belongs to a document, e.g. one trial of a batch-size job: numbered within its document,
/// with an integer group for filtered reads (the service files a finished trial under its batch size), so
/// that a document with a long history is read and written a record at a time instead of whole. Items share
/// their document's (kind, key) and are protected by its lock: lock the document with get_for_update() before
/// reading or changing its items.
struct Item {
  int64_t number = 0;  ///< unique within the document
  int64_t group = 0;
  std::string body;  ///< JSON text

  bool operator==(const Item&) const = default;
};

/// Which items Transaction::items() returns (always highest number first).
struct ItemQuery {
  std::optional<int64_t> group;   ///< only items of this group (unset: every group)
  std::optional<int64_t> before;  ///< only items numbered below this (unset: all)
  size_t limit = 0;               ///< at most this many (0: no limit)
};

/// The view of one transaction. Reads through get_for_update() lock the document until the transaction ends,
/// so concurrent transactions on the same document (in this process or another one on the same database)
/// run one after the other.
class Transaction {
 public:
  virtual ~Transaction() = default;

  /// @return the document, locked for this transaction, or nullopt if there is none.
  virtual Result<std::optional<Document>> get_for_update(std::string_view kind, std::string_view key) = 0;
  /// Creates the document. @return false (and changes nothing) if it already exists.
  virtual Result<bool> insert(std::string_view kind, std::string_view key, std::string_view body) = 0;
  /// Replaces an existing document's body (version + 1). kNotFound if there is none.
  virtual Result<void> update(std::string_view kind, std::string_view key, std::string_view body) = 0;
  /// Deletes a document. @return false if there was none.
  virtual Result<bool> erase(std::string_view kind, std::string_view key) = 0;
  /// @return the keys of a kind starting with `prefix`, sorted.
  virtual Result<std::vector<std::string>> keys(std::string_view kind, std::string_view prefix) = 0;

  /// @return item `number` of document (kind, key), or nullopt if there is none.
  virtual Result<std::optional<Item>> get_item(std::string_view kind, std::string_view key,
                                               int64_t number) = 0;
  /// Creates or replaces item `item.number` of document (kind, key) (the document itself need not exist).
  virtual Result<void> put_item(std::string_view kind, std::string_view key, const Item& item) = 0;
  /// @return the items of document (kind, key) that `query` selects, highest number first. Its cost follows
  /// the items returned, not how many the document has.
  virtual Result<std::vector<Item>> items(std::string_view kind, std::string_view key,
                                          const ItemQuery& query) = 0;
  /// Deletes every item of document (kind, key). @return how many there were.
  virtual Result<int64_t> erase_items(std::string_view kind, std::string_view key) = 0;

  /// @return the response stored for `request_id` by an earlier transaction, if any (idempotent retries).
  /// Also locks `request_id` until the transaction ends, so two concurrent transactions for the same request
  /// run one after the other and the second one finds the first one's response.
  virtual Result<std::optional<std::string>> find_response(std::string_view request_id) = 0;
  /// Stores the response of `request_id`, committed with the rest of the transaction.
  virtual Result<void> save_response(std::string_view request_id, std::string_view response) = 0;
  /// Deletes up to `max_rows` stored responses saved more than `age` ago, oldest first (a retry after that is
  /// a new request). @return how many were deleted.
  virtual Result<int64_t> erase_responses_older_than(std::chrono::seconds age, size_t max_rows) = 0;
};

/// A database. Thread-safe: transactions may run from many threads at once.
class Store {
 public:
  virtual ~Store() = default;

  /// Runs `work` in one transaction: committed if it succeeds, rolled back if it returns an error (which is
  /// then returned). Transactions that fail because of a conflict with a concurrent one (a deadlock, a
  /// serialization failure, a busy database) are retried from the start, so `work` must have no effects
  /// outside the transaction.
  virtual Result<void> run(const std::function<Result<void>(Transaction&)>& work) = 0;

  /// @return the store's URL with any password masked, for logs and messages.
  virtual std::string description() const = 0;

  /// @return the schema version the database is at after opening (migrations applied).
  virtual int schema_version() const = 0;

  /// Runs `work` and returns its value (the convenience form of run()).
  template <class T>
  Result<T> transact(const std::function<Result<T>(Transaction&)>& work) {
    std::optional<T> value;
    auto done = run([&](Transaction& transaction) -> Result<void> {
      auto result = JOULE_TRY(work(transaction));
      value = std::move(result);
      return {};
    });
    if (!done) {
      return tl::make_unexpected(done.error());
    }
    return std::move(*value);
  }
};

/// The schema version this joule creates and understands (the number of migrations it knows).
inline constexpr int kSchemaVersion = 2;

/// Tuning for open_store(); the defaults suit `joule serve`.
struct OpenOptions {
  /// Most database connections a store keeps open at once (PostgreSQL; 0: 16). Transactions wait for a free
  /// one. SQLite runs one transaction at a time per database anyway, so it needs only one or two.
  int max_connections = 0;
  /// How long one statement waits for a lock that another transaction holds (SQLite's busy timeout,
  /// PostgreSQL's lock_timeout) before run() rolls back and starts over.
  std::chrono::milliseconds lock_timeout{5000};
  /// How long run() keeps retrying a transaction that conflicts with others before it gives up (kIo).
  std::chrono::milliseconds retry_timeout{30000};
};

/// Opens a store and brings its schema to the current version:
/// - `sqlite:PATH` (or a path ending in .db / .sqlite): a SQLite file in WAL mode, created if missing;
/// - `postgresql://…` / `postgres://…`: a PostgreSQL database (libpq connection URI);
/// - `memory:`: in this process only, for tests and throwaway runs.
/// @return kInvalidArgument for an unknown scheme; kIo / kPermissionDenied with the database's own message if
/// it cannot be opened; kState if the database's schema is newer than this joule knows.
Result<std::unique_ptr<Store>> open_store(const std::string& url);

/// open_store() with tuning options.
Result<std::unique_ptr<Store>> open_store(const std::string& url, const OpenOptions& options);

/// @return `url` with the password of a `scheme://user:password@host…` URL (and any `password=` query
/// parameter) replaced by `***`, for logs and messages.
std::string mask_password(std::string_view url);

/// @return a store that lives in this process's memory (what open_store("memory:") returns).
std::unique_ptr<Store> memory_store();

}  // namespace joule::store
