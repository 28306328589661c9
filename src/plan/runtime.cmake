# SPDX-License-Identifier: Apache-2.0
# The runtime of a pipeline frequency plan: the per-stage clock controller and the simulated executor.
target_sources(joule_plan PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/runtime_controller.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/runtime_executor.cpp")
