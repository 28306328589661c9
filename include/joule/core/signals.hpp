// SPDX-License-Identifier: Apache-2.0
// joule/core/signals.hpp — signals handled synchronously: blocked in every thread and waited for with sigtimedwait, so no
// asynchronous handler runs (nothing to make async-signal-safe, and sanitizers see plain code).
#pragma once

#include <initializer_list>
#include <optional>

#include <signal.h>

#include "joule/core/units.hpp"

namespace joule {

/// Blocks `signals` in the calling thread for its lifetime; threads created meanwhile inherit the mask, so
/// the signals are only ever received by wait(). Create it before any other thread starts.
class BlockedSignals {
 public:
  explicit BlockedSignals(std::initializer_list<int> signals);
  ~BlockedSignals();
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

  /// Waits for one of the signals, at most `timeout` (forever if nullopt).
  /// @return what arrived, or nullopt on timeout.
  std::optional<siginfo_t> wait(std::optional<Nanos> timeout);

  /// @return the signal mask before this object, for child processes (which must not inherit the block).
  const sigset_t& previous_mask() const { return previous_; }

 private:
  sigset_t set_{};
  sigset_t previous_{};
};

/// @return true if `info` describes a signal another process sent (kill, sigqueue), as opposed to one the
/// kernel generated (e.g. Ctrl-C in a terminal, which reaches the whole foreground process group).
bool sent_by_process(const siginfo_t& info);

}  // namespace joule
