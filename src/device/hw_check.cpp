// SPDX-License-Identifier: Apache-2.0
// The read-only hardware check.
#include "joule/device/hw_check.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace joule::device {

Result<void> validate(const HwCheckOptions& options) {
  if (!std::isfinite(options.duration_s) || options.duration_s <= 0) {
    return fail(ErrorCode::kInvalidArgument,
                "hardware check: the duration must be a finite number of seconds > 0, got {}",
                options.duration_s);
  }
  if (options.duration_s > kMaxDurationS) {
    return fail(ErrorCode::kInvalidArgument,
                "hardware check: the duration must be at most 100 years ({:g} s), got {:g} s", kMaxDurationS,
                options.duration_s);
  }
  if (!std::isfinite(options.poll_period_s) || options.poll_period_s <= 0 ||
      options.poll_period_s > options.duration_s) {
    return fail(ErrorCode::kInvalidArgument,
                "hardware check: the poll period must be > 0 and at most the duration ({} s), got {} s",
                options.duration_s, options.poll_period_s);
  }
  if (!(options.tolerance_ratio > 0) || !(options.warn_tolerance_ratio >= options.tolerance_ratio)) {
    return fail(ErrorCode::kInvalidArgument,
                "hardware check: need 0 < tolerance_ratio ≤ warn_tolerance_ratio, got {} and {}",
                options.tolerance_ratio, options.warn_tolerance_ratio);
  }
  return {};
}

std::string_view to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass:
      return "PASS";
    case CheckStatus::kWarn:
      return "WARN";
    case CheckStatus::kFail:
      return "FAIL";
    case CheckStatus::kSkip:
      return "SKIP";
  }
  return "?";
}

namespace hw_check_detail {

// What one GPU showed while it was watched.
struct Watch {
  std::vector<std::pair<Nanos, uint64_t>> energy_mj;  // successful counter reads
  std::vector<std::pair<Nanos, uint32_t>> power_mw;   // successful power reads
  std::optional<Error> energy_error;
  std::optional<Error> power_error;
  bool went_backwards = false;
  std::string backwards_detail;
};

// @return the median interval between changes of the value, s; nullopt with fewer than 3 changes.
template <class Value>
std::optional<double> median_update_period_s(const std::vector<std::pair<Nanos, Value>>& reads) {
  std::vector<Nanos> changes;
  for (size_t i = 1; i < reads.size(); ++i) {
    if (reads[i].second != reads[i - 1].second) {
      changes.push_back(reads[i].first);
    }
  }
  if (changes.size() < 3) {
    return std::nullopt;
  }
  std::vector<double> intervals_s;
  for (size_t i = 1; i < changes.size(); ++i) {
    intervals_s.push_back(to_seconds(changes[i] - changes[i - 1]));
  }
  std::nth_element(intervals_s.begin(),
                   intervals_s.begin() + static_cast<std::ptrdiff_t>(intervals_s.size() / 2),
                   intervals_s.end());
  return intervals_s[intervals_s.size() / 2];
}

std::string watts(uint32_t power_mw) {
  return format_watts(power_mw);
}

void check_energy(GpuCheck& out, const Watch& watch, const HwCheckOptions& options) {
  if (!out.info.has_energy_counter) {
    out.items.push_back({"energy counter", CheckStatus::kSkip,
                         "the GPU has no energy counter: joule integrates power samples instead"});
  } else if (watch.energy_mj.size() < 2) {
    out.items.push_back({"energy counter", CheckStatus::kFail,
                         fmt::format("could not read it: {}",
                                     watch.energy_error ? watch.energy_error->message() : "no reading")});
  } else if (watch.went_backwards) {
    out.items.push_back({"energy counter", CheckStatus::kFail, watch.backwards_detail});
  } else {
    out.counter_energy_j =
        static_cast<double>(watch.energy_mj.back().second - watch.energy_mj.front().second) / 1e3;
    out.items.push_back({"energy counter", CheckStatus::kPass,
                         fmt::format("monotonic over {:.1f} s, {} reads, +{:.3f} J", out.watched_s,
                                     watch.energy_mj.size(), *out.counter_energy_j)});
  }
  if (watch.power_mw.size() < 2) {
    out.items.push_back({"power", CheckStatus::kFail,
                         fmt::format("could not read it: {}",
                                     watch.power_error ? watch.power_error->message() : "no reading")});
    return;
  }
  uint32_t lowest = watch.power_mw.front().second;
  uint32_t highest = lowest;
  double integrated_j = 0;
  for (size_t i = 1; i < watch.power_mw.size(); ++i) {
    const auto& [time, power] = watch.power_mw[i];
    const auto& [previous_time, previous_power] = watch.power_mw[i - 1];
    integrated_j += 0.5 * (power + previous_power) / 1e3 * to_seconds(time - previous_time);
    lowest = std::min(lowest, power);
    highest = std::max(highest, power);
  }
  out.items.push_back(
      {"power", CheckStatus::kPass,
       fmt::format("{} reads, {} to {}", watch.power_mw.size(), watts(lowest), watts(highest))});
  if (!out.counter_energy_j) {
    return;
  }
  // Compare over the span both series cover; the counter's span is the reference.
  const double counter_span_s = to_seconds(watch.energy_mj.back().first - watch.energy_mj.front().first);
  const double power_span_s = to_seconds(watch.power_mw.back().first - watch.power_mw.front().first);
  out.integrated_energy_j = power_span_s > 0 ? integrated_j * counter_span_s / power_span_s : integrated_j;
  const double counter_j = *out.counter_energy_j;
  if (!(counter_j > 0)) {
    out.items.push_back({"energy vs power", CheckStatus::kWarn,
                         fmt::format("the counter did not advance over {:.1f} s; integrated power {:.3f} J",
                                     counter_span_s, *out.integrated_energy_j)});
    return;
  }
  const double apart = std::abs(*out.integrated_energy_j - counter_j) / counter_j;
  const CheckStatus status = apart <= options.tolerance_ratio        ? CheckStatus::kPass
                             : apart <= options.warn_tolerance_ratio ? CheckStatus::kWarn
                                                                     : CheckStatus::kFail;
  out.items.push_back(
      {"energy vs power", status,
       fmt::format("counter {:.3f} J, integrated power {:.3f} J: {:.1f}% apart (tolerance {:.0f}%)",
                   counter_j, *out.integrated_energy_j, 100 * apart, 100 * options.tolerance_ratio)});
}

void check_update_periods(GpuCheck& out, const Watch& watch) {
  const auto describe = [](std::optional<double> period_s, const char* what) -> CheckItem {
    if (!period_s) {
      return {fmt::format("{} updates", what), CheckStatus::kSkip,
              "too few changes to measure (constant load, or a reading that never changes)"};
    }
    return {fmt::format("{} updates", what), CheckStatus::kPass,
            fmt::format("every {:.0f} ms (median interval between changes)", *period_s * 1e3)};
  };
  out.power_update_period_s = median_update_period_s(watch.power_mw);
  out.items.push_back(describe(out.power_update_period_s, "power"));
  if (out.info.has_energy_counter) {
    out.energy_update_period_s = median_update_period_s(watch.energy_mj);
    out.items.push_back(describe(out.energy_update_period_s, "energy"));
  }
}

void check_controls(GpuCheck& out, Gpu& gpu) {
  const auto constraints = gpu.power_limit_constraints();
  const auto limit = gpu.power_limit_mw();
  if (constraints && limit) {
    out.items.push_back(
        {"power limit", CheckStatus::kPass,
         fmt::format("{} (range {} to {}, default {})", watts(*limit), watts(constraints->min_mw),
                     watts(constraints->max_mw), watts(constraints->default_mw))});
  } else {
    out.items.push_back(
        {"power limit", CheckStatus::kFail, (constraints ? limit.error() : constraints.error()).message()});
  }
  const auto clocks = gpu.supported_sm_clocks_mhz();
  if (clocks && !clocks->empty()) {
    const auto [lowest, highest] = std::minmax_element(clocks->begin(), clocks->end());
    out.items.push_back({"SM clocks", CheckStatus::kPass,
                         fmt::format("{} supported, {} to {} MHz", clocks->size(), *lowest, *highest)});
  } else {
    out.items.push_back(
        {"SM clocks", clocks ? CheckStatus::kFail : CheckStatus::kWarn,
         clocks ? std::string("the driver lists no supported clock") : clocks.error().message()});
  }
  const GpuTelemetry telemetry = gpu.telemetry();
  std::vector<std::string> read;
  std::vector<std::string> unsupported;
  std::vector<std::string> failed;
  for (const auto field : telemetry_fields()) {
    const Error* error = telemetry.error(field);
    if (error == nullptr) {
      read.emplace_back(telemetry_field_name(field));
    } else if (error->code() == ErrorCode::kNotSupported) {
      unsupported.emplace_back(telemetry_field_name(field));
    } else {
      failed.push_back(fmt::format("{} ({})", telemetry_field_name(field), error->message()));
    }
  }
  std::string detail =
      read.empty() ? std::string("nothing readable") : fmt::format("{}", fmt::join(read, ", "));
  if (!unsupported.empty()) {
    detail += fmt::format("; not supported: {}", fmt::join(unsupported, ", "));
  }
  if (!failed.empty()) {
    detail += fmt::format("; failed: {}", fmt::join(failed, ", "));
  }
  out.items.push_back({"telemetry", failed.empty() ? CheckStatus::kPass : CheckStatus::kWarn, detail});
}

}  // namespace hw_check_detail

std::vector<GpuCheck> check_gpus(const std::vector<Gpu*>& gpus, Clock& clock, const HwCheckOptions& options) {
  using namespace hw_check_detail;
  if (auto valid = validate(options); !valid) {
    throw Exception(valid.error());
  }
  std::vector<Watch> watches(gpus.size());
  const Nanos start = clock.now();
  const Nanos end = start + from_seconds(options.duration_s);
  const Nanos period = from_seconds(options.poll_period_s);
  for (Nanos next = start; clock.now() < end; next += period) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      Watch& watch = watches[i];
      if (gpus[i]->info().has_energy_counter) {
        if (auto energy = gpus[i]->energy_mj()) {
          const Nanos now = clock.now();
          if (!watch.energy_mj.empty() && *energy < watch.energy_mj.back().second && !watch.went_backwards) {
            watch.went_backwards = true;
            watch.backwards_detail =
                fmt::format("went backwards from {} mJ to {} mJ after {:.3f} s",
                            watch.energy_mj.back().second, *energy, to_seconds(now - start));
          }
          watch.energy_mj.emplace_back(now, *energy);
        } else {
          watch.energy_error = energy.error();
        }
      }
      if (auto power = gpus[i]->power_mw()) {
        watch.power_mw.emplace_back(clock.now(), *power);
      } else {
        watch.power_error = power.error();
      }
    }
    const Nanos wait = next + period - clock.now();
    if (wait > Nanos(0)) {
      clock.sleep_for(wait);
    }
  }
  std::vector<GpuCheck> checks;
  for (size_t i = 0; i < gpus.size(); ++i) {
    GpuCheck check;
    check.info = gpus[i]->info();
    check.watched_s = to_seconds(clock.now() - start);
    check.energy_reads = static_cast<int>(watches[i].energy_mj.size());
    check.power_reads = static_cast<int>(watches[i].power_mw.size());
    check.items.push_back({"discovery", CheckStatus::kPass,
                           fmt::format("{} backend, {}{}", check.info.backend, check.info.name,
                                       check.info.uuid.empty() ? "" : ", " + check.info.uuid)});
    check_energy(check, watches[i], options);
    check_update_periods(check, watches[i]);
    check_controls(check, *gpus[i]);
    checks.push_back(std::move(check));
  }
  return checks;
}

int count_status(const std::vector<GpuCheck>& checks, CheckStatus status) {
  int count = 0;
  for (const auto& check : checks) {
    for (const auto& item : check.items) {
      count += item.status == status ? 1 : 0;
    }
  }
  return count;
}

}  // namespace joule::device
