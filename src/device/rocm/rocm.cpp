// SPDX-License-Identifier: Apache-2.0
// AMD GPUs through ROCm SMI (dlopened, see rocm_library.hpp). ROCm SMI speaks µW, µJ and Hz; joule's Gpu
// interface speaks mW, mJ and MHz, so every conversion happens here.
#include "joule/device/rocm.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "joule/core/log.hpp"

#include "device/amd_counter_check.hpp"
#include "device/rocm/rocm_library.hpp"

namespace joule::device {

namespace {

namespace smi = rocm_smi;
using rocm_detail::RocmLibrary;

// ROCm SMI sensor index of the board's power sensor (the only one on every supported board).
constexpr uint32_t kPowerSensor = 0;

using amd_counter::saturate_u32;

uint32_t uw_to_mw(uint64_t power_uw) {
  return saturate_u32(static_cast<double>(power_uw) / 1e3);
}

class RocmGpu final : public Gpu {
 public:
  RocmGpu(GpuInfo info, std::shared_ptr<const RocmLibrary> library)
      : Gpu(std::move(info)), library_(std::move(library)) {}

  /// The counter in µJ (ticks × resolution). Used by do_energy_mj and, before the device is shared, by the
  /// counter check.
  Result<double> read_energy_uj() const {
    uint64_t counter = 0;
    float resolution_uj = 0;
    uint64_t timestamp_ns = 0;
    JOULE_TRY(library_->check(
        library_->fn().rsmi_dev_energy_count_get(device(), &counter, &resolution_uj, &timestamp_ns),
        fmt::format("cannot read the energy counter of {}", label())));
    return static_cast<double>(counter) * static_cast<double>(resolution_uj);
  }

  Result<uint32_t> read_power_mw() const {
    uint64_t power_uw = 0;
    JOULE_TRY(library_->check(library_->fn().rsmi_dev_power_ave_get(device(), kPowerSensor, &power_uw),
                              fmt::format("cannot read the power of {}", label())));
    return uw_to_mw(power_uw);
  }

  void set_has_energy_counter(bool has_counter) { mutable_info().has_energy_counter = has_counter; }

 protected:
  Result<uint64_t> do_energy_mj() override {
    auto energy_uj = JOULE_TRY(read_energy_uj());
    return static_cast<uint64_t>(uj_to_mj_floor(energy_uj));
  }

  Result<uint32_t> do_power_mw() override { return read_power_mw(); }

  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    uint64_t max_uw = 0;
    uint64_t min_uw = 0;
    const auto& fn = library_->fn();
    JOULE_TRY(library_->check(fn.rsmi_dev_power_cap_range_get(device(), kPowerSensor, &max_uw, &min_uw),
                              fmt::format("cannot read the power cap range of {}", label())));
    // Boards and releases without a default cap ship with the cap at its maximum.
    uint64_t default_uw = max_uw;
    if (fn.rsmi_dev_power_cap_default_get != nullptr) {
      JOULE_TRY(library_->check(fn.rsmi_dev_power_cap_default_get(device(), &default_uw),
                                fmt::format("cannot read the default power cap of {}", label())));
    }
    return PowerLimitConstraints{uw_to_mw(min_uw), uw_to_mw(max_uw), uw_to_mw(default_uw)};
  }

  Result<uint32_t> do_power_limit_mw() override {
    uint64_t cap_uw = 0;
    JOULE_TRY(library_->check(library_->fn().rsmi_dev_power_cap_get(device(), kPowerSensor, &cap_uw),
                              fmt::format("cannot read the power cap of {}", label())));
    return uw_to_mw(cap_uw);
  }

  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    const uint64_t cap_uw = uint64_t{power_limit_mw} * 1000;
    return library_->check(
        library_->fn().rsmi_dev_power_cap_set(device(), kPowerSensor, cap_uw),
        fmt::format("cannot set the power cap of {} to {}", label(), format_watts(power_limit_mw)));
  }

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    smi::Frequencies frequencies{};
    JOULE_TRY(
        library_->check(library_->fn().rsmi_dev_gpu_clk_freq_get(device(), smi::ClkType::kSys, &frequencies),
                        fmt::format("cannot read the supported SM clocks of {}", label())));
    const size_t count = std::min<size_t>(frequencies.num_supported, smi::kMaxNumFrequencies);
    std::vector<uint32_t> clocks_mhz;
    for (size_t i = 0; i < count; ++i) {
      clocks_mhz.push_back(saturate_u32(static_cast<double>(frequencies.frequency[i]) / 1e6));
    }
    // ROCm SMI lists DPM levels low to high; the interface promises highest first, without repeats.
    std::sort(clocks_mhz.begin(), clocks_mhz.end(), std::greater<>());
    clocks_mhz.erase(std::unique(clocks_mhz.begin(), clocks_mhz.end()), clocks_mhz.end());
    return clocks_mhz;
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    // Catch an impossible range here with a clear message; ROCm SMI would answer only INVALID_ARGS.
    if (auto clocks = do_supported_sm_clocks_mhz(); clocks && !clocks->empty()) {
      if (min_mhz < clocks->back() || max_mhz > clocks->front()) {
        return fail(ErrorCode::kOutOfRange, "SM clock range {}-{} MHz is outside {}'s supported {}-{} MHz",
                    min_mhz, max_mhz, label(), clocks->back(), clocks->front());
      }
    }
    return library_->check(
        library_->fn().rsmi_dev_clk_range_set(device(), min_mhz, max_mhz, smi::ClkType::kSys),
        fmt::format("cannot lock the SM clock of {} to {}-{} MHz", label(), min_mhz, max_mhz));
  }

  Result<void> do_reset_sm_clocks() override {
    // A clock range puts the board in manual mode; "auto" hands clock choice back to the driver.
    return library_->check(library_->fn().rsmi_dev_perf_level_set_v1(device(), smi::PerfLevel::kAuto),
                           fmt::format("cannot reset the SM clock of {} (performance level auto)", label()));
  }

  // ---- Telemetry ----

  Result<double> do_temperature_c() override {
    constexpr TelemetryField kField = TelemetryField::kTemperature;
    const auto& fn = library_->fn();
    if (fn.rsmi_dev_temp_metric_get == nullptr) {
      return tl::make_unexpected(missing_symbol(kField, "rsmi_dev_temp_metric_get"));
    }
    int64_t temperature_mdeg_c = 0;
    smi::Status status = fn.rsmi_dev_temp_metric_get(device(), smi::kTempTypeEdge, smi::TempMetric::kCurrent,
                                                     &temperature_mdeg_c);
    if (status == smi::Status::kNotSupported) {
      // Boards without an edge sensor (MI300) report the junction (hotspot), as AMD SMI's backend reads it.
      status = fn.rsmi_dev_temp_metric_get(device(), smi::kTempTypeJunction, smi::TempMetric::kCurrent,
                                           &temperature_mdeg_c);
    }
    if (status != smi::Status::kSuccess) {
      return tl::make_unexpected(telemetry_error(kField, status, "rsmi_dev_temp_metric_get",
                                                 fmt::format("cannot read the temperature of {}", label())));
    }
    return static_cast<double>(temperature_mdeg_c) / 1e3;
  }

  Result<uint32_t> do_sm_clock_mhz() override {
    return read_current_clock_mhz(TelemetryField::kSmClock, smi::ClkType::kSys, "SM clock");
  }

  Result<uint32_t> do_memory_clock_mhz() override {
    return read_current_clock_mhz(TelemetryField::kMemoryClock, smi::ClkType::kMem, "memory clock");
  }

  Result<uint32_t> do_gpu_utilization_pct() override {
    return read_busy_percent(TelemetryField::kGpuUtilization, library_->fn().rsmi_dev_busy_percent_get,
                             "rsmi_dev_busy_percent_get", "GPU utilisation");
  }

  Result<uint32_t> do_memory_utilization_pct() override {
    return read_busy_percent(TelemetryField::kMemoryUtilization,
                             library_->fn().rsmi_dev_memory_busy_percent_get,
                             "rsmi_dev_memory_busy_percent_get", "memory utilisation");
  }

  Result<uint64_t> do_clock_event_reasons() override {
    return tl::make_unexpected(telemetry_not_supported(TelemetryField::kClockEventReasons,
                                                       "ROCm SMI has no call that reports them"));
  }

  Result<uint32_t> do_memory_power_mw() override {
    return tl::make_unexpected(telemetry_not_supported(TelemetryField::kMemoryPower,
                                                       "ROCm SMI reports only the whole board's power"));
  }

 private:
  static double uj_to_mj_floor(double energy_uj) { return std::floor(energy_uj / 1e3); }

  // A telemetry read that failed: what ROCm SMI calls not supported becomes telemetry_not_supported (naming
  // the call and its answer); anything else is the ordinary error.
  Error telemetry_error(TelemetryField field, smi::Status status, std::string_view symbol,
                        std::string_view action) const {
    Error converted = library_->error(status, action);
    if (converted.code() == ErrorCode::kNotSupported) {
      return telemetry_not_supported(field,
                                     fmt::format("{} returned {}", symbol, library_->status_text(status)));
    }
    return converted;
  }

  // Telemetry symbols are optional: a library without one still loads and lacks only that reading.
  Error missing_symbol(TelemetryField field, std::string_view symbol) const {
    return telemetry_not_supported(
        field, fmt::format("'{}' has no function {}; a newer ROCm may provide it", library_->path(), symbol));
  }

  // The current level of a clock's frequency table, Hz to MHz.
  Result<uint32_t> read_current_clock_mhz(TelemetryField field, smi::ClkType type, std::string_view clock) {
    smi::Frequencies frequencies{};
    if (const smi::Status status = library_->fn().rsmi_dev_gpu_clk_freq_get(device(), type, &frequencies);
        status != smi::Status::kSuccess) {
      return tl::make_unexpected(telemetry_error(field, status, "rsmi_dev_gpu_clk_freq_get",
                                                 fmt::format("cannot read the {} of {}", clock, label())));
    }
    const size_t count = std::min<size_t>(frequencies.num_supported, smi::kMaxNumFrequencies);
    if (count == 0) {
      return tl::make_unexpected(telemetry_not_supported(field, "rsmi_dev_gpu_clk_freq_get lists no levels"));
    }
    if (frequencies.current >= count) {
      return fail(ErrorCode::kDevice,
                  "ROCm SMI reports level {} as {}'s current {}, but lists only {} levels",
                  frequencies.current, label(), clock, count);
    }
    return saturate_u32(static_cast<double>(frequencies.frequency[frequencies.current]) / 1e6);
  }

  Result<uint32_t> read_busy_percent(TelemetryField field, smi::DevBusyPercentGetFn function,
                                     std::string_view symbol, std::string_view reading) {
    if (function == nullptr) {
      return tl::make_unexpected(missing_symbol(field, symbol));
    }
    uint32_t busy_percent = 0;
    if (const smi::Status status = function(device(), &busy_percent); status != smi::Status::kSuccess) {
      return tl::make_unexpected(
          telemetry_error(field, status, symbol, fmt::format("cannot read the {} of {}", reading, label())));
    }
    return busy_percent;
  }

  uint32_t device() const { return static_cast<uint32_t>(info().physical_index); }

  std::shared_ptr<const RocmLibrary> library_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Gpu>>> open_rocm_gpus(const RocmOptions& options,
                                                         const VisibleDevices& visible) {
  if (!(options.counter_validation_s >= 0) || !std::isfinite(options.counter_validation_s)) {
    return fail(ErrorCode::kInvalidArgument,
                "the ROCm energy-counter check interval must be a non-negative "
                "number of seconds, not {}",
                options.counter_validation_s);
  }
  auto library = JOULE_TRY(RocmLibrary::open(options.library));
  const RocmLibrary& lib = *library;
  const auto& fn = lib.fn();

  uint32_t count = 0;
  JOULE_TRY(lib.check(fn.rsmi_num_monitor_devices(&count), "cannot count the AMD GPUs"));
  // Consumer boards often have no unique id: those get "" and can be selected only by index.
  std::vector<std::string> uuids;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t unique_id = 0;
    uuids.push_back(fn.rsmi_dev_unique_id_get(i, &unique_id) == smi::Status::kSuccess
                        ? rocm_detail::format_unique_id(unique_id)
                        : std::string());
  }
  auto order = JOULE_TRY(resolve_visible_devices(visible, uuids));

  std::vector<std::unique_ptr<Gpu>> gpus;
  std::vector<RocmGpu*> rocm_gpus;
  for (size_t i = 0; i < order.size(); ++i) {
    const int physical = (order)[i];
    GpuInfo info;
    info.backend = "rocm";
    info.index = static_cast<int>(i);
    info.physical_index = physical;
    info.uuid = uuids[static_cast<size_t>(physical)];
    std::array<char, 256> name{};
    if (fn.rsmi_dev_name_get(static_cast<uint32_t>(physical), name.data(), name.size()) ==
            smi::Status::kSuccess &&
        name[0] != '\0') {
      name.back() = '\0';
      info.name = name.data();
    } else {
      info.name = fmt::format("AMD GPU {}", physical);  // the name is cosmetic: never fail over it
    }
    auto gpu = std::make_unique<RocmGpu>(std::move(info), library);
    rocm_gpus.push_back(gpu.get());
    gpus.push_back(std::move(gpu));
  }
  amd_counter::validate_energy_counters(rocm_gpus, options.counter_validation_s);
  return gpus;
}

}  // namespace joule::device
