// SPDX-License-Identifier: Apache-2.0
// joule/device/levelzero.hpp — Intel GPUs through Level Zero Sysman (libze_loader.so.1), loaded at run time
// with dlopen.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct LevelZeroOptions {
  /// The Level Zero loader to dlopen. Environment: JOULE_LEVEL_ZERO_LIBRARY.
  std::string library = "libze_loader.so.1";
  /// Sysman has no instantaneous power nor utilisation, only counters: power_mw() and
  /// gpu_utilization_pct() are the change of the energy (busy-time) counter between two readings at least
  /// this many seconds apart (the previous call's reading when it is 0.05–1 s old, else a fresh pair taken
  /// this far apart). Must be > 0 and ≤ 1.
  double sample_window_s = 0.05;
};

/// Opens every Intel GPU that Level Zero Sysman reports (every driver's devices, in the loader's order),
/// ordered by `visible` (discovery passes an unset list: every GPU, see docs/devices.md on
/// ZE_AFFINITY_MASK). GpuInfo::backend is "levelzero"; GpuInfo::uuid is "GPU-" and the device UUID.
///
/// Units on the Gpu interface are joule's (mW, mJ, MHz). Energy: the card-level power domain's counter
/// (else the package's); power: derived from that counter (see sample_window_s). Power limit: the
/// sustained limit (ZES_POWER_LEVEL_SUSTAINED), range from the domain's properties. SM clocks: the GPU
/// frequency domain (available clocks, zesFrequencySetRange; reset restores the hardware range).
/// Telemetry: temperature (GPU sensor, else the global one), SM and memory clock, GPU utilisation (engine
/// group activity), clock event reasons (the GPU domain's throttle reasons); memory utilisation and memory
/// power are kNotSupported.
/// @return kLibraryMissing if the loader cannot be loaded or lacks a required symbol (named); kNotSupported
/// if its API major version is not 1 (both versions named); the mapped error of the initialisation;
/// kInvalidArgument for a sample window outside (0, 1] s; the errors of resolve_visible_devices.
Result<std::vector<std::unique_ptr<Gpu>>> open_levelzero_gpus(const LevelZeroOptions& options,
                                                              const VisibleDevices& visible);

}  // namespace joule::device
