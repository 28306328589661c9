# SPDX-License-Identifier: Apache-2.0
joule_test(plan_planner_test SOURCES "${CMAKE_CURRENT_LIST_DIR}/planner_test.cpp" "${CMAKE_CURRENT_LIST_DIR}/min_cut_test.cpp"
  LIBS joule::plan LABELS plan)
target_include_directories(plan_planner_test PRIVATE "${PROJECT_SOURCE_DIR}/src")
target_compile_definitions(plan_planner_test PRIVATE JOULE_PERSEUS_DATA_DIR="${PROJECT_SOURCE_DIR}/data/perseus")
