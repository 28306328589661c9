# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
# libsvm (Debian libsvm-dev) has no CMake config or pkg-config file.
find_path(LIBSVM_INCLUDE_DIR svm.h PATH_SUFFIXES libsvm REQUIRED)
find_library(LIBSVM_LIBRARY NAMES svm REQUIRED)
target_sources(joule_optimize PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/carbon.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/carbon_forecast.cpp")
target_include_directories(joule_optimize SYSTEM PRIVATE "${LIBSVM_INCLUDE_DIR}")
target_link_libraries(joule_optimize PRIVATE "${LIBSVM_LIBRARY}")
