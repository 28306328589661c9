# SPDX-License-Identifier: Apache-2.0
# The power-limit optimizer's tests, and the child process they signal.
add_executable(power_limit_signal_helper "${CMAKE_CURRENT_LIST_DIR}/power_limit_signal_helper.cpp")
target_link_libraries(power_limit_signal_helper PRIVATE joule::optimize)
joule_warnings(power_limit_signal_helper)

joule_test(power_limit_test SOURCES "${CMAKE_CURRENT_LIST_DIR}/power_limit_test.cpp" LIBS joule::optimize
  LABELS optimize)
target_compile_definitions(power_limit_test PRIVATE
  JOULE_POWER_LIMIT_HELPER="$<TARGET_FILE:power_limit_signal_helper>")
add_dependencies(power_limit_test power_limit_signal_helper)
