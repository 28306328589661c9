// SPDX-License-Identifier: Apache-2.0
// A thin RAII layer over libpq: a connection that runs commands with text parameters (PQexecParams) and
// their results. Errors carry PostgreSQL's own message, prefixed by the store's description (password
// masked), and say whether the command failed for a reason worth retrying the transaction.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "joule/core/error.hpp"

struct pg_conn;
struct pg_result;

namespace joule::store::pg {

struct LibPq;

/// Why the last command failed.
enum class Failure {
  kNone,
  kConflict,        ///< serialization failure, deadlock or lock timeout: roll back and run again
  kConnectionLost,  ///< the connection is broken: reconnect and run again (if it was not a COMMIT)
  kOther,
};

/// The rows (or the outcome) of a command.
class Rows {
 public:
  /// Takes ownership of `result` (cleared through `pq`, the library that made it).
  Rows(const LibPq& pq, pg_result* result) : pq_(&pq), result_(result) {}
  Rows(Rows&& other) noexcept : pq_(other.pq_), result_(std::exchange(other.result_, nullptr)) {}
  Rows& operator=(Rows&&) = delete;
  Rows(const Rows&) = delete;
  Rows& operator=(const Rows&) = delete;
  ~Rows();

  int size() const;
  std::string_view text(int row, int column) const;
  /// Rows inserted, updated or deleted by the command.
  int64_t affected() const;

 private:
  const LibPq* pq_;
  pg_result* result_;
};

/// Where to connect, shared by a store's connections.
struct Target {
  std::string url;          ///< libpq connection URI, with the password
  std::string description;  ///< the URI with the password masked
  std::string password;     ///< to scrub from messages that might echo it
};

/// One connection, used by one thread at a time.
class Connection {
 public:
  /// Connects and sets lock_timeout. kLibraryMissing if libpq cannot be loaded (libpq.hpp),
  /// kInvalidArgument for a malformed URI, kPermissionDenied if authentication fails, kIo otherwise (with
  /// libpq's message).
  static Result<std::unique_ptr<Connection>> open(const Target& target,
                                                  std::chrono::milliseconds lock_timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Runs one command with text parameters $1, $2, … (which may not contain NUL bytes).
  Result<Rows> execute(const char* sql, std::initializer_list<std::string_view> parameters = {});
  /// Runs several commands without parameters (migration scripts).
  Result<void> execute_script(const char* sql);

  Failure last_failure() const { return failure_; }
  /// Whether the connection is broken (it must not go back to the pool).
  bool broken() const;

 private:
  Connection(const LibPq& pq, pg_conn* connection, const Target& target)
      : pq_(&pq), connection_(connection), target_(&target) {}
  Result<Rows> check(pg_result* result);

  const LibPq* pq_;
  pg_conn* connection_;
  const Target* target_;
  Failure failure_ = Failure::kNone;
};

/// @return `message` on one line, with the target's URI and password masked (libpq may echo parts of a
/// malformed URI).
std::string clean_message(std::string_view message, const Target& target);

}  // namespace joule::store::pg
