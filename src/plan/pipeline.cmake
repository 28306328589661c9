# SPDX-License-Identifier: Apache-2.0
# Until the pipeline sources land.
target_sources(joule_plan PRIVATE "${CMAKE_CURRENT_LIST_DIR}/placeholder.cpp")
