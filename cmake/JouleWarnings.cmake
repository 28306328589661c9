# SPDX-License-Identifier: Apache-2.0
# joule_warnings(<target>): the project's warning set; errors when JOULE_WERROR is ON.
function(joule_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Woverloaded-virtual -Wconversion -Wimplicit-fallthrough -Wformat=2 -Wmisleading-indentation)
  # A unity build (CMAKE_UNITY_BUILD) compiles each .cpp as if it were a header of the batch's file, so g++'s
  # -Wsubobject-linkage fires on every private Impl/State whose fields use the .cpp's own anonymous namespace.
  # It means something only for real headers: builds without the unity build (UNITY=OFF, make test-tsan,
  # make tidy's configure) keep it.
  if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
  if(JOULE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
