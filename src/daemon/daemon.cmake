# SPDX-License-Identifier: Apache-2.0
# The privileged daemon: access rules, settings ledger with restore, audit log, the socket server.
target_sources(joule_daemon PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/access.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/audit.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/ledger.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/listener.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/metrics.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/safe_files.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/server.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/session.cpp")
