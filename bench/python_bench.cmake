# SPDX-License-Identifier: Apache-2.0
# `cmake --build BUILD --target python_bench`: a measurement window from Python next to the same calls in C++
# (bench/python_bench.py runs bench/monitor_bench for the C++ figures). Not run by `make test`.
if(JOULE_BUILD_PYTHON)
  add_custom_target(python_bench
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=$<TARGET_FILE_DIR:joule_python>/.."
            "${Python3_EXECUTABLE}" "${CMAKE_CURRENT_SOURCE_DIR}/python_bench.py"
            --cpp-bench "$<TARGET_FILE:monitor_bench>"
    USES_TERMINAL VERBATIM)
  add_dependencies(python_bench joule_python monitor_bench)
endif()
