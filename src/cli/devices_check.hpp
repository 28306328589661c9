// SPDX-License-Identifier: Apache-2.0
// `joule devices --check`: the read-only hardware check.
#pragma once

#include <string>

#include "common.hpp"

namespace joule::cli {

struct DevicesCheckFlags {
  double duration_s = 10;             ///< --duration-s: how long the GPUs are watched
  std::string fallback_sim = "v100";  ///< the simulated GPU checked when there is no GPU
};

/// Runs the check and prints its report. @return 1 if a check failed, else 0 (also without a GPU: the
/// simulated one is checked instead, and the report says so).
int run_devices_check(const GlobalOptions& global, const DevicesCheckFlags& flags, Format format);

}  // namespace joule::cli
