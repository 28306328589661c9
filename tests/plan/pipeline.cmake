# SPDX-License-Identifier: Apache-2.0
# The pipeline model, the exact reference frontier, plan JSON, the profile codec and timeline charts.
joule_test(plan_pipeline_test
  SOURCES "${CMAKE_CURRENT_LIST_DIR}/pipeline_test.cpp" "${CMAKE_CURRENT_LIST_DIR}/pipeline_profile_test.cpp"
          "${CMAKE_CURRENT_LIST_DIR}/exact_test.cpp" "${CMAKE_CURRENT_LIST_DIR}/plan_io_test.cpp"
          "${CMAKE_CURRENT_LIST_DIR}/profile_codec_test.cpp"
          "${CMAKE_CURRENT_LIST_DIR}/timeline_plot_test.cpp"
  LIBS joule::plan
  LABELS plan)
# The example profile and its reference frontier (data/perseus/README.md).
target_compile_definitions(plan_pipeline_test PRIVATE JOULE_PERSEUS_DATA_DIR="${PROJECT_SOURCE_DIR}/data/perseus")
