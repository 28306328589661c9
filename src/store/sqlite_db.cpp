// SPDX-License-Identifier: Apache-2.0
#include "store/sqlite_db.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <sqlite3.h>
#include <unistd.h>

namespace joule::store::sqlite {

namespace {

Error make_error(sqlite3* db, int code, const std::string& description) {
  const int primary = code & 0xff;
  // errmsg describes the last call on the connection; a bind failure is reported later, by code alone.
  std::string message =
      db != nullptr && sqlite3_extended_errcode(db) == code ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  ErrorCode kind = ErrorCode::kIo;
  switch (primary) {
    case SQLITE_PERM:
    case SQLITE_AUTH:
      kind = ErrorCode::kPermissionDenied;
      break;
    case SQLITE_READONLY:
      kind = ErrorCode::kPermissionDenied;
      // SQLite writes the database, its -wal and -shm files, and creates them in the folder.
      message += fmt::format(
          " (user {} must be able to write the database file and create files in its folder)", ::geteuid());
      break;
    case SQLITE_FULL:
      message += " (free some space on the database's file system, or raise the process's file-size limit)";
      break;
    case SQLITE_IOERR: {
      // "disk I/O error" alone does not say what failed; the OS error does (ENOSPC, EFBIG, EIO, …).
      const int os_error = db != nullptr ? sqlite3_system_errno(db) : 0;
      if (os_error != 0) {
        message += fmt::format(" ({})", std::strerror(os_error));
      }
      break;
    }
    case SQLITE_CANTOPEN: {
      // "unable to open database file" alone does not say why; the OS error does.
      const int os_error = db != nullptr ? sqlite3_system_errno(db) : 0;
      if (os_error != 0) {
        message += fmt::format(" ({})", std::strerror(os_error));
      }
      if (os_error == EACCES || os_error == EPERM || os_error == EROFS) {
        kind = ErrorCode::kPermissionDenied;
      }
      break;
    }
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
      kind = ErrorCode::kInternal;
      break;
    default:
      break;
  }
  return Error(kind, fmt::format("{}: {}", description, message));
}

/// The wait before retry `count` (0-based) for a lock another connection holds: 25 µs doubling to 1 ms.
std::chrono::microseconds busy_delay(int count) {
  return std::chrono::microseconds(std::min(25 << std::min(count, 6), 1000));
}

}  // namespace

Statement::Statement(Statement&& other) noexcept
    : connection_(other.connection_),
      statement_(std::exchange(other.statement_, nullptr)),
      bind_code_(other.bind_code_) {}

Statement::~Statement() {
  if (statement_ != nullptr) {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);  // parameters are bound without copies: drop the pointers
  }
}

Statement& Statement::bind(int index, std::string_view text) {
  if (text.size() > static_cast<std::size_t>(INT_MAX)) {
    bind_code_ = bind_code_ != SQLITE_OK ? bind_code_ : SQLITE_TOOBIG;
    return *this;
  }
  // No copy (a null destructor is SQLITE_STATIC): the text outlives the statement's use, which ends (with
  // clear_bindings) before the caller returns.
  const int code = sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()),
                                     sqlite3_destructor_type{});
  if (bind_code_ == SQLITE_OK) {
    bind_code_ = code;
  }
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  const int code = sqlite3_bind_int64(statement_, index, value);
  if (bind_code_ == SQLITE_OK) {
    bind_code_ = code;
  }
  return *this;
}

Result<bool> Statement::step() {
  if (bind_code_ != SQLITE_OK) {
    return tl::make_unexpected(connection_->error(bind_code_));
  }
  const int code = sqlite3_step(statement_);
  if (code == SQLITE_ROW) {
    return true;
  }
  if (code == SQLITE_DONE) {
    return false;
  }
  return tl::make_unexpected(connection_->error(code));
}

Result<void> Statement::run() {
  for (;;) {
    auto row = step();
    if (!row) {
      return tl::make_unexpected(row.error());
    }
    if (!*row) {
      return {};
    }
  }
}

void Statement::reset() {
  sqlite3_reset(statement_);
}

std::string_view Statement::text(int column) const {
  const auto* data = sqlite3_column_text(statement_, column);
  const int size = sqlite3_column_bytes(statement_, column);
  if (data == nullptr) {
    return {};
  }
  return {reinterpret_cast<const char*>(data), static_cast<std::size_t>(size)};
}

int64_t Statement::integer(int column) const {
  return sqlite3_column_int64(statement_, column);
}

Connection::Connection(sqlite3* db, std::string description, std::chrono::milliseconds busy_timeout)
    : db_(db), description_(std::move(description)), busy_timeout_(busy_timeout) {}

Connection::~Connection() {
  for (auto& [sql, statement] : statements_) {
    sqlite3_finalize(statement);
  }
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<Connection>> Connection::open(const std::string& path, std::string description,
                                                     std::chrono::milliseconds busy_timeout) {
  sqlite3* db = nullptr;
  const int code = sqlite3_open_v2(path.c_str(), &db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (code != SQLITE_OK) {
    Error error = make_error(db, code, description);
    sqlite3_close_v2(db);
    return tl::make_unexpected(std::move(error));
  }
  std::unique_ptr<Connection> connection(new Connection(db, std::move(description), busy_timeout));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_handler(db, &Connection::on_busy, connection.get());

  // WAL: readers never block the writer and a commit is one append to the log. The mode is stored in the
  // file, so this only changes something the first time.
  {
    auto mode = JOULE_TRY(connection->statement("PRAGMA journal_mode=WAL"));
    auto row = mode.step();
    // While another connection turns a new file to WAL, SQLite answers SQLITE_BUSY at once, without calling
    // the busy handler (about 1 open in 70 when six open a new file at once, here): wait as the handler
    // would.
    const auto deadline = std::chrono::steady_clock::now() + busy_timeout;
    for (int attempt = 0;
         !row && connection->last_failure_was_busy() && std::chrono::steady_clock::now() < deadline;
         ++attempt) {
      mode.reset();
      std::this_thread::sleep_for(busy_delay(attempt));
      row = mode.step();
    }
    if (!row) {
      return tl::make_unexpected(row.error());
    }
    if (!*row || mode.text(0) != "wal") {
      return fail(ErrorCode::kIo, "{}: cannot use write-ahead logging (journal mode is '{}')",
                  connection->description_, *row ? mode.text(0) : "");
    }
  }
  // synchronous=NORMAL in WAL mode: a commit is in the OS's hands when it returns, so it survives a crash
  // of this process; only a power loss or OS crash can lose the last commits (never corrupt the file).
  // FULL would add an fsync to every commit.
  // A 64 MiB page cache (SQLite's default is 2 MiB): the working set of a busy service (jobs, recent
  // trials, the responses index) stays in memory as the database grows.
  if (auto set =
          connection->execute("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-65536;");
      !set) {
    return tl::make_unexpected(set.error());
  }
  return connection;
}

Result<void> Connection::execute(const char* sql) {
  const int code = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (code != SQLITE_OK) {
    return tl::make_unexpected(error(code));
  }
  return {};
}

Result<Statement> Connection::statement(std::string_view sql) {
  auto found = statements_.find(sql);
  if (found == statements_.end()) {
    sqlite3_stmt* prepared = nullptr;
    const int code = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                        SQLITE_PREPARE_PERSISTENT, &prepared, nullptr);
    if (code != SQLITE_OK) {
      return tl::make_unexpected(error(code));
    }
    found = statements_.emplace(std::string(sql), prepared).first;
  }
  return Statement(*this, found->second);
}

int64_t Connection::changes() const {
  return sqlite3_changes64(db_);
}

Error Connection::error(int code) {
  const int primary = code & 0xff;
  busy_ = primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
  return make_error(db_, code, description_);
}

int Connection::on_busy(void* self, int count) {
  auto& connection = *static_cast<Connection*>(self);
  const auto now = std::chrono::steady_clock::now();
  if (count == 0) {
    connection.busy_since_ = now;
  }
  if (now - connection.busy_since_ >= connection.busy_timeout_) {
    return 0;  // give up: the statement fails with SQLITE_BUSY and run() starts the transaction over
  }
  // Short sleeps first: this process's own writers queue on the store's gate, so a wait here is for another
  // process's transaction, which is usually short. (SQLite's own busy timeout sleeps 1 ms, then longer.)
  std::this_thread::sleep_for(busy_delay(count));
  return 1;
}

}  // namespace joule::store::sqlite
