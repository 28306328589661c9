// SPDX-License-Identifier: Apache-2.0
// A frontier card as a prior (joule/probe/prior.hpp): the two kernels' curves of one knob, a workload fitted
// as their mix, and predictions scaled from the workload's own anchor sample.
#include "joule/probe/prior.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace joule::probe {

std::string_view to_string(CardKnob knob) {
  switch (knob) {
    case CardKnob::kPowerLimit:
      return "power_limit";
    case CardKnob::kSmClock:
      return "sm_clock";
    case CardKnob::kMemoryClock:
      return "memory_clock";
  }
  return "unknown";
}

namespace {

bool positive_finite(double value) {
  return std::isfinite(value) && value > 0;
}

std::string skipped_reason(const Card& card, CardKnob knob) {
  for (const Skipped& skipped : card.skipped) {
    if (skipped.what == to_string(knob) || skipped.what == "frontiers") {
      return fmt::format(" (skipped: {})", skipped.why);
    }
  }
  return card.read_only ? " (a --read-only card has no frontiers)" : "";
}

}  // namespace

Result<KnobPrior> KnobPrior::from_card(const Card& card, CardKnob knob, std::string_view source) {
  KnobPrior prior;
  prior.knob_ = knob;
  for (const bool compute : {true, false}) {
    const std::string_view kernel = compute ? "compute" : "memory";
    const auto curve =
        std::find_if(card.frontiers.begin(), card.frontiers.end(),
                     [&](const FrontierCurve& c) { return c.kernel == kernel && c.knob == to_string(knob); });
    if (curve == card.frontiers.end()) {
      return fail(ErrorCode::kInvalidArgument, "{}: the card has no {} kernel frontier under {}{}", source,
                  kernel, to_string(knob), skipped_reason(card, knob));
    }
    if (curve->points.size() < 2) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}: the {} kernel's {} frontier has {} point(s); a prior needs 2", source, kernel,
                  to_string(knob), curve->points.size());
    }
    std::vector<Point>& points = compute ? prior.compute_ : prior.memory_;
    for (size_t i = 0; i < curve->points.size(); ++i) {
      const FrontierRow& row = curve->points[i];
      if (!positive_finite(row.knob_value) || !positive_finite(row.time_per_iteration_s) ||
          !positive_finite(row.average_power_w)) {
        return fail(
            ErrorCode::kInvalidArgument,
            "{}: the {} kernel's {} frontier, point {}: knob value {}, time {} s and power {} W must be "
            "positive",
            source, kernel, to_string(knob), i, row.knob_value, row.time_per_iteration_s,
            row.average_power_w);
      }
      points.push_back({row.knob_value, row.time_per_iteration_s, row.average_power_w});
      prior.knob_values_.push_back(row.knob_value);
    }
    std::sort(points.begin(), points.end(),
              [](const Point& a, const Point& b) { return a.knob_value < b.knob_value; });
    // Repeated knob values would make the interpolation divide by zero: keep the first of each.
    points.erase(std::unique(points.begin(), points.end(),
                             [](const Point& a, const Point& b) { return a.knob_value == b.knob_value; }),
                 points.end());
    if (points.size() < 2) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}: the {} kernel's {} frontier has only one distinct knob value", source, kernel,
                  to_string(knob));
    }
  }
  std::sort(prior.knob_values_.begin(), prior.knob_values_.end(), std::greater<>());
  prior.knob_values_.erase(std::unique(prior.knob_values_.begin(), prior.knob_values_.end()),
                           prior.knob_values_.end());
  return prior;
}

double KnobPrior::clamp_knob(double knob_value) const {
  return std::clamp(knob_value, min_knob_value(), max_knob_value());
}

std::pair<double, double> KnobPrior::interpolate(const std::vector<Point>& curve, double knob_value) {
  const Point& top = curve.back();
  const double value = std::clamp(knob_value, curve.front().knob_value, top.knob_value);
  auto upper = std::lower_bound(curve.begin(), curve.end(), value,
                                [](const Point& p, double v) { return p.knob_value < v; });
  if (upper == curve.begin()) {
    return {upper->time_s / top.time_s, upper->power_w / top.power_w};
  }
  const Point& high = *upper;
  const Point& low = *(upper - 1);
  const double fraction = (value - low.knob_value) / (high.knob_value - low.knob_value);
  const double time_s = low.time_s + fraction * (high.time_s - low.time_s);
  const double power_w = low.power_w + fraction * (high.power_w - low.power_w);
  return {time_s / top.time_s, power_w / top.power_w};
}

std::pair<double, double> KnobPrior::kernel_relative(bool compute, double knob_value) const {
  return interpolate(compute ? compute_ : memory_, clamp_knob(knob_value));
}

std::pair<double, double> KnobPrior::mixed(double share, double knob_value) const {
  const auto [compute_time, compute_power] = kernel_relative(true, knob_value);
  const auto [memory_time, memory_power] = kernel_relative(false, knob_value);
  return {share * compute_time + (1 - share) * memory_time,
          share * compute_power + (1 - share) * memory_power};
}

Result<PriorFit> KnobPrior::fit(std::span<const KnobSample> samples) const {
  if (samples.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a {} prior needs at least one sample of the workload",
                to_string(knob_));
  }
  for (const KnobSample& sample : samples) {
    if (!std::isfinite(sample.knob_value) || !positive_finite(sample.time_s) ||
        !positive_finite(sample.energy_j)) {
      return fail(ErrorCode::kInvalidArgument,
                  "a sample at {} {} has time {} s and energy {} J: both must be positive and finite",
                  sample.knob_value, knob_ == CardKnob::kPowerLimit ? "W" : "MHz", sample.time_s,
                  sample.energy_j);
    }
  }
  PriorFit fit;
  fit.anchor =
      *std::max_element(samples.begin(), samples.end(),
                        [](const KnobSample& a, const KnobSample& b) { return a.knob_value < b.knob_value; });
  const double anchor_power_w = fit.anchor.energy_j / fit.anchor.time_s;
  const auto relative_errors = [&](double share) {
    const auto [anchor_time, anchor_power] = mixed(share, fit.anchor.knob_value);
    double time_squares = 0;
    double power_squares = 0;
    for (const KnobSample& sample : samples) {
      const auto [time, power] = mixed(share, sample.knob_value);
      const double predicted_time_s = fit.anchor.time_s * time / anchor_time;
      const double predicted_power_w = anchor_power_w * power / anchor_power;
      time_squares += std::pow(predicted_time_s / sample.time_s - 1, 2);
      power_squares += std::pow(predicted_power_w / (sample.energy_j / sample.time_s) - 1, 2);
    }
    return std::pair{time_squares, power_squares};
  };
  const bool one_knob_value = std::all_of(samples.begin(), samples.end(), [&](const KnobSample& sample) {
    return clamp_knob(sample.knob_value) == clamp_knob(fit.anchor.knob_value);
  });
  if (one_knob_value) {
    // One operating point says nothing about the slope: place the workload by its power between the two
    // kernels' powers at that knob value.
    const double value = clamp_knob(fit.anchor.knob_value);
    const auto top_power = [&](const std::vector<Point>& curve) { return curve.back().power_w; };
    const double compute_power_w = kernel_relative(true, value).second * top_power(compute_);
    const double memory_power_w = kernel_relative(false, value).second * top_power(memory_);
    fit.compute_share =
        compute_power_w > memory_power_w
            ? std::clamp((anchor_power_w - memory_power_w) / (compute_power_w - memory_power_w), 0.0, 1.0)
            : 1.0;
  } else {
    double best = std::numeric_limits<double>::infinity();
    constexpr int kShareSteps = 1000;
    for (int step = 0; step <= kShareSteps; ++step) {
      const double share = static_cast<double>(step) / kShareSteps;
      const auto [time_squares, power_squares] = relative_errors(share);
      if (time_squares + power_squares < best) {
        best = time_squares + power_squares;
        fit.compute_share = share;
      }
    }
  }
  fit.time_residual =
      std::sqrt(relative_errors(fit.compute_share).first / static_cast<double>(samples.size()));
  return fit;
}

KnobSample KnobPrior::predict(const PriorFit& fit, double knob_value) const {
  const auto [anchor_time, anchor_power] = mixed(fit.compute_share, fit.anchor.knob_value);
  const auto [time, power] = mixed(fit.compute_share, knob_value);
  const double time_s = fit.anchor.time_s * time / anchor_time;
  const double power_w = fit.anchor.energy_j / fit.anchor.time_s * power / anchor_power;
  return {knob_value, time_s, time_s * power_w};
}

}  // namespace joule::probe
