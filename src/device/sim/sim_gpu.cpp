// SPDX-License-Identifier: Apache-2.0
#include "joule/device/sim_gpu.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace joule::device::sim {

namespace {

// Above this temperature the simulated driver slows the clocks (reported, not modelled).
constexpr double kThermalSlowdownC = 87;

double thermal_resistance_c_per_w(const GpuModel& model) {
  if (model.thermal_resistance_c_per_w > 0) {
    return model.thermal_resistance_c_per_w;
  }
  const double max_w = model.max_power_limit_mw / 1e3;
  return max_w > 0 ? 55.0 / max_w : 0.2;
}

double leakage_w_per_c(const GpuModel& model) {
  if (model.leakage_w_per_c > 0) {
    return model.leakage_w_per_c;
  }
  return 0.0015 * model.max_power_limit_mw / 1e3;
}

double thermal_time_constant_s(const GpuModel& model) {
  return model.thermal_time_constant_s > 0 ? model.thermal_time_constant_s : 45.0;
}

GpuInfo make_info(const GpuModel& model, int index, int physical_index) {
  GpuInfo info;
  info.backend = "sim";
  info.index = index;
  info.physical_index = physical_index < 0 ? index : physical_index;
  info.name = model.name;
  info.uuid = simulated_uuid(model, info.physical_index);
  info.has_energy_counter = model.has_energy_counter;
  return info;
}

}  // namespace

std::string simulated_uuid(const GpuModel& model, int physical_index) {
  // FNV-1a of the model key: stable across runs and platforms, unlike std::hash.
  uint32_t hash = 2166136261u;
  for (const char c : model.key) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  }
  return fmt::format("GPU-{:08x}-5100-4000-8000-{:012x}", hash, physical_index);
}

SimulatedGpu::SimulatedGpu(const GpuModel& model, std::shared_ptr<const Workload> workload,
                           std::shared_ptr<Clock> clock, int index, int physical_index)
    : Gpu(make_info(model, index, physical_index)),
      model_(model),
      clock_(std::move(clock)),
      workload_(std::move(workload)),
      power_limit_mw_(model.default_power_limit_mw) {
  if (!clock_ || !workload_) {
    throw Exception(ErrorCode::kInvalidArgument, "a simulated GPU needs a clock and a workload");
  }
  last_update_ = clock_->now();
  refresh_power_locked();
  temperature_c_ = steady_temperature_locked();
}

double SimulatedGpu::steady_temperature_locked() const {
  return model_.ambient_c + thermal_resistance_c_per_w(model_) * power_w_;
}

double SimulatedGpu::temperature_now_locked() const {
  // Without moving last_update_: readings must not split the energy integral.
  const double steady_c = steady_temperature_locked();
  const double since_s = to_seconds(clock_->now() - last_update_);
  return steady_c + (temperature_c_ - steady_c) * std::exp(-since_s / thermal_time_constant_s(model_));
}

double SimulatedGpu::drawn_power_w_locked() const {
  if (!leakage_) {
    return power_w_;
  }
  double power_w =
      power_w_ - leakage_w_per_c(model_) * (steady_temperature_locked() - temperature_now_locked());
  if (busy_) {
    power_w = std::min(power_w, power_limit_mw_ / 1e3);
  }
  return power_w;
}

void SimulatedGpu::integrate_locked() {
  const Nanos now = clock_->now();
  if (now <= last_update_) {
    return;
  }
  const double tau_s = thermal_time_constant_s(model_);
  const double steady_c = steady_temperature_locked();
  const double dt_s = to_seconds(now - last_update_);
  const double offset_c = temperature_c_ - steady_c;  // T(t) = T_ss + offset·e^(−t/τ)
  if (!leakage_) {
    energy_mj_ += joule::energy_mj(power_w_ * 1e3, now - last_update_);
  } else {
    // P(t) = P + k·offset·e^(−t/τ), integrated exactly; above the power limit (a GPU hotter than its
    // load's steady state) the limit holds until P(t) falls to it at t*.
    const double excess_w = leakage_w_per_c(model_) * offset_c;
    const double limit_w = power_limit_mw_ / 1e3;
    double capped_s = 0;
    if (busy_ && power_w_ + excess_w > limit_w) {
      capped_s =
          limit_w > power_w_ ? std::min(dt_s, tau_s * std::log(excess_w / (limit_w - power_w_))) : dt_s;
    }
    const double joules = limit_w * capped_s + power_w_ * (dt_s - capped_s) +
                          excess_w * tau_s * (std::exp(-capped_s / tau_s) - std::exp(-dt_s / tau_s));
    energy_mj_ += joules * 1e3;
  }
  temperature_c_ = steady_c + offset_c * std::exp(-dt_s / tau_s);
  last_update_ = now;
}

void SimulatedGpu::set_thermal(ThermalOptions options) {
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  leakage_ = options.leakage;
  temperature_c_ = options.temperature_c.value_or(steady_temperature_locked());
}

double SimulatedGpu::steady_temperature_c() {
  std::lock_guard lock(state_mutex_);
  return steady_temperature_locked();
}

void SimulatedGpu::refresh_power_locked() {
  if (!busy_) {
    power_w_ = model_.idle_power_w;
    return;
  }
  power_w_ = point_locked().power_w;
}

OperatingPoint SimulatedGpu::point_locked() const {
  std::optional<double> clock_lock;
  if (locked_max_mhz_) {
    clock_lock = static_cast<double>(*locked_max_mhz_);
  }
  if (locked_memory_mhz_ && !model_.lockable_memory_clocks_mhz.empty()) {
    const double ratio = static_cast<double>(*locked_memory_mhz_) / model_.lockable_memory_clocks_mhz.front();
    return workload_->at_memory_clock(power_limit_mw_ / 1e3, clock_lock, ratio);
  }
  return workload_->at(power_limit_mw_ / 1e3, clock_lock);
}

void SimulatedGpu::record_locked(std::string setting, uint32_t value, uint32_t value_min) {
  settings_.push_back({clock_->now(), std::move(setting), value, value_min});
}

OperatingPoint SimulatedGpu::operating_point() {
  std::lock_guard lock(state_mutex_);
  return point_locked();
}

void SimulatedGpu::set_busy(bool busy) {
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  busy_ = busy;
  refresh_power_locked();
}

void SimulatedGpu::set_workload(std::shared_ptr<const Workload> workload) {
  if (!workload) {
    throw Exception(ErrorCode::kInvalidArgument, "set_workload needs a workload");
  }
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  workload_ = std::move(workload);
  refresh_power_locked();
}

std::shared_ptr<const Workload> SimulatedGpu::workload() const {
  std::lock_guard lock(state_mutex_);
  return workload_;
}

std::vector<SettingRecord> SimulatedGpu::settings_log() const {
  std::lock_guard lock(state_mutex_);
  return settings_;
}

double SimulatedGpu::exact_energy_mj() {
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  return energy_mj_;
}

Result<uint64_t> SimulatedGpu::do_energy_mj() {
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  return static_cast<uint64_t>(energy_mj_);
}

Result<uint32_t> SimulatedGpu::do_power_mw() {
  std::lock_guard lock(state_mutex_);
  return static_cast<uint32_t>(std::lround(drawn_power_w_locked() * 1e3));
}

Result<double> SimulatedGpu::do_temperature_c() {
  std::lock_guard lock(state_mutex_);
  return temperature_now_locked();
}

Result<uint32_t> SimulatedGpu::do_sm_clock_mhz() {
  std::lock_guard lock(state_mutex_);
  if (!busy_) {
    return model_.min_sm_clock_mhz;
  }
  const double mhz = point_locked().sm_clock_mhz;
  if (!(mhz > 0)) {
    return tl::unexpected(
        telemetry_not_supported(TelemetryField::kSmClock, "the workload has no clock model"));
  }
  return static_cast<uint32_t>(std::lround(mhz));
}

Result<uint32_t> SimulatedGpu::do_memory_clock_mhz() {
  if (model_.memory_clock_mhz == 0) {
    return tl::unexpected(
        telemetry_not_supported(TelemetryField::kMemoryClock, "the simulated model has no memory clock"));
  }
  std::lock_guard lock(state_mutex_);
  return locked_memory_mhz_.value_or(model_.memory_clock_mhz);
}

Result<uint32_t> SimulatedGpu::do_gpu_utilization_pct() {
  std::lock_guard lock(state_mutex_);
  return busy_ ? 98u : 0u;
}

Result<uint32_t> SimulatedGpu::do_memory_utilization_pct() {
  std::lock_guard lock(state_mutex_);
  if (!busy_) {
    return 0u;
  }
  // Memory traffic follows throughput: 50% at the fastest setting.
  const double now_s = point_locked().iteration_time_s;
  const double fastest_s = workload_->at(model_.max_power_limit_mw / 1e3, std::nullopt).iteration_time_s;
  if (!(now_s > 0) || !(fastest_s > 0)) {
    return 50u;
  }
  return static_cast<uint32_t>(std::lround(std::clamp(50.0 * fastest_s / now_s, 0.0, 100.0)));
}

Result<uint64_t> SimulatedGpu::do_clock_event_reasons() {
  std::lock_guard lock(state_mutex_);
  uint64_t reasons = 0;
  if (!busy_) {
    reasons |= clock_event::kIdle;
  }
  if (locked_max_mhz_) {
    reasons |= clock_event::kApplicationClocks;
  }
  const double limit_w = power_limit_mw_ / 1e3;
  if (busy_ && power_limit_mw_ < model_.max_power_limit_mw && drawn_power_w_locked() >= 0.97 * limit_w) {
    reasons |= clock_event::kSwPowerCap;
  }
  if (temperature_now_locked() > kThermalSlowdownC) {
    reasons |= clock_event::kSwThermalSlowdown;
  }
  return reasons;
}

Result<uint32_t> SimulatedGpu::do_memory_power_mw() {
  std::lock_guard lock(state_mutex_);
  const double idle_w = model_.idle_power_w;
  const double memory_w = 0.3 * idle_w + 0.12 * std::max(0.0, drawn_power_w_locked() - idle_w);
  return static_cast<uint32_t>(std::lround(memory_w * 1e3));
}

Result<double> SimulatedGpu::do_set_simulated_busy(bool busy) {
  set_busy(busy);
  const OperatingPoint now = operating_point();
  const double fastest_s = workload()->at(model_.max_power_limit_mw / 1e3, std::nullopt).iteration_time_s;
  return fastest_s > 0 ? std::max(1.0, now.iteration_time_s / fastest_s) : 1.0;
}

Result<PowerLimitConstraints> SimulatedGpu::do_power_limit_constraints() {
  return PowerLimitConstraints{model_.min_power_limit_mw, model_.max_power_limit_mw,
                               model_.default_power_limit_mw};
}

Result<uint32_t> SimulatedGpu::do_power_limit_mw() {
  std::lock_guard lock(state_mutex_);
  return power_limit_mw_;
}

Result<void> SimulatedGpu::do_set_power_limit_mw(uint32_t power_limit_mw) {
  // A real driver refuses limits outside its constraints; so does the simulated one.
  if (power_limit_mw < model_.min_power_limit_mw || power_limit_mw > model_.max_power_limit_mw) {
    return fail(ErrorCode::kOutOfRange, "power limit {} is outside {}'s range {} to {}",
                format_watts(power_limit_mw), label(), format_watts(model_.min_power_limit_mw),
                format_watts(model_.max_power_limit_mw));
  }
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  power_limit_mw_ = power_limit_mw;
  refresh_power_locked();
  record_locked("power_limit_mw", power_limit_mw);
  return {};
}

Result<std::vector<uint32_t>> SimulatedGpu::do_supported_sm_clocks_mhz() {
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = model_.max_sm_clock_mhz; mhz > model_.min_sm_clock_mhz;
       mhz -= model_.sm_clock_step_mhz) {
    clocks.push_back(mhz);
    if (mhz < model_.sm_clock_step_mhz) {
      break;
    }
  }
  clocks.push_back(model_.min_sm_clock_mhz);
  return clocks;
}

Result<void> SimulatedGpu::do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  if (min_mhz < model_.min_sm_clock_mhz || max_mhz > model_.max_sm_clock_mhz) {
    return fail(ErrorCode::kOutOfRange, "SM clock range {}-{} MHz is outside {}'s supported {}-{} MHz",
                min_mhz, max_mhz, label(), model_.min_sm_clock_mhz, model_.max_sm_clock_mhz);
  }
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  locked_max_mhz_ = max_mhz;
  refresh_power_locked();
  record_locked("sm_clocks_locked_mhz", max_mhz, min_mhz);
  return {};
}

Result<void> SimulatedGpu::do_reset_sm_clocks() {
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  locked_max_mhz_.reset();
  refresh_power_locked();
  record_locked("sm_clocks_reset", 0);
  return {};
}

Result<std::vector<uint32_t>> SimulatedGpu::do_supported_memory_clocks_mhz() {
  if (model_.lockable_memory_clocks_mhz.empty()) {
    return Gpu::do_supported_memory_clocks_mhz();
  }
  return model_.lockable_memory_clocks_mhz;
}

Result<void> SimulatedGpu::do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  const std::vector<uint32_t>& clocks = model_.lockable_memory_clocks_mhz;
  if (clocks.empty()) {
    return Gpu::do_lock_memory_clocks(min_mhz, max_mhz);
  }
  // As NVML: the range must hold at least one supported clock; the highest of them is the one that runs.
  const auto chosen = std::find_if(clocks.begin(), clocks.end(),
                                   [&](uint32_t mhz) { return mhz >= min_mhz && mhz <= max_mhz; });
  if (chosen == clocks.end()) {
    return fail(ErrorCode::kOutOfRange,
                "memory clock range {}-{} MHz holds none of {}'s memory clocks ({} MHz)", min_mhz, max_mhz,
                label(), fmt::join(clocks, ", "));
  }
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  locked_memory_mhz_ = *chosen;
  refresh_power_locked();
  record_locked("memory_clocks_locked_mhz", max_mhz, min_mhz);
  return {};
}

Result<void> SimulatedGpu::do_reset_memory_clocks() {
  if (model_.lockable_memory_clocks_mhz.empty()) {
    return Gpu::do_reset_memory_clocks();
  }
  std::lock_guard lock(state_mutex_);
  integrate_locked();
  locked_memory_mhz_.reset();
  refresh_power_locked();
  record_locked("memory_clocks_reset", 0);
  return {};
}

Result<std::vector<std::unique_ptr<SimulatedGpu>>> open_sim_gpus(const Spec& spec,
                                                                 const std::shared_ptr<Clock>& clock,
                                                                 const VisibleDevices& visible) {
  if (spec.model == nullptr || spec.workload == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "incomplete sim spec: no GPU model or workload");
  }
  auto workload = JOULE_TRY(make_trace_workload(*spec.model, *spec.workload, spec.batch_size));
  std::vector<std::string> uuids;
  uuids.reserve(static_cast<size_t>(spec.count));
  for (int i = 0; i < spec.count; ++i) {
    uuids.push_back(simulated_uuid(*spec.model, i));
  }
  auto order = JOULE_TRY(resolve_visible_devices(visible, uuids));
  std::vector<std::unique_ptr<SimulatedGpu>> gpus;
  for (size_t i = 0; i < order.size(); ++i) {
    gpus.push_back(
        std::make_unique<SimulatedGpu>(*spec.model, workload, clock, static_cast<int>(i), (order)[i]));
  }
  return gpus;
}

TrainingJob::TrainingJob(std::vector<SimulatedGpu*> gpus, VirtualClock& clock)
    : gpus_(std::move(gpus)), clock_(clock) {
  if (gpus_.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "a training job needs at least one GPU");
  }
  for (auto* gpu : gpus_) {
    if (&gpu->clock() != &clock_) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("{} does not run on the job's clock", gpu->label()));
    }
  }
}

double TrainingJob::iteration_time_s() {
  double slowest = 0;
  for (auto* gpu : gpus_) {
    slowest = std::max(slowest, gpu->operating_point().iteration_time_s);
  }
  return slowest;
}

Nanos TrainingJob::run_iterations(int64_t iterations) {
  if (iterations < 0) {
    throw Exception(ErrorCode::kInvalidArgument, "cannot run a negative number of iterations");
  }
  const Nanos elapsed = from_seconds(iteration_time_s() * static_cast<double>(iterations));
  clock_.advance(elapsed);
  return elapsed;
}

}  // namespace joule::device::sim
