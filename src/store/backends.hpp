// SPDX-License-Identifier: Apache-2.0
// The backends open_store() dispatches to.
#pragma once

#include <memory>
#include <string>

#include "joule/store/store.hpp"

namespace joule::store {

/// Opens (creating if missing) the SQLite database file `path` and migrates it.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path, const OpenOptions& options);

/// Connects to the PostgreSQL database of the libpq URI `url` and migrates it.
Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url, const OpenOptions& options);

}  // namespace joule::store
