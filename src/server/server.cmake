# SPDX-License-Identifier: Apache-2.0
target_sources(joule_server PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/service.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/batch_size_routes.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/pipeline_routes.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/pipeline_document.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/pipeline_frontier.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/http_server.cpp"
  "${CMAKE_CURRENT_LIST_DIR}/metrics.cpp")
target_link_libraries(joule_server PUBLIC joule::measure)
