// SPDX-License-Identifier: Apache-2.0
// joule/plan/shared_guard.hpp — the restore contract for a stage runtime whose GPUs are owned by someone else
// (a Python DeviceSet or PipelineStageDevice, shared by reference counting): a device::SettingsGuard that
// keeps the owner of every GPU it changed alive until it has set the GPU back. joule.SettingsGuard in Python.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/settings_guard.hpp"

namespace joule::plan {

/// A device::SettingsGuard (same options, same restore on restore(), destruction, exit and signals) that also
/// holds a reference to the owner of each GPU it changed, so the GPU outlives the guard's restore.
///
/// Thread-safe: every method may be called from any thread.
class SharedSettingsGuard {
 public:
  /// Whatever keeps a GPU alive (a shared_ptr to its DeviceSet, say); compared by identity.
  using Owner = std::shared_ptr<const void>;

  explicit SharedSettingsGuard(device::SettingsGuardOptions options = {});
  /// Restores what the guard changed (a failure is logged), then lets the owners go.
  ~SharedSettingsGuard();
  SharedSettingsGuard(const SharedSettingsGuard&) = delete;
  SharedSettingsGuard& operator=(const SharedSettingsGuard&) = delete;
  SharedSettingsGuard(SharedSettingsGuard&&) = delete;
  SharedSettingsGuard& operator=(SharedSettingsGuard&&) = delete;

  /// device::SettingsGuard::lock_sm_clocks, MHz, keeping `owner` (of `gpu`) alive. Errors: the device's.
  Result<void> lock_sm_clocks(const Owner& owner, device::Gpu& gpu, uint32_t min_mhz, uint32_t max_mhz);
  /// device::SettingsGuard::set_power_limit_mw, mW, keeping `owner` (of `gpu`) alive. Errors: the device's.
  Result<void> set_power_limit_mw(const Owner& owner, device::Gpu& gpu, uint32_t power_limit_mw);

  /// The guard itself (restore(), changed(), consume_signal_restore()).
  device::SettingsGuard& guard() { return *guard_; }
  /// @return how many distinct owners the guard keeps alive.
  size_t owner_count() const;

 private:
  void keep(const Owner& owner);

  mutable std::mutex owners_mutex_;
  std::vector<Owner> owners_;                     // destroyed after guard_: the GPUs outlive the restore
  std::unique_ptr<device::SettingsGuard> guard_;  // declared last: destroyed (restores) first
};

}  // namespace joule::plan
