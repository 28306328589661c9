// SPDX-License-Identifier: Apache-2.0
// joule/probe/probe.hpp — `joule probe`: characterise one GPU and make its frontier card (card.hpp).
//
//   auto runner = joule::probe::make_simulated_runner(gpu);     // or make_cuda_runner(gpu)
//   auto card = joule::probe::probe_gpu(gpu, clock, runner.get(), {});
//
// Every setting the probe changes goes through a joule::device::SettingsGuard: it is put back when a knob's
// sweep ends, when the probe returns (also on error or cancellation) and on SIGINT/SIGTERM/SIGHUP.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/probe/card.hpp"
#include "joule/probe/kernel_runner.hpp"

namespace joule::probe {

/// How much the probe measures. The defaults are the full probe (seconds on a simulated GPU, about a minute
/// on a real one); quick_probe_options() is a short one for tests and a first look.
struct ProbeOptions {
  /// Measure only what needs no setting: the counter's period and error, and the device's ranges.
  bool read_only = false;
  /// Run the compute kernel while the energy counter is polled (it changes no setting, but loads the GPU:
  /// on a real GPU it allocates 512 MiB and keeps it busy for counter_window_s). Off, the counter is read
  /// under whatever the GPU is doing. `joule probe --read-only` turns it off unless `--load` is given, so
  /// that a hardware check on a busy node neither allocates memory nor adds work.
  bool counter_under_load = true;
  bool quick = false;                     ///< recorded in the card (set by quick_probe_options())
  double counter_window_s = 0.5;          ///< how long to poll the energy counter, s
  double counter_poll_interval_s = 1e-3;  ///< s between counter polls
  int latency_tries = 20;                 ///< changes timed per control
  double settle_window_s = 0.3;           ///< how long power is sampled after a power-limit step, s
  double settle_sample_interval_s = 2e-3;
  int power_limit_values = 7;   ///< knob values per power-limit frontier (≥ 2), min to max
  int sm_clock_values = 8;      ///< knob values per SM-clock frontier (≥ 2), among the supported clocks
  int memory_clock_values = 4;  ///< knob values per memory-clock frontier (≥ 2), among the lockable clocks
  double run_s = 0.02;          ///< kernel time per knob value (at the fastest setting), s
  double knob_settle_s = 0.1;   ///< compute kernel time after each knob change, before measuring, s
  std::string joule_version;    ///< written into the card
  /// Called with a one-line description of each step ("power_limit frontier of compute: 250 W").
  std::function<void(std::string_view)> progress;
  /// Polled between steps and during runs; when it returns false the probe stops, restores every setting
  /// and returns kState "probe cancelled". Empty: never.
  std::function<bool()> keep_going;
};

/// @return the short probe: 3 knob values per knob, 5 ms runs and settling, 50 ms windows, 5 latency tries.
ProbeOptions quick_probe_options();

/// Probes `gpu`. `clock` is the clock the GPU's readings are timed on (a simulated GPU's own clock);
/// `runner` may be null (then only the counter, ranges and latencies are measured, and the frontier is
/// listed as skipped). @return the card; kInvalidArgument for bad options; kState if cancelled; a device
/// error that stops a whole step (e.g. the power limit cannot be set: kPermissionDenied with the device's
/// hint). A knob the device does not support (kNotSupported) is listed in card.skipped instead.
Result<Card> probe_gpu(device::Gpu& gpu, Clock& clock, KernelRunner* runner, const ProbeOptions& options);

/// @return a short text summary of the card (one line per figure) for the terminal.
std::string summarize_card(const Card& card);

}  // namespace joule::probe
