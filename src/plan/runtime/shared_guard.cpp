// SPDX-License-Identifier: Apache-2.0
// A SettingsGuard that keeps the owners of the GPUs it changed alive (joule.SettingsGuard in Python).
#include "joule/plan/shared_guard.hpp"

#include <algorithm>
#include <utility>

namespace joule::plan {

SharedSettingsGuard::SharedSettingsGuard(device::SettingsGuardOptions options)
    : guard_(std::make_unique<device::SettingsGuard>(std::move(options))) {}

SharedSettingsGuard::~SharedSettingsGuard() {
  guard_.reset();  // restores while the owners still hold the GPUs (members go in reverse order anyway)
}

void SharedSettingsGuard::keep(const Owner& owner) {
  std::lock_guard lock(owners_mutex_);
  if (std::find(owners_.begin(), owners_.end(), owner) == owners_.end()) {
    owners_.push_back(owner);
  }
}

Result<void> SharedSettingsGuard::lock_sm_clocks(const Owner& owner, device::Gpu& gpu, uint32_t min_mhz,
                                                 uint32_t max_mhz) {
  keep(owner);
  return guard_->lock_sm_clocks(gpu, min_mhz, max_mhz);
}

Result<void> SharedSettingsGuard::set_power_limit_mw(const Owner& owner, device::Gpu& gpu,
                                                     uint32_t power_limit_mw) {
  keep(owner);
  return guard_->set_power_limit_mw(gpu, power_limit_mw);
}

size_t SharedSettingsGuard::owner_count() const {
  std::lock_guard lock(owners_mutex_);
  return owners_.size();
}

}  // namespace joule::plan
