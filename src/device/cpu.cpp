// SPDX-License-Identifier: Apache-2.0
#include "joule/device/cpu.hpp"

#include <fmt/format.h>

namespace joule::device {

std::string Cpu::label() const {
  return fmt::format("CPU {} ({})", info_.index, info_.name);
}

Result<uint64_t> Cpu::package_energy_mj() {
  std::lock_guard lock(mutex_);
  return do_package_energy_mj();
}

Result<uint64_t> Cpu::dram_energy_mj() {
  if (!info_.has_dram) {
    return fail(ErrorCode::kNotSupported, "{} has no DRAM energy domain", label());
  }
  std::lock_guard lock(mutex_);
  return do_dram_energy_mj();
}

}  // namespace joule::device
