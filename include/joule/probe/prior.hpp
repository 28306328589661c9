// SPDX-License-Identifier: Apache-2.0
// joule/probe/prior.hpp — a frontier card as a prior: predict a workload's time and energy per unit of work
// at every value of a knob from a few measurements of it and the card's two kernels (docs/cards.md, "Cards
// as priors").
//
// The model: a workload behaves as a mix of the card's compute kernel (share w) and memory kernel (1 − w).
// For each kernel k the card gives, at each knob value v, the time of one iteration and the average power;
// relative to the kernel's figures at the highest knob value they are τ_k(v) and π_k(v) (linear between the
// card's points). The workload's relative time and power are τ(v) = w·τ_c(v) + (1 − w)·τ_m(v) and
// π(v) = w·π_c(v) + (1 − w)·π_m(v); a prediction at v scales the anchor sample (the one at the highest knob
// value measured) by τ(v)/τ(v_anchor) and π(v)/π(v_anchor). With two or more samples w minimises the squared
// relative errors of the samples' predicted times and powers (a search over w in steps of 0.001); with one,
// w is where the sample's power lies between the two kernels' powers at its knob value (a workload drawing as
// much as the compute kernel is compute-bound).
//
// Typical use (an optimizer that would otherwise measure every knob value):
//
//   auto prior = joule::probe::KnobPrior::from_card(card, joule::probe::CardKnob::kPowerLimit, "card.json");
//   std::vector<joule::probe::KnobSample> samples = {{250, step_time_s, step_energy_j}};
//   auto fit = prior->fit(samples);
//   for (double v : prior->knob_values()) use(prior->predict(*fit, v));
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/probe/card.hpp"

namespace joule::probe {

/// The knob a prior predicts over.
enum class CardKnob {
  kPowerLimit,   ///< power limit, W (the card's "power_limit" curves)
  kSmClock,      ///< locked SM clock, MHz (the card's "sm_clock" curves)
  kMemoryClock,  ///< locked memory clock, MHz (the card's "memory_clock" curves, where the GPU has several)
};

/// @return "power_limit", "sm_clock" or "memory_clock" (the card's `frontiers[].knob`).
std::string_view to_string(CardKnob knob);

/// One measurement of a unit of work (a training step, a pipeline stage's forward or backward, a serving
/// iteration) at one knob value, or a prediction of one.
struct KnobSample {
  double knob_value = 0;  ///< W (power limit) or MHz (SM clock)
  double time_s = 0;      ///< time of one unit, s (> 0)
  double energy_j = 0;    ///< energy of one unit, J (> 0)
};

/// A workload fitted to a card.
struct PriorFit {
  double compute_share = 1;  ///< w in [0, 1]: 1 behaves as the compute kernel, 0 as the memory kernel
  KnobSample anchor;         ///< the sample predictions are scaled from: the one at the highest knob value
  /// Root-mean-square relative error of the predicted times of the samples, as a fraction (0.02 = 2%); 0
  /// with one sample. A large figure says the card does not describe this workload well.
  double time_residual = 0;
};

/// The prior of one knob from one card.
class KnobPrior {
 public:
  /// Builds the prior of `knob` from `card`; `source` (a path) names the card in errors.
  /// Errors (kInvalidArgument), each naming `source`: the card has no compute or no memory curve for the knob
  /// (a read-only card, or the knob was skipped: the card's reason is quoted), a curve with fewer than 2
  /// points, or a point whose knob value, time or power is not positive and finite.
  static Result<KnobPrior> from_card(const Card& card, CardKnob knob, std::string_view source);

  /// @return the knob.
  CardKnob knob() const { return knob_; }
  /// @return the card's knob values (union of both curves'), highest first; W or MHz.
  const std::vector<double>& knob_values() const { return knob_values_; }
  /// @return the highest knob value of the card, W or MHz.
  double max_knob_value() const { return knob_values_.front(); }
  /// @return the lowest knob value of the card, W or MHz.
  double min_knob_value() const { return knob_values_.back(); }

  /// Fits a workload from `samples` (at least one; distinct knob values are not required).
  /// Errors (kInvalidArgument): no samples; a sample whose time or energy is not positive and finite, or
  /// whose knob value is not finite. Knob values outside the card's range are clamped into it.
  Result<PriorFit> fit(std::span<const KnobSample> samples) const;

  /// @return the predicted time and energy of one unit at `knob_value` (clamped into the card's range; the
  /// returned knob_value is the one asked for).
  KnobSample predict(const PriorFit& fit, double knob_value) const;

  /// @return {relative time, relative power} of the card's compute kernel (`compute` true) or memory kernel
  /// at `knob_value` (clamped), relative to the kernel at the card's highest knob value: τ_k(v), π_k(v).
  std::pair<double, double> kernel_relative(bool compute, double knob_value) const;

 private:
  struct Point {
    double knob_value;
    double time_s;
    double power_w;
  };
  KnobPrior() = default;
  static std::pair<double, double> interpolate(const std::vector<Point>& curve, double knob_value);
  double clamp_knob(double knob_value) const;
  /// {τ(v), π(v)} of a workload with compute share `share`.
  std::pair<double, double> mixed(double share, double knob_value) const;

  CardKnob knob_ = CardKnob::kPowerLimit;
  std::vector<Point> compute_;  // ascending knob value
  std::vector<Point> memory_;   // ascending knob value
  std::vector<double> knob_values_;
};

}  // namespace joule::probe
