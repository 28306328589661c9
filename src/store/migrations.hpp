// SPDX-License-Identifier: Apache-2.0
// The schema, as a list of numbered steps with one SQL script per backend. Opening a store applies the
// steps its database lacks, in one transaction, and records each in schema_migrations(version, applied_at).
// Never edit a released step: add a new one (and raise kSchemaVersion in store.hpp).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "joule/store/store.hpp"

namespace joule::store {

struct Migration {
  int version;
  std::string_view sqlite;
  std::string_view postgres;
};

inline constexpr std::array kMigrations = {
    Migration{
        1,
        // SQLite: BINARY collation (the default) sorts keys byte by byte, like the memory store.
        R"sql(
CREATE TABLE documents (
  kind TEXT NOT NULL,
  key TEXT NOT NULL,
  version BIGINT NOT NULL,
  body TEXT NOT NULL,
  updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (kind, key)
);
CREATE TABLE responses (
  request_id TEXT PRIMARY KEY,
  response TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
)sql",
        // PostgreSQL: "C" collation so keys sort byte by byte whatever the database's locale.
        R"sql(
CREATE TABLE documents (
  kind TEXT COLLATE "C" NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  version BIGINT NOT NULL,
  body TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (kind, key)
);
CREATE TABLE responses (
  request_id TEXT PRIMARY KEY,
  response TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
)sql",
    },
    Migration{
        2,
        // Items: records of a document read and written one at a time (a batch-size job's trials), so that
        // a request's cost does not grow with the document's history. The group index serves "the last N
        // finished trials of this batch size"; the age index lets old stored responses be pruned.
        R"sql(
CREATE TABLE items (
  kind TEXT NOT NULL,
  key TEXT NOT NULL,
  number INTEGER NOT NULL,
  grp INTEGER NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (kind, key, number)
) WITHOUT ROWID;
CREATE INDEX items_by_group ON items (kind, key, grp, number);
CREATE INDEX responses_by_age ON responses (created_at);
)sql",
        R"sql(
CREATE TABLE items (
  kind TEXT COLLATE "C" NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  number BIGINT NOT NULL,
  grp BIGINT NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (kind, key, number)
);
CREATE INDEX items_by_group ON items (kind, key, grp, number);
CREATE INDEX responses_by_age ON responses (created_at);
)sql",
    },
};

static_assert(static_cast<int>(kMigrations.size()) == kSchemaVersion,
              "kSchemaVersion is the number of steps");

/// The message of the kState error for a database whose schema is newer than this joule.
inline std::string newer_schema_message(std::string_view description, int version) {
  return fmt::format(
      "{}: the database's schema is at version {}, newer than this joule knows ({}): upgrade joule, or use "
      "another database",
      description, version, kSchemaVersion);
}

}  // namespace joule::store
