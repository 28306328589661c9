# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
joule_test(carbon_optimize_test SOURCES carbon_test.cpp LIBS joule::optimize LABELS optimize)
joule_settings_guard_helper(carbon_optimize_test)
