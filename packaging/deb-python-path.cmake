# SPDX-License-Identifier: Apache-2.0
# CPACK_PRE_BUILD_SCRIPTS for the Debian package: Debian's Python looks for packages in
# /usr/lib/python3/dist-packages, not in the lib/pythonX.Y/site-packages that `cmake --install` uses.
file(GLOB_RECURSE init_files "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/__init__.py")
list(FILTER init_files INCLUDE REGEX "/site-packages/joule/__init__\\.py$")
foreach(init IN LISTS init_files)
  get_filename_component(package_dir "${init}" DIRECTORY)
  get_filename_component(site_dir "${package_dir}" DIRECTORY)
  get_filename_component(python_dir "${site_dir}" DIRECTORY)
  get_filename_component(lib_dir "${python_dir}" DIRECTORY)
  file(MAKE_DIRECTORY "${lib_dir}/python3/dist-packages")
  file(RENAME "${package_dir}" "${lib_dir}/python3/dist-packages/joule")
  file(REMOVE_RECURSE "${python_dir}")
endforeach()
