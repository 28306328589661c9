// SPDX-License-Identifier: Apache-2.0
// joule/device/discovery.hpp — find every GPU and CPU, and say why a backend found nothing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

/// Where to look. from_environment() fills it from JOULE_* variables; flags override it afterwards.
struct DiscoveryOptions {
  /// A sim spec (`[COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]]`): if set, the GPUs are simulated and no vendor
  /// library is loaded. Environment: JOULE_SIM.
  std::optional<std::string> sim_spec;
  /// The socket of a `joule daemon` (docs/daemon.md): if set (and sim_spec is not), the GPUs are the
  /// daemon's, reached without privileges, and no vendor library is loaded here. If set, the CPUs' energy
  /// counters (root-only RAPL) are the daemon's too (on one shared connection); only where the daemon
  /// serves none are the local ones tried. JOULE_DAEMON_SOCKET.
  std::optional<std::string> daemon_socket;
  std::string nvml_library = "libnvidia-ml.so.1";     ///< JOULE_NVML_LIBRARY
  std::string rocm_library = "librocm_smi64.so.1";    ///< JOULE_ROCM_SMI_LIBRARY
  std::string amd_smi_library = "libamd_smi.so";      ///< JOULE_AMD_SMI_LIBRARY; preferred to ROCm SMI
  double rocm_counter_validation_s = 0.5;             ///< JOULE_ROCM_VALIDATION_S
  std::string powercap_root = "/sys/class/powercap";  ///< JOULE_POWERCAP_ROOT
  /// The Level Zero loader, for Intel GPUs. JOULE_LEVEL_ZERO_LIBRARY.
  std::string level_zero_library = "libze_loader.so.1";
  /// The folder holding an NVIDIA Jetson board's sys/ and proc/ trees. Unset: "/", tried only where it looks
  /// like a Jetson (so other machines get no report line). JOULE_JETSON_SYSFS_ROOT.
  std::optional<std::string> jetson_sysfs_root;
  bool gpus = true;  ///< look for GPUs
  bool cpus = true;  ///< look for CPUs
  /// The clock simulated devices run on. Default: the steady clock.
  std::shared_ptr<Clock> clock;

  /// @return defaults overridden by JOULE_SIM, JOULE_DAEMON_SOCKET, JOULE_NVML_LIBRARY,
  /// JOULE_ROCM_SMI_LIBRARY, JOULE_AMD_SMI_LIBRARY, JOULE_ROCM_VALIDATION_S, JOULE_POWERCAP_ROOT and
  /// JOULE_LEVEL_ZERO_LIBRARY and JOULE_JETSON_SYSFS_ROOT.
  /// kInvalidArgument for a malformed number.
  static Result<DiscoveryOptions> from_environment();
};

/// What one backend found, or why it found nothing.
struct BackendReport {
  std::string backend;  ///< "nvml", "levelzero", "amdsmi", "rocm", "jetson", "sim", "daemon", "rapl"
  std::string kind;     ///< "gpu" or "cpu"
  size_t devices = 0;   ///< how many devices it opened
  bool ok = false;      ///< false if the backend failed (detail says why)
  std::string detail;   ///< e.g. "libnvidia-ml.so.1 not found: …"; for ok backends, the library used
};

/// Every device found. Owns the devices.
struct DeviceSet {
  std::vector<std::unique_ptr<Gpu>> gpus;  ///< in framework order: gpus[i]->info().index == i
  std::vector<std::unique_ptr<Cpu>> cpus;  ///< sorted by package index
  std::vector<BackendReport> reports;      ///< one per backend tried, in the order tried
  std::shared_ptr<Clock> clock;            ///< the clock the devices run on

  /// @return "no GPU found: nvml: …; rocm: …" built from the reports, for messages.
  std::string why_no_gpus() const;
  /// @return "no CPU energy counters found: rapl: …".
  std::string why_no_cpus() const;

  /// @return the GPUs with these framework indices (all if nullopt). kNotFound names the unknown index and
  /// the visible ones (or why there are none); kInvalidArgument for an index listed twice.
  Result<std::vector<Gpu*>> select_gpus(const std::optional<std::vector<int>>& indices) const;
  /// @return the CPUs with these package indices (all if nullopt), with the same errors.
  Result<std::vector<Cpu*>> select_cpus(const std::optional<std::vector<int>>& indices) const;
};

/// Finds every GPU and CPU. Backends that find nothing are reported, not errors: a machine without AMD
/// GPUs is normal. @return kInvalidArgument for configuration the user got wrong (a malformed sim spec or
/// CUDA_VISIBLE_DEVICES).
Result<DeviceSet> discover(const DiscoveryOptions& options);

}  // namespace joule::device
