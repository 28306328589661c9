// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/power_limit.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "joule/core/file.hpp"
#include "joule/core/log.hpp"
#include "joule/core/units.hpp"
#include "joule/optimize/power_limit_card.hpp"

#include "power_limit_profile.hpp"

namespace joule::optimize {

namespace {

// A limit in watts for names and messages: "250", "212.5".
std::string watts(uint32_t power_mw) {
  return fmt::format("{}", mw_to_w(power_mw));
}

bool derives_max_power(const Policy& policy) {
  const auto* cost = std::get_if<ZeusCost>(&policy);
  return cost != nullptr && cost->max_power_w == 0;
}

bool same_constraints(const device::PowerLimitConstraints& a, const device::PowerLimitConstraints& b) {
  return a.min_mw == b.min_mw && a.max_mw == b.max_mw && a.default_mw == b.default_mw;
}

std::string describe(const device::PowerLimitConstraints& constraints) {
  return fmt::format("{} W to {} W (default {} W)", watts(constraints.min_mw), watts(constraints.max_mw),
                     watts(constraints.default_mw));
}

// A number every rank computes alike from the same card: 1 + a hash of its text, below 2^31 so that a sum
// over up to 2^21 ranks stays exact in a double.
double card_digest(const probe::Card& card) {
  return 1.0 + static_cast<double>(std::hash<std::string>{}(probe::render_card(card)) % (uint64_t{1} << 31));
}

}  // namespace

std::string_view to_string(CardPath path) {
  switch (path) {
    case CardPath::kNone:
      return "none";
    case CardPath::kSearching:
      return "searching";
    case CardPath::kPredicted:
      return "predicted";
    case CardPath::kFallback:
      return "fallback";
  }
  return "unknown";
}

std::string_view to_string(PowerLimitState state) {
  switch (state) {
    case PowerLimitState::kReady:
      return "ready";
    case PowerLimitState::kWarmup:
      return "warmup";
    case PowerLimitState::kProfiling:
      return "profiling";
    case PowerLimitState::kDone:
      return "done";
  }
  return "unknown";
}

bool RankAggregator::all_ranks(bool value) {
  const auto [count, ignored] = aggregate(value ? 1.0 : 0.0, 0.0);
  return std::lround(count) == world_size();
}

Result<void> validate(const PowerLimitOptions& options) {
  if (options.wait_steps < 0) {
    return fail(ErrorCode::kInvalidArgument, "wait_steps must be at least 0, got {}", options.wait_steps);
  }
  if (options.warmup_steps < 0) {
    return fail(ErrorCode::kInvalidArgument, "warmup_steps must be at least 0, got {}", options.warmup_steps);
  }
  if (options.profile_steps < 1) {
    return fail(ErrorCode::kInvalidArgument, "profile_steps must be at least 1, got {}",
                options.profile_steps);
  }
  // The step is applied in whole milliwatts; NaN fails the comparison too.
  if (!(options.step_w >= 1e-3 && options.step_w <= 1e6)) {
    return fail(ErrorCode::kInvalidArgument, "step_w must be from 0.001 W to 1000000 W, got {} W",
                options.step_w);
  }
  Policy policy = options.policy;
  if (auto* cost = std::get_if<ZeusCost>(&policy); cost != nullptr && cost->max_power_w == 0) {
    cost->max_power_w = 1;  // a stand-in: the real value is derived from the GPUs
  }
  if (auto valid = joule::validate(policy); !valid) {
    return valid;
  }
  if (auto valid = measure::validate(options.steady_state); !valid) {
    return valid;
  }
  if (!options.profile_dir.empty() && !detail::valid_job_key(options.job_key)) {
    if (options.job_key.empty()) {
      return fail(ErrorCode::kInvalidArgument,
                  "job_key is required with profile_dir: it names the profile file");
    }
    return fail(
        ErrorCode::kInvalidArgument,
        "job_key '{}' may only contain letters, digits, '.', '_' and '-', and must not start with '.'",
        options.job_key);
  }
  if (options.aggregator) {
    const int world_size = options.aggregator->world_size();
    const int rank = options.aggregator->rank();
    if (world_size < 1) {
      return fail(ErrorCode::kInvalidArgument, "the aggregator's world_size must be at least 1, got {}",
                  world_size);
    }
    if (rank < 0 || rank >= world_size) {
      return fail(ErrorCode::kInvalidArgument, "the aggregator's rank {} is outside 0 to {}", rank,
                  world_size - 1);
    }
  }
  return {};
}

std::vector<uint32_t> power_limit_candidates_mw(const device::PowerLimitConstraints& constraints,
                                                uint32_t step_mw) {
  std::vector<uint32_t> candidates;
  if (step_mw == 0 || constraints.min_mw > constraints.max_mw) {
    return candidates;
  }
  // 64-bit arithmetic: max − k·step must not wrap below 0.
  for (int64_t limit = constraints.max_mw; limit >= constraints.min_mw; limit -= step_mw) {
    candidates.push_back(static_cast<uint32_t>(limit));
  }
  if (candidates.back() != constraints.min_mw) {
    candidates.push_back(constraints.min_mw);
  }
  return candidates;
}

PowerLimitOptimizer::PowerLimitOptimizer(measure::EnergyMonitor& monitor, PowerLimitOptions options)
    : monitor_(monitor), options_(std::move(options)) {
  value_or_throw(validate(options_));
  aggregator_ = options_.aggregator ? options_.aggregator : std::make_shared<SingleProcessAggregator>();

  const auto& gpus = monitor_.gpus();
  if (gpus.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "the energy monitor has no GPUs: the power-limit optimizer needs at least one");
  }
  // One limit for all GPUs only makes sense for identical GPUs.
  for (size_t i = 0; i < gpus.size(); ++i) {
    const auto constraints = value_or_throw(gpus[i]->power_limit_constraints());
    if (i == 0) {
      constraints_ = constraints;
      gpu_name_ = gpus[0]->info().name;
    } else if (gpus[i]->info().name != gpu_name_) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("the power-limit optimizer sets one limit for all GPUs, so they must be "
                                  "identical: {} is not the same model as {}",
                                  gpus[i]->label(), gpus[0]->label()));
    } else if (!same_constraints(constraints, constraints_)) {
      throw Exception(
          ErrorCode::kInvalidArgument,
          fmt::format("the power-limit optimizer sets one limit for all GPUs, so they must be "
                      "identical: {} allows {}, {} allows {}",
                      gpus[i]->label(), describe(constraints), gpus[0]->label(), describe(constraints_)));
    }
  }
  steady_ = std::make_unique<measure::SteadyStateDetector>(gpus, monitor_.clock(), options_.steady_state);
  candidates_mw_ =
      power_limit_candidates_mw(constraints_, static_cast<uint32_t>(round_w_to_mw(options_.step_w)));
  if (candidates_mw_.empty()) {
    throw Exception(ErrorCode::kDevice, fmt::format("{} reports an empty power-limit range: {}",
                                                    gpus[0]->label(), describe(constraints_)));
  }
  policy_ = options_.policy;
  if (derives_max_power(policy_)) {
    std::get<ZeusCost>(policy_).max_power_w = mw_to_w(candidates_mw_.front()) *
                                              static_cast<double>(gpus.size()) *
                                              static_cast<double>(aggregator_->world_size());
  }
  warmup_steps_ = options_.warmup_steps;
  profile_steps_ = options_.profile_steps;
  if (options_.card) {
    start_from_card();
  }
  if (!options_.profile_dir.empty()) {
    profile_path_ = (std::filesystem::path(options_.profile_dir) / (options_.job_key + ".json")).string();
  }

  // Every change goes through the guard, which records the limit in force before the first one.
  guard_ = std::make_unique<device::SettingsGuard>(
      device::SettingsGuardOptions{.owner = "power-limit optimizer",
                                   .power_limit_restore = options_.restore_to == RestoreTarget::kInitial
                                                              ? device::PowerLimitRestore::kRecorded
                                                              : device::PowerLimitRestore::kDefault,
                                   .restore_on_signals = options_.restore_on_signals});
  try {
    if (!try_load_profile()) {
      state_ = PowerLimitState::kReady;
      steps_left_ = options_.wait_steps + 1;
      apply(candidates_mw_.front());
    }
  } catch (...) {
    guard_.reset();
    throw;
  }
}

PowerLimitOptimizer::~PowerLimitOptimizer() {
  try {
    if (state_ == PowerLimitState::kProfiling && monitor_.is_open(window_name())) {
      monitor_.cancel_window(window_name());
    }
  } catch (...) {
  }
  guard_.reset();
}

uint32_t PowerLimitOptimizer::current_power_limit_mw() const {
  if (chosen_mw_) {
    return *chosen_mw_;
  }
  return candidates_mw_[std::min(index_, candidates_mw_.size() - 1)];
}

void PowerLimitOptimizer::on_step_begin() {
  if (guard_->consume_signal_restore()) {
    log().warn("power-limit optimizer: the limits were restored on a signal and the job goes on; {}",
               state_ == PowerLimitState::kWarmup || state_ == PowerLimitState::kProfiling
                   ? "re-measuring the interrupted limit"
                   : "setting the limit again");
    switch (state_) {
      case PowerLimitState::kWarmup:
      case PowerLimitState::kProfiling:
        interrupt();
        break;
      case PowerLimitState::kReady:
        apply(candidates_mw_.front());
        break;
      case PowerLimitState::kDone:
        apply(*chosen_mw_);
        break;
    }
  }
  switch (state_) {
    case PowerLimitState::kReady:
      if (--steps_left_ <= 0) {
        start_candidate();
      }
      break;
    case PowerLimitState::kWarmup:
      steady_->sample();
      if (--steps_left_ <= 0 && warmed_up()) {
        begin_profile();
      }
      break;
    case PowerLimitState::kProfiling:
      if (--steps_left_ <= 0) {
        finish_profile();
      }
      break;
    case PowerLimitState::kDone:
      break;
  }
  if (state_ == PowerLimitState::kWarmup || state_ == PowerLimitState::kProfiling) {
    ++profiling_steps_;
  }
}

void PowerLimitOptimizer::start_from_card() {
  const std::string source = options_.card_source.empty() ? "the card" : options_.card_source;
  const auto& gpu = *monitor_.gpus().front();
  value_or_throw(probe::check_card_for(*options_.card, probe::card_identity_of(gpu.info()), source));
  card_guide_ = std::make_unique<CardGuide>(value_or_throw(CardGuide::make(*options_.card, source)));
  if (aggregator_->world_size() > 1) {
    // Ranks with different cards would take different decisions and then wait for each other forever.
    const double digest = card_digest(*options_.card);
    const auto [sum, largest] = aggregator_->aggregate(digest, digest);
    if (std::abs(sum - largest * aggregator_->world_size()) >= 0.5) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("power-limit optimizer: the ranks were given different cards ({} here): "
                                  "give every rank the same card",
                                  source));
    }
  }
  card_path_ = CardPath::kSearching;
  card_reason_ = "measuring the maximum limit first";
  // The first window is short, then extended to what the card's figures ask for at the measured step time.
  profile_steps_ = std::min(options_.profile_steps, kCardMinProfileSteps);
  log().info(
      "power-limit optimizer: starting from {} ({}): measuring {} W first, then only the limits it "
      "cannot rule out",
      source, options_.card->device.model, watts(candidates_mw_.front()));
}

void PowerLimitOptimizer::on_step_end() {}

void PowerLimitOptimizer::on_epoch_end() {
  if (state_ == PowerLimitState::kWarmup || state_ == PowerLimitState::kProfiling) {
    interrupt();
  }
}

void PowerLimitOptimizer::override_power_limit_mw(uint32_t power_limit_mw) {
  if (state_ != PowerLimitState::kDone) {
    throw Exception(
        ErrorCode::kState,
        fmt::format("power-limit optimizer: the limit can be replaced only once profiling is done "
                    "(state: {})",
                    to_string(state_)));
  }
  // The measured limits, not today's candidate grid: a stored profile may have used another step.
  const bool measured = std::any_of(
      measurements_.begin(), measurements_.end(),
      [power_limit_mw](const PowerLimitMeasurement& m) { return m.power_limit_mw == power_limit_mw; });
  if (!measured) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("power-limit optimizer: {} W is not one of the profiled limits", watts(power_limit_mw)));
  }
  chosen_mw_ = power_limit_mw;
  apply(power_limit_mw);
}

void PowerLimitOptimizer::apply(uint32_t power_limit_mw) {
  // Every GPU is tried, so that a failure on one leaves none of the others behind; the first error wins.
  Result<void> result;
  for (device::Gpu* gpu : monitor_.gpus()) {
    auto set = guard_->set_power_limit_mw(*gpu, power_limit_mw);
    if (!set && result) {
      result = set;
    }
  }
  if (!result) {
    throw Exception(result.error().with_context(
        fmt::format("power-limit optimizer: cannot set the power limit to {} W", watts(power_limit_mw))));
  }
}

std::string PowerLimitOptimizer::window_name() const {
  return "__joule_power_limit_" + watts(candidates_mw_[index_]);
}

bool PowerLimitOptimizer::warmed_up() {
  if (steady_->mode() == measure::SteadyStateMode::kOff) {
    return true;  // no collective: every rank is ready on the same step
  }
  const bool ready =
      aggregator_->world_size() > 1 ? aggregator_->all_ranks(steady_->ready()) : steady_->ready();
  if (ready && steady_->mode() != measure::SteadyStateMode::kOff) {
    if (steady_->timed_out()) {
      log().warn("power-limit optimizer: {} W: measuring without a steady state: {}",
                 watts(candidates_mw_[index_]), steady_->describe());
    } else {
      log().info("power-limit optimizer: {} W: {}", watts(candidates_mw_[index_]), steady_->describe());
    }
  }
  return ready;
}

void PowerLimitOptimizer::start_candidate() {
  apply(candidates_mw_[index_]);
  steady_->restart();
  if (warmup_steps_ == 0 && steady_->mode() == measure::SteadyStateMode::kOff) {
    begin_profile();
    return;
  }
  state_ = PowerLimitState::kWarmup;
  steps_left_ = warmup_steps_;
}

void PowerLimitOptimizer::begin_profile() {
  monitor_.begin_window(window_name());
  state_ = PowerLimitState::kProfiling;
  steps_left_ = profile_steps_;
}

void PowerLimitOptimizer::finish_profile() {
  const measure::Measurement window = monitor_.end_window(window_name());
  const auto [energy_j, time_s] = aggregator_->aggregate(window.total_gpu_energy_j(), window.time_s);
  measurements_.push_back({candidates_mw_[index_], energy_j, time_s, profile_steps_});
  log().debug("power-limit optimizer: {} W: {} J, {} s over {} steps", watts(candidates_mw_[index_]),
              energy_j, time_s, profile_steps_);
  if (card_path_ != CardPath::kNone) {
    next_with_card();
    return;
  }
  ++index_;
  if (index_ < candidates_mw_.size()) {
    start_candidate();
    return;
  }
  index_ = candidates_mw_.size() - 1;
  choose();
  save_profile();
}

void PowerLimitOptimizer::next_with_card() {
  if (extending_anchor_) {
    // The extension of the first window: one measurement of both.
    extending_anchor_ = false;
    const PowerLimitMeasurement extension = measurements_.back();
    measurements_.pop_back();
    measurements_.back().energy_j += extension.energy_j;
    measurements_.back().time_s += extension.time_s;
    measurements_.back().steps += extension.steps;
    profile_steps_ = measurements_.back().steps;  // the card's window, for the other limits
  } else if (measurements_.size() == 1) {
    // The first limit's step time sizes the windows by the card's figures, the first one's included.
    const PowerLimitMeasurement& first = measurements_.back();
    const CardWindows windows =
        card_windows(*options_.card, first.time_per_step_s(), options_.warmup_steps, options_.profile_steps);
    log().info("power-limit optimizer: windows at {:.4g} s a step: {}", first.time_per_step_s(), windows.why);
    warmup_steps_ = windows.warmup_steps;
    profile_steps_ = windows.profile_steps;
    if (windows.profile_steps > first.steps) {
      // Same limit, no change to settle from: the window goes on at once.
      extending_anchor_ = true;
      profile_steps_ = windows.profile_steps - first.steps;
      begin_profile();
      return;
    }
  }
  const PowerLimitMeasurement& last = measurements_.back();
  if (card_path_ == CardPath::kSearching) {
    CardDecision decision{CardDecision::Kind::kFallback, 0, ""};
    if (auto recorded =
            card_guide_->record(last.power_limit_mw, last.time_per_step_s(), last.energy_per_step_j());
        !recorded) {
      // E.g. an energy that could not be measured: the prior cannot use it, a full profile can go on.
      decision.why = "the card cannot use the measurement: " + recorded.error().message();
    } else {
      decision = value_or_throw(card_guide_->next(candidates_mw_, policy_));
    }
    switch (decision.kind) {
      case CardDecision::Kind::kMeasure:
        log().info("power-limit optimizer: measuring {} W: {}", watts(candidates_mw_[decision.candidate]),
                   decision.why);
        index_ = decision.candidate;
        start_candidate();
        return;
      case CardDecision::Kind::kDone:
        card_path_ = CardPath::kPredicted;
        card_reason_ = decision.why;
        log().info("power-limit optimizer: choosing from the card's prior after {} of {} limits: {}",
                   measurements_.size(), candidates_mw_.size(), decision.why);
        break;
      case CardDecision::Kind::kFallback:
        card_path_ = CardPath::kFallback;
        card_reason_ = decision.why;
        log().warn(
            "power-limit optimizer: the card does not describe this workload ({}); measuring the other "
            "limits as without a card",
            decision.why);
        break;
    }
  }
  if (card_path_ == CardPath::kFallback) {
    // The remaining limits, highest first, as without a card.
    for (size_t i = 0; i < candidates_mw_.size(); ++i) {
      const bool measured =
          std::any_of(measurements_.begin(), measurements_.end(),
                      [&](const PowerLimitMeasurement& m) { return m.power_limit_mw == candidates_mw_[i]; });
      if (!measured) {
        index_ = i;
        start_candidate();
        return;
      }
    }
  }
  index_ = candidates_mw_.size() - 1;
  choose();
  save_profile();
}

void PowerLimitOptimizer::interrupt() {
  if (state_ == PowerLimitState::kProfiling && monitor_.is_open(window_name())) {
    monitor_.cancel_window(window_name());
  }
  // The interrupted candidate starts over with its warmup at the next step; meanwhile the job runs at full
  // speed through the epoch boundary.
  state_ = PowerLimitState::kReady;
  steps_left_ = 1;
  apply(candidates_mw_.front());
}

void PowerLimitOptimizer::choose() {
  if (derives_max_power(options_.policy)) {
    uint32_t max_mw = 0;
    for (const auto& measurement : measurements_) {
      max_mw = std::max(max_mw, measurement.power_limit_mw);
    }
    std::get<ZeusCost>(policy_).max_power_w = mw_to_w(max_mw) * static_cast<double>(monitor_.gpus().size()) *
                                              static_cast<double>(aggregator_->world_size());
  }
  std::vector<FrontierPoint<uint32_t>> points;
  points.reserve(measurements_.size());
  for (const auto& measurement : measurements_) {
    points.push_back(
        {measurement.power_limit_mw, measurement.time_per_step_s(), measurement.energy_per_step_j()});
  }
  frontier_ = Frontier<uint32_t>::from_points(std::move(points));
  auto selected = select(frontier_, policy_);
  if (!selected && selected.error().code() == ErrorCode::kNotFound) {
    // A bound no limit meets: run as fast as possible rather than stop the job.
    log().warn("power-limit optimizer: {}; choosing the fastest limit", selected.error().message());
    selected = size_t{0};
  }
  const auto& point = frontier_.points()[value_or_throw(std::move(selected))];
  chosen_mw_ = point.knob;
  state_ = PowerLimitState::kDone;
  apply(point.knob);
  const auto& fastest = frontier_.fastest();
  log().info(
      "power-limit optimizer: {} chose {} W for {} x {} ({:.4g} s and {:.4g} J per step; fastest: {} W, "
      "{:.4g} s and {:.4g} J){}",
      joule::describe(policy_), watts(point.knob), monitor_.gpus().size(), gpu_name_, point.time_s,
      point.energy_j, watts(fastest.knob), fastest.time_s, fastest.energy_j,
      loaded_from_profile_ ? fmt::format(" from the stored profile {}", *profile_path_)
      : card_path_ != CardPath::kNone
          ? fmt::format(" ({} of {} limits measured, card path: {})", measurements_.size(),
                        candidates_mw_.size(), to_string(card_path_))
          : std::string());
}

bool PowerLimitOptimizer::try_load_profile() {
  if (!profile_path_) {
    return false;
  }
  const std::string& path = *profile_path_;
  std::optional<detail::StoredProfile> usable;
  if (auto text = read_text_file(path); !text) {
    if (text.error().code() == ErrorCode::kNotFound) {
      log().info("power-limit optimizer: no stored profile at {}; profiling", path);
    } else {
      log().warn("power-limit optimizer: ignoring the stored profile: {}; profiling again",
                 text.error().message());
    }
  } else if (auto stored = detail::parse_profile(*text); !stored) {
    log().warn("power-limit optimizer: ignoring the stored profile {}: {}; profiling again", path,
               stored.error().message());
  } else {
    detail::StoredProfile here;
    here.job_key = options_.job_key;
    here.gpu_name = gpu_name_;
    here.gpu_count = static_cast<int>(monitor_.gpus().size());
    here.world_size = aggregator_->world_size();
    here.constraints = constraints_;
    if (auto mismatch = detail::profile_mismatch(*stored, here)) {
      log().warn("power-limit optimizer: ignoring the stored profile {}: {}; profiling again", path,
                 *mismatch);
    } else {
      usable = std::move(*stored);
    }
  }
  // Every rank must take the same path, or they would wait for each other in aggregate() forever.
  if (aggregator_->world_size() > 1 && !aggregator_->all_ranks(usable.has_value())) {
    if (usable) {
      log().info("power-limit optimizer: another rank has no usable profile; profiling on every rank");
    }
    return false;
  }
  if (!usable) {
    return false;
  }
  measurements_ = std::move(usable->measurements);
  loaded_from_profile_ = true;
  if (card_path_ != CardPath::kNone) {
    card_path_ = CardPath::kNone;
    card_reason_ = "the stored profile was used";
  }
  index_ = candidates_mw_.size() - 1;
  choose();
  return true;
}

void PowerLimitOptimizer::save_profile() const {
  if (!profile_path_ || aggregator_->rank() != 0) {
    return;
  }
  detail::StoredProfile profile;
  profile.job_key = options_.job_key;
  profile.gpu_name = gpu_name_;
  profile.gpu_count = static_cast<int>(monitor_.gpus().size());
  profile.world_size = aggregator_->world_size();
  profile.constraints = constraints_;
  profile.profile_steps = options_.profile_steps;
  profile.measurements = measurements_;
  for (auto& measurement : profile.measurements) {
    // The file holds windows of profile_steps steps; a card's shorter windows are scaled to that length.
    if (measurement.steps != profile.profile_steps) {
      const double scale = static_cast<double>(profile.profile_steps) / measurement.steps;
      measurement.energy_j *= scale;
      measurement.time_s *= scale;
      measurement.steps = profile.profile_steps;
    }
  }
  std::error_code error;
  std::filesystem::create_directories(options_.profile_dir, error);
  if (error) {
    log().warn("power-limit optimizer: cannot create {}: {}; the profile is not saved", options_.profile_dir,
               error.message());
    return;
  }
  if (auto written = write_file_atomic(*profile_path_, detail::profile_to_json(profile)); !written) {
    log().warn("power-limit optimizer: the profile is not saved: {}", written.error().message());
    return;
  }
  log().info("power-limit optimizer: saved the profile to {}", *profile_path_);
}

}  // namespace joule::optimize
