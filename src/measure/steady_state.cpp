// SPDX-License-Identifier: Apache-2.0
// Waiting for a thermal steady state before measuring.
#include "joule/measure/steady_state.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "joule/core/log.hpp"

namespace joule::measure {

std::string_view to_string(SteadyStateMode mode) {
  switch (mode) {
    case SteadyStateMode::kOff:
      return "off";
    case SteadyStateMode::kFixed:
      return "fixed";
    case SteadyStateMode::kSteady:
      return "steady";
  }
  return "unknown";
}

Result<SteadyStateMode> steady_state_mode_from_string(std::string_view name) {
  for (const auto mode : {SteadyStateMode::kOff, SteadyStateMode::kFixed, SteadyStateMode::kSteady}) {
    if (name == to_string(mode)) {
      return mode;
    }
  }
  return fail(ErrorCode::kInvalidArgument, "unknown steady-state mode '{}' (expected off, fixed or steady)",
              name);
}

Result<void> validate(const SteadyStateOptions& options) {
  const auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (!positive(options.window_s)) {
    return fail(ErrorCode::kInvalidArgument, "steady state: window_s must be a finite number > 0, got {}",
                options.window_s);
  }
  if (!positive(options.temperature_band_c)) {
    return fail(ErrorCode::kInvalidArgument,
                "steady state: temperature_band_c must be a finite number > 0, got {}",
                options.temperature_band_c);
  }
  if (!positive(options.power_band_ratio)) {
    return fail(ErrorCode::kInvalidArgument,
                "steady state: power_band_ratio must be a finite number > 0, got {}",
                options.power_band_ratio);
  }
  if (!std::isfinite(options.max_wait_s) || options.max_wait_s < options.window_s) {
    return fail(ErrorCode::kInvalidArgument,
                "steady state: max_wait_s must be a finite number ≥ window_s ({} s), got {}",
                options.window_s, options.max_wait_s);
  }
  if (!std::isfinite(options.fixed_warmup_s) || options.fixed_warmup_s < 0) {
    return fail(ErrorCode::kInvalidArgument,
                "steady state: fixed_warmup_s must be a finite number ≥ 0, got {}", options.fixed_warmup_s);
  }
  return {};
}

SteadyStateMode resolve_steady_state_mode(const SteadyStateOptions& options,
                                          const std::vector<device::Gpu*>& gpus) {
  if (options.mode) {
    return *options.mode;
  }
  // Vendor backends, and the daemon that serves them; simulated and test devices are not real.
  static constexpr std::string_view kRealBackends[] = {"nvml", "rocm", "amdsmi", "levelzero", "jetson", "daemon"};
  const bool any_real = std::any_of(gpus.begin(), gpus.end(), [](const device::Gpu* gpu) {
    return std::find(std::begin(kRealBackends), std::end(kRealBackends), gpu->info().backend) !=
           std::end(kRealBackends);
  });
  return any_real ? SteadyStateMode::kSteady : SteadyStateMode::kOff;
}

SteadyStateDetector::SteadyStateDetector(std::vector<device::Gpu*> gpus, Clock& clock,
                                         SteadyStateOptions options)
    : gpus_(std::move(gpus)), clock_(clock), options_(options), readings_(gpus_.size()) {
  if (auto valid = validate(options_); !valid) {
    throw Exception(valid.error());
  }
  mode_ = resolve_steady_state_mode(options_, gpus_);
  restart();
}

void SteadyStateDetector::restart() {
  started_ = clock_.now();
  for (auto& readings : readings_) {
    readings.clear();
  }
}

void SteadyStateDetector::sample() {
  if (mode_ != SteadyStateMode::kSteady) {
    return;
  }
  const Nanos now = clock_.now();
  const Nanos window = from_seconds(options_.window_s);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    Reading reading{now, std::nullopt, std::nullopt};
    if (auto temperature = gpus_[i]->temperature_c()) {
      reading.temperature_c = *temperature;
    } else if (temperature.error().code() != ErrorCode::kNotSupported) {
      log().debug("steady state: {}", temperature.error().message());
    }
    if (auto power = gpus_[i]->power_mw()) {
      reading.power_w = *power / 1e3;
    } else {
      log().debug("steady state: {}", power.error().message());
    }
    auto& readings = readings_[i];
    readings.push_back(reading);
    // Keep the shortest suffix that still spans the window.
    while (readings.size() >= 2 && readings.back().time - readings[1].time >= window) {
      readings.pop_front();
    }
  }
}

namespace {

struct ReadingSpread {
  double min = 0;
  double max = 0;
  double mean = 0;
  size_t count = 0;
};

template <class Readings, class Field>
ReadingSpread spread_of(const Readings& readings, Field field) {
  ReadingSpread out;
  double sum = 0;
  for (const auto& reading : readings) {
    if (const auto value = field(reading)) {
      out.min = out.count == 0 ? *value : std::min(out.min, *value);
      out.max = out.count == 0 ? *value : std::max(out.max, *value);
      sum += *value;
      ++out.count;
    }
  }
  out.mean = out.count > 0 ? sum / static_cast<double>(out.count) : 0;
  return out;
}

}  // namespace

bool SteadyStateDetector::steady() const {
  const Nanos window = from_seconds(options_.window_s);
  for (const auto& readings : readings_) {
    if (readings.empty() || readings.back().time - readings.front().time < window) {
      return false;
    }
    // Power drifts as a GPU warms, but single readings of a training loop also swing with its phases (data
    // loading, all-reduce): compare the means of the window's halves, which the swings hardly move.
    const Nanos middle = readings.front().time + (readings.back().time - readings.front().time) / 2;
    const auto half = [&readings, middle](bool second) {
      std::deque<Reading> part;
      for (const auto& reading : readings) {
        if ((reading.time >= middle) == second) {
          part.push_back(reading);
        }
      }
      return spread_of(part, [](const Reading& r) { return r.power_w; });
    };
    const ReadingSpread first = half(false);
    const ReadingSpread second = half(true);
    const double mean_w = 0.5 * (first.mean + second.mean);
    if (first.count == 0 || second.count == 0 || !(mean_w > 0) ||
        std::abs(second.mean - first.mean) / mean_w > options_.power_band_ratio) {
      return false;
    }
    const ReadingSpread temperature = spread_of(readings, [](const Reading& r) { return r.temperature_c; });
    if (temperature.count >= 2 && temperature.max - temperature.min > options_.temperature_band_c) {
      return false;
    }
  }
  return true;
}

double SteadyStateDetector::waited_s() const {
  return to_seconds(clock_.now() - started_);
}

bool SteadyStateDetector::timed_out() const {
  return mode_ == SteadyStateMode::kSteady && waited_s() >= options_.max_wait_s && !steady();
}

bool SteadyStateDetector::ready() const {
  switch (mode_) {
    case SteadyStateMode::kOff:
      return true;
    case SteadyStateMode::kFixed:
      return waited_s() >= options_.fixed_warmup_s;
    case SteadyStateMode::kSteady:
      return steady() || waited_s() >= options_.max_wait_s;
  }
  return true;
}

std::string SteadyStateDetector::describe() const {
  if (mode_ != SteadyStateMode::kSteady) {
    return fmt::format("{} after {:.1f} s ({} mode)", ready() ? "ready" : "waiting", waited_s(),
                       to_string(mode_));
  }
  std::string out = fmt::format(
      "{} after {:.1f} s", steady() ? "steady" : (ready() ? "not steady, timed out" : "waiting"), waited_s());
  std::vector<std::string> parts;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const ReadingSpread temperature = spread_of(readings_[i], [](const Reading& r) { return r.temperature_c; });
    const ReadingSpread power = spread_of(readings_[i], [](const Reading& r) { return r.power_w; });
    std::string part = fmt::format("GPU {}:", gpus_[i]->info().index);
    if (temperature.count > 0) {
      part += fmt::format(" {:.1f}–{:.1f} °C,", temperature.min, temperature.max);
    }
    part += power.count > 0 ? fmt::format(" {:.1f}–{:.1f} W", power.min, power.max)
                            : std::string(" no power reading");
    parts.push_back(std::move(part));
  }
  return parts.empty() ? out : fmt::format("{} ({})", out, fmt::join(parts, "; "));
}

}  // namespace joule::measure
