// SPDX-License-Identifier: Apache-2.0
// joule/device/rocm.hpp — AMD GPUs through ROCm SMI, loaded at run time with dlopen.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct RocmOptions {
  /// The library to dlopen. Environment: JOULE_ROCM_SMI_LIBRARY.
  std::string library = "librocm_smi64.so.1";
  /// How long the energy-counter check waits between its two reads, in seconds. ROCm energy counters are
  /// unreliable on some boards, so a counter is trusted only if it agrees with average power within 10×
  /// over this interval (0 skips the check and trusts the counter). Environment: JOULE_ROCM_VALIDATION_S.
  double counter_validation_s = 0.5;
};

/// Opens every visible AMD GPU, in framework order (HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES).
/// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol; kDevice with ROCm
/// SMI's own text if initialisation fails.
Result<std::vector<std::unique_ptr<Gpu>>> open_rocm_gpus(const RocmOptions& options,
                                                         const VisibleDevices& visible);

}  // namespace joule::device
