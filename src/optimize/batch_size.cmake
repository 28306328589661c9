# SPDX-License-Identifier: Apache-2.0
# The batch-size optimizer (Zeus's current server) as a library: decisions in batch_size.cpp, JSON in
# batch_size_json.cpp, numpy/Python-compatible number helpers in batch_size_util.cpp.
target_sources(joule_optimize PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/batch_size.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/batch_size_json.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/batch_size_util.cpp")
