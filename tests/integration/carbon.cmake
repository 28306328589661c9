# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
joule_test(carbon_cli_test SOURCES carbon_cli_test.cpp LIBS nlohmann_json::nlohmann_json joule::core
  LABELS integration)
target_compile_definitions(carbon_cli_test PRIVATE JOULE_BINARY="$<TARGET_FILE:joule>"
  JOULE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(carbon_cli_test joule)
