// SPDX-License-Identifier: Apache-2.0
// joule/device/sim_gpu.hpp — the simulated GPU: a complete device for machines without GPUs.
//
// A simulated GPU is a named GPU model (v100, a40, p100, rtx6000 from the Zeus power traces, and a
// generic modern one) busy running a training workload at a batch size. Its power draw and iteration time
// follow its power limit as the Zeus power traces measured them (linear interpolation between the
// measured limits), its energy counter integrates that power over its clock (real or virtual), limits
// outside the model's constraints fail as on a real GPU, and every setting made is recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device::sim {

/// A GPU model the simulator knows.
struct GpuModel {
  std::string key;                 ///< as written in a sim spec: "v100"
  std::string name;                ///< reported device name
  std::string trace;               ///< which built-in power trace drives it: "v100", "a40", "p100", "rtx6000"
  double trace_power_scale = 1.0;  ///< multiplies the trace's power and power limits (generic model)
  double trace_speed_scale = 1.0;  ///< divides the trace's epoch times (generic model)
  uint32_t min_power_limit_mw = 0;
  uint32_t max_power_limit_mw = 0;
  uint32_t default_power_limit_mw = 0;
  uint32_t min_sm_clock_mhz = 0;
  uint32_t max_sm_clock_mhz = 0;
  uint32_t sm_clock_step_mhz = 15;
  double idle_power_w = 0;  ///< power when not running the workload; also the static part of busy power
  bool has_energy_counter = true;  ///< false for pre-Volta models (p100), as NVML reports them
  std::string description;         ///< one line for `joule devices` and docs
  uint32_t memory_clock_mhz = 0;   ///< reported memory clock, MHz; 0: the model does not report one
  /// The memory clocks it can be locked to, MHz, highest first (the first is memory_clock_mhz); empty: the
  /// memory clock cannot be locked. HBM models list one (as NVML does), GDDR models several.
  std::vector<uint32_t> lockable_memory_clocks_mhz;
  // Thermal model (docs/metrics.md): first order, dT/dt = (T_ss − T)/τ with T_ss = ambient + R·P.
  double ambient_c = 25;                  ///< temperature of a cold GPU, °C
  double thermal_resistance_c_per_w = 0;  ///< R, °C per W; 0: 55 °C over ambient at the largest limit
  double thermal_time_constant_s = 45;    ///< τ, s
  /// Extra power per °C of temperature (leakage): a GPU below its steady temperature draws
  /// leakage·(T_ss − T) watts less than the trace (measured warm). 0: 0.15% of the largest limit per °C.
  double leakage_w_per_c = 0;
};

/// @return every model, in a stable order.
const std::vector<GpuModel>& gpu_models();
/// @return the model called `key` (case-insensitive), or kNotFound listing the known models.
Result<const GpuModel*> find_gpu_model(std::string_view key);

/// A training workload of the Zeus traces.
struct WorkloadInfo {
  std::string key;                ///< as written in a sim spec: "imagenet"
  std::string dataset;            ///< the trace's dataset column: "imagenet"
  std::string network;            ///< "resnet50"
  std::string optimizer;          ///< "adadelta"
  int default_batch_size = 0;     ///< the paper's b0
  int64_t samples_per_epoch = 0;  ///< training-set size, to turn epoch time into iteration time
};

/// @return every workload, in a stable order. The first entry is not special; see default_workload().
const std::vector<WorkloadInfo>& workloads();
/// @return the workload a spec without one runs (imagenet: ResNet-50, the paper's flagship job).
const WorkloadInfo& default_workload();
/// @return the workload called `key` (case-insensitive; "movielens" means "movielens-1m"), or kNotFound.
Result<const WorkloadInfo*> find_workload(std::string_view key);

/// What a busy simulated GPU does under some settings.
struct OperatingPoint {
  double power_w = 0;           ///< board power draw, W
  double iteration_time_s = 0;  ///< time of one training iteration, s
  double sm_clock_mhz = 0;      ///< effective SM clock, MHz
};

/// How a workload behaves on a device as a function of the device's settings. Implementations are
/// immutable and thread-safe.
class Workload {
 public:
  virtual ~Workload() = default;
  /// @return e.g. "imagenet (resnet50, batch size 256)".
  virtual std::string description() const = 0;
  /// @param power_limit_w the power limit in force, W.
  /// @param locked_sm_clock_mhz the upper end of an SM clock lock, if one is in force.
  virtual OperatingPoint at(double power_limit_w, std::optional<double> locked_sm_clock_mhz) const = 0;
  /// The same with the memory clock locked at `memory_clock_ratio` (its share of the highest memory clock,
  /// in (0, 1]). The default ignores it: a workload without a memory model runs as at full memory clock.
  virtual OperatingPoint at_memory_clock(double power_limit_w, std::optional<double> locked_sm_clock_mhz,
                                         double memory_clock_ratio) const;
};

/// One measured row of a power trace.
struct TracePoint {
  double power_limit_w = 0;
  double time_per_epoch_s = 0;
  double average_power_w = 0;
};

/// A workload driven by a Zeus power trace: power and epoch time interpolated linearly between measured
/// power limits (held constant outside them). An SM clock lock below the clock the power limit allows
/// slows the GPU by the model P = P_idle + (P_top − P_idle)·r³, time = t·(c·r_limit/r + 1 − c), where r is
/// the clock ratio and c, the compute-bound share, is fitted from the trace's lowest and highest limits.
/// A workload driven by a Zeus power trace (see below). Under a memory clock lock at ratio q of the highest,
/// the share of its time that does not follow the SM clock (1 − compute_share) stretches by 1/q and the same
/// share of its dynamic power scales by q.
class TraceWorkload final : public Workload {
 public:
  TraceWorkload(const GpuModel& model, const WorkloadInfo& info, int batch_size,
                std::vector<TracePoint> points);
  std::string description() const override;
  OperatingPoint at(double power_limit_w, std::optional<double> locked_sm_clock_mhz) const override;
  OperatingPoint at_memory_clock(double power_limit_w, std::optional<double> locked_sm_clock_mhz,
                                 double memory_clock_ratio) const override;

  int batch_size() const { return batch_size_; }
  const std::vector<TracePoint>& points() const { return points_; }
  /// @return the fitted compute-bound share c in [0.05, 1].
  double compute_share() const { return compute_share_; }

 private:
  TracePoint interpolate(double power_limit_w) const;
  double clock_ratio_for_power(double power_w) const;

  std::string description_;
  int batch_size_;
  double iterations_per_epoch_;
  double idle_power_w_;
  double max_sm_clock_mhz_;
  std::vector<TracePoint> points_;  // sorted by power limit, already scaled for the model
  double compute_share_;
};

/// @return the text of a built-in Zeus power trace ("v100", "a40", "p100", "rtx6000"), or nullopt.
std::optional<std::string_view> builtin_power_trace(std::string_view gpu);

/// @return the batch sizes the built-in power trace has for `workload` on `model`, ascending.
Result<std::vector<int>> available_batch_sizes(const GpuModel& model, const WorkloadInfo& workload);

/// @return the trace-driven workload for `model`, `workload` and `batch_size` (default: the paper's b0,
/// or the largest available batch size below it). kNotFound lists the available batch sizes.
Result<std::shared_ptr<const TraceWorkload>> make_trace_workload(const GpuModel& model,
                                                                 const WorkloadInfo& workload,
                                                                 std::optional<int> batch_size);

/// A parsed sim spec: `[COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]]`, e.g. "v100", "4xa40:imagenet:256".
struct Spec {
  int count = 1;
  const GpuModel* model = nullptr;
  const WorkloadInfo* workload = nullptr;
  std::optional<int> batch_size;
};

/// @return the spec, or kInvalidArgument naming the bad part and what is valid there.
Result<Spec> parse_spec(std::string_view text);

/// One setting made on a simulated GPU.
struct SettingRecord {
  Nanos time{0};           ///< on the GPU's clock
  std::string setting;     ///< "power_limit_mw", "sm_clocks_locked_mhz", "sm_clocks_reset"
  uint32_t value = 0;      ///< the limit in mW, or the upper clock in MHz
  uint32_t value_min = 0;  ///< the lower clock in MHz for clock locks
};

/// The thermal state a simulated GPU starts in, and whether temperature changes its power.
struct ThermalOptions {
  /// Temperature now, °C; nullopt: the steady state of the current load (a GPU that has run for a while).
  std::optional<double> temperature_c;
  /// Whether power follows temperature (leakage): off by default, so that power is exactly the trace's.
  bool leakage = false;
};

/// A simulated GPU. Busy (running its workload) from construction; see set_busy().
///
/// Telemetry: temperature follows a first-order thermal model of the power drawn (it rises under load
/// and settles with the model's time constant); the SM clock is the operating point's (the lowest clock
/// while idle); utilisation is 98% busy (memory: scaled by throughput), 0 idle; clock event reasons say
/// idle, a clock lock, a binding power limit or thermal slowdown (above 87 °C); memory power is 0.3 of
/// idle power plus 12% of the power above idle.
class SimulatedGpu final : public Gpu {
 public:
  /// @param index the framework index; @param physical_index the index before CUDA_VISIBLE_DEVICES
  /// (-1: same as index). The UUID derives from the model and the physical index.
  SimulatedGpu(const GpuModel& model, std::shared_ptr<const Workload> workload, std::shared_ptr<Clock> clock,
               int index, int physical_index = -1);

  const GpuModel& model() const { return model_; }
  Clock& clock() const { return *clock_; }

  /// @return what the GPU does now under its current settings (the busy point, even while idle).
  OperatingPoint operating_point();
  /// Busy GPUs draw the workload's power; idle ones draw model().idle_power_w.
  void set_busy(bool busy);
  /// @return the workload it runs.
  std::shared_ptr<const Workload> workload() const;
  /// Swaps the running workload (e.g. a pipeline stage's next computation). Energy so far is kept.
  void set_workload(std::shared_ptr<const Workload> workload);
  /// @return every setting made so far, oldest first.
  std::vector<SettingRecord> settings_log() const;
  /// @return the exact integrated energy in mJ (the counter reports its integer part).
  double exact_energy_mj();
  /// Sets the thermal state now (e.g. a cold start: {model().ambient_c, true}). Energy so far is kept.
  void set_thermal(ThermalOptions options);
  /// @return the steady-state temperature of the current load, °C.
  double steady_temperature_c();

 protected:
  Result<uint64_t> do_energy_mj() override;
  Result<uint32_t> do_power_mw() override;
  Result<PowerLimitConstraints> do_power_limit_constraints() override;
  Result<double> do_set_simulated_busy(bool busy) override;
  Result<uint32_t> do_power_limit_mw() override;
  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override;
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override;
  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override;
  Result<void> do_reset_sm_clocks() override;
  Result<std::vector<uint32_t>> do_supported_memory_clocks_mhz() override;
  Result<void> do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) override;
  Result<void> do_reset_memory_clocks() override;
  Result<double> do_temperature_c() override;
  Result<uint32_t> do_sm_clock_mhz() override;
  Result<uint32_t> do_memory_clock_mhz() override;
  Result<uint32_t> do_gpu_utilization_pct() override;
  Result<uint32_t> do_memory_utilization_pct() override;
  Result<uint64_t> do_clock_event_reasons() override;
  Result<uint32_t> do_memory_power_mw() override;

 private:
  // Adds energy up to now at the current power; call before any change of power. Needs state_mutex_.
  void integrate_locked();
  void refresh_power_locked();
  // The power drawn now: the load's power less leakage below steady temperature, capped by the limit.
  double drawn_power_w_locked() const;
  double steady_temperature_locked() const;
  double temperature_now_locked() const;
  void record_locked(std::string setting, uint32_t value, uint32_t value_min = 0);
  // The workload's operating point under the settings in force. Needs state_mutex_.
  OperatingPoint point_locked() const;

  const GpuModel& model_;
  std::shared_ptr<Clock> clock_;
  mutable std::mutex state_mutex_;  // taken after the base class's lock, never before it
  std::shared_ptr<const Workload> workload_;
  bool busy_ = true;
  uint32_t power_limit_mw_;
  std::optional<uint32_t> locked_max_mhz_;
  std::optional<uint32_t> locked_memory_mhz_;  // the upper end of a memory clock lock
  double power_w_ = 0;                         // the load's power at steady temperature (the trace's)
  double energy_mj_ = 0;
  double temperature_c_ = 0;
  bool leakage_ = false;
  Nanos last_update_{0};
  std::vector<SettingRecord> settings_;
};

/// @return the UUID of the simulated GPU with this model and physical index.
std::string simulated_uuid(const GpuModel& model, int physical_index);

/// Opens the GPUs `spec` describes, all on `clock`, in the order `visible` selects (default: all),
/// with framework indices 0, 1, …. Errors as resolve_visible_devices() gives them.
Result<std::vector<std::unique_ptr<SimulatedGpu>>> open_sim_gpus(const Spec& spec,
                                                                 const std::shared_ptr<Clock>& clock,
                                                                 const VisibleDevices& visible = {});

/// Data-parallel training on simulated GPUs that share a virtual clock: every iteration takes the slowest
/// GPU's iteration time at its current settings, and all GPUs draw power meanwhile.
class TrainingJob {
 public:
  TrainingJob(std::vector<SimulatedGpu*> gpus, VirtualClock& clock);
  /// Runs `iterations` iterations by advancing the clock. @return the time they took.
  Nanos run_iterations(int64_t iterations);
  /// @return the time one iteration takes at the current settings, in seconds.
  double iteration_time_s();

 private:
  std::vector<SimulatedGpu*> gpus_;
  VirtualClock& clock_;
};

}  // namespace joule::device::sim
