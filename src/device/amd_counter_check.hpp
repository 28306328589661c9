// SPDX-License-Identifier: Apache-2.0
// What the two AMD backends (ROCm SMI and AMD SMI, which read the same hardware counter) share: Zeus's
// plausibility check of energy counters, and the saturating conversion of their readings.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "joule/core/log.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device::amd_counter {

/// @return `value` rounded into uint32_t: 0 for non-positive or NaN, the maximum where it overflows.
inline uint32_t saturate_u32(double value) {
  if (!(value > 0)) {
    return 0;
  }
  if (value >= static_cast<double>(std::numeric_limits<uint32_t>::max())) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(std::llround(value));
}

/// @return whether a counter that rose by `measured_mj` while power predicted `expected_mj` is trusted:
/// within 10× either way (Zeus's rule, spec A.1). Without power to compare with, it cannot be vouched for.
inline bool plausible(double measured_mj, double expected_mj) {
  if (expected_mj < 0.001) {
    return false;  // no power to compare with (idle board, or power unreadable): cannot vouch for it
  }
  const double ratio = measured_mj / expected_mj;
  return ratio > 0.1 && ratio < 10;
}

/// Zeus's check of AMD energy counters (spec A.1): some boards' counters are off by orders of magnitude, so a
/// counter is trusted only if its increase over `interval_s` is within 10× of power × interval. Two
/// refinements: all GPUs are checked in the same interval, so opening N GPUs waits once, not N times; and
/// "interval" is the time that really passed between a GPU's two counter reads (a late wake-up on a loaded
/// machine would otherwise inflate the ratio and reject a good counter). `interval_s` ≤ 0 trusts every
/// counter that can be read. BackendGpu provides read_power_mw() and read_energy_uj() (Results),
/// set_has_energy_counter(bool) and label().
template <class BackendGpu>
void validate_energy_counters(const std::vector<BackendGpu*>& gpus, double interval_s) {
  using SteadyClock = std::chrono::steady_clock;
  struct Probe {
    double power_mw = 0;
    std::optional<double> start_uj;
    SteadyClock::time_point start_time;
  };
  std::vector<Probe> probes(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    // Power first, then the counter (Zeus's order); power that cannot be read counts as 0.
    probes[i].power_mw = gpus[i]->read_power_mw().value_or(0);
    if (auto energy_uj = gpus[i]->read_energy_uj()) {
      probes[i].start_uj = *energy_uj;
      probes[i].start_time = SteadyClock::now();
    } else {
      log().info("{}: no energy counter ({}); energy will be estimated from power", gpus[i]->label(),
                 energy_uj.error().message());
    }
  }
  const bool any_counter = std::any_of(probes.begin(), probes.end(),
                                       [](const Probe& probe) { return probe.start_uj.has_value(); });
  if (interval_s <= 0 || !any_counter) {
    // Checking is switched off (or there is nothing to check): trust every counter that can be read at all.
    for (size_t i = 0; i < gpus.size(); ++i) {
      gpus[i]->set_has_energy_counter(probes[i].start_uj.has_value());
    }
    return;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  for (size_t i = 0; i < gpus.size(); ++i) {
    bool trusted = false;
    if (probes[i].start_uj) {
      if (auto end_uj = gpus[i]->read_energy_uj()) {
        const double elapsed_s =
            std::chrono::duration<double>(SteadyClock::now() - probes[i].start_time).count();
        const double measured_mj = (*end_uj - *probes[i].start_uj) / 1e3;
        const double expected_mj = probes[i].power_mw * elapsed_s;
        trusted = plausible(measured_mj, expected_mj);
        if (!trusted) {
          log().warn(
              "{}: energy counter rejected: it rose by {:.3f} mJ in {:.3f} s, but average power {} predicts "
              "{:.3f} mJ; energy will be estimated from power",
              gpus[i]->label(), measured_mj, elapsed_s, format_watts(saturate_u32(probes[i].power_mw)),
              expected_mj);
        }
      }
    }
    gpus[i]->set_has_energy_counter(trusted);
  }
}

}  // namespace joule::device::amd_counter
