// SPDX-License-Identifier: Apache-2.0
// Chase: the carbon-aware power-limit controller and the trace replay that compares it with the maximum
// power limit and Zeus's fixed choice.
#include "joule/optimize/chase.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "joule/carbon/monitor.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::optimize {

Result<void> validate(const ChaseOptions& options) {
  if (!(options.eta >= 0 && options.eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "chase: eta must be in [0, 1], got {}", options.eta);
  }
  if (!(options.max_intensity_g_per_kwh > 0) || !std::isfinite(options.max_intensity_g_per_kwh)) {
    return fail(ErrorCode::kInvalidArgument, "chase: the maximum intensity must be positive, got {} g/kWh",
                options.max_intensity_g_per_kwh);
  }
  if (options.period_s <= 0) {
    return fail(ErrorCode::kInvalidArgument, "chase: the period must be positive, got {} s",
                options.period_s);
  }
  if (!(options.max_power_w >= 0) || !std::isfinite(options.max_power_w)) {
    return fail(ErrorCode::kInvalidArgument, "chase: max power must be non-negative (0 = derive), got {} W",
                options.max_power_w);
  }
  return {};
}

ChaseController::ChaseController(Frontier<uint32_t> frontier, std::vector<device::Gpu*> gpus,
                                 CarbonForecaster& forecaster, ChaseOptions options)
    : frontier_(std::move(frontier)), gpus_(std::move(gpus)), forecaster_(forecaster), options_(options) {
  value_or_throw(validate(options_));
  if (frontier_.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "chase: the power-limit frontier is empty");
  }
  if (options_.max_power_w == 0) {
    uint32_t largest_mw = 0;
    for (const auto& point : frontier_.points()) {
      largest_mw = std::max(largest_mw, point.knob);
    }
    options_.max_power_w =
        static_cast<double>(largest_mw) / 1000.0 * static_cast<double>(std::max<size_t>(1, gpus_.size()));
  }
  guard_ = std::make_unique<device::SettingsGuard>(
      device::SettingsGuardOptions{.owner = "chase",
                                   .power_limit_restore = device::PowerLimitRestore::kRecorded,
                                   .restore_on_signals = options_.restore_on_signals});
}

ChaseController::~ChaseController() = default;

CarbonCost ChaseController::cost_at(double intensity_g_per_kwh) const {
  return CarbonCost{options_.eta, intensity_g_per_kwh, options_.max_intensity_g_per_kwh,
                    options_.max_power_w};
}

Result<size_t> ChaseController::choose(double intensity_g_per_kwh) const {
  return select(frontier_, cost_at(intensity_g_per_kwh));
}

Result<ChaseDecision> ChaseController::tick(int64_t now_unix_s, double previous_g_per_kwh,
                                            int64_t signal_period_s) {
  if (signal_period_s <= 0) {
    return fail(ErrorCode::kInvalidArgument, "chase: the signal's period must be positive, got {} s",
                signal_period_s);
  }
  // The coming period may span several of the signal's periods: forecast each and average them.
  const int steps =
      static_cast<int>(std::max<int64_t>(1, (options_.period_s + signal_period_s - 1) / signal_period_s));
  const auto path = forecaster_.predict_steps(now_unix_s, signal_period_s, previous_g_per_kwh, steps);
  double forecast = 0;
  for (const double value : path) {
    forecast += value;
  }
  forecast /= static_cast<double>(path.size());
  const auto index = JOULE_TRY(choose(forecast));
  ChaseDecision decision{now_unix_s, previous_g_per_kwh, forecast, cost_at(forecast).effective_eta(),
                         frontier_.points()[index].knob};
  if (!options_.monitor_only) {
    for (auto* gpu : gpus_) {
      JOULE_TRY(guard_->set_power_limit_mw(*gpu, decision.power_limit_mw));
    }
  }
  decisions_.push_back(decision);
  return decision;
}

// ---- replay
// ------------------------------------------------------------------------------------------------

namespace {

constexpr int64_t kNsPerS = 1'000'000'000;

struct SimSetup {
  device::sim::Spec spec;
  int batch_size = 0;
  std::string gpu_name;
};

Result<SimSetup> sim_setup(const CarbonReplayOptions& options) {
  const auto model = JOULE_TRY(device::sim::find_gpu_model(options.gpu));
  const auto workload = JOULE_TRY(device::sim::find_workload(options.workload));
  if (options.gpu_count < 1) {
    return fail(ErrorCode::kInvalidArgument, "carbon replay: the GPU count must be at least 1, got {}",
                options.gpu_count);
  }
  const auto trace_workload =
      JOULE_TRY(device::sim::make_trace_workload(*model, *workload, options.batch_size));
  SimSetup setup;
  setup.spec.count = options.gpu_count;
  setup.spec.model = model;
  setup.spec.workload = workload;
  setup.spec.batch_size = (trace_workload)->batch_size();
  setup.batch_size = (trace_workload)->batch_size();
  setup.gpu_name = (model)->name;
  return setup;
}

struct SimRun {
  std::shared_ptr<VirtualClock> clock;
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> owned;
  std::vector<device::Gpu*> gpus;
  std::vector<device::sim::SimulatedGpu*> sim_gpus;
};

Result<SimRun> open_run(const SimSetup& setup, int64_t start_unix_s) {
  SimRun run;
  run.clock = std::make_shared<VirtualClock>(start_unix_s * kNsPerS);
  auto gpus = JOULE_TRY(device::sim::open_sim_gpus(setup.spec, run.clock));
  run.owned = std::move(gpus);
  for (auto& gpu : run.owned) {
    run.gpus.push_back(gpu.get());
    run.sim_gpus.push_back(gpu.get());
  }
  return run;
}

Result<void> set_all(const std::vector<device::Gpu*>& gpus, uint32_t power_limit_mw) {
  for (auto* gpu : gpus) {
    if (auto ok = gpu->set_power_limit_mw(power_limit_mw); !ok) {
      return ok;
    }
  }
  return {};
}

// Zeus's JIT profile, offline: each candidate limit runs profile_iterations on fresh simulated GPUs.
Result<Frontier<uint32_t>> profile_frontier(const SimSetup& setup, const CarbonReplayOptions& options,
                                            device::PowerLimitConstraints& constraints) {
  auto run = JOULE_TRY(open_run(setup, 0));
  auto got = JOULE_TRY(run.gpus.front()->power_limit_constraints());
  constraints = got;
  if (!(options.step_w >= 0.001)) {
    return fail(ErrorCode::kInvalidArgument,
                "carbon replay: the power-limit step must be at least 0.001 W, got {}", options.step_w);
  }
  if (options.profile_iterations < 1) {
    return fail(ErrorCode::kInvalidArgument, "carbon replay: profile iterations must be at least 1, got {}",
                options.profile_iterations);
  }
  measure::EnergyMonitor monitor(run.gpus, {}, *run.clock);
  device::sim::TrainingJob job(run.sim_gpus, *run.clock);
  std::vector<FrontierPoint<uint32_t>> points;
  const auto step_mw = static_cast<uint32_t>(std::lround(options.step_w * 1000));
  for (const uint32_t limit_mw : power_limit_candidates_mw(constraints, step_mw)) {
    JOULE_TRY(set_all(run.gpus, limit_mw));
    monitor.begin_window("profile");
    job.run_iterations(options.profile_iterations);
    const auto m = monitor.end_window("profile");
    points.push_back({limit_mw, m.time_s / options.profile_iterations,
                      m.total_gpu_energy_j() / options.profile_iterations});
  }
  return Frontier<uint32_t>::from_points(std::move(points));
}

// Decides the limit at a period start: (now, intensity of the period before) → (limit, forecast).
using Decide = std::function<Result<std::pair<uint32_t, double>>(int64_t, double)>;

Result<StrategyResult> run_strategy(std::string name, const carbon::CarbonTrace& trace, const SimSetup& setup,
                                    const CarbonReplayOptions& options, int64_t start_unix_s,
                                    const std::function<Decide(SimRun&)>& make_decide) {
  auto run = JOULE_TRY(open_run(setup, start_unix_s));
  const Decide decide = make_decide(run);
  measure::EnergyMonitor monitor(run.gpus, {}, *run.clock);
  carbon::TraceSignal signal(trace, *run.clock);
  carbon::CarbonMonitor carbon(monitor, signal,
                               {.bucket_s = trace.period_s(), .background_checkpoints = false});
  device::sim::TrainingJob job(run.sim_gpus, *run.clock);
  StrategyResult result;
  result.name = std::move(name);
  carbon.begin_window("replay");
  int64_t remaining = options.work_iterations;
  const double period_s = static_cast<double>(options.chase.period_s);
  while (remaining > 0) {
    const int64_t now_ns = run.clock->to_unix_ns(run.clock->now());
    const int64_t now_s = now_ns / kNsPerS;
    const auto current = trace.at(now_s);
    const auto previous = trace.at(now_s - trace.period_s());
    if (!current || !previous) {
      carbon.cancel_window("replay");
      return fail(ErrorCode::kOutOfRange,
                  "carbon replay ({}): {} covers {} to {}, but the run needs the intensity at {} ({} "
                  "iterations still to run): use a longer trace, an earlier --start or less work",
                  result.name, trace.source(), carbon::format_utc_time(trace.start_unix_s()),
                  carbon::format_utc_time(trace.end_unix_s()), carbon::format_utc_time(now_s), remaining);
    }
    const auto decision = decide(now_s, previous->intensity_g_per_kwh);
    if (!decision) {
      carbon.cancel_window("replay");
      return tl::make_unexpected(decision.error());
    }
    // Energy so far belongs to the previous limit; from here on the power is constant until the next tick.
    carbon.checkpoint();
    if (auto ok = set_all(run.gpus, decision->first); !ok) {
      carbon.cancel_window("replay");
      return tl::make_unexpected(ok.error());
    }
    result.timeline.push_back({static_cast<double>(run.clock->now().count()) / 1e9, now_s,
                               current->intensity_g_per_kwh, decision->second,
                               static_cast<double>(decision->first) / 1000.0});
    const double iteration_s = job.iteration_time_s();
    const auto iterations =
        std::min(remaining, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(period_s / iteration_s))));
    job.run_iterations(iterations);
    remaining -= iterations;
  }
  const int64_t end_s = run.clock->to_unix_ns(run.clock->now()) / kNsPerS;
  if (end_s >= trace.end_unix_s()) {
    carbon.cancel_window("replay");
    return fail(ErrorCode::kOutOfRange,
                "carbon replay ({}): {} ends at {}, but the run ends at {}: use a longer trace, an earlier "
                "--start or less work",
                result.name, trace.source(), carbon::format_utc_time(trace.end_unix_s()),
                carbon::format_utc_time(end_s));
  }
  auto measured = carbon.end_window("replay");
  if (!measured.carbon) {
    return tl::make_unexpected(measured.carbon.error());
  }
  result.carbon_g = measured.carbon->carbon_g;
  result.energy_j = measured.energy.measurement.total_gpu_energy_j();
  result.time_s = measured.energy.measurement.time_s;
  return result;
}

}  // namespace

Result<CarbonReplayResult> replay_carbon(const carbon::CarbonTrace& trace,
                                         const CarbonReplayOptions& options) {
  JOULE_TRY(validate(options.chase));
  if (options.zeus_eta && !(*options.zeus_eta >= 0 && *options.zeus_eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "carbon replay: Zeus's eta must be in [0, 1], got {}",
                *options.zeus_eta);
  }
  if (options.work_iterations <= 0) {
    return fail(ErrorCode::kInvalidArgument, "carbon replay: the work must be at least 1 iteration, got {}",
                options.work_iterations);
  }
  auto forecaster = JOULE_TRY(make_forecaster(options.forecaster));
  const auto setup = JOULE_TRY(sim_setup(options));
  // The forecaster is fitted once on the samples just before the start (Chase: the 24 h before).
  const auto& points = trace.points();
  const int64_t start_unix_s = options.start_unix_s.value_or(
      trace.start_unix_s() + static_cast<int64_t>(options.training_samples) * trace.period_s());
  const auto start_index = trace.index_at(start_unix_s);
  if (!start_index) {
    return fail(ErrorCode::kOutOfRange, "carbon replay: the start {} is outside {} ({} to {})",
                carbon::format_utc_time(start_unix_s), trace.source(),
                carbon::format_utc_time(trace.start_unix_s()), carbon::format_utc_time(trace.end_unix_s()));
  }
  if (*start_index < options.training_samples || *start_index < 1) {
    return fail(ErrorCode::kOutOfRange,
                "carbon replay: the forecaster trains on the {} periods before the start, but {} has only {} "
                "before {}: start later",
                options.training_samples, trace.source(), *start_index,
                carbon::format_utc_time(start_unix_s));
  }
  const std::vector<carbon::IntensityPoint> training(
      points.begin() + static_cast<std::ptrdiff_t>(*start_index - options.training_samples),
      points.begin() + static_cast<std::ptrdiff_t>(*start_index));
  JOULE_TRY((forecaster)->fit(training));

  CarbonReplayResult result;
  result.gpu_name = setup.gpu_name;
  result.workload = setup.spec.workload->key;
  result.batch_size = setup.batch_size;
  result.gpu_count = options.gpu_count;
  result.work_iterations = options.work_iterations;
  result.start_unix_s = start_unix_s;
  result.trace_source = trace.source();
  device::PowerLimitConstraints constraints;
  auto frontier = JOULE_TRY(profile_frontier(setup, options, constraints));
  result.frontier = std::move(frontier);
  result.max_power_w = options.chase.max_power_w > 0
                           ? options.chase.max_power_w
                           : static_cast<double>(constraints.max_mw) / 1000.0 * options.gpu_count;
  const auto zeus_index = JOULE_TRY(
      select(result.frontier, ZeusCost{options.zeus_eta.value_or(options.chase.eta), result.max_power_w}));
  result.zeus_power_limit_mw = result.frontier.points()[zeus_index].knob;

  const auto fixed = [](uint32_t limit_mw) {
    return [limit_mw](SimRun& /*run*/) -> Decide {
      return [limit_mw](int64_t /*now*/, double previous) -> Result<std::pair<uint32_t, double>> {
        return std::make_pair(limit_mw, previous);
      };
    };
  };
  ChaseOptions chase_options = options.chase;
  chase_options.max_power_w = result.max_power_w;
  // Simulated GPUs: no process-wide signal handlers for them.
  chase_options.restore_on_signals = false;
  const auto chase = [&](SimRun& run) -> Decide {
    // Owned by the Decide, which run_strategy destroys before the run's GPUs (the controller restores
    // their limits on destruction).
    std::shared_ptr<ChaseController> controller =
        std::make_shared<ChaseController>(result.frontier, run.gpus, *forecaster, chase_options);
    return [&trace, controller](int64_t now, double previous) -> Result<std::pair<uint32_t, double>> {
      auto decision = JOULE_TRY(controller->tick(now, previous, trace.period_s()));
      return std::make_pair(decision.power_limit_mw, decision.forecast_g_per_kwh);
    };
  };
  const std::vector<std::pair<std::string, std::function<Decide(SimRun&)>>> strategies = {
      {"max_power_limit", fixed(constraints.max_mw)},
      {"zeus", fixed(result.zeus_power_limit_mw)},
      {"chase", chase},
  };
  for (const auto& [name, make_decide] : strategies) {
    auto strategy = JOULE_TRY(run_strategy(name, trace, setup, options, start_unix_s, make_decide));
    result.strategies.push_back(std::move(strategy));
  }
  return result;
}

}  // namespace joule::optimize
