// SPDX-License-Identifier: Apache-2.0
// joule/measure/steady_state.hpp — waiting for GPUs to reach a thermal steady state before a measurement, so
// that a profile is not skewed by a cold (or still hot) GPU: leakage power rises with temperature, and a GPU
// settles to a new temperature over a minute or more after its load or power limit changes.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"

namespace joule::measure {

/// How to decide that GPUs are ready to be measured.
enum class SteadyStateMode {
  kOff,     ///< measure at once (after the optimizer's warm-up steps)
  kFixed,   ///< wait fixed_warmup_s after each change
  kSteady,  ///< wait until temperature and power stay within their bands over window_s (or max_wait_s)
};

/// @return "off", "fixed" or "steady".
std::string_view to_string(SteadyStateMode mode);
/// @return the mode called `name`, or kInvalidArgument listing the valid names.
Result<SteadyStateMode> steady_state_mode_from_string(std::string_view name);

struct SteadyStateOptions {
  /// nullopt: kSteady when every GPU is a real device, kOff on simulated GPUs (whose power follows the trace
  /// exactly unless their thermal leakage is switched on). See resolve_steady_state_mode().
  std::optional<SteadyStateMode> mode;
  double window_s = 20;             ///< kSteady: readings over this long must stay within the bands, s (> 0)
  double temperature_band_c = 1.0;  ///< kSteady: largest max − min temperature over the window, °C (> 0)
  /// kSteady: largest difference between the mean power of the window's two halves, relative to the mean
  /// (> 0). Means, not single readings: a training loop's power swings with its phases from one reading to
  /// the next, while warming up moves the means.
  double power_band_ratio = 0.02;
  double max_wait_s = 180;     ///< kSteady: measure anyway (with a warning) after this long, s (≥ window_s)
  double fixed_warmup_s = 30;  ///< kFixed: the wait, s (≥ 0)
};

/// @return kInvalidArgument naming the first bad field and its valid range.
Result<void> validate(const SteadyStateOptions& options);

/// @return options.mode, or the default for these GPUs: kSteady if any is a real device (backend nvml, rocm,
/// amdsmi or daemon), else kOff (simulated and test devices).
SteadyStateMode resolve_steady_state_mode(const SteadyStateOptions& options,
                                          const std::vector<device::Gpu*>& gpus);

/// Decides when a set of GPUs is steady. Feed it a reading of every GPU now and then (each training step,
/// or a timer) with sample(); it keeps the readings of the last window_s. Not thread-safe.
///
/// kSteady: steady when the window is full (readings span at least window_s) and, for every GPU, the
/// temperature spread is within temperature_band_c (GPUs that do not report temperature are judged on power
/// alone) and the means of the window's halves differ by at most power_band_ratio. kFixed: once fixed_warmup_s has passed
/// since restart(). kOff: always. Any mode: timed_out() after max_wait_s (kSteady only) — ready() is then
/// true.
class SteadyStateDetector {
 public:
  /// @param gpus the GPUs to watch (must outlive this); @param clock their clock.
  /// @throws joule::Exception kInvalidArgument for invalid options.
  SteadyStateDetector(std::vector<device::Gpu*> gpus, Clock& clock, SteadyStateOptions options);

  /// Forgets the readings and starts waiting again (call after every change of settings or load).
  void restart();
  /// Reads every GPU's temperature and power now. Failed reads are skipped (logged at debug level).
  void sample();
  /// @return whether the GPUs may be measured now: steady, waited long enough, or timed out.
  bool ready() const;
  /// @return true if ready() only because max_wait_s passed without a steady state.
  bool timed_out() const;
  /// @return seconds since restart().
  double waited_s() const;
  /// @return one line for logs: "steady after 42.0 s (GPU 0: 71.2–71.9 °C, 210.1–212.0 W)" or why not yet.
  std::string describe() const;
  SteadyStateMode mode() const { return mode_; }

 private:
  struct Reading {
    Nanos time{0};
    std::optional<double> temperature_c;
    std::optional<double> power_w;
  };
  bool steady() const;

  std::vector<device::Gpu*> gpus_;
  Clock& clock_;
  SteadyStateOptions options_;
  SteadyStateMode mode_;
  Nanos started_{0};
  std::vector<std::deque<Reading>> readings_;  // per GPU, oldest first
};

}  // namespace joule::measure
