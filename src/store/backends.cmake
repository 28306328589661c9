# SPDX-License-Identifier: Apache-2.0
target_sources(joule_store PRIVATE "${CMAKE_CURRENT_LIST_DIR}/open.cpp")
