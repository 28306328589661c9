// SPDX-License-Identifier: Apache-2.0
// joule/plan/warmup_detector.hpp — the thermal wait of a pipeline stage's warm-up (Perseus profiles only
// once the GPUs are thermally steady): a measure::SteadyStateDetector that keeps its GPUs' owner and its
// clock alive and may be called from several threads. joule._joule.SteadyStateDetector in Python.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/steady_state.hpp"

namespace joule::plan {

/// measure::SteadyStateDetector (same options, same answers) behind a mutex, holding `owner` (whatever keeps
/// the GPUs alive) and the clock. Thread-safe: every method may be called from any thread; each holds the
/// mutex for its call (sample() reads every GPU, so it may take milliseconds).
class WarmupDetector {
 public:
  /// Samples nothing yet. `gpus` must stay alive as long as `owner` does.
  WarmupDetector(std::shared_ptr<const void> owner, std::vector<device::Gpu*> gpus,
                 std::shared_ptr<Clock> clock, const measure::SteadyStateOptions& options);

  /// Reads every GPU's temperature and power now (failed reads are skipped).
  void sample();
  /// @return whether the GPUs may be measured now: steady, waited long enough, or timed out.
  bool ready() const;
  /// @return true if ready() only because max_wait_s passed without a steady state.
  bool timed_out() const;
  /// Forgets the readings and starts waiting again (after a change of settings or load).
  void restart();
  /// @return seconds since construction or restart().
  double waited_s() const;
  /// @return one line for logs (measure::SteadyStateDetector::describe).
  std::string describe() const;
  /// @return the mode, 'auto' resolved for these GPUs.
  measure::SteadyStateMode mode() const;

 private:
  std::shared_ptr<const void> owner_;
  std::shared_ptr<Clock> clock_;
  mutable std::mutex mutex_;
  measure::SteadyStateDetector detector_;  // last: references the GPUs and the clock
};

}  // namespace joule::plan
