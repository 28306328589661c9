// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the pipeline planner's inputs (a profile CSV, a schedule name, an instruction name).
// Parsing never throws or crashes, an error always has a message, and an accepted profile has stages whose
// every option is finite and positive, at the profile's frequencies.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/plan/pipeline.hpp"

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using joule::fuzz::require_message;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  require_message(joule::plan::parse_schedule(text));
  require_message(joule::plan::parse_instruction(text));
  const auto profile = joule::plan::Profile::parse(text, "fuzz.csv");
  require_message(profile);
  if (!profile) {
    return 0;
  }
  if (profile->stage_count() <= 0) {
    std::abort();
  }
  for (int stage = 0; stage < profile->stage_count(); ++stage) {
    for (const auto instruction : {joule::plan::Instruction::kForward, joule::plan::Instruction::kBackward}) {
      const auto& options = profile->options(stage, instruction);
      if (options.size() != profile->frequencies_mhz().size()) {
        std::abort();
      }
      for (const auto& option : options) {
        if (!(std::isfinite(option.time_s) && option.time_s > 0 && std::isfinite(option.energy_j) &&
              option.energy_j > 0)) {
          std::abort();
        }
      }
    }
  }
  return 0;
}
