// SPDX-License-Identifier: Apache-2.0
// The test side of settings_guard_helper: runs it on a file of its own and reads the GPU's history back.
// A test target defines JOULE_SETTINGS_GUARD_HELPER (the helper's path) and depends on the helper.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "joule/core/file.hpp"

#include "file_gpu.hpp"
#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {

struct SettingsGuardHelper {
  TempDir dir;
  std::string file = dir.path() + "/settings";

  /// @return the helper's command line for `controller` and `action`.
  std::vector<std::string> argv(const std::string& controller, const std::string& action) const {
    return {JOULE_SETTINGS_GUARD_HELPER, file, controller, action};
  }

  /// @return the lines the helper's GPU wrote ("limit 200000", "lock 1200 1200", "reset-clocks", …).
  std::vector<std::string> lines() const { return read_lines(file); }
};

}  // namespace joule::test
