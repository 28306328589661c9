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

Result<CpuEnergyReading> Cpu::package_reading() {
  std::lock_guard lock(mutex_);
  return do_package_reading();
}

Result<CpuEnergyReading> Cpu::dram_reading() {
  if (!info_.has_dram) {
    return fail(ErrorCode::kNotSupported, "{} has no DRAM energy domain", label());
  }
  std::lock_guard lock(mutex_);
  return do_dram_reading();
}

Result<CpuEnergyReading> Cpu::do_package_reading() {
  auto energy_mj = JOULE_TRY(do_package_energy_mj());
  return CpuEnergyReading{energy_mj, 0, {}};
}

Result<CpuEnergyReading> Cpu::do_dram_reading() {
  auto energy_mj = JOULE_TRY(do_dram_energy_mj());
  return CpuEnergyReading{energy_mj, 0, {}};
}

std::optional<std::string> why_not_measurable(const CpuEnergyReading& begin, const CpuEnergyReading& end) {
  if (end.resets == begin.resets) {
    return std::nullopt;
  }
  const uint64_t resets = end.resets > begin.resets ? end.resets - begin.resets : begin.resets - end.resets;
  return fmt::format(
      "not measurable: the energy counter was reset {} between the readings ({}); the energy "
      "before the reset is unknown, so none is counted rather than a wrap's worth of phantom energy",
      resets == 1 ? std::string("once") : fmt::format("{} times", resets),
      end.last_reset.empty() ? std::string("no reason given") : end.last_reset);
}

}  // namespace joule::device
