// SPDX-License-Identifier: Apache-2.0
// joule/optimize/power_limit_card.hpp — the power-limit optimizer starting from a frontier card
// (docs/optimize.md, "Starting from a frontier card"): which card fits the GPUs, how long the windows after
// the first candidate need to be by the card's own figures, and which limits the card's prior rules out.
//
// PowerLimitOptimizer uses these when PowerLimitOptions::card is set; they are public so that a caller (the
// CLI, the Python binding, a bench) reads a card the same way and tests can drive the guide without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/frontier.hpp"
#include "joule/device/gpu.hpp"
#include "joule/probe/card.hpp"
#include "joule/probe/prior.hpp"

namespace joule::optimize {

/// Reads the card at `path` for `gpu`: probe::read_card()'s errors, e.g. kInvalidArgument "card.json is for
/// Tesla V100-PCIE-32GB (simulated), not NVIDIA A40 (simulated): make a card for this device with 'joule
/// probe'", kParse "card.json: card schema version 2 is newer than this joule reads (1): upgrade joule".
Result<probe::Card> read_card_for(const std::string& path, const device::Gpu& gpu);

/// The warm-up and profile windows of the candidates after the first, as the card's figures justify them.
struct CardWindows {
  int warmup_steps = 0;   ///< ≤ the options' warmup_steps
  int profile_steps = 0;  ///< ≤ the options' profile_steps
  std::string why;        ///< how they were derived, for the log
};

/// Counter updates a window must span: the counter is read at both ends, so a window loses at most one
/// update period of energy at each, ≤ 2/1000 = 0.2% of it.
inline constexpr double kCardWindowUpdatePeriods = 1000;
/// Profile steps a card never goes below: the counter says nothing about the workload's own step-to-step
/// variation, which a few steps average.
inline constexpr int kCardMinProfileSteps = 3;

/// @return the windows for a job whose step takes `step_time_s` (measured at the first candidate):
/// - warm-up: the steps that cover the card's power-limit change latency (p99) plus its settling time
///   (settled_within_s), at least 1 (the step during which the limit changes) and at most `warmup_steps`;
///   `warmup_steps` if the card has neither figure;
/// - profile: the steps that span kCardWindowUpdatePeriods of the card's counter update period, at least
///   kCardMinProfileSteps and at most `profile_steps`; `profile_steps` if the card has no energy counter or
///   no update period (energy then comes from power samples, whose error the card does not bound).
CardWindows card_windows(const probe::Card& card, double step_time_s, int warmup_steps, int profile_steps);

/// The prior's errors that make the optimizer stop predicting and measure every limit (the fallback).
/// Justification in docs/optimize.md: beyond them the workload does not behave as a mix of the card's two
/// kernels, and the safety margin they imply would keep almost every limit anyway.
inline constexpr double kCardFallbackError = 0.10;     ///< a check's relative error of time or energy
inline constexpr double kCardFallbackResidual = 0.05;  ///< the fit's time residual over the measured limits
/// The smallest margin by which an unmeasured limit must be predicted worse to be left out: short windows'
/// precision (0.2%), the card's linear interpolation between its points, and a real GPU's run-to-run
/// variation (~1%).
inline constexpr double kCardMinMargin = 0.02;

/// What the guide says to do next.
struct CardDecision {
  enum class Kind {
    kMeasure,   ///< measure `candidate`
    kDone,      ///< choose among the measured limits: the unmeasured ones cannot win
    kFallback,  ///< the card does not describe the workload: measure every remaining limit
  };
  Kind kind = Kind::kMeasure;
  size_t candidate = 0;  ///< index into the candidates, for kMeasure
  std::string why;       ///< for the log
};

/// Decides, from the measurements so far, which limit to measure next. Every input is an aggregated figure,
/// so every rank of a job takes the same decisions.
///
/// The rule: fit the card's prior to the measured limits; each check (a limit measured after being predicted)
/// records the prediction's relative error. Fall back when a check's error exceeds kCardFallbackError or the
/// fit's residual exceeds kCardFallbackResidual. Otherwise, with margin m = max(kCardMinMargin, the largest
/// error seen), an unmeasured limit is a contender if the policy, given the measured limits and that limit's
/// prediction made m better in time and energy, would pick it. Measure the contender the policy picks from
/// the measured limits and all contenders' predictions (or the contender nearest the best measured limit);
/// with no contender left, done. At least one check is made before done (after the first limit alone, the
/// limit the prior predicts best, or if that is the measured one, the best of the others).
class CardGuide {
 public:
  /// @return the guide for `card`'s power-limit curves; KnobPrior::from_card()'s errors naming `source`.
  static Result<CardGuide> make(const probe::Card& card, std::string_view source);

  /// Records the measurement of candidate `power_limit_mw`: per-step time (s) and energy (J). If the limit
  /// was predicted before (it was not the first measured), the prediction's error is recorded as a check.
  /// Errors: those of KnobPrior::fit() (a non-positive figure).
  Result<void> record(uint32_t power_limit_mw, double time_per_step_s, double energy_per_step_j);

  /// @return what to do next over `candidates_mw` (highest first) for `policy` (max_power_w filled in).
  /// Errors: those of KnobPrior::fit() and joule::select() other than kNotFound.
  Result<CardDecision> next(const std::vector<uint32_t>& candidates_mw, const Policy& policy);

  /// @return the largest relative error of a check so far (0 before any).
  double largest_error() const { return largest_error_; }
  /// @return the fit's time residual over the measured limits (0 with fewer than two).
  double time_residual() const { return residual_; }
  /// @return the prediction at `power_limit_mw` from the measurements so far (per step). @pre one recorded.
  probe::KnobSample predict(uint32_t power_limit_mw) const;

 private:
  explicit CardGuide(probe::KnobPrior prior) : prior_(std::move(prior)) {}
  bool measured(uint32_t power_limit_mw) const;

  probe::KnobPrior prior_;
  std::vector<probe::KnobSample> samples_;  // W, per-step s and J
  std::optional<probe::PriorFit> fit_;
  double largest_error_ = 0;
  double residual_ = 0;
  int checks_ = 0;
};

}  // namespace joule::optimize
