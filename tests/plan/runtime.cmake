# SPDX-License-Identifier: Apache-2.0
joule_test(plan_runtime_test
  SOURCES "${CMAKE_CURRENT_LIST_DIR}/runtime_test.cpp"
  LIBS joule::plan
  LABELS plan)
target_compile_definitions(plan_runtime_test PRIVATE
  JOULE_PERSEUS_DATA_DIR="${PROJECT_SOURCE_DIR}/data/perseus")
joule_settings_guard_helper(plan_runtime_test)
