# SPDX-License-Identifier: Apache-2.0
# metrics_bench: the cost of a Prometheus scrape (docs/metrics.md, "Cost of a scrape").
add_executable(metrics_bench "${CMAKE_CURRENT_LIST_DIR}/metrics_bench.cpp")
target_link_libraries(metrics_bench PRIVATE joule::measure PkgConfig::HTTPLIB benchmark::benchmark
                      benchmark::benchmark_main)
joule_warnings(metrics_bench)
