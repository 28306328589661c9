// SPDX-License-Identifier: Apache-2.0
// A thin RAII layer over libsqlite3: a connection with its cache of prepared statements, and a statement
// borrowed from that cache (bind, step, read columns; reset when done). Errors carry SQLite's own message.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace joule::store::sqlite {

class Connection;

/// A prepared statement lent by its connection's cache; reset (bindings cleared) when it goes away.
class Statement {
 public:
  Statement(Connection& connection, sqlite3_stmt* statement)
      : connection_(&connection), statement_(statement) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  /// Binds parameter `index` (1-based). A failure shows when the statement is stepped.
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, int64_t value);

  /// @return true if there is a row to read, false when the statement is done.
  Result<bool> step();
  /// Steps to the end (for statements without rows).
  Result<void> run();
  /// Rewinds the statement to step it again (bindings kept), e.g. after SQLITE_BUSY.
  void reset();

  std::string_view text(int column) const;
  int64_t integer(int column) const;

 private:
  Connection* connection_;
  sqlite3_stmt* statement_;
  int bind_code_ = 0;  ///< first failed bind, reported by step()
};

/// One database connection, used by one thread at a time (opened with SQLITE_OPEN_NOMUTEX).
class Connection {
 public:
  /// Opens `path` (creating it), then switches to WAL mode with synchronous=NORMAL and foreign keys on.
  /// `description` prefixes error messages; `busy_timeout` bounds each wait for another writer's lock.
  static Result<std::unique_ptr<Connection>> open(const std::string& path, std::string description,
                                                  std::chrono::milliseconds busy_timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Runs one or more statements that return no rows.
  Result<void> execute(const char* sql);
  /// @return the cached prepared statement for `sql` (prepared on first use).
  Result<Statement> statement(std::string_view sql);

  /// Rows changed by the last INSERT, UPDATE or DELETE.
  int64_t changes() const;
  /// Whether the last failure was a lock held by another connection (SQLITE_BUSY / SQLITE_LOCKED).
  bool last_failure_was_busy() const { return busy_; }
  const std::string& description() const { return description_; }

  /// @return an Error for SQLite result code `code` with the connection's message, and remembers whether it
  /// was a lock conflict.
  Error error(int code);

 private:
  Connection(sqlite3* db, std::string description, std::chrono::milliseconds busy_timeout);
  static int on_busy(void* self, int count);

  sqlite3* db_;
  std::string description_;
  std::chrono::microseconds busy_timeout_;
  std::chrono::steady_clock::time_point busy_since_;
  bool busy_ = false;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
};

}  // namespace joule::store::sqlite
