# SPDX-License-Identifier: Apache-2.0
target_sources(joule_optimize PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/power_limit.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/power_limit_profile.cpp")
