# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` puts under the prefix, and the Debian package (`make package`, docs/install.md):
#   bin/joule                                   the command (component tools)
#   include/joule/<area>/, lib/libjoule_*.a      the libraries (component development)
#   lib/cmake/joule/                            find_package(joule): joule::<area> and the umbrella joule::joule
#   lib/pkgconfig/joule.pc                      pkg-config --cflags --libs joule
#   share/man/man1/joule*.1                     man pages, generated from `joule … --help`
#   lib/systemd/system/joule-daemon.service     the daemon's unit (docs/daemon.md)
#   share/doc/joule/                            README.md, docs/*.md, examples/, the example data (data/),
#                                               copyright (DEP-5) and changelog.gz: the docs' commands run
#                                               from there as from the source folder
#   the Python package                          component python (python/CMakeLists.txt)
include(CMakePackageConfigHelpers)

get_property(joule_areas GLOBAL PROPERTY JOULE_AREAS)

# The umbrella target: every library this build has.
add_library(joule_all INTERFACE)
add_library(joule::joule ALIAS joule_all)
set_target_properties(joule_all PROPERTIES EXPORT_NAME joule)
foreach(area IN LISTS joule_areas)
  target_link_libraries(joule_all INTERFACE joule::${area})
endforeach()
install(TARGETS joule_all EXPORT joule-targets)

set(JOULE_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/joule")
install(EXPORT joule-targets NAMESPACE joule:: FILE joule-targets.cmake DESTINATION "${JOULE_CMAKE_DIR}"
  COMPONENT development)
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/jouleConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/jouleConfig.cmake" INSTALL_DESTINATION "${JOULE_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/jouleConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/jouleConfig.cmake" "${PROJECT_BINARY_DIR}/jouleConfigVersion.cmake"
  DESTINATION "${JOULE_CMAKE_DIR}" COMPONENT development)

# pkg-config: static libraries, so Libs names every library (users first) and what they link.
set(JOULE_PC_LIBS "")
list(REVERSE joule_areas)
foreach(area IN LISTS joule_areas)
  string(APPEND JOULE_PC_LIBS " -ljoule_${area}")
endforeach()
set(JOULE_PC_REQUIRES "fmt spdlog nlohmann_json")
set(JOULE_PC_EXTRA_LIBS "")
if(TARGET joule_metrics)
  string(APPEND JOULE_PC_REQUIRES " prometheus-cpp-core")
endif()
# (cpp-httplib and OpenSSL are the HTTP transport module's, libpq is dlopened: neither is linked.)
if(TARGET joule_store)
  string(APPEND JOULE_PC_REQUIRES " sqlite3")
endif()
if(TARGET joule_optimize)
  string(APPEND JOULE_PC_EXTRA_LIBS " ${LIBSVM_LIBRARY}")
endif()
# dlopen (the HTTP transport module, libpq).
string(APPEND JOULE_PC_EXTRA_LIBS " -ldl -pthread")
file(RELATIVE_PATH JOULE_PC_PREFIX_FROM_PCFILEDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file("${PROJECT_SOURCE_DIR}/cmake/joule.pc.in" "${PROJECT_BINARY_DIR}/joule.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/joule.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
  COMPONENT development)

if(TARGET joule)
  install(TARGETS joule RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT tools)
  # Man pages from the command's own --help, so they never disagree with it.
  set(man_dir "${PROJECT_BINARY_DIR}/man")
  add_custom_command(OUTPUT "${man_dir}/man1/joule.1"
    COMMAND "${Python3_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/scripts/make-man" "$<TARGET_FILE:joule>"
            "${man_dir}/man1" "${PROJECT_VERSION}"
    DEPENDS joule "${PROJECT_SOURCE_DIR}/scripts/make-man"
    COMMENT "Man pages from joule --help" VERBATIM)
  add_custom_target(joule_man ALL DEPENDS "${man_dir}/man1/joule.1")
  install(DIRECTORY "${man_dir}/man1" DESTINATION "${CMAKE_INSTALL_MANDIR}" COMPONENT tools)

  set(JOULE_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
      "Where the daemon's systemd unit goes, relative to the install prefix")
  # Written at install time: ExecStart names the binary under the prefix actually installed to.
  install(CODE "
    set(JOULE_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    set(JOULE_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}\")
    set(JOULE_UNIT_DIR \"\${CMAKE_INSTALL_PREFIX}/${JOULE_SYSTEMD_UNIT_DIR}\")
    configure_file(\"${PROJECT_SOURCE_DIR}/packaging/joule-daemon.service.in\"
                   \"${PROJECT_BINARY_DIR}/joule-daemon.service\" @ONLY)
    file(INSTALL \"${PROJECT_BINARY_DIR}/joule-daemon.service\" DESTINATION \"\${JOULE_UNIT_DIR}\")
  " COMPONENT tools)
endif()

# The docs, laid out as in the source folder so that their links and commands (data/…, examples/…) work
# from share/doc/joule; the licence and origin of everything shipped (packaging/debian/copyright, DEP-5).
install(FILES README.md packaging/debian/copyright DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT tools)
install(DIRECTORY docs/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/docs" COMPONENT tools FILES_MATCHING PATTERN "*.md")
install(DIRECTORY examples/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples" COMPONENT tools
  FILES_MATCHING PATTERN "*.py")
install(DIRECTORY data/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/data" COMPONENT tools)

# Who answers for the Debian package, and the project's web page. No address or page of this project can be
# vouched for here, so the defaults claim none: the maintainer is whoever builds the package, as Debian's
# own tools (dch, dh_make) take it: DEBFULLNAME and DEBEMAIL (or EMAIL), else the user at this host; the
# Homepage field is left out unless given.
if(NOT "$ENV{DEBEMAIL}" STREQUAL "")
  set(joule_builder_email "$ENV{DEBEMAIL}")
elseif(NOT "$ENV{EMAIL}" STREQUAL "")
  set(joule_builder_email "$ENV{EMAIL}")
else()
  set(joule_builder_user "$ENV{USER}")
  if(joule_builder_user STREQUAL "")
    set(joule_builder_user "$ENV{LOGNAME}")
  endif()
  if(joule_builder_user STREQUAL "")
    set(joule_builder_user "root")
  endif()
  cmake_host_system_information(RESULT joule_builder_host QUERY FQDN)
  set(joule_builder_email "${joule_builder_user}@${joule_builder_host}")
endif()
set(joule_builder_name "$ENV{DEBFULLNAME}")
if(joule_builder_email MATCHES "^(.+) <(.+)>$")  # DEBEMAIL="Name <address>", as dch also accepts
  set(joule_builder_name "${CMAKE_MATCH_1}")
  set(joule_builder_email "${CMAKE_MATCH_2}")
elseif(joule_builder_name STREQUAL "")
  string(REGEX REPLACE "@.*" "" joule_builder_name "${joule_builder_email}")
endif()
set(JOULE_PACKAGE_MAINTAINER "${joule_builder_name} <${joule_builder_email}>" CACHE STRING
    "Maintainer of the Debian package, 'Name <address>' (default: the builder, from DEBFULLNAME/DEBEMAIL)")
set(JOULE_PACKAGE_HOMEPAGE "" CACHE STRING "Homepage of the Debian package (empty: no Homepage field)")
if(NOT JOULE_PACKAGE_MAINTAINER MATCHES "^[^<>]+ <[^<> ]+@[^<> ]+>$")
  message(FATAL_ERROR "JOULE_PACKAGE_MAINTAINER='${JOULE_PACKAGE_MAINTAINER}': expected 'Name <address>', "
                      "e.g. -DJOULE_PACKAGE_MAINTAINER='Ada Lovelace <ada@example.org>'")
endif()

# Debian's changelog of a native package: this version, by the maintainer, dated now (or SOURCE_DATE_EPOCH,
# which string(TIMESTAMP) honours, for a reproducible build); installed gzip-compressed as Debian wants.
string(TIMESTAMP JOULE_PACKAGE_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file("${PROJECT_SOURCE_DIR}/packaging/debian/changelog.in" "${PROJECT_BINARY_DIR}/debian/changelog"
  @ONLY)
file(ARCHIVE_CREATE OUTPUT "${PROJECT_BINARY_DIR}/debian/changelog.gz"
  PATHS "${PROJECT_BINARY_DIR}/debian/changelog" FORMAT raw COMPRESSION GZip)
install(FILES "${PROJECT_BINARY_DIR}/debian/changelog.gz" DESTINATION "${CMAKE_INSTALL_DOCDIR}"
  COMPONENT tools)

# The Debian package: `make package` (cpack -G DEB in the build folder). Its Depends come from
# dpkg-shlibdeps, i.e. the Debian packages of the shared libraries the binary and the Python module link.
set(CPACK_PACKAGE_NAME joule)
set(CPACK_PACKAGE_VENDOR "joule")
set(CPACK_PACKAGE_CONTACT "${JOULE_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${JOULE_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "measure and cut the energy of deep-learning training and inference on GPUs")
set(CPACK_PACKAGE_DESCRIPTION
    "joule measures GPU and CPU energy and picks power limits, batch sizes and per-stage GPU clocks\n(Zeus, Perseus, Chase), from C++, Python and the shell.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Install with DESTDIR, so that paths written at install time (the unit's ExecStart) are /usr/….
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libpq is dlopened by a postgresql:// store only (src/store/libpq.cpp), so dpkg-shlibdeps cannot see it.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libpq5")
if(NOT JOULE_PACKAGE_HOMEPAGE STREQUAL "")
  set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${JOULE_PACKAGE_HOMEPAGE}")
endif()
set(CPACK_PRE_BUILD_SCRIPTS "${PROJECT_SOURCE_DIR}/packaging/deb-python-path.cmake")
set(CPACK_GENERATOR DEB)
include(CPack)
