# SPDX-License-Identifier: Apache-2.0
# joule_library(<area> SOURCES … DEPENDS …): the static library joule_<area> with alias joule::<area>,
# public headers in include/joule/<area>/.
function(joule_library area)
  cmake_parse_arguments(LIB "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(joule_${area} STATIC ${LIB_SOURCES})
  add_library(joule::${area} ALIAS joule_${area})
  target_include_directories(joule_${area} PUBLIC "${PROJECT_SOURCE_DIR}/include"
                                           PRIVATE "${PROJECT_SOURCE_DIR}/src")
  target_link_libraries(joule_${area} PUBLIC ${LIB_DEPENDS} PRIVATE ${LIB_PRIVATE_DEPENDS})
  joule_warnings(joule_${area})
endfunction()
