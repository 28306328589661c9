# SPDX-License-Identifier: Apache-2.0
joule_test(batch_size_test
  SOURCES "${CMAKE_CURRENT_LIST_DIR}/batch_size_test.cpp" "${CMAKE_CURRENT_LIST_DIR}/batch_size_json_test.cpp"
  LIBS joule::optimize
  LABELS optimize)
# The tests also check the private number helpers (Python reprs, numpy sums).
target_include_directories(batch_size_test PRIVATE "${PROJECT_SOURCE_DIR}/src")
