// SPDX-License-Identifier: Apache-2.0
// GPU metrics read at scrape time and window histograms.
#include "joule/metrics/gpu_metrics.hpp"

#include <chrono>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/core/units.hpp"
#include "joule/device/nvml.hpp"
#include "joule/device/visible_devices.hpp"

#include "metrics/buckets.hpp"
#include "metrics/samples.hpp"

namespace joule::metrics {

namespace {

constexpr double kMilli = 1e-3;

std::vector<prometheus::ClientMetric::Label> gpu_labels(const device::GpuInfo& info) {
  return {{"gpu", std::to_string(info.index)}, {"uuid", info.uuid}, {"name", info.name}};
}

}  // namespace

// ---- Telemetry families --------------------------------------------------------------------------------

GpuMetrics::TelemetryFamilies::TelemetryFamilies()
    : temperature(make_family("joule_gpu_temperature_celsius",
                              "GPU temperature in degrees Celsius (DCGM: "
                              "DCGM_FI_DEV_GPU_TEMP)",
                              prometheus::MetricType::Gauge)),
      sm_clock(make_family("joule_gpu_sm_clock_hertz",
                           "Current SM (graphics) clock in hertz (DCGM: DCGM_FI_DEV_SM_CLOCK, MHz)",
                           prometheus::MetricType::Gauge)),
      memory_clock(make_family("joule_gpu_memory_clock_hertz",
                               "Current memory clock in hertz (DCGM: DCGM_FI_DEV_MEM_CLOCK, MHz)",
                               prometheus::MetricType::Gauge)),
      utilization(make_family("joule_gpu_utilization_ratio",
                              "Share of the driver's last sample period in which a kernel ran, 0 to 1 (DCGM: "
                              "DCGM_FI_DEV_GPU_UTIL, %)",
                              prometheus::MetricType::Gauge)),
      memory_utilization(
          make_family("joule_gpu_memory_utilization_ratio",
                      "Share of the driver's last sample period in which device memory was read or "
                      "written, 0 to 1 (DCGM: DCGM_FI_DEV_MEM_COPY_UTIL, %)",
                      prometheus::MetricType::Gauge)),
      clock_event_reasons(
          make_family("joule_gpu_clock_event_reasons",
                      "Why the clocks are held down, as NVML's clocks-event reason bit set (DCGM: "
                      "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS); 0: they are not",
                      prometheus::MetricType::Gauge)),
      clock_event_active(make_family("joule_gpu_clock_event_active",
                                     "1 while this reason holds the clocks down, else 0, by reason",
                                     prometheus::MetricType::Gauge)),
      memory_power(make_family("joule_gpu_memory_power_watts", "Memory subsystem power draw in watts",
                               prometheus::MetricType::Gauge)),
      module_power(
          make_family("joule_gpu_module_power_watts",
                      "Power of the whole module the GPU is part of (Grace Hopper, Grace Blackwell: "
                      "GPU, CPU and memory), in watts, scope=\"module\". It includes the GPU's: never "
                      "add it to joule_gpu_power_watts",
                      prometheus::MetricType::Gauge)),
      module_energy(make_family("joule_gpu_module_energy_joules_total",
                                "Energy of the whole module the GPU is part of, in joules since the driver "
                                "loaded, scope=\"module\". It includes the GPU's: never add it to "
                                "joule_gpu_energy_joules_total",
                                prometheus::MetricType::Counter)) {}

void GpuMetrics::TelemetryFamilies::append_to(std::vector<prometheus::MetricFamily>& families) {
  for (auto* one :
       {&temperature, &sm_clock, &memory_clock, &utilization, &memory_utilization, &clock_event_reasons,
        &clock_event_active, &memory_power, &module_power, &module_energy}) {
    // A family no GPU reports is left out entirely: unsupported is absent, never zero.
    if (!one->metric.empty()) {
      families.push_back(std::move(*one));
    }
  }
}

void GpuMetrics::collect_telemetry_locked(size_t gpu, TelemetryFamilies& out) const {
  const device::GpuTelemetry reading = gpus_[gpu]->telemetry();
  const auto labels = gpu_labels(gpus_[gpu]->info());
  constexpr double kHertzPerMegahertz = 1e6;
  constexpr double kRatioPerPercent = 1e-2;
  if (reading.temperature_c) {
    out.temperature.metric.push_back(gauge_sample(labels, *reading.temperature_c));
  }
  if (reading.sm_clock_mhz) {
    out.sm_clock.metric.push_back(gauge_sample(labels, *reading.sm_clock_mhz * kHertzPerMegahertz));
  }
  if (reading.memory_clock_mhz) {
    out.memory_clock.metric.push_back(gauge_sample(labels, *reading.memory_clock_mhz * kHertzPerMegahertz));
  }
  if (reading.gpu_utilization_pct) {
    out.utilization.metric.push_back(gauge_sample(labels, *reading.gpu_utilization_pct * kRatioPerPercent));
  }
  if (reading.memory_utilization_pct) {
    out.memory_utilization.metric.push_back(
        gauge_sample(labels, *reading.memory_utilization_pct * kRatioPerPercent));
  }
  if (reading.clock_event_reasons) {
    const uint64_t mask = *reading.clock_event_reasons;
    out.clock_event_reasons.metric.push_back(gauge_sample(labels, static_cast<double>(mask)));
    for (uint64_t bit = device::clock_event::kIdle; bit <= device::clock_event::kDisplayClocks; bit <<= 1) {
      auto reason_labels = labels;
      reason_labels.push_back({"reason", device::clock_event_reason_names(bit).front()});
      out.clock_event_active.metric.push_back(
          gauge_sample(std::move(reason_labels), (mask & bit) != 0 ? 1 : 0));
    }
  }
  if (reading.memory_power_mw) {
    out.memory_power.metric.push_back(gauge_sample(labels, *reading.memory_power_mw * kMilli));
  }
  // Grace Hopper / Blackwell module scope, a separate series labelled scope="module" (absent elsewhere).
  auto module_labels = labels;
  module_labels.push_back({"scope", "module"});
  const auto module_power = gpus_[gpu]->module_power_mw();
  const auto module_energy = gpus_[gpu]->module_energy_mj();
  if (module_power) {
    out.module_power.metric.push_back(gauge_sample(module_labels, *module_power * kMilli));
  }
  if (module_energy) {
    out.module_energy.metric.push_back(
        counter_sample(module_labels, static_cast<double>(*module_energy) * kMilli));
  }
  for (const auto* failed :
       {module_power ? nullptr : &module_power.error(), module_energy ? nullptr : &module_energy.error()}) {
    if (failed != nullptr && failed->code() != ErrorCode::kNotSupported) {
      count_error(gpu, kTelemetry, *failed);
    }
  }
  // Unsupported readings are a property of the device, not failures; anything else is counted.
  for (const auto& [field, error] : reading.errors) {
    if (error.code() != ErrorCode::kNotSupported) {
      count_error(gpu, kTelemetry, error);
      break;
    }
  }
}

// ---- GpuMetrics ----------------------------------------------------------------------------------------

void GpuMetrics::collect_processes_locked(size_t gpu, uint64_t now_us, prometheus::MetricFamily& out) const {
  State& state = states_[gpu];
  if (!state.processes) {
    return;
  }
  if (auto updated = state.processes->update(now_us); !updated) {
    if (updated.error().code() == ErrorCode::kNotSupported) {
      log().debug("metrics: no per-process energy for {}: {}", gpus_[gpu]->label(),
                  updated.error().message());
      state.processes.reset();  // a property of the driver: no series, no error count
      return;
    }
    count_error(gpu, kTelemetry, updated.error());
  }
  for (const auto& total : state.processes->totals()) {
    auto labels = gpu_labels(gpus_[gpu]->info());
    labels.push_back({"pid", total.process});
    out.metric.push_back(counter_sample(std::move(labels), static_cast<double>(total.energy_mj) * kMilli));
  }
}

GpuMetrics::GpuMetrics(std::vector<device::Gpu*> gpus, Clock& clock, GpuMetricsOptions options)
    : gpus_(std::move(gpus)), clock_(clock), options_(options), states_(gpus_.size()) {
  if (options_.polling_period <= Nanos(0)) {
    throw Exception(ErrorCode::kInvalidArgument, "metrics: the polling period must be positive");
  }
  bool polled = false;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const device::GpuInfo& info = gpus_[i]->info();
    polled = polled || !info.has_energy_counter;
    if (options_.max_processes > 0 && info.backend == "nvml" && info.has_energy_counter &&
        !device::is_mig_uuid(info.uuid)) {
      states_[i].processes =
          std::make_shared<measure::ProcessEnergyTotals>(*gpus_[i], options_.max_processes);
    }
  }
  {
    std::lock_guard lock(mutex_);
    update_locked(true);  // the integrals of GPUs without a counter start now
  }
  if (polled && !clock_.is_virtual()) {
    thread_ = std::thread([this] { poll_thread(); });
  }
}

GpuMetrics::~GpuMetrics() {
  {
    std::lock_guard lock(thread_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void GpuMetrics::poll_thread() {
  std::unique_lock lock(thread_mutex_);
  while (!wake_.wait_for(lock, options_.polling_period, [this] { return stop_; })) {
    lock.unlock();
    {
      std::lock_guard state_lock(mutex_);
      update_locked(false);
    }
    lock.lock();
  }
}

Result<void> GpuMetrics::set_carbon_intensity(double grams_per_kwh) {
  if (!std::isfinite(grams_per_kwh) || grams_per_kwh < 0) {
    return fail(ErrorCode::kInvalidArgument,
                "carbon intensity {} gCO2eq/kWh: expected a finite number of at least 0", grams_per_kwh);
  }
  std::lock_guard lock(mutex_);
  update_locked(true);  // energy so far at the old intensity
  intensity_g_per_kwh_ = grams_per_kwh;
  ever_intensity_ = true;
  return {};
}

void GpuMetrics::clear_carbon_intensity() {
  std::lock_guard lock(mutex_);
  update_locked(true);
  intensity_g_per_kwh_.reset();
}

std::optional<double> GpuMetrics::carbon_intensity() const {
  std::lock_guard lock(mutex_);
  return intensity_g_per_kwh_;
}

void GpuMetrics::update() {
  std::lock_guard lock(mutex_);
  update_locked(true);
}

void GpuMetrics::count_error(size_t gpu, Reading reading, const Error& error) const {
  State& state = states_[gpu];
  ++state.errors[reading];
  if (!state.error_logged[reading]) {
    state.error_logged[reading] = true;
    log().warn("metrics: {}: {} (later failures are only counted in joule_gpu_read_errors_total)",
               gpus_[gpu]->label(), error.message());
  }
}

void GpuMetrics::account_carbon_locked(State& state) const {
  if (!state.energy_j) {
    return;
  }
  const double energy_j = *state.energy_j;
  // A counter that went backwards (driver reload) starts a new base; so does energy used without intensity.
  if (intensity_g_per_kwh_ && state.carbon_base_j && energy_j >= *state.carbon_base_j) {
    state.carbon_g += (energy_j - *state.carbon_base_j) / kJoulesPerKwh * *intensity_g_per_kwh_;
  }
  state.carbon_base_j = energy_j;
}

void GpuMetrics::update_locked(bool all) const {
  for (size_t i = 0; i < gpus_.size(); ++i) {
    device::Gpu& gpu = *gpus_[i];
    State& state = states_[i];
    const bool counter = gpu.info().has_energy_counter;
    if (!all && counter) {
      continue;
    }
    if (all) {
      state.power_w.reset();
      state.limit_w.reset();
      state.energy_read = !counter;  // the integral of a GPU without a counter always has a value
    }
    if (counter) {
      if (auto energy = gpu.energy_mj()) {
        state.energy_j = static_cast<double>(*energy) * kMilli;
        state.energy_read = true;
      } else {
        count_error(i, kEnergy, energy.error());
      }
    }
    const Nanos now = clock_.now();
    if (auto power = gpu.power_mw()) {
      const double power_w = static_cast<double>(*power) * kMilli;
      state.power_w = power_w;
      if (!counter) {
        if (state.polled && now > state.polled->time) {
          state.integrated_j +=
              0.5 * (state.polled->power_w + power_w) * to_seconds(now - state.polled->time);
        }
        state.polled = PowerPoint{now, power_w};
        state.energy_j = state.integrated_j;
      }
    } else {
      count_error(i, kPower, power.error());
    }
    if (all) {
      if (auto limit = gpu.power_limit_mw()) {
        state.limit_w = static_cast<double>(*limit) * kMilli;
      } else {
        count_error(i, kPowerLimit, limit.error());
      }
    }
    account_carbon_locked(state);
  }
}

std::vector<prometheus::MetricFamily> GpuMetrics::Collect() const {
  std::lock_guard lock(mutex_);
  update_locked(true);
  using prometheus::MetricType;
  auto info =
      make_family("joule_gpu_info",
                  "Identity of each GPU (value 1): framework index, UUID, name, backend, and where its "
                  "energy comes from (counter: the device's energy counter, measured; power: integrated "
                  "from polled power, estimated)",
                  MetricType::Gauge);
  auto energy =
      make_family("joule_gpu_energy_joules_total",
                  "GPU energy in joules: the device's cumulative energy counter (origin: driver load), "
                  "or for GPUs without one the integral of polled power since the exporter started",
                  MetricType::Counter);
  auto power = make_family("joule_gpu_power_watts", "GPU board power draw in watts", MetricType::Gauge);
  auto limit =
      make_family("joule_gpu_power_limit_watts", "GPU power limit in force, in watts", MetricType::Gauge);
  auto errors = make_family(
      "joule_gpu_read_errors_total",
      "Failed GPU reads by reading (energy, power, power_limit, telemetry); a failed read leaves its "
      "sample out of that scrape",
      MetricType::Counter);
  auto carbon =
      make_family("joule_gpu_carbon_grams_total",
                  "Carbon emitted for GPU energy in grams CO2-equivalent: energy times the grid carbon "
                  "intensity in force when it was used (counted since an intensity was first set)",
                  MetricType::Counter);
  auto processes = make_family(
      "joule_gpu_process_energy_joules_total",
      "Estimated share of the GPU's measured energy per process since the exporter started (method: NVML "
      "process utilisation samples): pid is a process ID, or other (PIDs past the per-GPU bound), exited "
      "(processes that have ended) or unattributed (no process's SM time); a GPU's series add up to its "
      "measured energy over that time",
      MetricType::Counter);
  const auto now_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  static constexpr std::string_view kReadingNames[kReadings] = {"energy", "power", "power_limit",
                                                                "telemetry"};
  TelemetryFamilies telemetry;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    collect_telemetry_locked(i, telemetry);
    const device::GpuInfo& gpu = gpus_[i]->info();
    const State& state = states_[i];
    auto labels = gpu_labels(gpu);
    auto info_labels = labels;
    info_labels.push_back({"backend", gpu.backend});
    // A MIG instance's energy is its GPU's × its slice share: estimated, and labelled so.
    info_labels.push_back({"energy_source", device::is_mig_uuid(gpu.uuid)
                                                ? std::string(device::kMigEnergyMethod)
                                            : gpu.has_energy_counter ? "counter"
                                                                     : "power"});
    info.metric.push_back(gauge_sample(std::move(info_labels), 1));
    if (state.energy_j && state.energy_read) {
      energy.metric.push_back(counter_sample(labels, *state.energy_j));
    }
    if (state.power_w) {
      power.metric.push_back(gauge_sample(labels, *state.power_w));
    }
    if (state.limit_w) {
      limit.metric.push_back(gauge_sample(labels, *state.limit_w));
    }
    for (size_t reading = 0; reading < kReadings; ++reading) {
      auto error_labels = labels;
      error_labels.push_back({"reading", std::string(kReadingNames[reading])});
      errors.metric.push_back(
          counter_sample(std::move(error_labels), static_cast<double>(state.errors[reading])));
    }
    if (ever_intensity_) {
      carbon.metric.push_back(counter_sample(labels, state.carbon_g));
    }
    collect_processes_locked(i, now_us, processes);
  }
  std::vector<prometheus::MetricFamily> families;
  families.push_back(std::move(info));
  families.push_back(std::move(energy));
  families.push_back(std::move(power));
  families.push_back(std::move(limit));
  families.push_back(std::move(errors));
  if (!processes.metric.empty()) {
    families.push_back(std::move(processes));
  }
  telemetry.append_to(families);
  if (intensity_g_per_kwh_) {
    auto intensity = make_family("joule_grid_carbon_intensity_grams_per_kwh",
                                 "Carbon intensity of the grid in force, in grams CO2-equivalent per kWh",
                                 MetricType::Gauge);
    intensity.metric.push_back(gauge_sample({}, *intensity_g_per_kwh_));
    families.push_back(std::move(intensity));
  }
  if (ever_intensity_) {
    families.push_back(std::move(carbon));
  }
  return families;
}

// ---- WindowMetrics -------------------------------------------------------------------------------------

WindowMetrics::WindowMetrics(prometheus::Registry& registry, WindowMetricsOptions options)
    : options_((check_buckets(options.duration_buckets_s, "duration"),
                check_buckets(options.energy_buckets_j, "energy"), std::move(options))),
      duration_(prometheus::BuildHistogram()
                    .Name(options_.prefix + "_duration_seconds")
                    .Help(fmt::format("Duration of each {} in seconds, by window name", options_.what))
                    .Register(registry)),
      energy_(prometheus::BuildHistogram()
                  .Name(options_.prefix + "_energy_joules")
                  .Help(fmt::format("GPU energy of each {} in joules (all its GPUs together), by window name",
                                    options_.what))
                  .Register(registry)) {}

void WindowMetrics::observe(std::string_view window, double duration_s, double energy_j) {
  if (!std::isfinite(duration_s) || duration_s < 0 || !std::isfinite(energy_j) || energy_j < 0) {
    log().debug("metrics: window '{}' skipped: duration {} s, energy {} J", window, duration_s, energy_j);
    return;
  }
  const prometheus::Labels labels = {{"window", std::string(window)}};
  duration_.Add(labels, options_.duration_buckets_s).Observe(duration_s);
  energy_.Add(labels, options_.energy_buckets_j).Observe(energy_j);
}

void WindowMetrics::observe(const measure::Measurement& measurement) {
  observe(measurement.name, measurement.time_s, measurement.total_gpu_energy_j());
}

std::function<void(const measure::Measurement&)> WindowMetrics::observer() {
  return [this](const measure::Measurement& measurement) { observe(measurement); };
}

}  // namespace joule::metrics
