// SPDX-License-Identifier: Apache-2.0
// AMD GPUs through AMD SMI (dlopened, see amdsmi_library.hpp). AMD SMI speaks W (board power), µW (caps),
// µJ (energy), Hz (clock lists) and °C; joule's Gpu interface speaks mW, mJ and MHz, so every conversion
// happens here.
#include "joule/device/amdsmi.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "joule/core/log.hpp"

#include "device/amd_counter_check.hpp"
#include "device/amdsmi/amdsmi_library.hpp"

namespace joule::device {

namespace amdsmi_detail {
namespace {

// The sensor index of the board's power cap (the only one on every supported board).
constexpr uint32_t kAmdSmiPowerSensor = 0;

uint32_t amdsmi_saturate_u32(double value) {
  return amd_counter::saturate_u32(value);
}

uint32_t amdsmi_uw_to_mw(uint64_t power_uw) {
  return amdsmi_saturate_u32(static_cast<double>(power_uw) / 1e3);
}

uint32_t amdsmi_hz_to_mhz(uint64_t hz) {
  return amdsmi_saturate_u32(static_cast<double>(hz) / 1e6);
}

class AmdSmiGpu final : public Gpu {
 public:
  AmdSmiGpu(GpuInfo info, smi::ProcessorHandle handle, std::shared_ptr<const AmdSmiLibrary> library)
      : Gpu(std::move(info)), handle_(handle), library_(std::move(library)) {}

  /// The counter in µJ (ticks × resolution). Used by do_energy_mj and, before the device is shared, by the
  /// counter check.
  Result<double> read_energy_uj() const {
    uint64_t ticks = 0;
    float resolution_uj = 0;
    uint64_t timestamp_ns = 0;
    JOULE_TRY(library_->check(fn().amdsmi_get_energy_count(handle_, &ticks, &resolution_uj, &timestamp_ns),
                              fmt::format("cannot read the energy counter of {}", label())));
    return static_cast<double>(ticks) * static_cast<double>(resolution_uj);
  }

  Result<uint32_t> read_power_mw() const {
    const std::string action = fmt::format("cannot read the power of {}", label());
    const AmdSmiPower power = JOULE_TRY(library_->power_info(handle_, action));
    // MI300 and newer report instantaneous power, older boards only the average; the other member is not
    // reported (or 0 on some releases). Prefer instantaneous, as the Gpu interface promises.
    std::optional<uint64_t> watts;
    for (const std::optional<uint64_t>& candidate :
         {power.current_socket_w, power.average_socket_w, power.socket_w}) {
      if (!candidate) {
        continue;
      }
      if (*candidate > 0) {
        watts = candidate;
        break;
      }
      watts = watts.value_or(0);  // a real 0 W, unless a later member has a reading
    }
    if (!watts) {
      return fail(ErrorCode::kNotSupported, "{}: AMD SMI reports no socket power for it", action);
    }
    return amdsmi_saturate_u32(static_cast<double>(*watts) * 1e3);
  }

  void set_has_energy_counter(bool has_counter) { mutable_info().has_energy_counter = has_counter; }

 protected:
  Result<uint64_t> do_energy_mj() override {
    auto energy_uj = JOULE_TRY(read_energy_uj());
    return static_cast<uint64_t>(std::floor(energy_uj / 1e3));
  }

  Result<uint32_t> do_power_mw() override { return read_power_mw(); }

  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    const AmdSmiPowerCaps cap =
        JOULE_TRY(read_power_cap(fmt::format("cannot read the power cap range of {}", label())));
    return PowerLimitConstraints{amdsmi_uw_to_mw(cap.min_uw), amdsmi_uw_to_mw(cap.max_uw),
                                 amdsmi_uw_to_mw(cap.default_uw)};
  }

  Result<uint32_t> do_power_limit_mw() override {
    const AmdSmiPowerCaps cap =
        JOULE_TRY(read_power_cap(fmt::format("cannot read the power cap of {}", label())));
    return amdsmi_uw_to_mw(cap.cap_uw);
  }

  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    const uint64_t cap_uw = uint64_t{power_limit_mw} * 1000;
    return library_->check(
        fn().amdsmi_set_power_cap(handle_, kAmdSmiPowerSensor, cap_uw),
        fmt::format("cannot set the power cap of {} to {}", label(), format_watts(power_limit_mw)));
  }

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    const smi::Frequencies frequencies = JOULE_TRY(
        read_clocks(smi::ClkType::kSys, fmt::format("cannot read the supported SM clocks of {}", label())));
    const size_t count = std::min<size_t>(frequencies.num_supported, smi::kMaxNumFrequencies);
    std::vector<uint32_t> clocks_mhz;
    for (size_t i = 0; i < count; ++i) {
      clocks_mhz.push_back(amdsmi_hz_to_mhz(frequencies.frequency[i]));
    }
    // AMD SMI lists DPM levels low to high; the interface promises highest first, without repeats.
    std::sort(clocks_mhz.begin(), clocks_mhz.end(), std::greater<>());
    clocks_mhz.erase(std::unique(clocks_mhz.begin(), clocks_mhz.end()), clocks_mhz.end());
    return clocks_mhz;
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    // Catch an impossible range here with a clear message; AMD SMI would answer only INVAL.
    if (auto clocks = do_supported_sm_clocks_mhz(); clocks && !clocks->empty()) {
      if (min_mhz < clocks->back() || max_mhz > clocks->front()) {
        return fail(ErrorCode::kOutOfRange, "SM clock range {}-{} MHz is outside {}'s supported {}-{} MHz",
                    min_mhz, max_mhz, label(), clocks->back(), clocks->front());
      }
    }
    return library_->check(
        fn().amdsmi_set_gpu_clk_range(handle_, min_mhz, max_mhz, smi::ClkType::kSys),
        fmt::format("cannot lock the SM clock of {} to {}-{} MHz", label(), min_mhz, max_mhz));
  }

  Result<void> do_reset_sm_clocks() override {
    // A clock range puts the board in manual mode; "auto" hands clock choice back to the driver.
    return library_->check(fn().amdsmi_set_gpu_perf_level(handle_, smi::PerfLevel::kAuto),
                           fmt::format("cannot reset the SM clock of {} (performance level auto)", label()));
  }

  Result<double> do_temperature_c() override {
    // MI300-class boards have no edge sensor; their hotspot (junction) temperature is what they report.
    int64_t temperature_c = 0;
    smi::Status status = fn().amdsmi_get_temp_metric(handle_, smi::TemperatureType::kEdge,
                                                     smi::TemperatureMetric::kCurrent, &temperature_c);
    if (status == smi::Status::kNotSupported) {
      status = fn().amdsmi_get_temp_metric(handle_, smi::TemperatureType::kHotspot,
                                           smi::TemperatureMetric::kCurrent, &temperature_c);
    }
    JOULE_TRY(telemetry_check(TelemetryField::kTemperature, status,
                              fmt::format("cannot read the temperature of {}", label())));
    return static_cast<double>(temperature_c);
  }

  Result<uint32_t> do_sm_clock_mhz() override { return current_clock_mhz(TelemetryField::kSmClock); }

  Result<uint32_t> do_memory_clock_mhz() override { return current_clock_mhz(TelemetryField::kMemoryClock); }

  Result<uint32_t> do_gpu_utilization_pct() override {
    const smi::EngineUsage usage = JOULE_TRY(read_activity(TelemetryField::kGpuUtilization));
    return activity_pct(TelemetryField::kGpuUtilization, usage.gfx_activity);
  }

  Result<uint32_t> do_memory_utilization_pct() override {
    const smi::EngineUsage usage = JOULE_TRY(read_activity(TelemetryField::kMemoryUtilization));
    return activity_pct(TelemetryField::kMemoryUtilization, usage.umc_activity);
  }

  // Clock event (throttle) reasons live only in amdsmi_gpu_metrics_t, whose layout changes with every GPU
  // metrics revision, and memory power is not reported at all: both keep the kNotSupported defaults.

 private:
  const AmdSmiFunctions& fn() const { return library_->fn(); }

  Result<AmdSmiPowerCaps> read_power_cap(const std::string& action) const {
    return library_->power_cap_info(handle_, kAmdSmiPowerSensor, action);
  }

  Result<smi::Frequencies> read_clocks(smi::ClkType type, const std::string& action) const {
    smi::Frequencies frequencies{};
    JOULE_TRY(library_->check(fn().amdsmi_get_clk_freq(handle_, type, &frequencies), action));
    return frequencies;
  }

  /// NOT_SUPPORTED from AMD SMI becomes the interface's telemetry kNotSupported (naming the reading and the
  /// backend, then AMD SMI's status); anything else goes through the library's one conversion.
  Result<void> telemetry_check(TelemetryField field, smi::Status status, const std::string& action) const {
    if (status == smi::Status::kNotSupported || status == smi::Status::kNotYetImplemented) {
      const Error error = library_->error(status, action);
      return tl::unexpected(telemetry_not_supported(field, error.message().substr(action.size() + 2)));
    }
    return library_->check(status, action);
  }

  Result<uint32_t> current_clock_mhz(TelemetryField field) const {
    const bool sm = field == TelemetryField::kSmClock;
    smi::Frequencies frequencies{};
    const std::string action = fmt::format("cannot read the {} clock of {}", sm ? "SM" : "memory", label());
    JOULE_TRY(telemetry_check(
        field, fn().amdsmi_get_clk_freq(handle_, sm ? smi::ClkType::kSys : smi::ClkType::kMem, &frequencies),
        action));
    const size_t count = std::min<size_t>(frequencies.num_supported, smi::kMaxNumFrequencies);
    if (frequencies.current >= count) {
      return tl::unexpected(telemetry_not_supported(
          field, fmt::format("AMD SMI's current clock level {} is not among its {} levels",
                             frequencies.current, count)));
    }
    return amdsmi_hz_to_mhz(frequencies.frequency[frequencies.current]);
  }

  Result<smi::EngineUsage> read_activity(TelemetryField field) const {
    smi::EngineUsage usage{};
    JOULE_TRY(telemetry_check(field, fn().amdsmi_get_gpu_activity(handle_, &usage),
                              fmt::format("cannot read the activity of {}", label())));
    return usage;
  }

  Result<uint32_t> activity_pct(TelemetryField field, uint32_t value) const {
    if (value > 100) {  // UINT32_MAX (or any impossible share): the board does not report this engine
      return tl::unexpected(telemetry_not_supported(field, "AMD SMI reports it as not available"));
    }
    return value;
  }

  smi::ProcessorHandle handle_;
  std::shared_ptr<const AmdSmiLibrary> library_;
};

// Every GPU processor handle, socket by socket, in AMD SMI's order (the physical order).
Result<std::vector<smi::ProcessorHandle>> amdsmi_gpu_handles(const AmdSmiLibrary& lib) {
  const auto& fn = lib.fn();
  uint32_t socket_count = 0;
  JOULE_TRY(
      lib.check(fn.amdsmi_get_socket_handles(&socket_count, nullptr), "cannot count the AMD SMI sockets"));
  std::vector<smi::SocketHandle> sockets(socket_count);
  if (socket_count > 0) {
    JOULE_TRY(lib.check(fn.amdsmi_get_socket_handles(&socket_count, sockets.data()),
                        "cannot list the AMD SMI sockets"));
    sockets.resize(std::min<size_t>(socket_count, sockets.size()));
  }
  std::vector<smi::ProcessorHandle> gpus;
  for (size_t s = 0; s < sockets.size(); ++s) {
    uint32_t count = 0;
    JOULE_TRY(lib.check(fn.amdsmi_get_processor_handles(sockets[s], &count, nullptr),
                        fmt::format("cannot count the processors of AMD SMI socket {}", s)));
    std::vector<smi::ProcessorHandle> processors(count);
    if (count > 0) {
      JOULE_TRY(lib.check(fn.amdsmi_get_processor_handles(sockets[s], &count, processors.data()),
                          fmt::format("cannot list the processors of AMD SMI socket {}", s)));
      processors.resize(std::min<size_t>(count, processors.size()));
    }
    for (smi::ProcessorHandle processor : processors) {
      smi::ProcessorType type = smi::ProcessorType::kUnknown;
      // amdsmi_init(AMDSMI_INIT_AMD_GPUS) lists only GPUs, but an APU socket may also hold its CPU.
      if (fn.amdsmi_get_processor_type(processor, &type) == smi::Status::kSuccess &&
          type == smi::ProcessorType::kAmdGpu) {
        gpus.push_back(processor);
      }
    }
  }
  return gpus;
}

std::string amdsmi_read_uuid(const AmdSmiFunctions& fn, smi::ProcessorHandle handle) {
  std::array<char, smi::kMaxStringLength> uuid{};
  unsigned int length = static_cast<unsigned int>(uuid.size());
  if (fn.amdsmi_get_gpu_device_uuid(handle, &length, uuid.data()) != smi::Status::kSuccess) {
    return "";  // selectable by index only
  }
  uuid.back() = '\0';
  return format_uuid(uuid.data());
}

}  // namespace
}  // namespace amdsmi_detail

Result<AmdSmiGpus> open_amdsmi(const AmdSmiOptions& options, const VisibleDevices& visible) {
  using namespace amdsmi_detail;
  if (!(options.counter_validation_s >= 0) || !std::isfinite(options.counter_validation_s)) {
    return fail(ErrorCode::kInvalidArgument,
                "the AMD SMI energy-counter check interval must be a non-negative number of seconds, not {}",
                options.counter_validation_s);
  }
  auto library = JOULE_TRY(AmdSmiLibrary::open(options.library));
  const auto& fn = library->fn();
  const auto handles = JOULE_TRY(amdsmi_gpu_handles(*library));

  std::vector<std::string> uuids;
  uuids.reserve(handles.size());
  for (auto* handle : handles) {
    uuids.push_back(amdsmi_read_uuid(fn, handle));
  }
  auto order = JOULE_TRY(resolve_visible_devices(visible, uuids));

  std::vector<std::unique_ptr<Gpu>> gpus;
  std::vector<AmdSmiGpu*> amdsmi_gpus;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto physical = static_cast<size_t>(order[i]);
    GpuInfo info;
    info.backend = "amdsmi";
    info.index = static_cast<int>(i);
    info.physical_index = order[i];
    info.uuid = uuids[physical];
    // The 26.x structure is the largest of the ABIs and market_name comes first in every release.
    auto asic = std::make_unique<amd_smi::AsicInfo>();
    if (fn.amdsmi_get_gpu_asic_info(handles[physical], asic.get()) == amd_smi::Status::kSuccess &&
        asic->market_name[0] != '\0') {
      asic->market_name[sizeof asic->market_name - 1] = '\0';
      info.name = asic->market_name;
    } else {
      info.name = fmt::format("AMD GPU {}", physical);  // the name is cosmetic: never fail over it
    }
    auto gpu = std::make_unique<AmdSmiGpu>(std::move(info), handles[physical], library);
    amdsmi_gpus.push_back(gpu.get());
    gpus.push_back(std::move(gpu));
  }
  amd_counter::validate_energy_counters(amdsmi_gpus, options.counter_validation_s);
  return AmdSmiGpus{std::move(gpus), library->abi().description()};
}

Result<std::vector<std::unique_ptr<Gpu>>> open_amdsmi_gpus(const AmdSmiOptions& options,
                                                           const VisibleDevices& visible) {
  auto opened = JOULE_TRY(open_amdsmi(options, visible));
  return std::move(opened.gpus);
}

}  // namespace joule::device
