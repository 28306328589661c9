// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/power_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "joule/core/log.hpp"

namespace joule::measure {

namespace {

// Linear interpolation of the signal between two timeline points at time t (t0 <= t <= t1).
double value_at(Nanos t0, double p0, Nanos t1, double p1, Nanos t) {
  if (t1 == t0) {
    return p0;
  }
  const double fraction = static_cast<double>((t - t0).count()) / static_cast<double>((t1 - t0).count());
  return p0 + (p1 - p0) * fraction;
}

}  // namespace

PowerChannel gpu_power_channel(device::Gpu& gpu) {
  return {gpu.label(), [&gpu]() -> Result<std::optional<uint32_t>> {
            auto power = JOULE_TRY(gpu.power_mw());
            return std::optional<uint32_t>(power);
          }};
}

PowerChannel cpu_power_channel(device::Cpu& cpu, Clock& clock, bool dram) {
  struct Previous {
    Nanos time{0};
    uint64_t energy_mj = 0;
    bool valid = false;
  };
  auto previous = std::make_shared<Previous>();
  return {fmt::format("{}{}", cpu.label(), dram ? " DRAM" : ""),
          [&cpu, &clock, dram, previous]() -> Result<std::optional<uint32_t>> {
            const Nanos now = clock.now();
            auto energy = JOULE_TRY(dram ? cpu.dram_energy_mj() : cpu.package_energy_mj());
            std::optional<uint32_t> power;
            if (previous->valid && now > previous->time && energy >= previous->energy_mj) {
              const double mw =
                  static_cast<double>(energy - previous->energy_mj) / to_seconds(now - previous->time);
              power = static_cast<uint32_t>(std::lround(mw));
            }
            *previous = {now, energy, true};
            return power;
          }};
}

namespace {
std::vector<PowerChannel> gpu_channels(const std::vector<device::Gpu*>& gpus) {
  std::vector<PowerChannel> channels;
  for (auto* gpu : gpus) {
    if (gpu == nullptr) {
      throw Exception(ErrorCode::kInvalidArgument, "PowerSampler was given a null GPU");
    }
    channels.push_back(gpu_power_channel(*gpu));
  }
  return channels;
}
}  // namespace

PowerSampler::PowerSampler(const std::vector<device::Gpu*>& gpus, Clock& clock, Nanos period,
                           size_t max_points)
    : PowerSampler(gpu_channels(gpus), clock, period, max_points) {}

PowerSampler::PowerSampler(std::vector<PowerChannel> channels, Clock& clock, Nanos period, size_t max_points)
    : channels_(std::move(channels)),
      clock_(clock),
      period_(period),
      max_points_(max_points),
      runs_(channels_.size()) {
  if (period_.count() <= 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("the power sampling period must be positive (got {} ns)", period_.count()));
  }
  for (const auto& channel : channels_) {
    if (!channel.read_mw) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("power channel '{}' has no reader", channel.label));
    }
  }
}

const std::string& PowerSampler::label(size_t channel) const {
  check_channel(channel);
  return channels_[channel].label;
}

PowerSampler::~PowerSampler() {
  stop();
}

void PowerSampler::start() {
  std::lock_guard thread_lock(thread_mutex_);
  if (thread_.joinable()) {
    throw Exception(ErrorCode::kState, "the power sampler is already running");
  }
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = false;
  }
  thread_ = std::thread([this] { run_thread(); });
}

void PowerSampler::stop() {
  std::lock_guard thread_lock(thread_mutex_);
  if (!thread_.joinable()) {
    return;
  }
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool PowerSampler::running() const {
  std::lock_guard thread_lock(thread_mutex_);
  return thread_.joinable();
}

void PowerSampler::run_thread() {
  // Ticks are scheduled on real time; a late tick is not made up for (no bursts after a stall).
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stop_requested_) {
    sample_locked();
    next += period_;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) {
      next = now;
    }
    wake_.wait_until(lock, next, [this] { return stop_requested_; });
  }
}

void PowerSampler::sample_now() {
  std::lock_guard lock(mutex_);
  sample_locked();
}

void PowerSampler::sample_locked() {
  for (size_t i = 0; i < channels_.size(); ++i) {
    const Nanos time = clock_.now();
    const auto reading = channels_[i].read_mw();
    ++reads_;
    if (!reading) {
      if (failed_reads_++ == 0) {
        log().warn("power sampling: {}", reading.error().message());
      }
      continue;
    }
    if (!*reading) {
      continue;
    }
    const std::optional<uint32_t>& power = *reading;
    auto& runs = runs_[i];
    if (!runs.empty() && time < runs.back().last) {
      continue;  // a reading older than what we have (clock raced): drop it rather than disorder the timeline
    }
    if (!runs.empty() && runs.back().power_mw == *power) {
      runs.back().last = time;
      continue;
    }
    runs.push_back({time, time, *power});
    if (max_points_ > 0 && runs.size() > max_points_) {
      runs.erase(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(runs.size() - max_points_));
    }
  }
}

void PowerSampler::check_channel(size_t channel) const {
  if (channel >= channels_.size()) {
    throw Exception(
        ErrorCode::kOutOfRange,
        fmt::format("power channel {} requested from a sampler of {} channels", channel, channels_.size()));
  }
}

std::vector<PowerSample> PowerSampler::timeline(size_t channel, std::optional<Nanos> start,
                                                std::optional<Nanos> end) const {
  check_channel(channel);
  std::lock_guard lock(mutex_);
  std::vector<PowerSample> points;
  for (const Run& run : runs_[channel]) {
    if ((start && run.first < *start) || (end && run.first > *end)) {
      continue;
    }
    points.push_back({run.first, run.power_mw});
  }
  return points;
}

std::optional<PowerSample> PowerSampler::latest(size_t channel) const {
  check_channel(channel);
  std::lock_guard lock(mutex_);
  if (runs_[channel].empty()) {
    return std::nullopt;
  }
  const Run& run = runs_[channel].back();
  return PowerSample{run.last, run.power_mw};
}

Result<double> PowerSampler::energy_j(size_t channel, Nanos start, Nanos end) const {
  check_channel(channel);
  if (end < start) {
    return fail(ErrorCode::kInvalidArgument, "energy requested over a range that ends before it starts");
  }
  std::lock_guard lock(mutex_);
  const auto& runs = runs_[channel];
  if (runs.empty()) {
    return fail(ErrorCode::kNotFound, "no power reading of {} yet", channels_[channel].label);
  }
  // The signal's points in time order: each run contributes its first and last sighting.
  // Integrate the piecewise-linear signal, held flat outside the readings, over [start, end].
  double energy_mj_total = 0;
  auto add = [&](Nanos t0, double p0, Nanos t1, double p1) {
    const Nanos a = std::max(t0, start);
    const Nanos b = std::min(t1, end);
    if (b <= a) {
      return;
    }
    const double pa = value_at(t0, p0, t1, p1, a);
    const double pb = value_at(t0, p0, t1, p1, b);
    energy_mj_total += (pa + pb) / 2.0 * to_seconds(b - a);
  };
  const Nanos first_time = runs.front().first;
  const Nanos last_time = runs.back().last;
  if (start < first_time) {
    add(start, runs.front().power_mw, first_time, runs.front().power_mw);
  }
  // Skip runs that end before the range: the first run that matters is the one before the first run
  // whose first sighting is after start.
  auto it = std::upper_bound(runs.begin(), runs.end(), start,
                             [](Nanos t, const Run& run) { return t < run.first; });
  if (it != runs.begin()) {
    --it;
  }
  for (; it != runs.end() && it->first <= end; ++it) {
    add(it->first, it->power_mw, it->last, it->power_mw);
    const auto next = it + 1;
    if (next != runs.end()) {
      add(it->last, it->power_mw, next->first, next->power_mw);
    }
  }
  if (end > last_time) {
    add(last_time, runs.back().power_mw, end, runs.back().power_mw);
  }
  return energy_mj_total / 1e3;
}

std::optional<uint32_t> PowerSampler::peak_mw(size_t channel, Nanos start, Nanos end) const {
  check_channel(channel);
  std::lock_guard lock(mutex_);
  std::optional<uint32_t> peak;
  for (const Run& run : runs_[channel]) {
    if (run.last < start || run.first > end) {
      continue;
    }
    peak = std::max(peak.value_or(0), run.power_mw);
  }
  return peak;
}

uint64_t PowerSampler::failed_reads() const {
  std::lock_guard lock(mutex_);
  return failed_reads_;
}

uint64_t PowerSampler::reads() const {
  std::lock_guard lock(mutex_);
  return reads_;
}

}  // namespace joule::measure
