// SPDX-License-Identifier: Apache-2.0
// joule/device/hw_check.hpp — a read-only check of the GPUs joule sees (`joule devices --check`,
// scripts/hw-check): discovery, the energy counter against integrated power, how often readings update,
// limits, clocks and telemetry. It never changes a setting.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device {

struct HwCheckOptions {
  /// How long the GPUs are watched (with whatever load runs on them meanwhile), s (> 0). The energy and
  /// power checks need several power-update periods (~100 ms on NVIDIA GPUs): 10 s by default.
  double duration_s = 10;
  /// How often energy and power are read while watching, s (> 0). 5 ms resolves a 100 ms update period.
  double poll_period_s = 0.005;
  /// The energy counter's increase and integrated power must agree within this share to pass, and within
  /// warn_tolerance_ratio to warn rather than fail (power is a short average on many GPUs, so they differ
  /// by a few percent when the load changes).
  double tolerance_ratio = 0.05;
  double warn_tolerance_ratio = 0.15;
};

/// @return kInvalidArgument naming the first bad option.
Result<void> validate(const HwCheckOptions& options);

enum class CheckStatus { kPass, kWarn, kFail, kSkip };
/// @return "PASS", "WARN", "FAIL" or "SKIP".
std::string_view to_string(CheckStatus status);

/// One check of one GPU.
struct CheckItem {
  std::string name;  ///< e.g. "energy counter"
  CheckStatus status = CheckStatus::kPass;
  std::string detail;  ///< what was seen, with units
};

/// Every check of one GPU, and the figures behind them.
struct GpuCheck {
  GpuInfo info;
  std::vector<CheckItem> items;
  double watched_s = 0;                          ///< how long it was watched
  int energy_reads = 0;                          ///< successful counter reads
  int power_reads = 0;                           ///< successful power reads
  std::optional<double> counter_energy_j;        ///< counter increase over the watch
  std::optional<double> integrated_energy_j;     ///< trapezoid integral of power over the same span
  std::optional<double> power_update_period_s;   ///< median interval between changes of the power reading
  std::optional<double> energy_update_period_s;  ///< median interval between changes of the counter
};

/// Watches `gpus` together for options.duration_s on `clock` (reads only), then reads limits, clocks and
/// telemetry. @throws joule::Exception kInvalidArgument for invalid options.
std::vector<GpuCheck> check_gpus(const std::vector<Gpu*>& gpus, Clock& clock, const HwCheckOptions& options);

/// @return the number of checks with `status` over all GPUs.
int count_status(const std::vector<GpuCheck>& checks, CheckStatus status);

}  // namespace joule::device
