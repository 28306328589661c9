// SPDX-License-Identifier: Apache-2.0
// The one boundary file that loads libpq (see libpq.hpp for why it is dlopened).
#include "store/libpq.hpp"

#include <cstdlib>

#include <dlfcn.h>

namespace joule::store::pg {

namespace {

// Resolves `symbol` into `function`. @return false if the library does not export it.
template <class Function>
bool resolve_pq_symbol(void* handle, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, symbol));
  return function != nullptr;
}

}  // namespace

std::string libpq_library_name() {
  const char* name = std::getenv("JOULE_LIBPQ_LIBRARY");
  return name != nullptr && *name != '\0' ? std::string(name) : std::string("libpq.so.5");
}

Result<LibPq> load_libpq(const std::string& library) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    return fail(ErrorCode::kLibraryMissing,
                "cannot load the PostgreSQL client library: {}. Install libpq (Debian/Ubuntu: apt install "
                "libpq5), set JOULE_LIBPQ_LIBRARY to the path of libpq.so.5, or use a sqlite: store",
                reason != nullptr ? reason : library);
  }
  LibPq api;
  const char* missing = nullptr;
  const auto require = [&](const char* symbol, auto& function) {
    if (!resolve_pq_symbol(handle, symbol, function) && missing == nullptr) {
      missing = symbol;
    }
  };
  require("PQconnectdbParams", api.connectdb_params);
  require("PQstatus", api.status);
  require("PQerrorMessage", api.error_message);
  require("PQfinish", api.finish);
  require("PQsetNoticeProcessor", api.set_notice_processor);
  require("PQexecParams", api.exec_params);
  require("PQexec", api.exec);
  require("PQresultStatus", api.result_status);
  require("PQresultErrorField", api.result_error_field);
  require("PQclear", api.clear);
  require("PQntuples", api.ntuples);
  require("PQgetvalue", api.get_value);
  require("PQgetlength", api.get_length);
  require("PQcmdTuples", api.cmd_tuples);
  require("PQconninfoParse", api.conninfo_parse);
  require("PQconninfoFree", api.conninfo_free);
  require("PQfreemem", api.freemem);
  if (missing != nullptr) {
    dlclose(handle);
    return fail(ErrorCode::kLibraryMissing,
                "{} lacks the function {}: it is not a PostgreSQL client library joule can use; install "
                "libpq5 or set JOULE_LIBPQ_LIBRARY to a libpq.so.5",
                library, missing);
  }
  return api;
}

Result<const LibPq*> libpq() {
  // Loaded once; the handle is never closed (connections and results may live until exit).
  static const Result<LibPq> loaded = load_libpq(libpq_library_name());
  if (!loaded) {
    return tl::make_unexpected(loaded.error());
  }
  return &*loaded;
}

}  // namespace joule::store::pg
