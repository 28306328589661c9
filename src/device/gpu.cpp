// SPDX-License-Identifier: Apache-2.0
#include "joule/device/gpu.hpp"

#include <fmt/format.h>

namespace joule::device {

std::string format_watts(uint32_t power_mw) {
  std::string text = fmt::format("{:.3f}", power_mw / 1e3);
  while (text.back() == '0') {
    text.pop_back();
  }
  if (text.back() == '.') {
    text.pop_back();
  }
  return text + " W";
}

std::string Gpu::label() const {
  return fmt::format("GPU {} ({})", info_.index, info_.name);
}

Result<uint64_t> Gpu::energy_mj() {
  if (!info_.has_energy_counter) {
    return fail(ErrorCode::kNotSupported,
                "{} has no energy counter; its energy is estimated from power samples", label());
  }
  std::lock_guard lock(mutex_);
  return do_energy_mj();
}

Result<uint32_t> Gpu::power_mw() {
  std::lock_guard lock(mutex_);
  return do_power_mw();
}

Result<PowerLimitConstraints> Gpu::constraints_locked() {
  if (!constraints_) {
    auto constraints = do_power_limit_constraints();
    if (!constraints) {
      return constraints;
    }
    constraints_ = *constraints;
  }
  return *constraints_;
}

Result<PowerLimitConstraints> Gpu::power_limit_constraints() {
  std::lock_guard lock(mutex_);
  return constraints_locked();
}

Result<uint32_t> Gpu::power_limit_mw() {
  std::lock_guard lock(mutex_);
  return do_power_limit_mw();
}

Result<void> Gpu::set_power_limit_mw(uint32_t power_limit_mw) {
  std::lock_guard lock(mutex_);
  const auto constraints = JOULE_TRY(constraints_locked());
  if (power_limit_mw < constraints.min_mw || power_limit_mw > constraints.max_mw) {
    return fail(ErrorCode::kOutOfRange, "power limit {} is outside {}'s range {} to {}",
                format_watts(power_limit_mw), label(), format_watts(constraints.min_mw),
                format_watts(constraints.max_mw));
  }
  return do_set_power_limit_mw(power_limit_mw);
}

Result<void> Gpu::reset_power_limit() {
  std::lock_guard lock(mutex_);
  const auto constraints = JOULE_TRY(constraints_locked());
  return do_set_power_limit_mw(constraints.default_mw);
}

Result<std::vector<uint32_t>> Gpu::supported_sm_clocks_mhz() {
  std::lock_guard lock(mutex_);
  return do_supported_sm_clocks_mhz();
}

Result<void> Gpu::lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  if (min_mhz > max_mhz) {
    return fail(ErrorCode::kInvalidArgument,
                "cannot lock {}'s SM clock: minimum {} MHz is above maximum {} MHz", label(), min_mhz,
                max_mhz);
  }
  std::lock_guard lock(mutex_);
  return do_lock_sm_clocks(min_mhz, max_mhz);
}

Result<void> Gpu::reset_sm_clocks() {
  std::lock_guard lock(mutex_);
  return do_reset_sm_clocks();
}

}  // namespace joule::device
