// SPDX-License-Identifier: Apache-2.0
// gmock stand-ins for the device interfaces.
#pragma once

#include <gmock/gmock.h>

#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"

namespace joule::test {

class MockGpu : public device::Gpu {
 public:
  explicit MockGpu(device::GpuInfo info) : Gpu(std::move(info)) {}
  MOCK_METHOD(Result<uint64_t>, do_energy_mj, (), (override));
  MOCK_METHOD(Result<uint32_t>, do_power_mw, (), (override));
  MOCK_METHOD(Result<device::PowerLimitConstraints>, do_power_limit_constraints, (), (override));
  MOCK_METHOD(Result<uint32_t>, do_power_limit_mw, (), (override));
  MOCK_METHOD(Result<void>, do_set_power_limit_mw, (uint32_t), (override));
  MOCK_METHOD(Result<std::vector<uint32_t>>, do_supported_sm_clocks_mhz, (), (override));
  MOCK_METHOD(Result<void>, do_lock_sm_clocks, (uint32_t, uint32_t), (override));
  MOCK_METHOD(Result<void>, do_reset_sm_clocks, (), (override));
};

class MockCpu : public device::Cpu {
 public:
  explicit MockCpu(device::CpuInfo info) : Cpu(std::move(info)) {}
  MOCK_METHOD(Result<uint64_t>, do_package_energy_mj, (), (override));
  MOCK_METHOD(Result<uint64_t>, do_dram_energy_mj, (), (override));
};

inline device::GpuInfo mock_gpu_info(int index = 0, bool counter = true) {
  device::GpuInfo info;
  info.backend = "mock";
  info.index = index;
  info.physical_index = index;
  info.name = "Mock GPU";
  info.uuid = "GPU-mock";
  info.has_energy_counter = counter;
  return info;
}

}  // namespace joule::test
