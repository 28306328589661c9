# SPDX-License-Identifier: Apache-2.0
# joule_embed_files(<target> <namespace-free symbol prefix> FILES f1 f2 …)
# Generates a source file that holds each file's bytes and a lookup table, so the binary carries the data
# it needs at run time (the simulated GPU's power traces) and works from any directory.
function(joule_embed_files target)
  cmake_parse_arguments(EMBED "" "NAME" "FILES" ${ARGN})
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${EMBED_NAME}.cpp")
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAME=${EMBED_NAME} "-DFILES=${EMBED_FILES}"
            -P "${PROJECT_SOURCE_DIR}/cmake/JouleEmbedScript.cmake"
    DEPENDS ${EMBED_FILES} "${PROJECT_SOURCE_DIR}/cmake/JouleEmbedScript.cmake"
    COMMENT "Embedding ${EMBED_NAME}"
    VERBATIM)
  target_sources(${target} PRIVATE "${out}")
endfunction()
