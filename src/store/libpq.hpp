// SPDX-License-Identifier: Apache-2.0
// The loaded PostgreSQL client library: libpq.so.5 is dlopened the first time a postgresql:// store is
// opened, never at start-up. libpq pulls in Kerberos, LDAP, GnuTLS and OpenSSL (about 20 shared libraries,
// ~4 ms of every `joule` process's start) for commands that never open a database. This file and
// libpq.cpp are the only ones that name the library; pg_db.cpp and postgres_store.cpp call through the
// table below. libpq-fe.h is used for its types and function signatures only (no link to libpq).
#pragma once

#include <string>

#include <libpq-fe.h>

#include "joule/core/error.hpp"

namespace joule::store::pg {

/// Every libpq function joule uses, resolved with dlsym; the types are libpq-fe.h's own, so a signature
/// that differs from the header's does not compile.
struct LibPq {
  decltype(&::PQconnectdbParams) connectdb_params = nullptr;
  decltype(&::PQstatus) status = nullptr;
  decltype(&::PQerrorMessage) error_message = nullptr;
  decltype(&::PQfinish) finish = nullptr;
  decltype(&::PQsetNoticeProcessor) set_notice_processor = nullptr;
  decltype(&::PQexecParams) exec_params = nullptr;
  decltype(&::PQexec) exec = nullptr;
  decltype(&::PQresultStatus) result_status = nullptr;
  decltype(&::PQresultErrorField) result_error_field = nullptr;
  decltype(&::PQclear) clear = nullptr;
  decltype(&::PQntuples) ntuples = nullptr;
  decltype(&::PQgetvalue) get_value = nullptr;
  decltype(&::PQgetlength) get_length = nullptr;
  decltype(&::PQcmdTuples) cmd_tuples = nullptr;
  decltype(&::PQconninfoParse) conninfo_parse = nullptr;
  decltype(&::PQconninfoFree) conninfo_free = nullptr;
  decltype(&::PQfreemem) freemem = nullptr;
};

/// The library's name: JOULE_LIBPQ_LIBRARY if set and not empty, else "libpq.so.5".
std::string libpq_library_name();

/// dlopens `library` (RTLD_NOW | RTLD_LOCAL) and resolves every function of LibPq, without caching (the
/// handle stays open for the process's life: a PGconn must not outlive its library).
/// @return kLibraryMissing saying what to install (or JOULE_LIBPQ_LIBRARY to set) when it cannot be loaded
/// or lacks a function.
Result<LibPq> load_libpq(const std::string& library);

/// @return the process's libpq, loaded on the first call (libpq_library_name()); a failure is remembered
/// and returned again. Thread-safe.
Result<const LibPq*> libpq();

}  // namespace joule::store::pg
