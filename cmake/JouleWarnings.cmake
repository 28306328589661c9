# SPDX-License-Identifier: Apache-2.0
# joule_warnings(<target>): the project's warning set; errors when JOULE_WERROR is ON.
function(joule_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Woverloaded-virtual -Wconversion -Wimplicit-fallthrough -Wformat=2 -Wmisleading-indentation)
  if(JOULE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
