# SPDX-License-Identifier: Apache-2.0
# The store's backends (SQLite, PostgreSQL) and open_store(), which picks one from the URL.
target_sources(joule_store PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/open.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/sqlite_db.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/sqlite_store.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/pg_db.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/postgres_store.cpp")
# Transactions share connection pools across threads.
target_link_libraries(joule_store PRIVATE Threads::Threads)
