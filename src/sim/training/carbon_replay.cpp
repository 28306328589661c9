// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/carbon_replay.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/signal.hpp"
#include "joule/sim/trace.hpp"
#include "joule/viz/plot.hpp"

namespace joule::sim {

namespace {

double percent_change(double value, double reference) {
  return reference != 0 ? 100.0 * (value - reference) / reference : 0.0;
}

nlohmann::json savings_json(const optimize::StrategyResult& chase,
                            const optimize::StrategyResult& reference) {
  return {{"carbon_saving_percent", -percent_change(chase.carbon_g, reference.carbon_g)},
          {"energy_saving_percent", -percent_change(chase.energy_j, reference.energy_j)},
          {"time_increase_percent", percent_change(chase.time_s, reference.time_s)}};
}

}  // namespace

// The mean number of epochs the Zeus training trace needs to reach the workload's target metric at this
// batch size (over the trace's repeated runs), rounded up.
Result<int> epochs_to_target(const std::string& gpu, const std::string& workload, int batch_size) {
  const auto model = JOULE_TRY(device::sim::find_gpu_model(gpu));
  const auto trace = JOULE_TRY(gpu_trace((model)->trace));
  const auto job = JOULE_TRY(paper_job(trace, workload));
  double sum = 0;
  int runs = 0;
  for (const auto& row : trace.rows) {
    if (row.dataset == job.dataset && row.network == job.network && row.batch_size == batch_size &&
        std::abs(row.target_metric - job.target_metric) < 1e-9 &&
        row.power_limit_w == trace.max_power_limit_w() && std::isfinite(row.target_epoch)) {
      sum += row.target_epoch;
      ++runs;
    }
  }
  if (runs == 0) {
    return fail(
        ErrorCode::kNotFound,
        "carbon replay: the Zeus trace has no run of {} at batch size {} that reaches {}: give --epochs "
        "or --iterations",
        workload, batch_size, job.target_metric);
  }
  return static_cast<int>(std::ceil(sum / runs));
}

Result<CarbonReplayWork> replay_work(const std::string& gpu, const std::string& workload_name,
                                     std::optional<int> batch_size, std::optional<double> epochs,
                                     std::optional<int64_t> iterations) {
  const auto* model = JOULE_TRY(device::sim::find_gpu_model(gpu));
  const auto* workload = JOULE_TRY(device::sim::find_workload(workload_name));
  const auto trace_workload = JOULE_TRY(device::sim::make_trace_workload(*model, *workload, batch_size));
  CarbonReplayWork work;
  work.batch_size = trace_workload->batch_size();
  const auto iterations_per_epoch = static_cast<int64_t>(
      std::ceil(static_cast<double>(workload->samples_per_epoch) / trace_workload->batch_size()));
  if (iterations) {
    work.work_iterations = *iterations;
    work.epochs = static_cast<double>(*iterations) / static_cast<double>(iterations_per_epoch);
    return work;
  }
  work.epochs = epochs ? *epochs : JOULE_TRY(epochs_to_target(gpu, workload_name, work.batch_size));
  if (!(work.epochs > 0)) {
    return fail(ErrorCode::kInvalidArgument, "carbon replay: --epochs must be positive, got {}", work.epochs);
  }
  work.work_iterations =
      static_cast<int64_t>(std::ceil(work.epochs * static_cast<double>(iterations_per_epoch)));
  return work;
}

const optimize::StrategyResult& replay_strategy(const optimize::CarbonReplayResult& result,
                                                std::string_view name) {
  for (const auto& s : result.strategies) {
    if (s.name == name) {
      return s;
    }
  }
  throw Exception(ErrorCode::kInternal, fmt::format("no strategy {}", name));
}

std::string render_replay_json(const optimize::CarbonReplayResult& result, const ReplaySettings& settings) {
  nlohmann::json strategies = nlohmann::json::array();
  for (const auto& s : result.strategies) {
    double weighted = 0;
    for (size_t i = 0; i < s.timeline.size(); ++i) {
      const double until = i + 1 < s.timeline.size() ? s.timeline[i + 1].time_s : s.time_s;
      weighted += s.timeline[i].power_limit_w * (until - s.timeline[i].time_s);
    }
    strategies.push_back({{"name", s.name},
                          {"carbon_g", s.carbon_g},
                          {"energy_j", s.energy_j},
                          {"time_s", s.time_s},
                          {"mean_power_limit_w", s.time_s > 0 ? weighted / s.time_s : 0.0}});
  }
  nlohmann::json decisions = nlohmann::json::array();
  for (const auto& tick : replay_strategy(result, "chase").timeline) {
    decisions.push_back({{"time_s", tick.time_s},
                         {"time", carbon::format_utc_time(tick.time_unix_s)},
                         {"intensity_g_per_kwh", tick.intensity_g_per_kwh},
                         {"forecast_g_per_kwh", tick.forecast_g_per_kwh},
                         {"power_limit_w", tick.power_limit_w}});
  }
  nlohmann::json frontier = nlohmann::json::array();
  for (const auto& p : result.frontier.points()) {
    frontier.push_back({{"power_limit_w", p.knob / 1000.0}, {"time_s", p.time_s}, {"energy_j", p.energy_j}});
  }
  const auto& chase = replay_strategy(result, "chase");
  nlohmann::json out = {
      {"gpu", result.gpu_name},
      {"workload", result.workload},
      {"batch_size", result.batch_size},
      {"gpus", result.gpu_count},
      {"epochs", settings.epochs},
      {"work_iterations", result.work_iterations},
      {"trace", result.trace_source},
      {"start", carbon::format_utc_time(result.start_unix_s)},
      {"eta", settings.eta},
      {"zeus_eta", settings.zeus_eta},
      {"period_s", settings.period_min * 60},
      {"max_intensity_g_per_kwh", settings.max_intensity_g_per_kwh},
      {"max_power_w", result.max_power_w},
      {"forecaster", settings.forecaster},
      {"zeus_power_limit_w", result.zeus_power_limit_mw / 1000.0},
      {"strategies", strategies},
      {"savings",
       {{"chase_vs_max_power_limit", savings_json(chase, replay_strategy(result, "max_power_limit"))},
        {"chase_vs_zeus", savings_json(chase, replay_strategy(result, "zeus"))}}},
      {"frontier_per_iteration", frontier},
      {"chase_decisions", decisions},
  };
  return out.dump(2) + "\n";
}

std::string render_replay_text(const optimize::CarbonReplayResult& result, const ReplaySettings& settings) {
  std::ostringstream out;
  out << fmt::format("{} × {}, {} at batch size {}: {:g} epochs = {} iterations\n", result.gpu_count,
                     result.gpu_name, result.workload, result.batch_size, settings.epochs,
                     result.work_iterations);
  out << fmt::format(
      "trace {} from {}; Chase re-decides every {:g} min with forecaster {} (eta {:g}, max "
      "intensity {:g} g/kWh); Zeus: eta {:g} → {:g} W\n\n",
      result.trace_source, carbon::format_utc_time(result.start_unix_s), settings.period_min,
      settings.forecaster, settings.eta, settings.max_intensity_g_per_kwh, settings.zeus_eta,
      result.zeus_power_limit_mw / 1000.0);
  out << fmt::format("{:<16} {:>12} {:>12} {:>10}\n", "strategy", "carbon (kg)", "energy (MJ)", "time (h)");
  for (const auto& s : result.strategies) {
    out << fmt::format("{:<16} {:>12.3f} {:>12.3f} {:>10.3f}\n", s.name, s.carbon_g / 1000, s.energy_j / 1e6,
                       s.time_s / 3600);
  }
  const auto& chase = replay_strategy(result, "chase");
  for (const char* reference : {"max_power_limit", "zeus"}) {
    const auto& r = replay_strategy(result, reference);
    out << fmt::format("\nchase vs {}: carbon {:+.1f}%, energy {:+.1f}%, time {:+.1f}%", reference,
                       percent_change(chase.carbon_g, r.carbon_g), percent_change(chase.energy_j, r.energy_j),
                       percent_change(chase.time_s, r.time_s));
  }
  out << "\n";
  return out.str();
}

std::string render_replay_csv(const optimize::CarbonReplayResult& result) {
  std::string out = "strategy,carbon_g,energy_j,time_s\n";
  for (const auto& s : result.strategies) {
    out += fmt::format("{},{:.6f},{:.6f},{:.6f}\n", s.name, s.carbon_g, s.energy_j, s.time_s);
  }
  return out;
}

// Two stacked charts in one SVG: the intensity (actual and Chase's forecast) and each strategy's limit.
std::string replay_plot_svg(const optimize::CarbonReplayResult& result) {
  const auto& chase = replay_strategy(result, "chase");
  viz::Plot intensity(900, 360);
  intensity.title(fmt::format("Carbon intensity during the run ({})", result.trace_source))
      .x_label("Training time (h)")
      .y_label("Intensity (gCO2e/kWh)");
  std::vector<double> hours;
  std::vector<double> actual;
  std::vector<double> forecast;
  for (const auto& tick : chase.timeline) {
    hours.push_back(tick.time_s / 3600);
    actual.push_back(tick.intensity_g_per_kwh);
    forecast.push_back(tick.forecast_g_per_kwh);
  }
  intensity.add({.label = "actual", .x = hours, .y = actual, .kind = viz::SeriesKind::kStep});
  intensity.add({.label = "forecast (Chase)",
                 .x = hours,
                 .y = forecast,
                 .kind = viz::SeriesKind::kLine,
                 .dash = "6 3"});
  viz::Plot limits(900, 360);
  limits.title("Power limit chosen").x_label("Training time (h)").y_label("Power limit (W)");
  for (const auto& s : result.strategies) {
    std::vector<double> x;
    std::vector<double> y;
    for (const auto& tick : s.timeline) {
      x.push_back(tick.time_s / 3600);
      y.push_back(tick.power_limit_w);
    }
    x.push_back(s.time_s / 3600);
    y.push_back(y.back());
    limits.add(
        {.label = s.name, .x = x, .y = y, .kind = viz::SeriesKind::kStep, .marker = viz::Marker::kNone});
  }
  // One time axis for both panels: the run's whole length (the slowest strategy's end), so that a moment
  // lines up vertically in the two panels.
  double end_h = hours.empty() ? 0 : hours.back();
  for (const auto& s : result.strategies) {
    end_h = std::max(end_h, s.time_s / 3600);
  }
  if (end_h > 0) {
    intensity.x_range(0, end_h);
    limits.x_range(0, end_h);
  }
  // Headroom above the data, so that the legend has a top corner where it covers nothing.
  viz::add_top_headroom(intensity);
  viz::add_top_headroom(limits);
  return viz::stack_plots({&intensity, &limits});
}

}  // namespace joule::sim
