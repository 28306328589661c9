// SPDX-License-Identifier: Apache-2.0
// Intel GPUs through Level Zero Sysman (dlopened, see levelzero_library.hpp). Sysman speaks µJ with µs
// timestamps (energy), mW (power limits), MHz as doubles (frequencies) and °C as doubles; joule's Gpu
// interface speaks mW, mJ and MHz, so every conversion happens here. Sysman has no instantaneous power nor
// utilisation: both come from the change of a counter between two readings (CounterSample).
#include "joule/device/levelzero.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "joule/core/log.hpp"

#include "device/levelzero/levelzero_library.hpp"

namespace joule::device {

namespace levelzero_detail {
namespace {

// A previous reading older than this is too stale to average over: a fresh pair is taken instead.
constexpr uint64_t kLevelZeroMaxSampleAgeUs = 1'000'000;

uint32_t levelzero_saturate_u32(double value) {
  if (!(value > 0)) {
    return 0;
  }
  if (value >= static_cast<double>(std::numeric_limits<uint32_t>::max())) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(std::lround(value));
}

/// One reading of a Sysman counter: a value (µJ of energy, µs of busy time) and its timestamp in µs.
struct CounterSample {
  uint64_t value = 0;
  uint64_t timestamp_us = 0;
};

/// The power domain a GPU is measured and capped by, with what its properties say.
struct LevelZeroPowerDomain {
  lz::PowerHandle handle = nullptr;
  lz::PowerDomain domain = lz::PowerDomain::kUnknown;
  bool can_control = false;
  int32_t min_mw = -1;
  int32_t max_mw = -1;
  int32_t default_mw = -1;
};

class LevelZeroGpu final : public Gpu {
 public:
  LevelZeroGpu(GpuInfo info, lz::DeviceHandle device, std::shared_ptr<const LevelZeroLibrary> library,
               uint64_t window_us)
      : Gpu(std::move(info)), device_(device), library_(std::move(library)), window_us_(window_us) {}

  /// Finds the device's power domain, frequency domains, temperature sensor and engine group. What is
  /// absent leaves the matching calls kNotSupported; only a failing enumeration is an error.
  Result<void> discover_resources() {
    JOULE_TRY(find_power_domain());
    JOULE_TRY(find_frequency_domains());
    JOULE_TRY(find_temperature_sensor());
    JOULE_TRY(find_engine_group());
    mutable_info().has_energy_counter = power_.handle != nullptr;
    return {};
  }

 protected:
  Result<uint64_t> do_energy_mj() override {
    last_energy_ = JOULE_TRY(read_energy());  // also the start of the next power reading
    return total_energy_uj_ / 1000;
  }

  Result<uint32_t> do_power_mw() override {
    JOULE_TRY(require_power_domain(fmt::format("cannot read the power of {}", label())));
    const auto rate = JOULE_TRY(counter_rate(last_energy_, [this] { return read_energy(); }));
    return levelzero_saturate_u32(rate * 1e3);  // µJ per µs = W
  }

  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    JOULE_TRY(require_power_domain(fmt::format("cannot read the power limit range of {}", label())));
    if (power_.max_mw <= 0 && power_.default_mw <= 0) {
      return fail(
          ErrorCode::kNotSupported,
          "cannot read the power limit range of {}: Level Zero reports neither a maximum nor a default "
          "power limit for it",
          label());
    }
    const auto max_mw = static_cast<uint32_t>(power_.max_mw > 0 ? power_.max_mw : power_.default_mw);
    const auto default_mw = static_cast<uint32_t>(power_.default_mw > 0 ? power_.default_mw : max_mw);
    // A domain without a known minimum accepts any limit down to 0; the driver clamps it.
    const auto min_mw = static_cast<uint32_t>(std::max(power_.min_mw, 0));
    return PowerLimitConstraints{std::min(min_mw, max_mw), max_mw, std::min(default_mw, max_mw)};
  }

  Result<uint32_t> do_power_limit_mw() override {
    const lz::PowerLimitExtDesc sustained =
        JOULE_TRY(read_sustained_limit(fmt::format("cannot read the power limit of {}", label())));
    return static_cast<uint32_t>(std::max(sustained.limit, 0));
  }

  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    const std::string action =
        fmt::format("cannot set the power limit of {} to {}", label(), format_watts(power_limit_mw));
    if (!power_.can_control && power_.handle != nullptr) {
      return fail(ErrorCode::kNotSupported, "{}: Level Zero says its power limits cannot be changed", action);
    }
    lz::PowerLimitExtDesc sustained = JOULE_TRY(read_sustained_limit(action));
    if (sustained.limitValueLocked != 0) {
      return fail(ErrorCode::kNotSupported, "{}: its sustained power limit is locked by the firmware",
                  action);
    }
    sustained.limit =
        static_cast<int32_t>(std::min<uint32_t>(power_limit_mw, std::numeric_limits<int32_t>::max()));
    sustained.enabled = 1;
    uint32_t count = 1;
    return library_->check(fn().zesPowerSetLimitsExt(power_.handle, &count, &sustained), action);
  }

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    const std::string action = fmt::format("cannot read the supported SM clocks of {}", label());
    JOULE_TRY(require_gpu_frequency(action));
    uint32_t count = 0;
    JOULE_TRY(library_->check(fn().zesFrequencyGetAvailableClocks(gpu_freq_, &count, nullptr), action));
    std::vector<double> clocks(count);
    if (count > 0) {
      JOULE_TRY(
          library_->check(fn().zesFrequencyGetAvailableClocks(gpu_freq_, &count, clocks.data()), action));
      clocks.resize(std::min<size_t>(count, clocks.size()));
    }
    std::vector<uint32_t> clocks_mhz;
    for (const double clock : clocks) {
      if (clock > 0) {
        clocks_mhz.push_back(levelzero_saturate_u32(clock));
      }
    }
    // Sysman lists clocks low to high; the interface promises highest first, without repeats.
    std::sort(clocks_mhz.begin(), clocks_mhz.end(), std::greater<>());
    clocks_mhz.erase(std::unique(clocks_mhz.begin(), clocks_mhz.end()), clocks_mhz.end());
    return clocks_mhz;
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    const std::string action =
        fmt::format("cannot lock the SM clock of {} to {}-{} MHz", label(), min_mhz, max_mhz);
    JOULE_TRY(require_gpu_frequency(action));
    if (!gpu_freq_can_control_) {
      return fail(ErrorCode::kNotSupported, "{}: Level Zero says its GPU frequency cannot be changed",
                  action);
    }
    // Catch an impossible range here with a clear message; Sysman would answer only INVALID_ARGUMENT.
    if (min_mhz < gpu_freq_min_mhz_ || max_mhz > gpu_freq_max_mhz_) {
      return fail(ErrorCode::kOutOfRange, "SM clock range {}-{} MHz is outside {}'s supported {}-{} MHz",
                  min_mhz, max_mhz, label(), gpu_freq_min_mhz_, gpu_freq_max_mhz_);
    }
    const lz::FreqRange range{static_cast<double>(min_mhz), static_cast<double>(max_mhz)};
    return library_->check(fn().zesFrequencySetRange(gpu_freq_, &range), action);
  }

  Result<void> do_reset_sm_clocks() override {
    const std::string action = fmt::format("cannot reset the SM clock of {}", label());
    JOULE_TRY(require_gpu_frequency(action));
    // No "unlocked" state exists in Sysman: the hardware's whole range is what the driver starts with.
    const lz::FreqRange range{static_cast<double>(gpu_freq_min_mhz_), static_cast<double>(gpu_freq_max_mhz_)};
    return library_->check(
        fn().zesFrequencySetRange(gpu_freq_, &range),
        fmt::format("{} (to its hardware range {}-{} MHz)", action, gpu_freq_min_mhz_, gpu_freq_max_mhz_));
  }

  Result<double> do_temperature_c() override {
    if (temperature_ == nullptr) {
      return tl::unexpected(telemetry_not_supported(TelemetryField::kTemperature,
                                                    "Level Zero lists no GPU or global temperature sensor"));
    }
    double temperature_c = 0;
    JOULE_TRY(telemetry_check(TelemetryField::kTemperature,
                              fn().zesTemperatureGetState(temperature_, &temperature_c),
                              fmt::format("cannot read the temperature of {}", label())));
    return temperature_c;
  }

  Result<uint32_t> do_sm_clock_mhz() override {
    const lz::FreqState state = JOULE_TRY(read_frequency_state(TelemetryField::kSmClock, gpu_freq_));
    return actual_mhz(TelemetryField::kSmClock, state);
  }

  Result<uint32_t> do_memory_clock_mhz() override {
    const lz::FreqState state = JOULE_TRY(read_frequency_state(TelemetryField::kMemoryClock, memory_freq_));
    return actual_mhz(TelemetryField::kMemoryClock, state);
  }

  Result<uint32_t> do_gpu_utilization_pct() override {
    if (engine_ == nullptr) {
      return tl::unexpected(telemetry_not_supported(TelemetryField::kGpuUtilization,
                                                    "Level Zero lists no engine group for it"));
    }
    const auto share = JOULE_TRY(counter_rate(last_activity_, [this] { return read_activity(); }));
    return std::min<uint32_t>(levelzero_saturate_u32(share * 100), 100);
  }

  Result<uint32_t> do_memory_utilization_pct() override {
    return tl::unexpected(telemetry_not_supported(
        TelemetryField::kMemoryUtilization,
        "Level Zero reports memory bandwidth counters, not the share of time memory was busy"));
  }

  Result<uint64_t> do_clock_event_reasons() override {
    const lz::FreqState state =
        JOULE_TRY(read_frequency_state(TelemetryField::kClockEventReasons, gpu_freq_));
    uint64_t reasons = 0;
    const uint32_t flags = state.throttleReasons;
    if ((flags & (lz::throttle::kAvePwrCap | lz::throttle::kBurstPwrCap)) != 0) {
      reasons |= clock_event::kSwPowerCap;
    }
    if ((flags & (lz::throttle::kCurrentLimit | lz::throttle::kHwRange)) != 0) {
      reasons |= clock_event::kHwSlowdown;
    }
    if ((flags & lz::throttle::kThermalLimit) != 0) {
      reasons |= clock_event::kHwThermalSlowdown;
    }
    if ((flags & lz::throttle::kPsuAlert) != 0) {
      reasons |= clock_event::kHwPowerBrakeSlowdown;
    }
    if ((flags & lz::throttle::kSwRange) != 0) {
      reasons |= clock_event::kApplicationClocks;
    }
    return reasons;
  }

  // Memory power: Sysman has no memory power domain; the kNotSupported default stays.

 private:
  const LevelZeroFunctions& fn() const { return library_->fn(); }

  /// @param action what fails without a power domain, e.g. "cannot read the power of GPU 0 (…)".
  Result<void> require_power_domain(const std::string& action) const {
    if (power_.handle == nullptr) {
      return fail(ErrorCode::kNotSupported, "{}: Level Zero lists no card or package power domain for it",
                  action);
    }
    return {};
  }

  Result<void> require_gpu_frequency(const std::string& action) const {
    if (gpu_freq_ == nullptr) {
      return fail(ErrorCode::kNotSupported, "{}: Level Zero lists no GPU frequency domain for it", action);
    }
    return {};
  }

  /// Reads the energy counter, advances the cumulative total (a step back, i.e. a counter reset, adds
  /// nothing: the 64-bit µJ counter itself never wraps in practice) and remembers the reading for power.
  Result<CounterSample> read_energy() {
    const std::string action = fmt::format("cannot read the energy counter of {}", label());
    JOULE_TRY(require_power_domain(action));
    lz::PowerEnergyCounter counter{};
    JOULE_TRY(library_->check(fn().zesPowerGetEnergyCounter(power_.handle, &counter), action));
    if (!last_energy_raw_uj_) {
      total_energy_uj_ = counter.energy;
    } else if (counter.energy >= *last_energy_raw_uj_) {
      total_energy_uj_ += counter.energy - *last_energy_raw_uj_;
    } else {
      log().warn(
          "Level Zero: the energy counter of {} went back from {} to {} uJ (a reset): counted as no energy",
          label(), *last_energy_raw_uj_, counter.energy);
    }
    last_energy_raw_uj_ = counter.energy;
    return CounterSample{counter.energy, counter.timestamp};
  }

  Result<CounterSample> read_activity() {
    lz::EngineStats stats{};
    JOULE_TRY(telemetry_check(TelemetryField::kGpuUtilization, fn().zesEngineGetActivity(engine_, &stats),
                              fmt::format("cannot read the engine activity of {}", label())));
    return CounterSample{stats.activeTime, stats.timestamp};
  }

  /// The counter's change per µs between the previous reading (if 0.05–1 s old: the window to 1 s) and a
  /// new one; without a usable previous reading, between two readings `window_us_` apart.
  Result<double> counter_rate(std::optional<CounterSample>& last,
                              const std::function<Result<CounterSample>()>& read) {
    CounterSample now = JOULE_TRY(read());
    const auto usable = [this](const std::optional<CounterSample>& before, const CounterSample& after) {
      return before && after.value >= before->value &&
             after.timestamp_us >= before->timestamp_us + window_us_ &&
             after.timestamp_us - before->timestamp_us <= kLevelZeroMaxSampleAgeUs;
    };
    if (!usable(last, now)) {
      last = now;
      std::this_thread::sleep_for(std::chrono::microseconds(window_us_));
      now = JOULE_TRY(read());
      if (now.timestamp_us <= last->timestamp_us || now.value < last->value) {
        const CounterSample before = *last;
        last = now;
        return fail(ErrorCode::kDevice,
                    "cannot derive a rate for {}: Level Zero's counter went from {} at {} us to {} at {} us",
                    label(), before.value, before.timestamp_us, now.value, now.timestamp_us);
      }
    }
    const double rate = static_cast<double>(now.value - last->value) /
                        static_cast<double>(now.timestamp_us - last->timestamp_us);
    last = now;
    return rate;
  }

  /// The sustained limit's descriptor. @param action the start of every error message ("cannot …").
  Result<lz::PowerLimitExtDesc> read_sustained_limit(const std::string& action) const {
    JOULE_TRY(require_power_domain(action));
    uint32_t count = 0;
    JOULE_TRY(library_->check(fn().zesPowerGetLimitsExt(power_.handle, &count, nullptr), action));
    std::vector<lz::PowerLimitExtDesc> limits(count);
    for (auto& limit : limits) {
      limit.stype = lz::StructureType::kPowerLimitExtDesc;
    }
    if (count > 0) {
      JOULE_TRY(library_->check(fn().zesPowerGetLimitsExt(power_.handle, &count, limits.data()), action));
      limits.resize(std::min<size_t>(count, limits.size()));
    }
    for (const auto& limit : limits) {
      if (limit.level != lz::PowerLevel::kSustained) {
        continue;
      }
      if (limit.limitUnit == lz::LimitUnit::kCurrent) {
        return fail(ErrorCode::kNotSupported, "{}: its sustained limit is in mA of current, not in mW",
                    action);
      }
      return limit;
    }
    return fail(ErrorCode::kNotSupported, "{}: Level Zero reports no sustained power limit for it", action);
  }

  Result<void> telemetry_check(TelemetryField field, lz::ZeResult result, const std::string& action) const {
    if (result == lz::ZeResult::kErrorUnsupportedFeature) {
      return tl::unexpected(telemetry_not_supported(field, lz::result_name(result)));
    }
    return library_->check(result, action);
  }

  Result<lz::FreqState> read_frequency_state(TelemetryField field, lz::FreqHandle handle) const {
    if (handle == nullptr) {
      return tl::unexpected(
          telemetry_not_supported(field, "Level Zero lists no such frequency domain for it"));
    }
    lz::FreqState state{};
    state.stype = lz::StructureType::kFreqState;
    JOULE_TRY(telemetry_check(field, fn().zesFrequencyGetState(handle, &state),
                              fmt::format("cannot read the frequency state of {}", label())));
    return state;
  }

  Result<uint32_t> actual_mhz(TelemetryField field, const lz::FreqState& state) const {
    if (!(state.actual >= 0)) {  // negative: unknown
      return tl::unexpected(telemetry_not_supported(field, "Level Zero reports the frequency as unknown"));
    }
    return levelzero_saturate_u32(state.actual);
  }

  Result<void> find_power_domain() {
    uint32_t count = 0;
    const std::string action = fmt::format("cannot list the power domains of {}", label());
    JOULE_TRY(library_->check(fn().zesDeviceEnumPowerDomains(device_, &count, nullptr), action));
    std::vector<lz::PowerHandle> handles(count);
    if (count > 0) {
      JOULE_TRY(library_->check(fn().zesDeviceEnumPowerDomains(device_, &count, handles.data()), action));
      handles.resize(std::min<size_t>(count, handles.size()));
    }
    // The card-level domain (the whole board) is preferred, the package (the GPU alone) next; without the
    // 1.4 extension properties, the first domain that is not a sub-device's is taken as the package.
    auto rank = [](const LevelZeroPowerDomain& d) {
      return d.domain == lz::PowerDomain::kCard ? 0 : d.domain == lz::PowerDomain::kPackage ? 1 : 2;
    };
    for (lz::PowerHandle handle : handles) {
      lz::PowerLimitExtDesc default_limit{};
      default_limit.stype = lz::StructureType::kPowerLimitExtDesc;
      lz::PowerExtProperties ext{};
      ext.stype = lz::StructureType::kPowerExtProperties;
      ext.defaultLimit = &default_limit;
      lz::PowerProperties properties{};
      properties.stype = lz::StructureType::kPowerProperties;
      properties.pNext = &ext;
      JOULE_TRY(library_->check(fn().zesPowerGetProperties(handle, &properties),
                                fmt::format("cannot read the power domain properties of {}", label())));
      LevelZeroPowerDomain candidate{handle,
                                     ext.domain,
                                     properties.canControl != 0,
                                     properties.minLimit,
                                     properties.maxLimit,
                                     properties.defaultLimit};
      if (candidate.domain == lz::PowerDomain::kUnknown && properties.onSubdevice == 0) {
        candidate.domain = lz::PowerDomain::kPackage;
      }
      if (candidate.domain != lz::PowerDomain::kCard && candidate.domain != lz::PowerDomain::kPackage) {
        continue;  // a stack (tile) or an unknown sub-device domain measures only part of the GPU
      }
      if (default_limit.limitUnit == lz::LimitUnit::kPower && default_limit.limit > 0) {
        candidate.default_mw = default_limit.limit;
      }
      if (power_.handle == nullptr || rank(candidate) < rank(power_)) {
        power_ = candidate;
      }
    }
    return {};
  }

  Result<void> find_frequency_domains() {
    uint32_t count = 0;
    const std::string action = fmt::format("cannot list the frequency domains of {}", label());
    JOULE_TRY(library_->check(fn().zesDeviceEnumFrequencyDomains(device_, &count, nullptr), action));
    std::vector<lz::FreqHandle> handles(count);
    if (count > 0) {
      JOULE_TRY(library_->check(fn().zesDeviceEnumFrequencyDomains(device_, &count, handles.data()), action));
      handles.resize(std::min<size_t>(count, handles.size()));
    }
    for (lz::FreqHandle handle : handles) {
      lz::FreqProperties properties{};
      properties.stype = lz::StructureType::kFreqProperties;
      JOULE_TRY(library_->check(fn().zesFrequencyGetProperties(handle, &properties),
                                fmt::format("cannot read the frequency domain properties of {}", label())));
      // On a multi-stack GPU each stack has its own domains; joule controls the first of each type.
      if (properties.type == lz::FreqDomain::kGpu && gpu_freq_ == nullptr) {
        gpu_freq_ = handle;
        gpu_freq_can_control_ = properties.canControl != 0;
        gpu_freq_min_mhz_ = levelzero_saturate_u32(properties.min);
        gpu_freq_max_mhz_ = levelzero_saturate_u32(properties.max);
      } else if (properties.type == lz::FreqDomain::kMemory && memory_freq_ == nullptr) {
        memory_freq_ = handle;
      }
    }
    return {};
  }

  Result<void> find_temperature_sensor() {
    uint32_t count = 0;
    const std::string action = fmt::format("cannot list the temperature sensors of {}", label());
    JOULE_TRY(library_->check(fn().zesDeviceEnumTemperatureSensors(device_, &count, nullptr), action));
    std::vector<lz::TempHandle> handles(count);
    if (count > 0) {
      JOULE_TRY(
          library_->check(fn().zesDeviceEnumTemperatureSensors(device_, &count, handles.data()), action));
      handles.resize(std::min<size_t>(count, handles.size()));
    }
    lz::TempHandle global = nullptr;
    for (lz::TempHandle handle : handles) {
      lz::TempProperties properties{};
      properties.stype = lz::StructureType::kTempProperties;
      JOULE_TRY(library_->check(fn().zesTemperatureGetProperties(handle, &properties),
                                fmt::format("cannot read the temperature sensor properties of {}", label())));
      if (properties.type == lz::TempSensors::kGpu && temperature_ == nullptr) {
        temperature_ = handle;
      } else if (properties.type == lz::TempSensors::kGlobal && global == nullptr) {
        global = handle;
      }
    }
    if (temperature_ == nullptr) {
      temperature_ = global;
    }
    return {};
  }

  Result<void> find_engine_group() {
    uint32_t count = 0;
    const std::string action = fmt::format("cannot list the engine groups of {}", label());
    JOULE_TRY(library_->check(fn().zesDeviceEnumEngineGroups(device_, &count, nullptr), action));
    std::vector<lz::EngineHandle> handles(count);
    if (count > 0) {
      JOULE_TRY(library_->check(fn().zesDeviceEnumEngineGroups(device_, &count, handles.data()), action));
      handles.resize(std::min<size_t>(count, handles.size()));
    }
    // Every engine combined is what "the GPU is busy" means; else all compute-capable engines, else the
    // compute engines alone. A sub-device's group covers only one stack.
    int best_rank = 3;
    for (lz::EngineHandle handle : handles) {
      lz::EngineProperties properties{};
      properties.stype = lz::StructureType::kEngineProperties;
      JOULE_TRY(library_->check(fn().zesEngineGetProperties(handle, &properties),
                                fmt::format("cannot read the engine group properties of {}", label())));
      if (properties.onSubdevice != 0) {
        continue;
      }
      const int rank = properties.type == lz::EngineGroup::kAll                  ? 0
                       : properties.type == lz::EngineGroup::kRenderComputeAll3d ? 1
                       : properties.type == lz::EngineGroup::kComputeAll         ? 2
                                                                                 : 3;
      if (rank < best_rank) {
        best_rank = rank;
        engine_ = handle;
      }
    }
    return {};
  }

  lz::DeviceHandle device_;
  std::shared_ptr<const LevelZeroLibrary> library_;
  uint64_t window_us_;
  LevelZeroPowerDomain power_;
  lz::FreqHandle gpu_freq_ = nullptr;
  bool gpu_freq_can_control_ = false;
  uint32_t gpu_freq_min_mhz_ = 0;
  uint32_t gpu_freq_max_mhz_ = 0;
  lz::FreqHandle memory_freq_ = nullptr;
  lz::TempHandle temperature_ = nullptr;
  lz::EngineHandle engine_ = nullptr;
  // Counter state (guarded by the Gpu's lock, like every do_* call).
  std::optional<uint64_t> last_energy_raw_uj_;
  uint64_t total_energy_uj_ = 0;
  std::optional<CounterSample> last_energy_;
  std::optional<CounterSample> last_activity_;
};

/// The name joule shows: the model name Sysman reads from the board, else the core device name, else the
/// PCI address.
std::string levelzero_device_name(const LevelZeroFunctions& fn, lz::DeviceHandle device,
                                  const lz::DeviceProperties& properties, size_t physical) {
  std::string model(properties.modelName, strnlen(properties.modelName, sizeof properties.modelName));
  if (!model.empty() && model != "unknown") {
    return model;
  }
  std::string core(properties.core.name, strnlen(properties.core.name, sizeof properties.core.name));
  if (!core.empty()) {
    return core;
  }
  lz::PciProperties pci{};
  pci.stype = lz::StructureType::kPciProperties;
  if (fn.zesDevicePciGetProperties(device, &pci) == lz::ZeResult::kSuccess) {
    return fmt::format("Intel GPU {:04x}:{:02x}:{:02x}.{:x}", pci.address.domain, pci.address.bus,
                       pci.address.device, pci.address.function);
  }
  return fmt::format("Intel GPU {}", physical);  // the name is cosmetic: never fail over it
}

}  // namespace
}  // namespace levelzero_detail

Result<std::vector<std::unique_ptr<Gpu>>> open_levelzero_gpus(const LevelZeroOptions& options,
                                                              const VisibleDevices& visible) {
  using namespace levelzero_detail;
  if (!(options.sample_window_s > 0 && options.sample_window_s <= 1)) {
    return fail(ErrorCode::kInvalidArgument,
                "the Level Zero sample window must be more than 0 and at most 1 second, not {}",
                options.sample_window_s);
  }
  auto library = JOULE_TRY(LevelZeroLibrary::open(options.library));
  const auto& fn = library->fn();
  const auto all_devices = JOULE_TRY(library->devices());

  std::vector<lz::DeviceHandle> handles;
  std::vector<lz::DeviceProperties> properties;
  std::vector<std::string> uuids;
  for (lz::DeviceHandle device : all_devices) {
    lz::DeviceProperties props{};
    props.stype = lz::StructureType::kDeviceProperties;
    props.core.stype = lz::kZeStructureTypeDeviceProperties;
    JOULE_TRY(
        library->check(fn.zesDeviceGetProperties(device, &props),
                       fmt::format("cannot read the properties of Level Zero device {}", handles.size())));
    constexpr uint32_t kZeDeviceTypeGpu = 1;  // ZE_DEVICE_TYPE_GPU
    if (props.core.type != kZeDeviceTypeGpu) {
      continue;
    }
    handles.push_back(device);
    uuids.push_back(format_uuid(props.core.uuid));
    properties.push_back(props);
  }
  auto order = JOULE_TRY(resolve_visible_devices(visible, uuids));

  const auto window_us = static_cast<uint64_t>(std::llround(options.sample_window_s * 1e6));
  std::vector<std::unique_ptr<Gpu>> gpus;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto physical = static_cast<size_t>(order[i]);
    GpuInfo info;
    info.backend = "levelzero";
    info.index = static_cast<int>(i);
    info.physical_index = order[i];
    info.uuid = uuids[physical];
    info.name = levelzero_device_name(fn, handles[physical], properties[physical], physical);
    auto gpu = std::make_unique<LevelZeroGpu>(std::move(info), handles[physical], library, window_us);
    JOULE_TRY(gpu->discover_resources());
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace joule::device
