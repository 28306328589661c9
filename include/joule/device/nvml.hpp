// SPDX-License-Identifier: Apache-2.0
// joule/device/nvml.hpp — NVIDIA GPUs through NVML, loaded at run time with dlopen (no build dependency).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct NvmlOptions {
  /// The library to dlopen: a soname searched the usual way, or a path. Environment: JOULE_NVML_LIBRARY.
  std::string library = "libnvidia-ml.so.1";
};

/// How the energy and power of an NVIDIA MIG instance are estimated (NVML measures only whole GPUs): the
/// parent GPU's × the instance's share of its compute slices. The name measure::EnergySource reports.
inline constexpr std::string_view kMigEnergyMethod = "mig-slice-share";

/// Opens every visible NVIDIA GPU, in framework order.
///
/// GPUs older than Volta (or whose driver refuses the energy call) get has_energy_counter = false, so
/// their energy is estimated from power samples.
///
/// GPUs in MIG mode: each MIG instance is a device too (uuid "MIG-…", physical_index its parent's), listed
/// after the whole GPUs when CUDA_VISIBLE_DEVICES is unset and selected by its UUID otherwise. Its energy
/// and power are the parent's × mig_compute_share() (kMigEnergyMethod: estimated); reading them fails with
/// kNotFound, naming the instance, once it has been destroyed. Setting a power limit or clock lock on an
/// instance is refused (kNotSupported, saying why), and so is a clock lock on a GPU in MIG mode.
/// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol (the message names
/// it); kPermissionDenied / kDevice from nvmlInit with NVML's own text; visible-device errors as
/// resolve_visible_devices() gives them.
Result<std::vector<std::unique_ptr<Gpu>>> open_nvml_gpus(const NvmlOptions& options,
                                                         const VisibleDevices& visible);

/// Grace Hopper / Grace Blackwell module scope: the power and energy of the whole module (GPU, CPU and
/// memory), read beside the GPU's own (NVML fields NVML_FI_DEV_POWER_INSTANT and NVML_FI_DEV_ENERGY with
/// NVML_POWER_SCOPE_MODULE). The module includes the GPU: never add these to power_mw() or energy_mj().
/// Thread-safe (NVML is); no Gpu lock is taken.
/// @return the module's power in mW; kNotSupported (saying why) on GPUs without a module scope, MIG
/// instances and other backends' GPUs; NVML's error, converted, for a field that answers another failure.
/// The same as gpu.module_power_mw() (Gpu's module scope, which `joule daemon` forwards too).
Result<uint32_t> nvml_module_power_mw(Gpu& gpu);
/// @return the module's energy since the driver loaded, in mJ; errors as nvml_module_power_mw().
Result<uint64_t> nvml_module_energy_mj(Gpu& gpu);

/// One process's SM utilisation over one of the driver's sample periods (1/6 s to 1 s, by product).
struct ProcessUtilizationSample {
  uint32_t pid = 0;
  uint64_t time_us = 0;  ///< when the period ended, µs since 1970 (CPU time)
  uint32_t sm_pct = 0;   ///< % of the period the process's kernels occupied the SMs, 0–100
};

/// @return the per-process samples the driver holds newer than `since_us` (µs since 1970; 0: all it holds),
/// as nvmlDeviceGetProcessUtilization gives them; empty when there is none. The driver keeps a short
/// history only (seconds), so a long window must be read repeatedly (measure::ProcessEnergyMeter::poll()).
/// kNotSupported (saying why) for MIG instances, other backends and drivers without the call.
Result<std::vector<ProcessUtilizationSample>> nvml_process_utilization(Gpu& gpu, uint64_t since_us);
/// @return the PIDs of the compute processes on the GPU now (nvmlDeviceGetComputeRunningProcesses);
/// errors as nvml_process_utilization().
Result<std::vector<uint32_t>> nvml_compute_processes(Gpu& gpu);

/// @return the share of its GPU's compute a MIG instance opened by open_nvml_gpus() holds (its compute
/// instance's slices over the GPU's MIG slots, 0–1); 1 for any other GPU.
double mig_compute_share(const Gpu& gpu);

}  // namespace joule::device
