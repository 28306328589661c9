// SPDX-License-Identifier: Apache-2.0
// joule/device/nvml.hpp — NVIDIA GPUs through NVML, loaded at run time with dlopen (no build dependency).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct NvmlOptions {
  /// The library to dlopen: a soname searched the usual way, or a path. Environment: JOULE_NVML_LIBRARY.
  std::string library = "libnvidia-ml.so.1";
};

/// Opens every visible NVIDIA GPU, in framework order.
///
/// GPUs older than Volta (or whose driver refuses the energy call) get has_energy_counter = false, so
/// their energy is estimated from power samples.
/// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol (the message names
/// it); kPermissionDenied / kDevice from nvmlInit with NVML's own text; visible-device errors as
/// resolve_visible_devices() gives them.
Result<std::vector<std::unique_ptr<Gpu>>> open_nvml_gpus(const NvmlOptions& options,
                                                         const VisibleDevices& visible);

}  // namespace joule::device
