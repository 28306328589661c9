# SPDX-License-Identifier: Apache-2.0
# metrics.cmake: Prometheus metrics (docs/metrics.md): `promtool check metrics` on /metrics of `joule power
# --serve`, `joule serve` and `joule daemon --metrics`, bad addresses, and a real `prometheus` scraping on
# loopback (skipped with a message when promtool / prometheus are not on PATH).
joule_test(metrics_integration_test SOURCES metrics_test.cpp
  LIBS nlohmann_json::nlohmann_json joule::core PkgConfig::HTTPLIB LABELS integration)
target_compile_definitions(metrics_integration_test PRIVATE JOULE_BINARY="$<TARGET_FILE:joule>"
  JOULE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(metrics_integration_test joule)
