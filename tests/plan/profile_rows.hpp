// SPDX-License-Identifier: Apache-2.0
// A small pipeline profile as the JSON rows the profile codec and PUT /pipelines/{id}/profile take.
#pragma once

#include <nlohmann/json.hpp>

namespace joule::test {

/// Two stages, forward and backward, two clocks (1000 and 1400 MHz): time falls with the clock and grows
/// with the stage; energy is time × clock / 10.
inline nlohmann::json small_profile_rows() {
  nlohmann::json rows = nlohmann::json::array();
  for (int stage = 0; stage < 2; ++stage) {
    for (const char* instruction : {"forward", "backward"}) {
      for (const int mhz : {1000, 1400}) {
        const double time = (instruction[0] == 'f' ? 0.01 : 0.02) * 1400.0 / mhz * (stage + 1);
        rows.push_back({{"stage", stage},
                        {"instruction", instruction},
                        {"frequency_mhz", mhz},
                        {"time_s", time},
                        {"energy_j", time * mhz / 10}});
      }
    }
  }
  return rows;
}

}  // namespace joule::test
