// SPDX-License-Identifier: Apache-2.0
// cluster_replay_bench: `joule cluster replay`'s budget and targets (docs/cluster.md, "Replaying a cluster").
// Times the default replay (1,000 GPUs, 14 days, the five policies) on one core, prints its table and the
// issue's target figures, what limits deferral (the autopilot against Chase per job with one setting
// changed), then the carbon curve as the deferrable share varies. Arguments: [carbon trace CSV] [cap share]
// [seed] [no-curve|curve] [training load] [plot.svg]; defaults: the shipped synthetic trace, 0.8, 1, the
// curve, 0.9, no plot.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "joule/cluster/replay.hpp"

namespace {

const joule::cluster::PolicyReport& find(const joule::cluster::ReplayReport& report,
                                         joule::cluster::ReplayPolicy policy) {
  for (const auto& p : report.policies) {
    if (p.policy == policy) {
      return p;
    }
  }
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  using joule::cluster::ReplayPolicy;
  joule::cluster::ReplayOptions options;
  options.carbon_trace_path =
      argc > 1 ? argv[1] : std::string(JOULE_SOURCE_DIR) + "/data/carbon/synthetic_us_solar_14d.csv";
  if (argc > 2) {
    options.cap_share = std::stod(argv[2]);
  }
  if (argc > 3) {
    options.seed = std::stoull(argv[3]);
  }
  if (argc > 5) {
    options.training_load = std::stod(argv[5]);
  }
  const auto start = std::chrono::steady_clock::now();
  auto report = joule::cluster::run_cluster_replay(options);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report) {
    fmt::print(stderr, "cluster_replay_bench: {}\n", report.error().message());
    return 1;
  }
  fmt::print("{}\n", joule::cluster::format_table(*report));
  if (argc > 6) {
    std::ofstream(argv[6]) << joule::cluster::replay_plot_svg(*report);
  }
  for (const auto& p : report->policies) {
    fmt::print("  {:<14} training GPUs {:.2f} MWh, {:.2f} t CO2e; rest of the cluster {:.2f} MWh\n", p.name,
               p.training_energy_j / 3.6e9, p.training_carbon_g / 1e6,
               (p.energy_j - p.training_energy_j) / 3.6e9);
  }
  fmt::print("replay wall time: {:.2f} s (5 policies, {} periods, budget 60 s on one core)\n\n", wall_s,
             report->periods);
  const auto& uncapped = find(*report, ReplayPolicy::kUncapped);
  const auto& chase = find(*report, ReplayPolicy::kChasePerJob);
  const auto& autopilot = find(*report, ReplayPolicy::kAutopilot);
  fmt::print("targets (cap {:.0f}%, deferrable {:.0f}%):\n", options.cap_share * 100,
             report->deferrable_work_share * 100);
  fmt::print("  autopilot periods over the cap: {} (target ≤ 1)\n", autopilot.periods_over_cap);
  fmt::print("  autopilot training throughput vs uncapped: {:.2f}% (target ≥ 97%)\n",
             100 * autopilot.throughput_vs_uncapped);
  fmt::print("  SLO attainment: autopilot {:.3f}% vs uncapped {:.3f}% (target: no lower)\n",
             100 * autopilot.slo_attainment, 100 * uncapped.slo_attainment);
  fmt::print("  carbon vs Chase per job: cluster {:.2f}%, training GPUs {:.2f}% (target ≤ −15%)\n",
             100 * (autopilot.carbon_g / chase.carbon_g - 1),
             100 * (autopilot.training_carbon_g / chase.training_carbon_g - 1));
  fmt::print("  deadlines met: autopilot {}/{}, Chase {}/{}, uncapped {}/{}\n", autopilot.deadlines_met,
             autopilot.deadlines_due, chase.deadlines_met, chase.deadlines_due, uncapped.deadlines_met,
             uncapped.deadlines_due);
  fmt::print("  of which deferrable: autopilot {}/{}, Chase {}/{}, uncapped {}/{}\n\n",
             autopilot.deferrable_deadlines_met, autopilot.deferrable_deadlines_due,
             chase.deferrable_deadlines_met, chase.deferrable_deadlines_due,
             uncapped.deferrable_deadlines_met, uncapped.deferrable_deadlines_due);
  // What limits deferral: the same replay (Chase per job against the autopilot) with one setting changed.
  struct Variant {
    const char* name;
    void (*apply)(joule::cluster::ReplayOptions&);
  };
  const Variant variants[] = {
      {"as above", [](joule::cluster::ReplayOptions&) {}},
      {"oracle forecast", [](joule::cluster::ReplayOptions& o) { o.deferral_oracle_forecast = true; }},
      {"slack 48 h", [](joule::cluster::ReplayOptions& o) { o.deferral_slack_s = 48 * 3600.0; }},
      {"training load 0.6", [](joule::cluster::ReplayOptions& o) { o.training_load = 0.6; }},
      {"load 0.6, oracle, 48 h",
       [](joule::cluster::ReplayOptions& o) {
         o.training_load = 0.6;
         o.deferral_oracle_forecast = true;
         o.deferral_slack_s = 48 * 3600.0;
       }},
      {"deferrable eta 0.25 (= Chase's)", [](joule::cluster::ReplayOptions& o) { o.deferrable_eta = 0.25; }},
      {"deferrable eta 0.75", [](joule::cluster::ReplayOptions& o) { o.deferrable_eta = 0.75; }},
      {"deferrable eta 1", [](joule::cluster::ReplayOptions& o) { o.deferrable_eta = 1; }},
      {"autopilot eta 0.5", [](joule::cluster::ReplayOptions& o) { o.autopilot_eta = 0.5; }},
      {"autopilot eta 0.5, deferrable 0.75",
       [](joule::cluster::ReplayOptions& o) {
         o.autopilot_eta = 0.5;
         o.deferrable_eta = 0.75;
       }},
      {"autopilot and Chase eta 0.5",
       [](joule::cluster::ReplayOptions& o) {
         o.autopilot_eta = 0.5;
         o.chase_eta = 0.5;
       }},
      {"autopilot not following carbon",
       [](joule::cluster::ReplayOptions& o) { o.autopilot_follows_carbon = false; }},
  };
  fmt::print("{:<32} {:>12} {:>16} {:>12} {:>14}\n", "variant (autopilot vs Chase)", "cluster",
             "training GPUs", "throughput", "deadlines met");
  for (const auto& variant : variants) {
    joule::cluster::ReplayOptions at = options;
    at.keep_timeline = false;
    at.policies = {ReplayPolicy::kUncapped, ReplayPolicy::kChasePerJob, ReplayPolicy::kAutopilot};
    variant.apply(at);
    auto result = joule::cluster::run_cluster_replay(at);
    if (!result) {
      fmt::print(stderr, "cluster_replay_bench: {}\n", result.error().message());
      return 1;
    }
    const auto& c = find(*result, ReplayPolicy::kChasePerJob);
    const auto& a = find(*result, ReplayPolicy::kAutopilot);
    fmt::print("{:<32} {:>11.2f}% {:>15.2f}% {:>11.2f}% {:>14}\n", variant.name,
               100 * (a.carbon_g / c.carbon_g - 1), 100 * (a.training_carbon_g / c.training_carbon_g - 1),
               100 * a.throughput_vs_uncapped, fmt::format("{}/{}", a.deadlines_met, a.deadlines_due));
  }
  fmt::print("\n");
  if (argc > 4 && std::string(argv[4]) == "no-curve") {
    return 0;
  }
  auto curve = joule::cluster::deferrable_curve(options, {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6});
  if (!curve) {
    fmt::print(stderr, "cluster_replay_bench: {}\n", curve.error().message());
    return 1;
  }
  fmt::print("{:>10} {:>14} {:>14} {:>12} {:>16} {:>14} {:>14}\n", "deferrable", "Chase (t CO2e)",
             "autopilot", "cluster", "training GPUs", "autopilot", "deadlines met");
  fmt::print("{:>10} {:>14} {:>14} {:>12} {:>16} {:>14} {:>14}\n", "share", "", "(t CO2e)", "vs Chase",
             "vs Chase", "throughput", "(autopilot)");
  for (const auto& point : *curve) {
    fmt::print("{:>9.0f}% {:>14.2f} {:>14.2f} {:>11.2f}% {:>15.2f}% {:>13.2f}% {:>14}\n",
               100 * point.deferrable_share, point.chase_carbon_g / 1e6, point.autopilot_carbon_g / 1e6,
               -100 * point.carbon_saving_vs_chase,
               100 * (point.autopilot_training_carbon_g / point.chase_training_carbon_g - 1),
               100 * point.autopilot_throughput_vs_uncapped,
               fmt::format("{}/{}", point.autopilot_deadlines_met, point.autopilot_deadlines_due));
  }
  return 0;
}
