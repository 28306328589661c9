# SPDX-License-Identifier: Apache-2.0
# serve_bench: the optimizer service under 64 concurrent clients (docs/serve.md, "Performance").
add_executable(serve_bench "${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp")
target_link_libraries(serve_bench PRIVATE joule::server joule::client)
joule_warnings(serve_bench)
