// SPDX-License-Identifier: Apache-2.0
// The power-limit optimizer starting from a frontier card (joule/optimize/power_limit_card.hpp): the card's
// identity check, the windows its figures justify, and the guide that decides which limits to measure.
#include "joule/optimize/power_limit_card.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "joule/core/units.hpp"

namespace joule::optimize {

namespace {

// Steps of `step_time_s` that cover `span_s`, as a double capped far above any option's range so that the
// conversion to int cannot overflow.
int steps_covering(double span_s, double step_time_s) {
  if (!(step_time_s > 0) || !std::isfinite(span_s)) {
    return std::numeric_limits<int>::max();
  }
  // 1e-9 steps of slack: a span of exactly N steps (up to rounding) is N steps, not N + 1.
  return static_cast<int>(std::min(std::ceil(span_s / step_time_s - 1e-9), 1e9));
}

std::string card_watts(uint32_t power_mw) {
  return fmt::format("{}", mw_to_w(power_mw));
}

// The limit `policy` picks from `points`; the fastest when no point meets its bound (as the optimizer does).
Result<uint32_t> pick_limit(std::vector<FrontierPoint<uint32_t>> points, const Policy& policy) {
  const auto frontier = Frontier<uint32_t>::from_points(std::move(points));
  auto selected = select(frontier, policy);
  if (!selected && selected.error().code() == ErrorCode::kNotFound) {
    selected = size_t{0};
  }
  const size_t index = JOULE_TRY(std::move(selected));
  return frontier.points()[index].knob;
}

}  // namespace

Result<probe::Card> read_card_for(const std::string& path, const device::Gpu& gpu) {
  return probe::read_card(path, probe::card_identity_of(gpu.info()));
}

CardWindows card_windows(const probe::Card& card, double step_time_s, int warmup_steps, int profile_steps) {
  CardWindows windows{warmup_steps, profile_steps, ""};
  std::optional<double> latency_s;
  for (const auto& latency : card.latencies) {
    if (latency.control == "power_limit") {
      latency_s = latency.p99_s;
    }
  }
  const std::optional<double> settle_s =
      card.settle ? std::optional<double>(card.settle->settled_within_s) : std::nullopt;
  if (latency_s || settle_s) {
    const double span_s = latency_s.value_or(0) + settle_s.value_or(0);
    windows.warmup_steps = std::min(warmup_steps, std::max(1, steps_covering(span_s, step_time_s)));
    windows.why = fmt::format(
        "warm-up {} step(s) to cover the card's power-limit latency (p99 {:.3g} s) and settling ({:.3g} s) "
        "at {:.4g} s a step",
        windows.warmup_steps, latency_s.value_or(0), settle_s.value_or(0), step_time_s);
  } else {
    windows.why = fmt::format("warm-up {} steps (the card has no latency or settling figure)", warmup_steps);
  }
  const auto& counter = card.counter;
  if (counter.has_energy_counter && counter.update_period_s && *counter.update_period_s > 0) {
    const double window_s = kCardWindowUpdatePeriods * *counter.update_period_s;
    windows.profile_steps =
        std::min(profile_steps, std::max(kCardMinProfileSteps, steps_covering(window_s, step_time_s)));
    windows.why += fmt::format(
        "; profile {} step(s) to span {:g} updates of the card's energy counter ({:.3g} s each, so at most "
        "0.2% of a window is lost at its ends; at least {} steps)",
        windows.profile_steps, kCardWindowUpdatePeriods, *counter.update_period_s, kCardMinProfileSteps);
  } else {
    windows.why += fmt::format(
        "; profile {} steps (the card {}, so it bounds no shorter window)", profile_steps,
        counter.has_energy_counter ? "has no counter update period" : "says the GPU has no energy counter");
  }
  return windows;
}

Result<CardGuide> CardGuide::make(const probe::Card& card, std::string_view source) {
  auto prior = JOULE_TRY(probe::KnobPrior::from_card(card, probe::CardKnob::kPowerLimit, source));
  return CardGuide(std::move(prior));
}

bool CardGuide::measured(uint32_t power_limit_mw) const {
  const double watts = mw_to_w(power_limit_mw);
  return std::any_of(samples_.begin(), samples_.end(),
                     [watts](const probe::KnobSample& sample) { return sample.knob_value == watts; });
}

probe::KnobSample CardGuide::predict(uint32_t power_limit_mw) const {
  if (!fit_) {
    throw Exception(ErrorCode::kState, "CardGuide::predict before any measurement");
  }
  return prior_.predict(*fit_, mw_to_w(power_limit_mw));
}

Result<void> CardGuide::record(uint32_t power_limit_mw, double time_per_step_s, double energy_per_step_j) {
  const probe::KnobSample sample{mw_to_w(power_limit_mw), time_per_step_s, energy_per_step_j};
  if (fit_ && std::isfinite(time_per_step_s) && time_per_step_s > 0 && std::isfinite(energy_per_step_j) &&
      energy_per_step_j > 0) {
    const probe::KnobSample predicted = prior_.predict(*fit_, sample.knob_value);
    const double error = std::max(std::abs(predicted.time_s / time_per_step_s - 1),
                                  std::abs(predicted.energy_j / energy_per_step_j - 1));
    largest_error_ = std::max(largest_error_, error);
    ++checks_;
  }
  samples_.push_back(sample);
  auto fit = prior_.fit(samples_);
  if (!fit) {
    samples_.pop_back();
    return tl::make_unexpected(fit.error());
  }
  fit_ = *fit;
  residual_ = samples_.size() >= 2 ? fit_->time_residual : 0;
  return {};
}

Result<CardDecision> CardGuide::next(const std::vector<uint32_t>& candidates_mw, const Policy& policy) {
  if (!fit_) {
    return fail(ErrorCode::kState, "the card guide has no measurement yet");
  }
  if (checks_ > 0 && largest_error_ > kCardFallbackError) {
    return CardDecision{CardDecision::Kind::kFallback, 0,
                        fmt::format("the card predicted a measured limit {:.1f}% off (more than {:g}%)",
                                    largest_error_ * 100, kCardFallbackError * 100)};
  }
  if (residual_ > kCardFallbackResidual) {
    return CardDecision{CardDecision::Kind::kFallback, 0,
                        fmt::format("the card fits the measured limits with a time residual of {:.1f}% (more "
                                    "than {:g}%)",
                                    residual_ * 100, kCardFallbackResidual * 100)};
  }
  std::vector<FrontierPoint<uint32_t>> measured_points;
  std::vector<size_t> unmeasured;
  for (size_t i = 0; i < candidates_mw.size(); ++i) {
    if (!measured(candidates_mw[i])) {
      unmeasured.push_back(i);
    }
  }
  for (const auto& sample : samples_) {
    measured_points.push_back(
        {static_cast<uint32_t>(round_w_to_mw(sample.knob_value)), sample.time_s, sample.energy_j});
  }
  if (unmeasured.empty()) {
    return CardDecision{CardDecision::Kind::kDone, 0, "every limit is measured"};
  }
  const auto predicted_point = [&](size_t index, double margin) {
    const probe::KnobSample p = predict(candidates_mw[index]);
    return FrontierPoint<uint32_t>{candidates_mw[index], p.time_s * (1 - margin), p.energy_j * (1 - margin)};
  };
  const auto index_of = [&](uint32_t limit_mw) {
    return static_cast<size_t>(std::find(candidates_mw.begin(), candidates_mw.end(), limit_mw) -
                               candidates_mw.begin());
  };
  if (checks_ == 0) {
    // Check the card once before trusting it: at the limit it predicts best, or at the best of the others.
    auto points = measured_points;
    for (const size_t i : unmeasured) {
      points.push_back(predicted_point(i, 0));
    }
    const uint32_t best = JOULE_TRY(pick_limit(points, policy));
    if (!measured(best)) {
      return CardDecision{CardDecision::Kind::kMeasure, index_of(best),
                          fmt::format("the card predicts {} W best for {}; checking it", card_watts(best),
                                      joule::describe(policy))};
    }
    std::vector<FrontierPoint<uint32_t>> others;
    others.reserve(unmeasured.size());
    for (const size_t i : unmeasured) {
      others.push_back(predicted_point(i, 0));
    }
    const uint32_t runner_up = JOULE_TRY(pick_limit(others, policy));
    return CardDecision{CardDecision::Kind::kMeasure, index_of(runner_up),
                        fmt::format("the card predicts the measured {} W best for {}; checking it at the "
                                    "best of the others, {} W",
                                    card_watts(best), joule::describe(policy), card_watts(runner_up))};
  }
  const double margin = std::max(kCardMinMargin, largest_error_);
  std::vector<size_t> contenders;
  for (const size_t i : unmeasured) {
    auto points = measured_points;
    points.push_back(predicted_point(i, margin));
    if (JOULE_TRY(pick_limit(points, policy)) == candidates_mw[i]) {
      contenders.push_back(i);
    }
  }
  if (contenders.empty()) {
    return CardDecision{
        CardDecision::Kind::kDone, 0,
        fmt::format("{} limit(s) left unmeasured: each is predicted to lose to a measured one even if "
                    "{:.1f}% faster and more frugal than predicted (the largest error of the card's "
                    "checks, at least {:g}%)",
                    unmeasured.size(), margin * 100, kCardMinMargin * 100)};
  }
  auto points = measured_points;
  for (const size_t i : contenders) {
    points.push_back(predicted_point(i, 0));
  }
  const uint32_t best = JOULE_TRY(pick_limit(points, policy));
  if (!measured(best)) {
    return CardDecision{CardDecision::Kind::kMeasure, index_of(best),
                        fmt::format("the card predicts {} W best of {} limit(s) that may win",
                                    card_watts(best), contenders.size())};
  }
  // Every contender's nominal prediction loses, but within the margin: measure the one nearest the best.
  size_t nearest = contenders.front();
  for (const size_t i : contenders) {
    const auto distance = [&](size_t j) { return std::abs(static_cast<int64_t>(candidates_mw[j]) - best); };
    if (distance(i) < distance(nearest)) {
      nearest = i;
    }
  }
  return CardDecision{CardDecision::Kind::kMeasure, nearest,
                      fmt::format("{} W may beat the measured {} W within the card's {:.1f}% margin",
                                  card_watts(candidates_mw[nearest]), card_watts(best), margin * 100)};
}

}  // namespace joule::optimize
