// SPDX-License-Identifier: Apache-2.0
#include "joule/device/discovery.hpp"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "joule/device/amdsmi.hpp"
#include "joule/device/daemon_client.hpp"
#include "joule/device/daemon_cpu.hpp"
#include "joule/device/daemon_gpu.hpp"
#include "joule/device/jetson.hpp"
#include "joule/device/levelzero.hpp"
#include "joule/device/nvml.hpp"
#include "joule/device/rapl.hpp"
#include "joule/device/rocm.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::device {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

template <class Device>
std::vector<Device*> all_of(const std::vector<std::unique_ptr<Device>>& devices) {
  std::vector<Device*> out;
  out.reserve(devices.size());
  for (const auto& device : devices) {
    out.push_back(device.get());
  }
  return out;
}

std::string join_reports(const std::vector<BackendReport>& reports, std::string_view kind) {
  std::vector<std::string> parts;
  for (const auto& report : reports) {
    if (report.kind == kind) {
      parts.push_back(fmt::format("{}: {}", report.backend, report.detail));
    }
  }
  return parts.empty() ? std::string("no backend was tried") : fmt::format("{}", fmt::join(parts, "; "));
}

// Adds a GPU backend's devices after those already found. Each keeps its own backend's framework index
// (what that vendor's framework calls it: cuda:0 and xpu:0 are both 0), while --gpu and select_gpus() count
// positions in the set; the two agree on a machine with one vendor's GPUs.
void add_gpus(DeviceSet& set, const std::string& backend, const std::string& detail,
              Result<std::vector<std::unique_ptr<Gpu>>> opened) {
  BackendReport report{backend, "gpu", 0, opened.has_value(), {}};
  if (!opened) {
    report.detail = opened.error().message();
  } else {
    report.devices = opened->size();
    report.detail = opened->empty() ? fmt::format("{} loaded, but it reports no GPU", detail) : detail;
    for (auto& gpu : *opened) {
      set.gpus.push_back(std::move(gpu));
    }
  }
  set.reports.push_back(std::move(report));
}

// NVIDIA Jetson boards: the integrated GPU from sysfs, where the tree looks like a Jetson (or a root was
// given), and only where no other backend found a GPU (JetPack 6's NVML lists the integrated GPU itself).
// `visible`: CUDA_VISIBLE_DEVICES, as for NVML.
void add_jetson(DeviceSet& set, const DiscoveryOptions& options, const VisibleDevices& visible) {
  const std::string root = options.jetson_sysfs_root.value_or("/");
  if (!options.jetson_sysfs_root && !looks_like_jetson(root)) {
    return;
  }
  if (!set.gpus.empty()) {
    set.reports.push_back({"jetson", "gpu", 0, true, "skipped: another backend found the GPUs"});
    return;
  }
  JetsonOptions jetson;
  jetson.sysfs_root = root;
  jetson.clock = set.clock;
  auto opened = open_jetson_gpus(jetson, visible);
  const std::string detail = opened ? opened->detail : root;
  add_gpus(set, "jetson", detail,
           std::move(opened).map([](JetsonGpus&& found) { return std::move(found.gpus); }));
}

}  // namespace

Result<DiscoveryOptions> DiscoveryOptions::from_environment() {
  DiscoveryOptions options;
  if (const char* sim = env("JOULE_SIM")) {
    options.sim_spec = sim;
  }
  if (const char* socket = env("JOULE_DAEMON_SOCKET")) {
    options.daemon_socket = socket;
  }
  if (const char* library = env("JOULE_NVML_LIBRARY")) {
    options.nvml_library = library;
  }
  if (const char* library = env("JOULE_ROCM_SMI_LIBRARY")) {
    options.rocm_library = library;
  }
  if (const char* library = env("JOULE_AMD_SMI_LIBRARY")) {
    options.amd_smi_library = library;
  }
  if (const char* library = env("JOULE_LEVEL_ZERO_LIBRARY")) {
    options.level_zero_library = library;
  }
  if (const char* root = env("JOULE_POWERCAP_ROOT")) {
    options.powercap_root = root;
  }
  if (const char* root = env("JOULE_JETSON_SYSFS_ROOT")) {
    options.jetson_sysfs_root = root;
  }
  if (const char* seconds = env("JOULE_ROCM_VALIDATION_S")) {
    const std::string_view text(seconds);
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
      return fail(ErrorCode::kInvalidArgument,
                  "JOULE_ROCM_VALIDATION_S='{}' is not a non-negative number of seconds", seconds);
    }
    options.rocm_counter_validation_s = value;
  }
  return options;
}

std::string DeviceSet::why_no_gpus() const {
  return "no GPU found: " + join_reports(reports, "gpu");
}

std::string DeviceSet::why_no_cpus() const {
  return "no CPU energy counters found: " + join_reports(reports, "cpu");
}

Result<std::vector<Gpu*>> DeviceSet::select_gpus(const std::optional<std::vector<int>>& indices) const {
  if (!indices) {
    return all_of(gpus);
  }
  std::vector<Gpu*> selected;
  for (const int index : *indices) {
    if (index < 0 || static_cast<size_t>(index) >= gpus.size()) {
      if (gpus.empty()) {
        return fail(ErrorCode::kNotFound, "unknown GPU index {}: {}", index, why_no_gpus());
      }
      return fail(ErrorCode::kNotFound, "unknown GPU index {}: {} GPU{} visible (indices 0 to {})", index,
                  gpus.size(), gpus.size() == 1 ? " is" : "s are", gpus.size() - 1);
    }
    Gpu* gpu = gpus[static_cast<size_t>(index)].get();
    if (std::find(selected.begin(), selected.end(), gpu) != selected.end()) {
      return fail(ErrorCode::kInvalidArgument, "GPU index {} is listed twice", index);
    }
    selected.push_back(gpu);
  }
  return selected;
}

Result<std::vector<Cpu*>> DeviceSet::select_cpus(const std::optional<std::vector<int>>& indices) const {
  if (!indices) {
    return all_of(cpus);
  }
  std::vector<Cpu*> selected;
  for (const int index : *indices) {
    Cpu* found = nullptr;
    for (const auto& cpu : cpus) {
      if (cpu->info().index == index) {
        found = cpu.get();
      }
    }
    if (found == nullptr) {
      if (cpus.empty()) {
        return fail(ErrorCode::kNotFound, "unknown CPU index {}: {}", index, why_no_cpus());
      }
      std::vector<int> known;
      for (const auto& cpu : cpus) {
        known.push_back(cpu->info().index);
      }
      return fail(ErrorCode::kNotFound, "unknown CPU index {} (CPU packages: {})", index,
                  fmt::join(known, ", "));
    }
    if (std::find(selected.begin(), selected.end(), found) != selected.end()) {
      return fail(ErrorCode::kInvalidArgument, "CPU index {} is listed twice", index);
    }
    selected.push_back(found);
  }
  return selected;
}

Result<DeviceSet> discover(const DiscoveryOptions& options) {
  DeviceSet set;
  set.clock = options.clock ? options.clock
                            : std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &SteadyClock::instance());
  // The daemon's GPUs and CPUs share one connection, made when first needed.
  std::optional<Result<std::shared_ptr<DaemonClient>>> daemon;
  const auto daemon_connection = [&daemon, &options]() -> Result<std::shared_ptr<DaemonClient>> {
    if (!daemon) {
      daemon = DaemonClient::connect(*options.daemon_socket);
    }
    return *daemon;
  };
  if (options.gpus) {
    if (options.sim_spec) {
      auto spec = JOULE_TRY(sim::parse_spec(*options.sim_spec));
      auto visible = JOULE_TRY(visible_devices_from_environment("sim"));
      auto opened = sim::open_sim_gpus(spec, set.clock, visible);
      if (!opened) {
        return tl::make_unexpected(opened.error().with_context("simulated GPUs"));
      }
      std::vector<std::unique_ptr<Gpu>> gpus;
      for (auto& gpu : *opened) {
        gpus.push_back(std::move(gpu));
      }
      add_gpus(set, "sim", fmt::format("simulated {}", *options.sim_spec), std::move(gpus));
    } else if (options.daemon_socket) {
      add_gpus(set, "daemon", fmt::format("joule daemon at {}", *options.daemon_socket),
               daemon_connection().and_then([](auto client) { return open_daemon_gpus(std::move(client)); }));
    } else {
      auto nvml_visible = JOULE_TRY(visible_devices_from_environment("nvml"));
      add_gpus(set, "nvml", options.nvml_library, open_nvml_gpus({options.nvml_library}, nvml_visible));
      // Intel GPUs through Level Zero Sysman. ZE_AFFINITY_MASK is not applied here: docs/devices.md.
      LevelZeroOptions level_zero;
      level_zero.library = options.level_zero_library;
      add_gpus(set, "levelzero", options.level_zero_library,
               open_levelzero_gpus(level_zero, VisibleDevices{}));
      // AMD GPUs: AMD SMI (ROCm 6.1+) when it loads and finds them, else ROCm SMI; never both, which would
      // list every AMD GPU twice. Both read HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES).
      auto amd_visible = JOULE_TRY(visible_devices_from_environment("rocm"));
      auto amdsmi = open_amdsmi({options.amd_smi_library, options.rocm_counter_validation_s}, amd_visible);
      // The report names the ABI chosen from the library's version, e.g. "AMD SMI 24.6.3 (ROCm 6.x ABI)".
      const std::string amdsmi_detail =
          amdsmi ? fmt::format("{} ({})", options.amd_smi_library, amdsmi->abi) : options.amd_smi_library;
      auto amdsmi_gpus = std::move(amdsmi).map([](AmdSmiGpus&& opened) { return std::move(opened.gpus); });
      const bool amdsmi_found = amdsmi_gpus.has_value() && !amdsmi_gpus->empty();
      add_gpus(set, "amdsmi", amdsmi_detail, std::move(amdsmi_gpus));
      if (amdsmi_found) {
        set.reports.push_back({"rocm", "gpu", 0, true, "skipped: AMD SMI found the AMD GPUs"});
      } else {
        add_gpus(set, "rocm", options.rocm_library,
                 open_rocm_gpus({options.rocm_library, options.rocm_counter_validation_s}, amd_visible));
      }
      add_jetson(set, options, nvml_visible);
    }
  }
  if (options.cpus && options.daemon_socket) {
    // RAPL is root-only since Linux 5.10: the daemon reads it for us. Where it serves no CPU (no RAPL
    // there, or a release before CPU energy), the local counters are still tried below.
    auto opened = daemon_connection().and_then([](const auto& client) { return open_daemon_cpus(client); });
    BackendReport report{"daemon", "cpu", 0, opened.has_value(), {}};
    if (!opened) {
      report.detail = opened.error().message();
    } else {
      report.devices = opened->size();
      report.detail = fmt::format("joule daemon at {}", *options.daemon_socket);
      set.cpus = std::move(*opened);
    }
    set.reports.push_back(std::move(report));
  }
  if (options.cpus && set.cpus.empty()) {
    RaplOptions rapl;
    rapl.powercap_root = options.powercap_root;
    auto opened = open_rapl_cpus(rapl);
    BackendReport report{"rapl", "cpu", 0, opened.has_value(), {}};
    if (!opened) {
      report.detail = opened.error().message();
    } else {
      report.devices = opened->size();
      report.detail = options.powercap_root;
      set.cpus = std::move(*opened);
    }
    set.reports.push_back(std::move(report));
  }
  return set;
}

}  // namespace joule::device
