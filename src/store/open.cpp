// SPDX-License-Identifier: Apache-2.0
// Placeholder until the SQLite and PostgreSQL backends land: only memory: works.
#include "joule/store/store.hpp"

namespace joule::store {

Result<std::unique_ptr<Store>> open_store(const std::string& url) {
  if (url == "memory:") {
    return memory_store();
  }
  return fail(ErrorCode::kNotSupported, "store '{}': only memory: is available yet", url);
}

}  // namespace joule::store
