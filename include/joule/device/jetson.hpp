// SPDX-License-Identifier: Apache-2.0
// joule/device/jetson.hpp — the integrated GPU of an NVIDIA Jetson board (Nano, TX2, Xavier, Orin), read from
// sysfs: power rails from the INA3221 monitors, clocks from devfreq, load and temperature. No vendor library.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

struct JetsonOptions {
  /// The folder that holds the board's `sys/` and `proc/` trees: "/" on the board; a copy elsewhere (a
  /// container's bind-mount, the tests' fake trees). Environment: JOULE_JETSON_SYSFS_ROOT.
  std::string sysfs_root = "/";
  /// How often a background thread samples the GPU rail's power to integrate energy, in seconds (each
  /// energy_mj() call samples too). The integral is only as good as the sampling: power that changes
  /// faster than this is averaged by the trapezoids. 0: no thread; energy is integrated only between
  /// energy_mj() calls (tests).
  double sampling_period_s = 0.1;
  /// The clock the integration runs on. Default: the steady clock.
  std::shared_ptr<Clock> clock;
};

/// Which rail a power reading comes from. The module rail feeds the whole module, GPU rail included: the
/// two overlap, so they must never be added.
enum class JetsonRailScope {
  kGpu,     ///< the GPU's rail (on some boards shared with the SoC or CPU: JetsonRail::shares_with says so)
  kModule,  ///< the whole module's input (VDD_IN, POM_5V_IN): includes every other rail
  kOther,   ///< another rail (CPU, SoC, memory, …)
};

/// One power rail of the board, as its monitor names it.
struct JetsonRail {
  std::string name;  ///< the monitor's label, e.g. "VDD_GPU_SOC", "POM_5V_IN"
  JetsonRailScope scope = JetsonRailScope::kOther;
  std::string shares_with;  ///< for the GPU rail: what else it feeds, e.g. "SoC" ("" if GPU only)
  uint32_t power_mw = 0;    ///< the power it carries now, mW
};

/// What a Jetson board offers, for reports.
struct JetsonBoard {
  std::string model;                  ///< /proc/device-tree/model, e.g. "NVIDIA Jetson AGX Orin"
  std::string layout;                 ///< "hwmon" (INA3221 hwmon, L4T 34+) or "iio" (older L4T)
  std::vector<JetsonRail> rails;      ///< every rail with a label, in the monitors' order
  std::optional<size_t> gpu_rail;     ///< index into rails
  std::optional<size_t> module_rail;  ///< index into rails
  std::string devfreq;                ///< the GPU's devfreq folder, "" if none
};

/// The Jetson GPU and the board it sits on.
struct JetsonGpus {
  std::vector<std::unique_ptr<Gpu>> gpus;  ///< one: the integrated GPU
  JetsonBoard board;
  /// For the discovery report: the rails used, their scope, and how energy is made, e.g. "NVIDIA Jetson Orin
  /// NX (hwmon rails): GPU power from rail VDD_CPU_GPU_CV (shared with the CPU and CV engines); module power
  /// on VDD_IN (the whole module, GPU included: never add the two); energy integrated in software from the
  /// GPU rail's power, sampled every 100 ms".
  std::string detail;
};

/// @return whether `sysfs_root` looks like a Jetson board: its proc/device-tree/compatible names
/// "nvidia,tegra…", or sys/class/devfreq has a Tegra GPU node (gv11b, ga10b, gp10b, gm20b, 17000000.gpu,
/// 57000000.gpu). Never fails.
bool looks_like_jetson(const std::string& sysfs_root);

/// Reads every labelled rail of the board under `sysfs_root` with its power now.
/// @return kNotFound if the board has no INA3221 monitor (hwmon or iio); kParse (naming the file and what
/// it holds) for a rail whose label or reading is not what the driver writes; kNotFound naming the rail
/// whose reading has gone.
Result<JetsonBoard> read_jetson_board(const std::string& sysfs_root);

/// Opens the Jetson's integrated GPU. GpuInfo::backend is "jetson", the name the board's model.
///
/// Power: the GPU rail's (voltage × current); on boards where the rail also feeds the SoC or CPU
/// (VDD_GPU_SOC on AGX Orin, VDD_CPU_GPU_CV on Orin NX/Nano) it includes them, as the detail says. Energy:
/// integrated in software (trapezoids) from that power every `sampling_period_s`: it is an integral of
/// samples, not a hardware counter. SM clocks: devfreq's available_frequencies; lock_sm_clocks writes
/// devfreq's min_freq/max_freq (root only) and reset_sm_clocks writes back the range in force before the
/// first lock (the full range if none was seen). Telemetry: SM clock (devfreq cur_freq), GPU utilisation
/// (the GPU's `load`), temperature (thermal zone GPU-therm / gpu-thermal). Power limits: kNotSupported (a
/// Jetson's power budget is its nvpmodel power mode).
/// `visible` (CUDA_VISIBLE_DEVICES) applies as for NVML: empty hides the GPU, "0" keeps it.
/// @return kNotFound if the tree is not a Jetson (looks_like_jetson) or has no GPU rail (naming the rails
/// found); the errors of read_jetson_board and resolve_visible_devices; kInvalidArgument for a negative or
/// non-finite sampling period.
Result<JetsonGpus> open_jetson_gpus(const JetsonOptions& options, const VisibleDevices& visible = {});

}  // namespace joule::device
