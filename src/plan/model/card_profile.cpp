// SPDX-License-Identifier: Apache-2.0
// Perseus's profile from a frontier card (joule/plan/card_profile.hpp): a few clocks measured per
// computation, the rest predicted by the card's prior, checked by each fit's residual.
#include "joule/plan/card_profile.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/file.hpp"

namespace joule::plan {

namespace {

size_t card_instruction_index(Instruction instruction) {
  return instruction == Instruction::kForward ? 0 : 1;
}

constexpr std::array<Instruction, 2> kCardInstructions = {Instruction::kForward, Instruction::kBackward};

// The smallest n such that the sweep's stop rule holds on energies[.][0, n); energies.front().size() if none.
size_t card_stop_index(const std::vector<std::vector<double>>& energies, double rise, int patience) {
  const size_t clocks = energies.empty() ? 0 : energies.front().size();
  const auto wait = static_cast<size_t>(patience);
  for (size_t n = wait + 1; n <= clocks; ++n) {
    bool all_rose = true;
    for (const auto& curve : energies) {
      const double least_j = *std::min_element(curve.begin(), curve.begin() + static_cast<std::ptrdiff_t>(n));
      for (size_t f = n - wait; f < n && all_rose; ++f) {
        all_rose = curve[f] > least_j * (1 + rise);
      }
      if (!all_rose) {
        break;
      }
    }
    if (all_rose) {
      return n;
    }
  }
  return clocks;
}

// Per clock index, the mean of the samples measured there.
using CardMeasuredAt = std::map<size_t, std::pair<probe::KnobSample, int>>;

// The computation at every clock: measured where measured; elsewhere the prior's prediction times its
// error at the measured clocks (measured / predicted), interpolated linearly in MHz between the nearest
// measured clocks above and below and held below the lowest. So the card gives the curve's shape between
// the measurements and the measurements pin it, instead of the one-parameter fit alone.
std::vector<ProfileOption> card_corrected_row(const probe::KnobPrior& prior, const probe::PriorFit& fit,
                                              const CardMeasuredAt& measured,
                                              std::span<const uint32_t> clocks_mhz) {
  struct Correction {
    double mhz;
    double time;
    double energy;
  };
  std::vector<Correction> corrections;  // clocks descending
  for (const auto& [index, entry] : measured) {
    const auto& [sum, count] = entry;
    const probe::KnobSample predicted = prior.predict(fit, clocks_mhz[index]);
    corrections.push_back({static_cast<double>(clocks_mhz[index]), sum.time_s / count / predicted.time_s,
                           sum.energy_j / count / predicted.energy_j});
  }
  std::vector<ProfileOption> row;
  row.reserve(clocks_mhz.size());
  for (size_t i = 0; i < clocks_mhz.size(); ++i) {
    if (const auto found = measured.find(i); found != measured.end()) {
      const auto& [sum, count] = found->second;
      row.push_back({clocks_mhz[i], sum.time_s / count, sum.energy_j / count});
      continue;
    }
    const double mhz = clocks_mhz[i];
    Correction correction = corrections.back();
    for (size_t k = 0; k < corrections.size(); ++k) {
      if (corrections[k].mhz <= mhz) {
        if (k == 0) {
          correction = corrections.front();
        } else {
          const Correction& high = corrections[k - 1];
          const Correction& low = corrections[k];
          const double t = (mhz - low.mhz) / (high.mhz - low.mhz);
          correction = {mhz, low.time + t * (high.time - low.time),
                        low.energy + t * (high.energy - low.energy)};
        }
        break;
      }
    }
    const probe::KnobSample predicted = prior.predict(fit, mhz);
    row.push_back(
        {clocks_mhz[i], predicted.time_s * correction.time, predicted.energy_j * correction.energy});
  }
  return row;
}

}  // namespace

Result<void> validate(const CardProfileOptions& options) {
  if (options.probe_clocks < 2 || options.probe_clocks > 64) {
    return fail(ErrorCode::kInvalidArgument, "probe_clocks must be 2 to 64, got {}", options.probe_clocks);
  }
  if (!(options.lowest_probe_ratio > 0 && options.lowest_probe_ratio < 1)) {
    return fail(ErrorCode::kInvalidArgument, "lowest_probe_ratio must be in (0, 1), got {}",
                options.lowest_probe_ratio);
  }
  if (!(options.max_residual > 0 && options.max_residual < 1)) {
    return fail(ErrorCode::kInvalidArgument, "max_residual must be in (0, 1), got {}", options.max_residual);
  }
  if (!(options.stop_energy_rise >= 0 && options.stop_energy_rise < 1) || options.patience < 1) {
    return fail(ErrorCode::kInvalidArgument,
                "stop_energy_rise must be in [0, 1) and patience at least 1, got {} and {}",
                options.stop_energy_rise, options.patience);
  }
  return {};
}

int card_probe_count(int probe_clocks, int microbatches, int samples) {
  const int per_round = std::max(1, microbatches / std::max(1, samples));
  const int rounds = (probe_clocks + per_round - 1) / per_round;
  return std::clamp(rounds * per_round, std::min(probe_clocks, 64), 64);
}

std::vector<size_t> card_probe_indices(std::span<const uint32_t> clocks_mhz,
                                       const CardProfileOptions& options) {
  std::set<size_t> chosen;
  if (clocks_mhz.empty()) {
    return {};
  }
  chosen.insert(0);
  const double top_mhz = clocks_mhz.front();
  const double lowest_mhz = top_mhz * options.lowest_probe_ratio;
  const int lower = std::max(1, options.probe_clocks - 1);
  for (int k = 1; k <= lower; ++k) {
    const double target_mhz = top_mhz - (top_mhz - lowest_mhz) * k / lower;
    size_t best = 0;
    for (size_t i = 0; i < clocks_mhz.size(); ++i) {
      if (std::abs(clocks_mhz[i] - target_mhz) < std::abs(clocks_mhz[best] - target_mhz)) {
        best = i;
      }
    }
    // The nearest may be taken already (few clocks): take the next unused one below it, if any.
    while (chosen.count(best) != 0 && best + 1 < clocks_mhz.size()) {
      ++best;
    }
    chosen.insert(best);
  }
  return {chosen.begin(), chosen.end()};
}

namespace {

// Fits one (stage, instruction): the prior's fit, its residuals, the held-out check; `at_clock` gets the mean
// measurement per clock index.
Result<CardFit> fit_card_computation(const probe::KnobPrior& prior,
                                     std::span<const probe::KnobSample> samples,
                                     std::span<const uint32_t> clocks_mhz, const CardProfileOptions& options,
                                     CardFit fit, CardMeasuredAt& at_clock) {
  const std::string_view instruction = to_string(fit.instruction);
  if (samples.empty()) {
    return fail(ErrorCode::kInvalidArgument, "stage {} {} has no measurement", fit.stage, instruction);
  }
  fit.fit = JOULE_TRY(prior.fit(samples));
  double time_squares = 0;
  double energy_squares = 0;
  for (const probe::KnobSample& sample : samples) {
    const auto found = std::find(clocks_mhz.begin(), clocks_mhz.end(), sample.knob_value);
    if (found == clocks_mhz.end()) {
      return fail(ErrorCode::kInvalidArgument, "stage {} {}: a measurement at {} MHz, not one of the clocks",
                  fit.stage, instruction, sample.knob_value);
    }
    const probe::KnobSample predicted = prior.predict(fit.fit, sample.knob_value);
    time_squares += std::pow(predicted.time_s / sample.time_s - 1, 2);
    energy_squares += std::pow(predicted.energy_j / sample.energy_j - 1, 2);
    // Several samples of one clock are averaged into the profile's row.
    auto& [sum, count] = at_clock[static_cast<size_t>(found - clocks_mhz.begin())];
    sum.time_s += sample.time_s;
    sum.energy_j += sample.energy_j;
    ++count;
  }
  const auto n = static_cast<double>(samples.size());
  fit.time_residual = std::sqrt(time_squares / n);
  fit.energy_residual = std::sqrt(energy_squares / n);
  // The check: each measured clock between the highest and the lowest predicted from the others (the fit and
  // the correction made without it), against its measurement.
  for (auto held = std::next(at_clock.begin()); at_clock.size() > 2 && held != std::prev(at_clock.end());
       ++held) {
    const size_t index = held->first;
    CardMeasuredAt others = at_clock;
    others.erase(index);
    std::vector<probe::KnobSample> rest;
    std::copy_if(samples.begin(), samples.end(), std::back_inserter(rest),
                 [&](const probe::KnobSample& sample) { return sample.knob_value != clocks_mhz[index]; });
    const probe::PriorFit without = JOULE_TRY(prior.fit(rest));
    const ProfileOption predicted = card_corrected_row(prior, without, others, clocks_mhz)[index];
    const auto& [sum, count] = held->second;
    fit.check_time_error =
        std::max(fit.check_time_error, std::abs(predicted.time_s / (sum.time_s / count) - 1));
    fit.check_energy_error =
        std::max(fit.check_energy_error, std::abs(predicted.energy_j / (sum.energy_j / count) - 1));
  }
  fit.fits = fit.check_time_error <= options.max_residual && fit.check_energy_error <= options.max_residual;
  return fit;
}

std::string describe_card_fit(const CardFit& fit) {
  return fmt::format("stage {} {}: held-out time {:.2f}%, energy {:.2f}% (fit residual {:.2f}%, {:.2f}%)",
                     fit.stage, to_string(fit.instruction), 100 * fit.check_time_error,
                     100 * fit.check_energy_error, 100 * fit.time_residual, 100 * fit.energy_residual);
}

// Every clock measured somewhere (MHz).
std::set<double> card_measured_clocks(const CardMeasurements& measured) {
  std::set<double> seen;
  for (const auto& stage : measured) {
    for (const auto& samples : stage) {
      for (const auto& sample : samples) {
        seen.insert(sample.knob_value);
      }
    }
  }
  return seen;
}

}  // namespace

Result<CardProfile> predict_card_profile(const probe::KnobPrior& prior, const CardMeasurements& measured,
                                         std::span<const uint32_t> clocks_mhz,
                                         const CardProfileOptions& options, const std::string& card_name) {
  JOULE_TRY(validate(options));
  if (measured.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a card profile needs at least one stage");
  }
  CardProfile result;
  std::vector<std::vector<ProfileOption>> rows;  // [computation][clock]
  for (size_t stage = 0; stage < measured.size(); ++stage) {
    for (const Instruction instruction : kCardInstructions) {
      CardMeasuredAt at_clock;
      CardFit blank;
      blank.stage = static_cast<int>(stage);
      blank.instruction = instruction;
      const CardFit fit = JOULE_TRY(fit_card_computation(
          prior, measured[stage][card_instruction_index(instruction)], clocks_mhz, options, blank, at_clock));
      rows.push_back(card_corrected_row(prior, fit.fit, at_clock, clocks_mhz));
      result.fits.push_back(fit);
      if (!fit.fits && (result.fallback_stages.empty() || result.fallback_stages.back() != fit.stage)) {
        result.fallback_stages.push_back(fit.stage);
      }
    }
  }
  const std::set<double> measured_mhz = card_measured_clocks(measured);
  if (!result.fallback_stages.empty()) {
    std::vector<std::string> misses;
    for (const CardFit& fit : result.fits) {
      if (!fit.fits) {
        misses.push_back(describe_card_fit(fit));
      }
    }
    result.summary = fmt::format(
        "{} does not describe stage(s) {} (held-out error over {:.1f}%: {}): profiling their remaining {} "
        "clocks "
        "as without a card",
        card_name, fmt::join(result.fallback_stages, ", "), 100 * options.max_residual,
        fmt::join(misses, "; "), clocks_mhz.size() - measured_mhz.size());
    return result;
  }
  std::vector<std::vector<double>> energies;
  for (const auto& row : rows) {
    auto& curve = energies.emplace_back();
    std::transform(row.begin(), row.end(), std::back_inserter(curve),
                   [](const ProfileOption& option) { return option.energy_j; });
  }
  // Down to where energy rises, and at least to every measured clock.
  size_t last_measured = 0;
  for (size_t i = 0; i < clocks_mhz.size(); ++i) {
    if (measured_mhz.count(clocks_mhz[i]) != 0) {
      last_measured = i;
    }
  }
  result.clocks_used =
      std::max(card_stop_index(energies, options.stop_energy_rise, options.patience), last_measured + 1);
  std::vector<std::array<std::vector<ProfileOption>, 2>> options_by_stage(measured.size());
  for (size_t c = 0; c < rows.size(); ++c) {
    rows[c].resize(result.clocks_used);
    options_by_stage[c / 2][c % 2] = std::move(rows[c]);
  }
  result.profile = JOULE_TRY(Profile::from_options(std::move(options_by_stage)));
  const auto worst =
      std::max_element(result.fits.begin(), result.fits.end(), [](const CardFit& a, const CardFit& b) {
        return std::max(a.check_time_error, a.check_energy_error) <
               std::max(b.check_time_error, b.check_energy_error);
      });
  result.summary = fmt::format(
      "{} fits every computation (largest held-out error {}, at most {:.1f}%): {} of {} clocks measured, {} "
      "predicted",
      card_name, describe_card_fit(*worst), 100 * options.max_residual, measured_mhz.size(),
      result.clocks_used, result.clocks_used - std::min(result.clocks_used, measured_mhz.size()));
  return result;
}

CardMeasurements measure_profile_at(const Profile& truth, std::span<const size_t> indices) {
  CardMeasurements measured(static_cast<size_t>(truth.stage_count()));
  for (int stage = 0; stage < truth.stage_count(); ++stage) {
    for (const Instruction instruction : kCardInstructions) {
      const auto& options = truth.options(stage, instruction);
      auto& samples = measured[static_cast<size_t>(stage)][card_instruction_index(instruction)];
      for (const size_t index : indices) {
        if (index < options.size()) {
          const ProfileOption& option = options[index];
          samples.push_back({static_cast<double>(option.frequency_mhz), option.time_s, option.energy_j});
        }
      }
    }
  }
  return measured;
}

Result<probe::Card> read_stage_card(const std::string& path, const device::Gpu& gpu) {
  return probe::read_card(path, probe::card_identity_of(gpu.info()));
}

Result<probe::Card> read_job_card(const std::string& path) {
  static constexpr ReadLimit kCardLimit{"frontier card", 16 * read_limits::kMib};
  return probe::parse_card(JOULE_TRY(read_text_file(path, kCardLimit)), path);
}

}  // namespace joule::plan
