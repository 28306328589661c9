# SPDX-License-Identifier: Apache-2.0
target_sources(joule_plan PRIVATE "${CMAKE_CURRENT_LIST_DIR}/min_cut.cpp" "${CMAKE_CURRENT_LIST_DIR}/planner.cpp")
