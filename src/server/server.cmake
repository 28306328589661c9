# SPDX-License-Identifier: Apache-2.0
target_sources(joule_server PRIVATE "${CMAKE_CURRENT_LIST_DIR}/placeholder.cpp")
