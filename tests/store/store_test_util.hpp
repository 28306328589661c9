// SPDX-License-Identifier: Apache-2.0
// Databases for the store tests: a fresh one per test for each backend, and raw access to it (to look at or
// tamper with the schema behind the store's back). PostgreSQL tests use the server of the `postgres` CTest
// fixture (scripts/start-postgres), each in a schema of its own so that tests can run in parallel.
#pragma once

#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "joule/store/store.hpp"

#include "test_util.hpp"

namespace joule::test {

/// The URL of the test PostgreSQL server: $JOULE_TEST_POSTGRES_URL, else the file the `postgres` fixture
/// writes. Throws (failing the test) with the reason if there is none.
inline std::string postgres_test_url() {
  if (const char* url = std::getenv("JOULE_TEST_POSTGRES_URL"); url != nullptr && *url != '\0') {
    return url;
  }
  const std::string file = JOULE_TEST_POSTGRES_URL_FILE;
  std::ifstream in(file);
  std::string url;
  if (!in || !std::getline(in, url) || url.empty()) {
    throw std::runtime_error(fmt::format(
        "no PostgreSQL server for the tests: {} is missing. The CTest fixture test postgres.start "
        "(scripts/start-postgres) writes it; run the tests with ctest, or start a server with "
        "scripts/start-postgres {}, or set JOULE_TEST_POSTGRES_URL",
        file, file.substr(0, file.rfind('/'))));
  }
  return url;
}

/// A libpq connection for the tests' own SQL; throws on failure.
class PgSession {
 public:
  explicit PgSession(const std::string& url) : connection_(PQconnectdb(url.c_str())) {
    if (PQstatus(connection_) != CONNECTION_OK) {
      const std::string message = PQerrorMessage(connection_);
      PQfinish(connection_);
      throw std::runtime_error("cannot connect to the test PostgreSQL (" + url + "): " + message);
    }
    PQsetNoticeProcessor(
        connection_, [](void*, const char*) {}, nullptr);
  }
  ~PgSession() { PQfinish(connection_); }
  PgSession(const PgSession&) = delete;
  PgSession& operator=(const PgSession&) = delete;

  /// Runs `sql`; @return the first column of the first row ("" if none).
  std::string execute(const std::string& sql) {
    PGresult* result = PQexec(connection_, sql.c_str());
    const auto status = PQresultStatus(result);
    std::string value;
    if (status == PGRES_TUPLES_OK && PQntuples(result) > 0) {
      value = PQgetvalue(result, 0, 0);
    }
    const std::string message = PQresultErrorMessage(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw std::runtime_error("SQL failed: " + sql + ": " + message);
    }
    return value;
  }

 private:
  PGconn* connection_;
};

/// A database for one test.
class TestDatabase {
 public:
  virtual ~TestDatabase() = default;
  /// The URL open_store() takes.
  virtual std::string url() const = 0;
  /// Runs SQL on the database directly; @return the first column of the first row ("" if none).
  virtual std::string execute(const std::string& sql) = 0;
};

class MemoryDatabase final : public TestDatabase {
 public:
  std::string url() const override { return "memory:"; }
  std::string execute(const std::string& /*sql*/) override { throw std::runtime_error("memory: has no SQL"); }
};

class SqliteDatabase final : public TestDatabase {
 public:
  SqliteDatabase() : path_(directory_.path() + "/store.db") {}
  std::string url() const override { return "sqlite:" + path_; }
  const std::string& path() const { return path_; }
  std::string execute(const std::string& sql) override {
    sqlite3* db = nullptr;
    if (sqlite3_open(path_.c_str(), &db) != SQLITE_OK) {
      sqlite3_close(db);
      throw std::runtime_error("cannot open " + path_);
    }
    sqlite3_busy_timeout(db, 5000);
    std::string value;
    char* error = nullptr;
    const int code = sqlite3_exec(
        db, sql.c_str(),
        [](void* out, int columns, char** values, char**) {
          auto& first = *static_cast<std::string*>(out);
          if (first.empty() && columns > 0 && values[0] != nullptr) {
            first = values[0];
          }
          return 0;
        },
        &value, &error);
    const std::string message = error != nullptr ? error : "";
    sqlite3_free(error);
    sqlite3_close(db);
    if (code != SQLITE_OK) {
      throw std::runtime_error("SQL failed: " + sql + ": " + message);
    }
    return value;
  }

 private:
  TempDir directory_;
  std::string path_;
};

/// A schema of its own in the test server's database (search_path set through the URL), dropped afterwards.
/// Its connections carry the schema's name as application_name, so a test can find (and kill) them.
class PostgresDatabase final : public TestDatabase {
 public:
  PostgresDatabase() : base_url_(postgres_test_url()) {
    std::random_device random;
    schema_ = fmt::format("joule_test_{:08x}{:08x}", random(), random());
    PgSession(base_url_).execute("CREATE SCHEMA " + schema_);
    const char separator = base_url_.find('?') == std::string::npos ? '?' : '&';
    sql_url_ = fmt::format("{}{}options=-csearch_path%3D{}", base_url_, separator, schema_);
    url_ = fmt::format("{}&application_name={}", sql_url_, schema_);
  }
  ~PostgresDatabase() override {
    try {
      PgSession(base_url_).execute("DROP SCHEMA " + schema_ + " CASCADE");
    } catch (const std::exception&) {
      // The server is gone: nothing to clean.
    }
  }
  std::string url() const override { return url_; }
  const std::string& base_url() const { return base_url_; }
  const std::string& schema() const { return schema_; }
  std::string execute(const std::string& sql) override { return PgSession(sql_url_).execute(sql); }

  /// Closes every connection of this schema's stores from the server side (as a restart would).
  int terminate_connections() {
    return std::stoi(PgSession(base_url_).execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '" + schema_ +
        "'"));
  }

 private:
  std::string base_url_;
  std::string schema_;
  std::string sql_url_;  ///< for the tests' own SQL
  std::string url_;      ///< for stores: also names their connections
};

/// @return a fresh database of `backend`: "memory", "sqlite" or "postgres".
inline std::unique_ptr<TestDatabase> make_test_database(const std::string& backend) {
  if (backend == "memory") {
    return std::make_unique<MemoryDatabase>();
  }
  if (backend == "sqlite") {
    return std::make_unique<SqliteDatabase>();
  }
  if (backend == "postgres") {
    return std::make_unique<PostgresDatabase>();
  }
  throw std::invalid_argument("unknown backend " + backend);
}

/// Opens a store or throws with the error's message.
inline std::unique_ptr<store::Store> open_or_throw(const std::string& url,
                                                   const store::OpenOptions& options = store::OpenOptions{}) {
  auto store = store::open_store(url, options);
  if (!store) {
    throw std::runtime_error("open_store(" + url + "): " + store.error().message());
  }
  return std::move(*store);
}

}  // namespace joule::test
