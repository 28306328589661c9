// SPDX-License-Identifier: Apache-2.0
// joule/cluster/replay.hpp — `joule cluster replay`: a deterministic, seeded simulation of a GPU cluster
// (1,000 GPUs for 14 days by default) under a facility power cap and a carbon trace, comparing five ways to
// run it: uncapped, a uniform static cap, Zeus per job, Chase per job and the cluster autopilot (the
// allocator every control period, deferrable work moved into cleaner hours within its deadline).
// docs/cluster.md, "Replaying a cluster", gives the model and the sources of its statistics.
//
//   joule::cluster::ReplayOptions options;            // 1,000 GPUs, 14 days, cap 80%, 30% deferrable
//   options.carbon_trace_path = "data/carbon/synthetic_us_solar_14d.csv";
//   auto report = joule::cluster::run_cluster_replay(options);
//   fmt::print("{}", joule::cluster::format_table(*report));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::cluster {

/// How the cluster's GPUs get their power limits.
enum class ReplayPolicy {
  kUncapped,     ///< every GPU at its maximum limit
  kUniformCap,   ///< every GPU at cap / N (capped at its maximum)
  kZeusPerJob,   ///< each training job at its own ZeusCost-optimal limit, ignoring the cap
  kChasePerJob,  ///< each training job re-picks its limit every Chase period by the carbon-weighted cost
  kAutopilot,    ///< allocate() every control period within the cap, plan_deferrable() every carbon slot
};

/// @return "uncapped", "uniform_cap", "zeus_per_job", "chase_per_job" or "autopilot".
std::string_view to_string(ReplayPolicy policy);
/// @return the policy called `name` (as to_string() writes it), or kInvalidArgument listing them.
Result<ReplayPolicy> parse_replay_policy(std::string_view name);

/// What to replay. Every default is stated in docs/cluster.md.
struct ReplayOptions {
  int gpus = 1000;                ///< GPUs in the cluster (≥ 1)
  double days = 14;               ///< simulated horizon, days (> 0, ≤ 366)
  double cap_share = 0.8;         ///< cap as a share of the GPUs' summed maximum power, in (0, 1]
  double deferrable_share = 0.3;  ///< share of the training work (GPU-s at full speed) that may wait, [0, 1]
  uint64_t seed = 1;              ///< the job mix and the inference load draw from it
  std::string carbon_trace_path;  ///< a CarbonTrace CSV (required); tiled when shorter than the horizon
  double control_period_s = 300;  ///< the autopilot re-allocates every period; over-cap is counted per period
  double chase_period_s = 1800;   ///< Chase re-picks every period (its paper: 30 min)
  double chase_eta = 0.25;        ///< Chase's eta (joule's ChaseOptions default)
  double chase_max_intensity_g_per_kwh = 750;  ///< Chase's normalising intensity (its default)
  double zeus_eta = 0.5;                       ///< Zeus per job's eta
  double inference_gpu_share = 0.1;            ///< share of the GPUs serving the inference services, [0, 0.5]
  double training_load = 0.9;  ///< offered training GPU-load as a share of the training GPUs, (0, 2]
  /// A deferrable job may finish this long after it could have finished running at once, s (its latest
  /// finish time is arrival + run time at full speed × 1.2 + this).
  double deferral_slack_s = 24 * 3600.0;
  /// A service's SLO floor: the lowest limit whose attainment is at least this, or the attainment at full
  /// power where that is lower (1: exactly what the service attains uncapped).
  double slo_attainment_target = 1.0;
  /// The autopilot offers each training job no more than its carbon-weighted optimum at the current
  /// intensity (Chase's cost: autopilot_eta or deferrable_eta, chase_max_intensity_g_per_kwh), and the cap
  /// decides how much less; false: up to its maximum limit.
  bool autopilot_follows_carbon = true;
  /// That cost's eta for the jobs that cannot wait (default: Chase's). Either way, a job is never slowed to
  /// where its current pace would miss its deadline.
  double autopilot_eta = 0.25;
  /// The same cost's eta for deferrable jobs, which have time to spare: they are slowed more in dirty hours
  /// (with autopilot_follows_carbon; in [0, 1]).
  double deferrable_eta = 0.5;
  /// The autopilot's deferral plan sees the trace's own future (an oracle, for a bound on what a better
  /// forecast would give) instead of the seasonal-naive forecast.
  bool deferral_oracle_forecast = false;
  /// The policies to run, in this order in the report; empty: all five. Relative figures need uncapped.
  std::vector<ReplayPolicy> policies;
  bool keep_timeline = true;  ///< keep the per-period cluster power of each policy (for the plot and JSON)
};

/// @return kInvalidArgument naming the first bad option (and what is expected).
Result<void> validate(const ReplayOptions& options);

/// What one policy did over the replay.
struct PolicyReport {
  ReplayPolicy policy = ReplayPolicy::kUncapped;
  std::string name;
  // The cap.
  int64_t periods_over_cap = 0;  ///< control periods whose mean cluster power exceeded the cap
  double time_over_cap_s = 0;    ///< their total length, s
  double energy_over_cap_j = 0;  ///< Σ (mean power − cap) × period over them, J
  double peak_power_w = 0;       ///< the highest period-mean cluster power, W
  double mean_power_w = 0;       ///< W
  // Training.
  double training_work_gpu_s =
      0;  ///< work done, GPU-s at full speed (each GPU-s weighted by t(max)/t(limit))
  double throughput_vs_uncapped = 0;  ///< training_work_gpu_s / uncapped's (0 when uncapped did not run)
  int64_t jobs_finished = 0;
  int64_t deadlines_due = 0;  ///< jobs whose deadline fell within the horizon
  int64_t deadlines_met = 0;  ///< of those, finished by their deadline
  int64_t deferrable_deadlines_due = 0;
  int64_t deferrable_deadlines_met = 0;
  // Inference.
  double slo_attainment = 0;  ///< tokens within the TPOT SLO / tokens produced, over all services and periods
  double min_period_slo_attainment = 0;  ///< the worst (service, period)
  // Energy and carbon.
  double energy_j = 0;           ///< all GPUs, idle ones included, J
  double carbon_g = 0;           ///< g CO2e
  double training_energy_j = 0;  ///< GPUs running training jobs, J
  double training_carbon_g = 0;
  std::vector<double>
      power_w;  ///< each control period's mean cluster power, W (ReplayOptions::keep_timeline)
};

/// One inference service of the replay.
struct ServiceInfo {
  std::string name;
  std::string model;
  std::string gpu;
  int tensor_parallel = 1;
  int replicas = 0;
  double peak_requests_per_s = 0;      ///< per replica, at the daily peak
  double capacity_requests_per_s = 0;  ///< per replica, the most that meets the SLO target at full power
};

/// The replay: its settings, the cluster it built and each policy's figures.
struct ReplayReport {
  ReplayOptions options;
  std::string carbon_source;
  int training_gpus = 0;
  int inference_gpus = 0;
  double max_power_w = 0;  ///< Σ GPUs' maximum power limits, W
  double cap_w = 0;
  int64_t periods = 0;
  int64_t jobs = 0;                     ///< training jobs that arrived within the horizon
  double offered_work_gpu_s = 0;        ///< their work, GPU-s at full speed
  double deferrable_work_share = 0;     ///< share of that work marked deferrable (as achieved)
  double mean_intensity_g_per_kwh = 0;  ///< of the carbon trace over the horizon
  std::vector<ServiceInfo> services;
  std::vector<PolicyReport> policies;
  std::vector<double> intensity_g_per_kwh;  ///< per control period (keep_timeline)
};

/// Runs the replay. Deterministic for the options (same seed, same report). Errors (kInvalidArgument /
/// validate()'s) for bad options; the carbon trace's read or parse error (kIo / kNotFound / kParse) with its
/// path.
Result<ReplayReport> run_cluster_replay(const ReplayOptions& options);

/// @return the report as a JSON document (2-space indent, final newline).
std::string to_json(const ReplayReport& report);
/// @return the report as a text table, one row per policy, and a line of settings above it.
std::string format_table(const ReplayReport& report);
/// @return an SVG: each policy's cluster power over time against the cap, above the carbon intensity.
/// Needs the timeline (ReplayOptions::keep_timeline); without it, a plot of the cap alone.
std::string replay_plot_svg(const ReplayReport& report);

/// One point of the deferrable-share curve.
struct DeferrableCurvePoint {
  double deferrable_share = 0;
  double chase_carbon_g = 0;
  double autopilot_carbon_g = 0;
  double chase_training_carbon_g = 0;
  double autopilot_training_carbon_g = 0;
  double carbon_saving_vs_chase = 0;  ///< 1 − autopilot / chase (whole cluster)
  double autopilot_throughput_vs_uncapped = 0;
  int64_t autopilot_deadlines_met = 0;
  int64_t autopilot_deadlines_due = 0;
  int64_t chase_deadlines_met = 0;
  int64_t chase_deadlines_due = 0;
};

/// Replays uncapped, Chase per job and the autopilot at each share (each in [0, 1]; the rest of `options` as
/// given). @return validate()'s errors, the first replay's error.
Result<std::vector<DeferrableCurvePoint>> deferrable_curve(const ReplayOptions& options,
                                                           const std::vector<double>& shares);

}  // namespace joule::cluster
