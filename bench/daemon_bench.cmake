# SPDX-License-Identifier: Apache-2.0
# daemon_bench: `joule daemon` with 100 clients streaming power for 60 s (docs/daemon.md, "Performance"). It
# runs the built `joule` binary as the daemon, so that its memory and CPU are measured alone.
add_executable(daemon_bench "${CMAKE_CURRENT_LIST_DIR}/daemon_bench.cpp")
target_link_libraries(daemon_bench PRIVATE fmt::fmt Threads::Threads)
target_compile_definitions(daemon_bench PRIVATE JOULE_BINARY="$<TARGET_FILE:joule>")
add_dependencies(daemon_bench joule)
joule_warnings(daemon_bench)
