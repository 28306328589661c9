// SPDX-License-Identifier: Apache-2.0
// joule/measure/power_sampler.hpp — polls GPU power on a background thread and integrates it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/gpu.hpp"

namespace joule::measure {

/// One power reading.
struct PowerSample {
  Nanos time{0};          ///< when it was read, on the sampler's clock
  uint32_t power_mw = 0;  ///< board power, mW
};

/// Something whose power can be read: a GPU, or a CPU domain (power derived from its energy counter).
struct PowerChannel {
  std::string label;  ///< e.g. "GPU 0 (NVIDIA A40)"
  /// Reads the power in mW now. nullopt = no reading this time (e.g. the first read of an energy-derived
  /// channel, which needs two counter values); an Error = a failed read (counted, skipped).
  std::function<Result<std::optional<uint32_t>>()> read_mw;
};

/// @return a channel reading `gpu`'s board power. `gpu` must outlive the channel.
PowerChannel gpu_power_channel(device::Gpu& gpu);
/// @return a channel reading a CPU's package (or, with dram = true, DRAM) power as the energy-counter
/// difference since the previous read divided by the time between them. `cpu` and `clock` must outlive it.
PowerChannel cpu_power_channel(device::Cpu& cpu, Clock& clock, bool dram = false);

/// Polls the power of a set of channels (GPUs, CPU domains) every `period` on a background thread and
/// keeps, per channel, a change-only timeline: a reading equal to the previous one is not stored as a new
/// point, but the time it was last seen is, so that flat stretches integrate exactly (polling tools that drop
/// repeats without this underestimate flat segments at window edges).
///
/// Energy over any time range is the trapezoid rule over the reconstructed signal, clipped to the range;
/// before the first and after the last reading the signal is held flat.
///
/// Thread-safe: all methods may be called from any thread while the background thread runs. A channel
/// whose read fails is skipped for that tick (failures are counted and the first is logged, never thrown).
class PowerSampler {
 public:
  /// @param channels what to poll.
  /// @param clock timestamps come from this clock (the thread itself waits in real time).
  /// @param period time between polls; must be positive.
  /// @param max_points bound on stored timeline points per channel (oldest dropped); 0 = unbounded.
  PowerSampler(std::vector<PowerChannel> channels, Clock& clock, Nanos period, size_t max_points = 0);
  /// Polls these GPUs (which must outlive the sampler); channel i is gpus[i].
  PowerSampler(const std::vector<device::Gpu*>& gpus, Clock& clock, Nanos period, size_t max_points = 0);
  ~PowerSampler();
  PowerSampler(const PowerSampler&) = delete;
  PowerSampler& operator=(const PowerSampler&) = delete;

  /// Starts the background thread (first poll immediately). @throws joule::Exception (kState) if running.
  void start();
  /// Stops the background thread and waits for it; returns at once if not running.
  void stop();
  bool running() const;

  /// Reads every channel now, on the calling thread, and records the readings.
  void sample_now();

  size_t channel_count() const { return channels_.size(); }
  const std::string& label(size_t channel) const;
  Nanos period() const { return period_; }

  /// @return the change-only timeline of channel `channel` (0-based, in constructor order), restricted
  /// to points within [start, end] when given.
  std::vector<PowerSample> timeline(size_t channel, std::optional<Nanos> start = {},
                                    std::optional<Nanos> end = {}) const;
  /// @return the latest reading of `channel`, if any.
  std::optional<PowerSample> latest(size_t channel) const;
  /// @return the energy in joules of `channel` over [start, end]; kNotFound if it has no reading yet;
  /// kInvalidArgument if end < start.
  Result<double> energy_j(size_t channel, Nanos start, Nanos end) const;
  /// @return the highest reading of `channel` seen within [start, end], if any.
  std::optional<uint32_t> peak_mw(size_t channel, Nanos start, Nanos end) const;
  /// @return how many reads failed so far.
  uint64_t failed_reads() const;
  /// @return how many reads were made so far (successful, empty or failed).
  uint64_t reads() const;

 private:
  // A stretch of identical readings: first and last time the value was seen.
  struct Run {
    Nanos first{0};
    Nanos last{0};
    uint32_t power_mw = 0;
  };
  void check_channel(size_t channel) const;
  void sample_locked();
  void run_thread();

  std::vector<PowerChannel> channels_;
  Clock& clock_;
  Nanos period_;
  size_t max_points_;

  mutable std::mutex mutex_;
  std::vector<std::vector<Run>> runs_;  // per channel, by time
  uint64_t reads_ = 0;
  uint64_t failed_reads_ = 0;

  mutable std::mutex thread_mutex_;  // guards thread_ (start/stop)
  std::condition_variable wake_;
  bool stop_requested_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace joule::measure
