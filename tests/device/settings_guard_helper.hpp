// SPDX-License-Identifier: Apache-2.0
// The test side of settings_guard_helper: runs it on a file of its own and reads the GPU's history back.
// A test target defines JOULE_SETTINGS_GUARD_HELPER (the helper's path) and depends on the helper.
#pragma once

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

  /// Runs the helper for `controller` until it has changed its GPU, sends it `signal_number` and waits.
  /// Fails the test (and returns nullopt) if the helper never got that far.
  std::optional<ProcessResult> end_with_signal(const std::string& controller, int signal_number) const {
    Process child(argv(controller, "wait"));
    if (!child.wait_for_output(std::chrono::seconds(20))) {
      ADD_FAILURE() << "the helper did not start: " << child.err_so_far();
      return std::nullopt;
    }
    child.signal(signal_number);
    return child.wait();
  }

  /// @return the lines the helper's GPU wrote ("limit 200000", "lock 1200 1200", "reset-clocks", …).
  std::vector<std::string> lines() const { return read_lines(file); }
};

}  // namespace joule::test
