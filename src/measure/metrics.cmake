# SPDX-License-Identifier: Apache-2.0
# metrics.cmake: Prometheus metrics (docs/metrics.md): prometheus-cpp's core renders the text exposition
# format (its civetweb-based pull module is not used); the project's HTTP listener (src/metrics/) serves it.
find_package(prometheus-cpp CONFIG REQUIRED)
target_sources(joule_measure PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/metrics.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/metrics_http.cpp")
target_link_libraries(joule_measure PUBLIC prometheus-cpp::core PRIVATE joule::metrics)
