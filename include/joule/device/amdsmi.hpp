// SPDX-License-Identifier: Apache-2.0
// joule/device/amdsmi.hpp — AMD GPUs through AMD SMI (libamd_smi.so, ROCm's successor to ROCm SMI), loaded at
// run time with dlopen.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct AmdSmiOptions {
  /// The library to dlopen. Environment: JOULE_AMD_SMI_LIBRARY.
  std::string library = "libamd_smi.so";
  /// How long the energy-counter check waits between its two reads, in seconds: as with ROCm SMI (the same
  /// hardware counter), a counter is trusted only if it agrees with the board power within 10× over this
  /// interval (0 skips the check and trusts any readable counter). Discovery passes JOULE_ROCM_VALIDATION_S.
  double counter_validation_s = 0.5;
};

/// The AMD GPUs open_amdsmi found, and the library that found them.
struct AmdSmiGpus {
  std::vector<std::unique_ptr<Gpu>> gpus;
  /// The library's version and the ABI chosen from it, e.g. "AMD SMI 24.6.3 (ROCm 6.x ABI)".
  std::string abi;
};

/// Opens every visible AMD GPU, in framework order (`visible`: HIP_VISIBLE_DEVICES, else
/// CUDA_VISIBLE_DEVICES). GpuInfo::backend is "amdsmi"; GpuInfo::uuid is "GPU-" and AMD SMI's UUID.
///
/// Units on the Gpu interface are joule's (mW, mJ, MHz); AMD SMI's board power has a resolution of 1 W.
/// Telemetry: temperature (edge sensor, else hotspot), SM and memory clock, GPU and memory utilisation;
/// clock event reasons and memory power are kNotSupported.
/// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol; kNotSupported if it is
/// not AMD SMI 24.x, 25.x (ROCm 6.1 to 6.4) or 26.x (ROCm 7), whose structures joule knows (the message
/// names the version found); kDevice (or the mapped code) with AMD SMI's own text if initialisation fails;
/// kInvalidArgument for a negative check interval; the errors of resolve_visible_devices.
/// The ABI (the layouts of AMD SMI's structures) is chosen at load time from amdsmi_get_lib_version.
Result<AmdSmiGpus> open_amdsmi(const AmdSmiOptions& options, const VisibleDevices& visible);

/// open_amdsmi without the ABI description.
Result<std::vector<std::unique_ptr<Gpu>>> open_amdsmi_gpus(const AmdSmiOptions& options,
                                                           const VisibleDevices& visible);

}  // namespace joule::device
