// SPDX-License-Identifier: Apache-2.0
// `joule probe`: the counter's period and error, the controls' latencies and settling, and the time–energy
// frontier of two kernels under each knob, every setting changed through one SettingsGuard.
#include "joule/probe/probe.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/frontier.hpp"
#include "joule/device/settings_guard.hpp"

namespace joule::probe {

namespace {

// One reading of the counter and power.
struct ProbeSample {
  double time_s = 0;
  std::optional<uint64_t> energy_mj;
  double power_w = 0;
};

// Trapezoid integral of power over the samples, J.
double integrate_power_j(const std::vector<ProbeSample>& samples) {
  double energy_j = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    energy_j +=
        0.5 * (samples[i].power_w + samples[i - 1].power_w) * (samples[i].time_s - samples[i - 1].time_s);
  }
  return energy_j;
}

// Nearest-rank quantile of `values` (not empty), q in [0, 1].
double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

// Up to `count` values spread evenly over `sorted_desc` (highest first), always with both ends.
std::vector<uint32_t> spread(const std::vector<uint32_t>& sorted_desc, int count) {
  std::vector<uint32_t> out;
  const size_t n = sorted_desc.size();
  if (n == 0) {
    return out;
  }
  const size_t k = std::min(static_cast<size_t>(std::max(1, count)), n);
  for (size_t i = 0; i < k; ++i) {
    const size_t index = k == 1 ? 0 : (i * (n - 1) + (k - 1) / 2) / (k - 1);
    if (out.empty() || out.back() != sorted_desc[index]) {
      out.push_back(sorted_desc[index]);
    }
  }
  return out;
}

Result<void> check_options(const ProbeOptions& options) {
  const auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (!positive(options.counter_window_s) || !positive(options.counter_poll_interval_s) ||
      !positive(options.settle_window_s) || !positive(options.settle_sample_interval_s) ||
      !positive(options.run_s)) {
    return fail(ErrorCode::kInvalidArgument,
                "probe: every window, interval and run time must be a finite number > 0");
  }
  if (!std::isfinite(options.knob_settle_s) || options.knob_settle_s < 0) {
    return fail(ErrorCode::kInvalidArgument,
                "probe: the settling time after a knob change must be a finite number ≥ 0");
  }
  if (options.latency_tries < 1 || options.power_limit_values < 2 || options.sm_clock_values < 2 ||
      options.memory_clock_values < 2) {
    return fail(
        ErrorCode::kInvalidArgument,
        "probe: latency tries must be ≥ 1 and knob values ≥ 2, got {} tries, {} power limits, {} clocks, "
        "{} memory clocks",
        options.latency_tries, options.power_limit_values, options.sm_clock_values,
        options.memory_clock_values);
  }
  return {};
}

class Prober {
 public:
  Prober(device::Gpu& gpu, Clock& clock, KernelRunner* runner, const ProbeOptions& options)
      : gpu_(gpu), clock_(clock), runner_(runner), options_(options) {}

  Result<Card> run() {
    JOULE_TRY(check_options(options_));
    Card card;
    card.joule_version = options_.joule_version;
    card.created_utc = format_iso8601_utc(clock_.to_unix_ns(clock_.now()));
    card.read_only = options_.read_only;
    card.quick = options_.quick;
    const device::GpuInfo& info = gpu_.info();
    card.device = {info.name, info.backend, runner_ != nullptr ? runner_->driver_version() : "", info.uuid};
    card.kernel_runner = runner_ != nullptr ? runner_->name() : "";
    read_ranges(card.ranges);
    report("energy counter");
    card.counter = JOULE_TRY(measure_counter());
    if (options_.read_only) {
      for (const char* what : {"latencies", "settle", "frontiers"}) {
        card.skipped.push_back({what, "--read-only: it needs a setting to be changed"});
      }
      return card;
    }
    // Every setting goes back when this guard restores: after each step and, whatever happens, on return.
    device::SettingsGuard guard({.owner = "joule probe"});
    guard_ = &guard;
    JOULE_TRY(measure_latencies(card));
    JOULE_TRY(measure_settle(card));
    JOULE_TRY(measure_frontiers(card));
    JOULE_TRY(guard.restore());
    return card;
  }

 private:
  void report(std::string_view step) const {
    if (options_.progress) {
      options_.progress(step);
    }
  }
  bool keep_going() const { return !options_.keep_going || options_.keep_going(); }
  Result<void> check_cancel() const {
    if (!keep_going()) {
      return fail(ErrorCode::kState, "probe cancelled: every setting it changed was put back");
    }
    return {};
  }
  double now_s() const { return to_seconds(clock_.now()); }

  Result<ProbeSample> sample() {
    ProbeSample out;
    out.time_s = now_s();
    if (gpu_.info().has_energy_counter) {
      out.energy_mj = JOULE_TRY(gpu_.energy_mj());
    }
    out.power_w = JOULE_TRY(gpu_.power_mw()) / 1000.0;
    return out;
  }

  void read_ranges(DeviceRanges& ranges) {
    if (auto constraints = gpu_.power_limit_constraints()) {
      constraints_ = *constraints;
      ranges.power_limit_min_w = constraints->min_mw / 1000.0;
      ranges.power_limit_max_w = constraints->max_mw / 1000.0;
      ranges.power_limit_default_w = constraints->default_mw / 1000.0;
    } else {
      constraints_error_ = constraints.error().message();
    }
    if (auto clocks = gpu_.supported_sm_clocks_mhz(); clocks && !clocks->empty()) {
      clocks_ = *clocks;
      std::sort(clocks_.rbegin(), clocks_.rend());
      ranges.sm_clock_max_mhz = clocks_.front();
      ranges.sm_clock_min_mhz = clocks_.back();
      ranges.sm_clock_count = static_cast<uint32_t>(clocks_.size());
    } else {
      clocks_error_ = clocks ? "the device lists no SM clock" : clocks.error().message();
    }
    if (auto memory = gpu_.memory_clock_mhz()) {
      ranges.memory_clock_mhz = *memory;
    }
    if (auto temperature = gpu_.temperature_c()) {
      ranges.temperature_c = *temperature;
    }
  }

  // Runs `kernel` (or just waits, without a runner or when `load` is false) and calls `tick` every
  // `interval_s` until it says stop.
  Result<void> drive(Kernel kernel, double interval_s, const std::function<Result<bool>()>& tick,
                     bool load = true) {
    std::optional<Error> error;
    const auto between = [&]() -> bool {
      auto more = tick();
      if (!more) {
        error = more.error();
        return false;
      }
      return *more && keep_going();
    };
    if (runner_ != nullptr && load) {
      JOULE_TRY(runner_->run(kernel, INT64_MAX, interval_s, between));
    } else {
      while (between()) {
        clock_.sleep_for(from_seconds(interval_s));
      }
    }
    if (error) {
      return tl::make_unexpected(*error);
    }
    return check_cancel();
  }

  Result<CounterFigures> measure_counter() {
    CounterFigures out;
    out.has_energy_counter = gpu_.info().has_energy_counter;
    out.poll_interval_s = options_.counter_poll_interval_s;
    out.under_load = runner_ != nullptr && options_.counter_under_load;
    std::vector<ProbeSample> samples;
    const double start_s = now_s();
    const auto poll = [&]() -> Result<bool> {
      samples.push_back(JOULE_TRY(sample()));
      return now_s() - start_s < options_.counter_window_s;
    };
    JOULE_TRY(drive(Kernel::kCompute, options_.counter_poll_interval_s, poll, out.under_load));
    out.polls = static_cast<int64_t>(samples.size());
    out.window_s = samples.empty() ? 0 : samples.back().time_s - samples.front().time_s;
    out.integrated_power_energy_j = integrate_power_j(samples);
    if (!out.has_energy_counter || samples.size() < 2) {
      return out;
    }
    std::vector<double> change_times_s;
    for (size_t i = 1; i < samples.size(); ++i) {
      if (samples[i].energy_mj != samples[i - 1].energy_mj) {
        change_times_s.push_back(samples[i].time_s);
      }
    }
    out.steps = static_cast<int64_t>(change_times_s.size());
    if (change_times_s.size() >= 3) {
      std::vector<double> periods;
      for (size_t i = 1; i < change_times_s.size(); ++i) {
        periods.push_back(change_times_s[i] - change_times_s[i - 1]);
      }
      out.update_period_s = quantile(periods, 0.5);
    }
    const double counter_j =
        static_cast<double>(*samples.back().energy_mj - *samples.front().energy_mj) / 1000.0;
    out.counter_energy_j = counter_j;
    if (out.integrated_power_energy_j > 0) {
      out.error_pct = (counter_j - out.integrated_power_energy_j) / out.integrated_power_energy_j * 100;
    }
    return out;
  }

  // Times `tries` changes alternating between two values; `set(i)` makes the i-th change.
  Result<LatencyFigures> time_changes(std::string control, const std::function<Result<void>(int)>& set) {
    std::vector<double> seconds;
    for (int i = 0; i < options_.latency_tries; ++i) {
      JOULE_TRY(check_cancel());
      const double before_s = now_s();
      JOULE_TRY(set(i));
      seconds.push_back(now_s() - before_s);
    }
    return LatencyFigures{std::move(control), options_.latency_tries, quantile(seconds, 0.5),
                          quantile(seconds, 0.99), *std::max_element(seconds.begin(), seconds.end())};
  }

  Result<void> measure_latencies(Card& card) {
    report("power-limit latency");
    if (constraints_) {
      const uint32_t high = constraints_->max_mw;
      const uint32_t low =
          std::max(constraints_->min_mw, high - std::max<uint32_t>(1000, (high - constraints_->min_mw) / 10));
      card.latencies.push_back(JOULE_TRY(time_changes(
          "power_limit", [&](int i) { return guard_->set_power_limit_mw(gpu_, i % 2 == 0 ? low : high); })));
    } else {
      card.skipped.push_back({"power_limit", constraints_error_});
    }
    report("SM clock lock latency");
    if (clocks_.size() >= 2) {
      const uint32_t high = clocks_.front();
      const uint32_t middle = clocks_[clocks_.size() / 2];
      card.latencies.push_back(JOULE_TRY(time_changes("sm_clock_lock", [&](int i) {
        const uint32_t mhz = i % 2 == 0 ? middle : high;
        return guard_->lock_sm_clocks(gpu_, mhz, mhz);
      })));
    } else {
      card.skipped.push_back(
          {"sm_clock", clocks_error_.empty() ? "fewer than two SM clocks" : clocks_error_});
    }
    return guard_->restore();
  }

  Result<void> measure_settle(Card& card) {
    if (!constraints_ || runner_ == nullptr) {
      card.skipped.push_back({"settle", runner_ == nullptr ? "no kernel runner for this device"
                                                           : "the power limit cannot be read"});
      return {};
    }
    report("power settling after a power-limit step");
    SettleFigures settle;
    settle.from_power_limit_w = constraints_->max_mw / 1000.0;
    settle.to_power_limit_w = constraints_->min_mw / 1000.0;
    settle.sample_interval_s = options_.settle_sample_interval_s;
    settle.window_s = options_.settle_window_s;
    JOULE_TRY(guard_->set_power_limit_mw(gpu_, constraints_->max_mw));
    std::vector<ProbeSample> before;
    std::vector<ProbeSample> after;
    std::optional<double> step_s;
    const double start_s = now_s();
    const double lead_s = options_.settle_window_s / 4;
    const auto tick = [&]() -> Result<bool> {
      ProbeSample reading = JOULE_TRY(sample());
      if (!step_s) {
        before.push_back(reading);
        if (reading.time_s - start_s >= lead_s) {
          JOULE_TRY(guard_->set_power_limit_mw(gpu_, constraints_->min_mw));
          step_s = now_s();
        }
        return true;
      }
      after.push_back(reading);
      return reading.time_s - *step_s < options_.settle_window_s;
    };
    JOULE_TRY(drive(Kernel::kCompute, options_.settle_sample_interval_s, tick));
    fit_settle(before, after, step_s.value_or(start_s), settle);
    card.settle = settle;
    return guard_->restore();
  }

  static void fit_settle(const std::vector<ProbeSample>& before, const std::vector<ProbeSample>& after,
                         double step_s, SettleFigures& settle) {
    if (before.empty() || after.empty()) {
      return;
    }
    double sum = 0;
    for (const auto& reading : before) {
      sum += reading.power_w;
    }
    settle.power_before_w = sum / static_cast<double>(before.size());
    const size_t tail = std::max<size_t>(1, after.size() / 5);
    sum = 0;
    for (size_t i = after.size() - tail; i < after.size(); ++i) {
      sum += after[i].power_w;
    }
    settle.power_after_w = sum / static_cast<double>(tail);
    const double span_w = settle.power_before_w - settle.power_after_w;
    if (std::abs(span_w) < 1e-6) {
      return;
    }
    // τ from ln(f) = −t/τ over the samples still between 5% and 95% of the way (least squares through 0).
    double sum_tt = 0;
    double sum_t_log = 0;
    int fitted = 0;
    bool settled = false;
    for (const auto& reading : after) {
      const double t = reading.time_s - step_s;
      const double remaining = (reading.power_w - settle.power_after_w) / span_w;
      if (!settled && std::abs(remaining) <= 0.05) {
        settle.settled_within_s = t;
        settled = true;
      }
      if (remaining > 0.05 && remaining < 0.95 && t > 0) {
        sum_tt += t * t;
        sum_t_log += t * std::log(remaining);
        ++fitted;
      }
    }
    if (fitted >= 2 && sum_t_log < 0) {
      settle.time_constant_s = -sum_tt / sum_t_log;
    }
  }

  // Runs `iterations` of `kernel` at the settings in force. @return its row (pareto unset).
  Result<FrontierRow> measure_row(Kernel kernel, int64_t iterations, double knob_value) {
    std::vector<ProbeSample> samples;
    samples.push_back(JOULE_TRY(sample()));
    std::optional<Error> error;
    const double interval_s = std::max(options_.run_s / 20, 1e-4);
    const auto result = JOULE_TRY(runner_->run(kernel, iterations, interval_s, [&]() -> bool {
      auto reading = sample();
      if (!reading) {
        error = reading.error();
        return false;
      }
      samples.push_back(*reading);
      return keep_going();
    }));
    if (error) {
      return tl::make_unexpected(*error);
    }
    JOULE_TRY(check_cancel());
    samples.push_back(JOULE_TRY(sample()));
    double energy_j = integrate_power_j(samples);
    if (samples.front().energy_mj && samples.back().energy_mj) {
      energy_j = static_cast<double>(*samples.back().energy_mj - *samples.front().energy_mj) / 1000.0;
    }
    const double span_s = samples.back().time_s - samples.front().time_s;
    FrontierRow row;
    row.knob_value = knob_value;
    row.iterations = result.iterations;
    const auto n = static_cast<double>(std::max<int64_t>(1, result.iterations));
    row.time_per_iteration_s = result.time_s / n;
    row.energy_per_iteration_j = energy_j / n;
    row.average_power_w = span_s > 0 ? energy_j / span_s : 0;
    return row;
  }

  static void mark_pareto(FrontierCurve& curve) {
    std::vector<FrontierPoint<size_t>> points;
    for (size_t i = 0; i < curve.points.size(); ++i) {
      points.push_back({i, curve.points[i].time_per_iteration_s, curve.points[i].energy_per_iteration_j});
    }
    const auto frontier = Frontier<size_t>::from_points(std::move(points));
    for (const auto& point : frontier.points()) {
      curve.points[point.knob].pareto = true;
    }
  }

  // One knob's sweep: for each value, set it and run both kernels.
  Result<void> sweep(Card& card, std::string knob, std::string unit, const std::vector<uint32_t>& values,
                     double to_unit, const std::function<Result<void>(uint32_t)>& set) {
    FrontierCurve compute{"compute", knob, unit, {}};
    FrontierCurve memory{"memory", knob, unit, {}};
    for (const uint32_t value : values) {
      JOULE_TRY(check_cancel());
      report(fmt::format("{} frontier: {:g} {}", knob, value * to_unit, unit));
      JOULE_TRY(set(value));
      JOULE_TRY(hold(options_.knob_settle_s));
      compute.points.push_back(
          JOULE_TRY(measure_row(Kernel::kCompute, compute_iterations_, value * to_unit)));
      memory.points.push_back(JOULE_TRY(measure_row(Kernel::kMemory, memory_iterations_, value * to_unit)));
    }
    JOULE_TRY(guard_->restore());
    mark_pareto(compute);
    mark_pareto(memory);
    card.frontiers.push_back(std::move(compute));
    card.frontiers.push_back(std::move(memory));
    return {};
  }

  // Runs the compute kernel for `seconds` (a new knob value settles under load before it is measured).
  Result<void> hold(double seconds) {
    if (seconds <= 0) {
      return {};
    }
    const double until_s = now_s() + seconds;
    const auto wait = [&]() -> Result<bool> { return now_s() < until_s; };
    return drive(Kernel::kCompute, std::max(seconds / 10, 1e-4), wait);
  }

  // Iterations per run: run_s worth at the settings the probe found (the fastest, normally).
  Result<int64_t> calibrate(Kernel kernel) {
    constexpr int64_t kCalibrationIterations = 4;
    const auto result = JOULE_TRY(runner_->run(kernel, kCalibrationIterations, 1.0, nullptr));
    const double per_iteration_s =
        result.time_s / static_cast<double>(std::max<int64_t>(1, result.iterations));
    if (per_iteration_s <= 0) {
      return int64_t{1000};
    }
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(options_.run_s / per_iteration_s)), 3,
                               100'000'000);
  }

  Result<void> measure_frontiers(Card& card) {
    if (runner_ == nullptr) {
      card.skipped.push_back({"frontiers", "no kernel runner for this device"});
      return {};
    }
    compute_iterations_ = JOULE_TRY(calibrate(Kernel::kCompute));
    memory_iterations_ = JOULE_TRY(calibrate(Kernel::kMemory));
    if (constraints_) {
      std::vector<uint32_t> limits;
      const int n = options_.power_limit_values;
      for (int i = 0; i < n; ++i) {
        const double mw =
            constraints_->max_mw - (constraints_->max_mw - constraints_->min_mw) * (i / double(n - 1));
        limits.push_back(static_cast<uint32_t>(std::llround(mw / 1000.0)) * 1000);
      }
      limits.front() = constraints_->max_mw;
      limits.back() = constraints_->min_mw;
      limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
      JOULE_TRY(sweep(card, "power_limit", "W", limits, 1e-3,
                      [&](uint32_t mw) { return guard_->set_power_limit_mw(gpu_, mw); }));
    }
    if (clocks_.size() >= 2) {
      JOULE_TRY(sweep(card, "sm_clock", "MHz", spread(clocks_, options_.sm_clock_values), 1.0,
                      [&](uint32_t mhz) { return guard_->lock_sm_clocks(gpu_, mhz, mhz); }));
    }
    // The memory clock where it can be locked to more than one value (GDDR boards; HBM ones list one).
    auto memory_clocks = gpu_.supported_memory_clocks_mhz();
    if (!memory_clocks) {
      card.skipped.push_back({"memory_clock", memory_clocks.error().message()});
    } else if (memory_clocks->size() < 2) {
      card.skipped.push_back(
          {"memory_clock",
           memory_clocks->empty()
               ? std::string("the device lists no memory clock")
               : fmt::format("the device has one memory clock ({} MHz): no frontier to measure",
                             memory_clocks->front())});
    } else {
      std::sort(memory_clocks->rbegin(), memory_clocks->rend());
      JOULE_TRY(sweep(card, "memory_clock", "MHz", spread(*memory_clocks, options_.memory_clock_values), 1.0,
                      [&](uint32_t mhz) { return guard_->lock_memory_clocks(gpu_, mhz, mhz); }));
    }
    return {};
  }

  device::Gpu& gpu_;
  Clock& clock_;
  KernelRunner* runner_;
  const ProbeOptions& options_;
  device::SettingsGuard* guard_ = nullptr;
  std::optional<device::PowerLimitConstraints> constraints_;
  std::string constraints_error_;
  std::vector<uint32_t> clocks_;
  std::string clocks_error_;
  int64_t compute_iterations_ = 0;
  int64_t memory_iterations_ = 0;
};

}  // namespace

ProbeOptions quick_probe_options() {
  ProbeOptions options;
  options.quick = true;
  options.counter_window_s = 0.05;
  options.latency_tries = 5;
  options.settle_window_s = 0.05;
  options.power_limit_values = 3;
  options.sm_clock_values = 3;
  options.memory_clock_values = 3;
  options.run_s = 0.005;
  options.knob_settle_s = 0.005;
  return options;
}

Result<Card> probe_gpu(device::Gpu& gpu, Clock& clock, KernelRunner* runner, const ProbeOptions& options) {
  return Prober(gpu, clock, runner, options).run();
}

std::string summarize_card(const Card& card) {
  std::string out =
      fmt::format("{} ({} backend{}), card schema {}\n", card.device.model, card.device.backend,
                  card.device.driver_version.empty() ? "" : ", driver " + card.device.driver_version,
                  card.schema_version);
  const CounterFigures& counter = card.counter;
  if (!counter.has_energy_counter) {
    out += "energy counter: none (energy is integrated from power)\n";
  } else {
    out +=
        fmt::format("energy counter: updates every {}, {} against integrated power over {:.3f} s\n",
                    counter.update_period_s ? fmt::format("{:.3g} ms", *counter.update_period_s * 1e3) : "?",
                    counter.error_pct ? fmt::format("{:+.2f}%", *counter.error_pct) : "?", counter.window_s);
  }
  for (const auto& latency : card.latencies) {
    out += fmt::format("{} latency: median {:.3g} ms, p99 {:.3g} ms over {} tries\n", latency.control,
                       latency.median_s * 1e3, latency.p99_s * 1e3, latency.tries);
  }
  if (card.settle) {
    out += fmt::format(
        "power settles from {:.0f} W to {:.0f} W within {:.3g} ms (time constant {})\n",
        card.settle->power_before_w, card.settle->power_after_w, card.settle->settled_within_s * 1e3,
        card.settle->time_constant_s ? fmt::format("{:.3g} ms", *card.settle->time_constant_s * 1e3)
                                     : "below one sample");
  }
  for (const auto& curve : card.frontiers) {
    int pareto = 0;
    for (const auto& row : curve.points) {
      pareto += row.pareto ? 1 : 0;
    }
    out += fmt::format("{} kernel under {}: {} values, {} on the frontier\n", curve.kernel, curve.knob,
                       curve.points.size(), pareto);
  }
  for (const auto& skipped : card.skipped) {
    out += fmt::format("not measured: {}: {}\n", skipped.what, skipped.why);
  }
  return out;
}

}  // namespace joule::probe
