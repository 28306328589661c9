// SPDX-License-Identifier: Apache-2.0
// Private: setting one power limit on a group of GPUs, and setting them back on destruction, at process
// exit and on SIGINT/SIGTERM.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <sys/types.h>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"

namespace joule::optimize::detail {

/// Why limits are being restored.
enum class RestoreReason {
  kDestroy,  ///< the optimizer is being destroyed: no further changes
  kExit,     ///< the process is exiting: no further changes
  kSignal,   ///< SIGINT/SIGTERM arrived: the process may live on (a handler that returns)
};

/// Sets one power limit on a group of GPUs and sets them back. Thread-safe: the training thread applies,
/// the restorer thread or an exit hook may restore at any time.
class LimitController {
 public:
  /// @param restore_mw per GPU: the limit to restore, or nullopt for the board's default.
  LimitController(std::vector<device::Gpu*> gpus, std::vector<std::optional<uint32_t>> restore_mw);

  /// Sets `power_limit_mw` on every GPU unless it is the limit this controller last set successfully.
  /// Does nothing once closed (destroyed or exiting). Tries every GPU; @return the first error.
  Result<void> apply(uint32_t power_limit_mw);

  /// Sets the GPUs back if a limit was applied since the last restore (so never twice for one change).
  /// kDestroy and kExit also close the controller. Never throws; failures are logged.
  void restore(RestoreReason reason) noexcept;

  /// @return true once after a kSignal restore that changed something (the owner re-applies its limit).
  bool consume_external_restore() { return external_restore_.exchange(false); }

  /// @return the process that created the controller (a forked child must not touch the parent's GPUs).
  pid_t owner_pid() const { return owner_pid_; }

 private:
  std::mutex mutex_;
  std::vector<device::Gpu*> gpus_;
  std::vector<std::optional<uint32_t>> restore_mw_;
  std::optional<uint32_t> applied_mw_;
  bool changed_ = false;  // a limit was set since the last restore
  bool closed_ = false;
  std::atomic<bool> external_restore_{false};
  pid_t owner_pid_;
};

/// Keeps a controller in the process-wide list that the exit hook and the signal restorer walk, and the
/// signal handlers installed while any registration asks for them.
class RestoreRegistration {
 public:
  RestoreRegistration(std::shared_ptr<LimitController> controller, bool handle_signals);
  /// Removes the controller (waiting for a restore in progress to finish); uninstalls the handlers with
  /// the last registration that asked for them. Never throws.
  ~RestoreRegistration();
  RestoreRegistration(const RestoreRegistration&) = delete;
  RestoreRegistration& operator=(const RestoreRegistration&) = delete;

 private:
  std::shared_ptr<LimitController> controller_;
  bool handle_signals_;
};

/// @return true if joule's handler is installed for `signal_number` now (tests).
bool signal_handler_installed(int signal_number);

}  // namespace joule::optimize::detail
