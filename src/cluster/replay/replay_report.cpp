// SPDX-License-Identifier: Apache-2.0
// The forms of a cluster replay's report (joule/cluster/replay.hpp): JSON, a text table and an SVG plot.
#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/cluster/replay.hpp"
#include "joule/core/units.hpp"
#include "joule/viz/plot.hpp"

namespace joule::cluster {
namespace {

nlohmann::json policy_json(const PolicyReport& policy, bool timeline) {
  nlohmann::json out = {
      {"policy", policy.name},
      {"periods_over_cap", policy.periods_over_cap},
      {"time_over_cap_s", policy.time_over_cap_s},
      {"energy_over_cap_j", policy.energy_over_cap_j},
      {"peak_power_w", policy.peak_power_w},
      {"mean_power_w", policy.mean_power_w},
      {"training_work_gpu_s", policy.training_work_gpu_s},
      {"throughput_vs_uncapped", policy.throughput_vs_uncapped},
      {"jobs_finished", policy.jobs_finished},
      {"deadlines_due", policy.deadlines_due},
      {"deadlines_met", policy.deadlines_met},
      {"deferrable_deadlines_due", policy.deferrable_deadlines_due},
      {"deferrable_deadlines_met", policy.deferrable_deadlines_met},
      {"slo_attainment", policy.slo_attainment},
      {"min_period_slo_attainment", policy.min_period_slo_attainment},
      {"energy_kwh", policy.energy_j / kJoulesPerKwh},
      {"carbon_kg", policy.carbon_g / 1000},
      {"training_energy_kwh", policy.training_energy_j / kJoulesPerKwh},
      {"training_carbon_kg", policy.training_carbon_g / 1000},
  };
  if (timeline) {
    out["power_w"] = policy.power_w;
  }
  return out;
}

}  // namespace

std::string to_json(const ReplayReport& report) {
  const ReplayOptions& options = report.options;
  nlohmann::json services = nlohmann::json::array();
  for (const auto& service : report.services) {
    services.push_back({{"name", service.name},
                        {"model", service.model},
                        {"gpu", service.gpu},
                        {"tensor_parallel", service.tensor_parallel},
                        {"replicas", service.replicas},
                        {"peak_requests_per_s", service.peak_requests_per_s},
                        {"capacity_requests_per_s", service.capacity_requests_per_s}});
  }
  nlohmann::json policies = nlohmann::json::array();
  for (const auto& policy : report.policies) {
    policies.push_back(policy_json(policy, options.keep_timeline));
  }
  nlohmann::json out = {
      {"gpus", options.gpus},
      {"days", options.days},
      {"cap_share", options.cap_share},
      {"deferrable_share", options.deferrable_share},
      {"seed", options.seed},
      {"control_period_s", options.control_period_s},
      {"training_load", options.training_load},
      {"inference_gpu_share", options.inference_gpu_share},
      {"autopilot_follows_carbon", options.autopilot_follows_carbon},
      {"deferrable_eta", options.deferrable_eta},
      {"chase_eta", options.chase_eta},
      {"deferral_oracle_forecast", options.deferral_oracle_forecast},
      {"carbon_trace", report.carbon_source},
      {"training_gpus", report.training_gpus},
      {"inference_gpus", report.inference_gpus},
      {"max_power_w", report.max_power_w},
      {"cap_w", report.cap_w},
      {"periods", report.periods},
      {"jobs", report.jobs},
      {"offered_work_gpu_s", report.offered_work_gpu_s},
      {"deferrable_work_share", report.deferrable_work_share},
      {"mean_intensity_g_per_kwh", report.mean_intensity_g_per_kwh},
      {"services", services},
      {"policies", policies},
  };
  if (options.keep_timeline) {
    out["intensity_g_per_kwh"] = report.intensity_g_per_kwh;
  }
  return out.dump(2) + "\n";
}

std::string format_table(const ReplayReport& report) {
  const ReplayOptions& options = report.options;
  std::string out = fmt::format(
      "{} GPUs ({} training, {} inference) for {:g} days; cap {:.0f} kW = {:.0f}% of {:.0f} kW; {} training "
      "jobs, {:.0f}% of their work deferrable; carbon {} (mean {:.0f} g/kWh); seed {}\n\n",
      options.gpus, report.training_gpus, report.inference_gpus, options.days, report.cap_w / 1000,
      options.cap_share * 100, report.max_power_w / 1000, report.jobs, report.deferrable_work_share * 100,
      report.carbon_source, report.mean_intensity_g_per_kwh, options.seed);
  out += fmt::format("{:<14} {:>9} {:>10} {:>11} {:>10} {:>11} {:>11} {:>9} {:>10} {:>10}\n", "policy",
                     "over cap", "over cap", "over cap", "peak", "throughput", "deadlines", "SLO", "energy",
                     "carbon");
  out += fmt::format("{:<14} {:>9} {:>10} {:>11} {:>10} {:>11} {:>11} {:>9} {:>10} {:>10}\n", "", "periods",
                     "time (h)", "energy (kWh)", "(% cap)", "vs uncapped", "met", "attained", "(MWh)",
                     "(t CO2e)");
  for (const auto& policy : report.policies) {
    out += fmt::format(
        "{:<14} {:>9} {:>10.1f} {:>11.1f} {:>10.1f} {:>11} {:>11} {:>8.2f}% {:>10.2f} {:>10.2f}\n",
        policy.name, policy.periods_over_cap, policy.time_over_cap_s / 3600,
        policy.energy_over_cap_j / kJoulesPerKwh,
        report.cap_w > 0 ? 100 * policy.peak_power_w / report.cap_w : 0.0,
        policy.throughput_vs_uncapped > 0 ? fmt::format("{:.2f}%", 100 * policy.throughput_vs_uncapped) : "-",
        fmt::format("{}/{}", policy.deadlines_met, policy.deadlines_due), 100 * policy.slo_attainment,
        policy.energy_j / kJoulesPerKwh / 1000, policy.carbon_g / 1e6);
  }
  return out;
}

std::string replay_plot_svg(const ReplayReport& report) {
  const double period_h = report.options.control_period_s / 3600;
  viz::Plot power(960, 420);
  power.title("Cluster power against the cap").x_label("Time (h)").y_label("Cluster power (kW)");
  for (const auto& policy : report.policies) {
    if (policy.power_w.empty()) {
      continue;
    }
    viz::Series series{.label = policy.name, .kind = viz::SeriesKind::kLine};
    for (size_t k = 0; k < policy.power_w.size(); ++k) {
      series.x.push_back(static_cast<double>(k) * period_h);
      series.y.push_back(policy.power_w[k] / 1000);
    }
    series.opacity = policy.policy == ReplayPolicy::kAutopilot ? 1.0 : 0.6;
    power.add(std::move(series));
  }
  power.reference({.orientation = viz::Orientation::kHorizontal,
                   .value = report.cap_w / 1000,
                   .label = fmt::format("cap {:.0f} kW", report.cap_w / 1000),
                   .color = "#cc0000"});
  const double end_h = static_cast<double>(report.periods) * period_h;
  power.x_range(0, std::max(end_h, period_h));
  viz::add_top_headroom(power, 0.3);
  viz::Plot intensity(960, 220);
  intensity.title("Grid carbon intensity").x_label("Time (h)").y_label("g CO2e/kWh");
  viz::Series carbon{.label = report.carbon_source, .kind = viz::SeriesKind::kLine, .color = "#555555"};
  for (size_t k = 0; k < report.intensity_g_per_kwh.size(); ++k) {
    carbon.x.push_back(static_cast<double>(k) * period_h);
    carbon.y.push_back(report.intensity_g_per_kwh[k]);
  }
  if (!carbon.x.empty()) {
    intensity.add(std::move(carbon));
  }
  intensity.legend(false);
  intensity.x_range(0, std::max(end_h, period_h));
  return viz::stack_plots({&power, &intensity});
}

}  // namespace joule::cluster
