// SPDX-License-Identifier: Apache-2.0
// joule/plan/card_profile.hpp — Perseus's profile from a frontier card: measure each stage's forward and
// backward at a few SM clocks, fit each to the card (joule::probe::KnobPrior, CardKnob::kSmClock) and predict
// the other clocks (docs/perseus-live.md, "Starting from a frontier card").
//
// Without a card the live scheduler sweeps every clock from the highest down until energy rises; with one
// it measures only card_probe_indices() (the highest clock and a few lower ones), fits every (stage,
// instruction) and plans on the measured + predicted profile — unless a fit's residual is over the
// threshold: then the card does not describe that computation and the job's sweep goes on as without a card.
//
//   auto prior = joule::probe::KnobPrior::from_card(card, joule::probe::CardKnob::kSmClock, "card.json");
//   auto indices = joule::plan::card_probe_indices(clocks_mhz, {});
//   ... measure every (stage, instruction) at clocks_mhz[i] for i in indices ...
//   auto predicted = joule::plan::predict_card_profile(*prior, measured, clocks_mhz, {});
//   if (predicted->profile) plan(*predicted->profile); else sweep the rest (predicted->fallback_stages).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/probe/prior.hpp"

namespace joule::plan {

/// How a profile is made from a card.
struct CardProfileOptions {
  /// SM clocks measured per (stage, instruction): the highest and probe_clocks − 1 lower ones, evenly
  /// spread in MHz down to lowest_probe_ratio × the highest. The prior has one free parameter (the compute
  /// share): the highest and the lowest pin it and the correction, the ones between check it. At least 2.
  int probe_clocks = 3;
  /// The lowest probe clock, as a fraction of the highest (the nearest clock the GPUs support). Plans use
  /// clocks from the top down to about where a computation's energy is least, and the card's own kernels
  /// have their least energy at 0.45 to 0.5 of the top clock on the simulated GPUs (v100: 675 of 1380 MHz):
  /// probing down to 0.4 brackets that region, so the clocks plans choose are interpolated between
  /// measurements, not extrapolated below them (0.6 and 0.5 were measured too: docs/perseus-live.md).
  double lowest_probe_ratio = 0.4;
  /// The largest error of the held-out check (CardFit::check_time_error, check_energy_error) accepted: over
  /// it the card does not describe that computation between the measured clocks and its stage is profiled
  /// as without a card. 5%: a held-out clock is predicted across twice the span the profile's own
  /// predictions cross (its neighbours' gap, not its own), and the error of interpolating a smooth curve
  /// grows with the square of the span, so 5% held out is about 1.25% between the profile's measured clocks;
  /// a plan's energy errs by less than its computations' (docs/perseus-live.md, "Starting from a frontier
  /// card", measures thresholds of 2, 5 and 10% and noisy measurements).
  double max_residual = 0.05;
  /// The predicted profile stops below the clock where every (stage, instruction)'s predicted energy has
  /// stayed more than stop_energy_rise above its least for patience clocks in a row: the live sweep's rule
  /// (LiveOptions::profile_stop_energy_rise, profile_patience) on predictions.
  double stop_energy_rise = 0.02;
  int patience = 3;
};

/// @return kInvalidArgument naming the option out of range.
Result<void> validate(const CardProfileOptions& options);

/// @return how many clocks the live scheduler measures with a card: at least `probe_clocks`, rounded up to
/// fill the profiling rounds they need (a round measures max(1, microbatches / samples) clocks whatever
/// they are, so the extra ones cost no iteration), at most 64.
int card_probe_count(int probe_clocks, int microbatches, int samples);

/// @return the indices into `clocks_mhz` (descending) of the clocks to measure: 0 (the highest) and
/// options.probe_clocks − 1 more, evenly spaced in MHz down to lowest_probe_ratio × the highest (each the
/// nearest clock, none twice), ascending. Fewer when there are fewer clocks. Empty for no clocks.
std::vector<size_t> card_probe_indices(std::span<const uint32_t> clocks_mhz,
                                       const CardProfileOptions& options);

/// One (stage, instruction) fitted to the card.
struct CardFit {
  int stage = 0;
  Instruction instruction = Instruction::kForward;
  probe::PriorFit fit;
  double time_residual = 0;    ///< RMS relative error of the fit's predicted times at the measured clocks
  double energy_residual = 0;  ///< the same for energies
  /// The check: the largest relative error of the profile's prediction (fit and correction) at a measured
  /// clock between the highest and the lowest, made without that clock's measurement; 0 with fewer than
  /// 3 measured clocks.
  double check_time_error = 0;
  double check_energy_error = 0;
  bool fits = false;  ///< both check errors ≤ options.max_residual
};

/// A profile predicted from a card.
struct CardProfile {
  std::vector<CardFit> fits;         ///< stage-major, forward then backward
  std::vector<int> fallback_stages;  ///< stages with a computation that does not fit, ascending
  /// The profile at clocks_mhz[0, clocks_used): measured at the probe clocks, predicted elsewhere; nullopt
  /// when a stage falls back.
  std::optional<Profile> profile;
  size_t clocks_used = 0;
  /// What happened, for a log line: "card.json fits every computation (largest residual 0.4%, stage 2
  /// backward): 3 of 84 clocks measured, 57 predicted" or "... stage 1 forward 3.2% > 1.0%: ...".
  std::string summary;
};

/// Measurements of one (stage, instruction) at the probe clocks: knob_value is the clock (MHz).
using CardMeasurements = std::vector<std::array<std::vector<probe::KnobSample>, 2>>;

/// Fits every (stage, instruction) of `measured` ([stage][0 forward, 1 backward], each at least one sample)
/// and predicts every clock of `clocks_mhz` (descending) down to the stop rule: measured clocks keep their
/// measurement; elsewhere the prior's prediction is multiplied by its error at the measured clocks
/// (measured / predicted), interpolated linearly in MHz between the nearest measured clocks and held below
/// the lowest — the card gives the curve's shape between measurements, the measurements pin its level. Each
/// computation is checked by predicting its interior measured clocks without them (CardFit::check_*).
/// `card_name` names the card in the summary. Errors (kInvalidArgument): no stage, a (stage, instruction)
/// without samples, a sample's clock not in `clocks_mhz`, the prior's fit() errors, invalid options.
Result<CardProfile> predict_card_profile(const probe::KnobPrior& prior, const CardMeasurements& measured,
                                         std::span<const uint32_t> clocks_mhz,
                                         const CardProfileOptions& options, const std::string& card_name);

/// @return what a sweep of `truth` measures at `indices` of its clocks: the measurements
/// predict_card_profile() takes (for benches and tests, which treat a full profile as the GPUs).
CardMeasurements measure_profile_at(const Profile& truth, std::span<const size_t> indices);

/// Reads the card at `path` for a stage GPU: probe::read_card() against probe::card_identity_of(), so a card
/// for another model or driver is refused naming both, and a newer schema, a malformed card, a missing file
/// with read_card()'s messages.
Result<probe::Card> read_stage_card(const std::string& path, const device::Gpu& gpu);

/// Reads the card at `path` for a job whose GPUs this process does not see (joule serve: ranks send their
/// clocks, not their model): read_card()'s errors but the device check, which the job's ranks make
/// (read_stage_card()).
Result<probe::Card> read_job_card(const std::string& path);

}  // namespace joule::plan
