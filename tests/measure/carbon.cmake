# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
joule_test(carbon_measure_test SOURCES carbon_test.cpp LIBS joule::measure LABELS measure)
target_compile_definitions(carbon_measure_test PRIVATE JOULE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The providers against loopback fakes of their HTTP APIs.
joule_test(carbon_providers_test SOURCES carbon_providers_test.cpp LIBS joule::measure PkgConfig::HTTPLIB
  LABELS measure)
