// SPDX-License-Identifier: Apache-2.0
// joule/device/settings_guard.hpp — the device layer's restore contract: every GPU control a controller
// changes goes back to what it was when the controller stops, however it stops.
//
//   joule::device::SettingsGuard guard({.owner = "chase"});
//   guard.set_power_limit_mw(gpu, 200'000);  // records the limit in force first
//   …                                         // destruction, exit or SIGINT/SIGTERM/SIGHUP: restored
//
// Every controller in joule (the power-limit optimizer, Chase, the pipeline frequency controller) changes
// GPU controls only through one. `joule daemon` keeps the same contract per connection: its ledger
// (src/daemon/ledger.cpp) records the first value of every control a client changes and restores it when
// the connection closes, also when the client process dies or is killed with SIGKILL (which no in-process
// guard can survive). A guard used through a DaemonGpu therefore restores twice over: in the process and,
// should that fail, in the daemon.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

/// What a guarded power limit is set back to.
enum class PowerLimitRestore {
  /// The limit read just before the guard first changed it; the board's default if it cannot be read.
  kRecorded,
  /// The board's default limit (PowerLimitConstraints::default_mw), whatever was set before.
  kDefault,
};

struct SettingsGuardOptions {
  /// Names the controller in log messages, e.g. "power-limit optimizer".
  std::string owner = "joule";
  /// What power limits go back to.
  PowerLimitRestore power_limit_restore = PowerLimitRestore::kRecorded;
  /// Restore on SIGINT, SIGTERM and SIGHUP before the signal takes its course (see SettingsGuard).
  /// Destruction and normal process exit restore regardless.
  bool restore_on_signals = true;
};

/// Changes GPU controls on behalf of one controller and sets them back.
///
/// **What is recorded**: per GPU and per control, the value before the guard's first change of it (after
/// a restore, the next change records again). Controls:
/// - power limit, mW: restored to the recorded limit (or the default, see PowerLimitRestore);
/// - SM clocks: Gpu cannot read a clock lock, so the state before the first lock is taken to be
///   unlocked and the restore removes the lock (Gpu::reset_sm_clocks());
/// - memory clocks: the same rules (Gpu::reset_memory_clocks()).
///
/// **When it restores** — once per change, never twice, on whichever comes first:
/// - restore() (the guard stays usable) or destruction;
/// - normal process exit (std::exit, return from main) while the guard is alive; afterwards every change
///   through any guard is ignored (no device call, success returned), so nothing stays changed;
/// - SIGINT, SIGTERM or SIGHUP (if options.restore_on_signals). While at least one such guard is alive the
///   process has handlers for these signals (not for a signal whose disposition is "ignore"). The
///   handler only writes the signal to a pipe; a restorer thread restores every guard of the process, then
///   lets the signal take its course: if the previous disposition was the default, it is put back and the
///   signal re-raised, so the process dies of it as it would have; if it was a handler function (e.g.
///   Python's), that function is called (from the restorer thread, with a null ucontext, so flags it sets
///   should be lock-free atomics) and our handler stays installed. If the process lives on,
///   consume_signal_restore() tells the controller to set its controls again. The previous dispositions
///   come back when the last such guard is destroyed (unless someone replaced our handler meanwhile).
///
/// A restore that fails is logged (joule::log()) and kept, so a later restore tries again.
///
/// **Fork safety**: a guard belongs to the process that created it. In a forked child it never calls a
/// device: restores do nothing (the GPUs are the parent's), changes fail with kState, and the signal
/// handler passes a signal straight to the previous disposition.
///
/// **Thread-safety**: all methods may be called from any thread. The GPUs must outlive the guard.
class SettingsGuard {
 public:
  /// Registers the guard with the exit hook and, if asked, the signal handlers. Changes nothing yet.
  explicit SettingsGuard(SettingsGuardOptions options = {});
  /// Restores every control still changed. Never throws.
  ~SettingsGuard();
  SettingsGuard(const SettingsGuard&) = delete;
  SettingsGuard& operator=(const SettingsGuard&) = delete;
  SettingsGuard(SettingsGuard&&) = delete;
  SettingsGuard& operator=(SettingsGuard&&) = delete;

  /// Sets `gpu`'s power limit, in mW, recording the limit in force first if this is the first change.
  /// No device call if the guard set this very limit last and has not restored it since.
  /// @return the device's error (code and message unchanged): a refused first change records nothing (the
  /// control is as it was); a refused later change leaves the control to be restored. kState in a forked
  /// child.
  Result<void> set_power_limit_mw(Gpu& gpu, uint32_t power_limit_mw);

  /// Locks `gpu`'s SM clock into [min_mhz, max_mhz] (Gpu::lock_sm_clocks()). No device call if the guard
  /// set this very lock last and has not restored it since. Errors as set_power_limit_mw().
  Result<void> lock_sm_clocks(Gpu& gpu, uint32_t min_mhz, uint32_t max_mhz);

  /// Locks `gpu`'s memory clock into [min_mhz, max_mhz] (Gpu::lock_memory_clocks()). Errors and repeats as
  /// lock_sm_clocks(); kNotSupported where the backend cannot lock the memory clock (nothing recorded).
  Result<void> lock_memory_clocks(Gpu& gpu, uint32_t min_mhz, uint32_t max_mhz);

  /// Restores every control this guard changed, now. @return the first device error (every control is
  /// tried; the ones that failed stay recorded). Does nothing in a forked child.
  Result<void> restore();

  /// @return true if some control is changed and not restored yet.
  bool changed() const;

  /// @return true once after a signal restore that set something back (the owner may set it again).
  bool consume_signal_restore();

  /// @return true if the guard's handler is installed for `signal_number` now (tests, diagnostics).
  static bool signal_handler_installed(int signal_number);

  struct State;  // shared with the exit hook and the signal restorer

 private:
  std::shared_ptr<State> state_;
  bool handles_signals_ = false;
};

}  // namespace joule::device
