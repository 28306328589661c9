# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
target_sources(joule_measure PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/carbon.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/carbon_http.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/carbon_providers.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/carbon_monitor.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/price.cpp")
target_include_directories(joule_measure PRIVATE "${PROJECT_SOURCE_DIR}/src")
target_link_libraries(joule_measure PRIVATE PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
