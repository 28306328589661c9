# SPDX-License-Identifier: Apache-2.0
include(GNUInstallDirs)

# joule_library(<area> SOURCES … DEPENDS … [PRIVATE_DEPENDS …]): the static library joule_<area>, with alias
# joule::<area> in this build and target joule::<area> for users of the installed package
# (find_package(joule)); public headers in include/joule/<area>/, private ones beside the sources.
function(joule_library area)
  cmake_parse_arguments(LIB "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(joule_${area} STATIC ${LIB_SOURCES})
  add_library(joule::${area} ALIAS joule_${area})
  set_target_properties(joule_${area} PROPERTIES EXPORT_NAME ${area})
  target_include_directories(joule_${area}
    PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>" "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>"
    PRIVATE "${PROJECT_SOURCE_DIR}/src")
  target_link_libraries(joule_${area} PUBLIC ${LIB_DEPENDS} PRIVATE ${LIB_PRIVATE_DEPENDS})
  joule_warnings(joule_${area})
  install(TARGETS joule_${area} EXPORT joule-targets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT development)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/joule/${area}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/joule"
    COMPONENT development)
  # The areas in dependency order (each after what it needs), for the umbrella target and pkg-config.
  set_property(GLOBAL APPEND PROPERTY JOULE_AREAS ${area})
endfunction()
