// SPDX-License-Identifier: Apache-2.0
// src/plan/runtime/computation_workload.hpp — private to the plan area: one (stage, instruction) of a pipeline
// profile as a simulated workload, shared by the pipeline executor and the stage device.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/error.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// One (stage, instruction) of the profile as a simulated workload: a busy GPU draws the computation's
/// average power (energy / time) at the clock it is locked to and takes the profiled time, so integrating
/// the power over the computation gives back the profiled energy.
class ComputationWorkload final : public device::sim::Workload {
 public:
  /// @param options the profile's options of (stage, instruction), fastest first (Profile::options()).
  /// @throws joule::Exception (kInvalidArgument) if `options` is empty.
  ComputationWorkload(int stage, Instruction instruction, std::vector<ProfileOption> options)
      : description_(fmt::format("stage {} {} (pipeline profile)", stage, to_string(instruction))),
        options_(std::move(options)) {
    if (options_.empty()) {
      throw Exception(ErrorCode::kInvalidArgument, fmt::format("{} has no profiled clock", description_));
    }
  }

  std::string description() const override { return description_; }

  device::sim::OperatingPoint at(double /*power_limit_w*/,
                                 std::optional<double> locked_sm_clock_mhz) const override {
    const ProfileOption& option = option_at_lock(locked_sm_clock_mhz);
    return {option.energy_j / option.time_s, option.time_s, static_cast<double>(option.frequency_mhz)};
  }

 private:
  // Options are fastest first. Unlocked, the GPU runs at its highest clock; locked, at the fastest profiled
  // clock not above the lock (the lowest one if the lock is below every profiled clock).
  const ProfileOption& option_at_lock(std::optional<double> locked_mhz) const {
    if (!locked_mhz) {
      return options_.front();
    }
    for (const ProfileOption& option : options_) {
      if (static_cast<double>(option.frequency_mhz) <= *locked_mhz) {
        return option;
      }
    }
    return options_.back();
  }

  std::string description_;
  std::vector<ProfileOption> options_;
};

}  // namespace joule::plan
