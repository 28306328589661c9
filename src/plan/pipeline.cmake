# SPDX-License-Identifier: Apache-2.0
# The pipeline model (profiles, DAG, plan costs), the exact reference frontier, plan JSON, the profile codec
# (CSV and JSON rows) and timelines.
target_sources(joule_plan PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/pipeline.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/exact.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/plan_io.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/profile_codec.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/timeline_plot.cpp")
