// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/frontier.hpp"
#include "joule/sim/json_forms.hpp"
#include "joule/viz/plot.hpp"

namespace joule::sim {

namespace {

Totals over_recurrences(const FixedConfiguration& config, int recurrences) {
  const auto n = static_cast<double>(recurrences);
  return {config.energy_j * n, config.time_s * n, config.cost * n};
}

std::string beta_text(double beta) {
  return std::isinf(beta) ? "inf" : fmt::format("{:g}", beta);
}

std::string percent(double fraction) {
  return fmt::format("{:.1f}%", fraction * 100);
}

nlohmann::json totals_json(const Totals& totals) {
  return {{"energy_j", totals.energy_j}, {"time_s", totals.time_s}, {"cost", totals.cost}};
}

nlohmann::json savings_json(const Totals& zeus, const Totals& reference) {
  return {{"energy", saving(zeus.energy_j, reference.energy_j)},
          {"time", saving(zeus.time_s, reference.time_s)},
          {"cost", saving(zeus.cost, reference.cost)}};
}

std::string config_name(const FixedConfiguration& config) {
  return fmt::format("{}@{:g}W", config.batch_size, config.power_limit_w);
}

// Zooms on what matters (frontier, baseline, oracle, tries): very slow configurations (tiny batch sizes)
// would otherwise squeeze everything into a corner. They stay in the file, clipped.
void zoom_on_what_matters(viz::Plot& plot, const SimulationResult& result,
                          const std::map<std::pair<int, double>, int>& tried) {
  double max_time_s = result.baseline.time_s;
  double max_energy_j = result.baseline.energy_j;
  for (const auto& config : result.configurations) {
    if (tried.count({config.batch_size, config.power_limit_w}) > 0 || config.reach_rate == 1) {
      if (tried.count({config.batch_size, config.power_limit_w}) > 0 ||
          config.time_s <= 2 * result.baseline.time_s) {
        max_time_s = std::max(max_time_s, config.time_s);
        max_energy_j = std::max(max_energy_j, config.energy_j);
      }
    }
  }
  size_t hidden = 0;
  for (const auto& config : result.configurations) {
    hidden += (config.time_s > max_time_s * 1.1 || config.energy_j > max_energy_j * 1.1) ? 1 : 0;
  }
  if (hidden > 0) {
    plot.x_range(0, max_time_s * 1.1 / 3600).y_range(0, max_energy_j * 1.1 / 1e6);
    plot.x_label(fmt::format("Time per recurrence (h); {} slow configuration{} off the chart", hidden,
                             hidden == 1 ? "" : "s"));
  }
}

}  // namespace

double saving(double a, double b) {
  return b == 0 ? 0.0 : 1.0 - a / b;
}

Comparison compare(const SimulationResult& result) {
  Comparison comparison;
  comparison.zeus = result.optimizer;
  comparison.baseline = over_recurrences(result.baseline, result.recurrences);
  if (result.oracle) {
    comparison.oracle = over_recurrences(*result.oracle, result.recurrences);
  }
  return comparison;
}

std::string render_simulation_text(const std::string& gpu, const SimulationResult& result,
                                   const SimulationOptions& options) {
  const Job& job = result.job;
  std::string out = fmt::format(
      "Zeus simulation: {} ({}, {}) on {}\n"
      "  target {:g} within {} epochs, b0 {}, eta {:g}, beta {}, seed {}, {} recurrences\n\n",
      job.dataset, job.network, job.optimizer, gpu, job.target_metric, job.max_epochs, job.default_batch_size,
      options.eta, beta_text(options.beta), options.seed, result.recurrences);
  out += fmt::format("  {:>4}  {:<44}  {:>11}  {:>9}  {:>10}\n", "rec",
                     "tries (batch size@power limit; x = stopped)", "energy (kJ)", "time (h)", "cost (kJ)");
  size_t i = 0;
  while (i < result.tries.size()) {
    const int recurrence = result.tries[i].recurrence;
    std::vector<std::string> steps;
    double energy_j = 0;
    double time_s = 0;
    double cost = 0;
    for (; i < result.tries.size() && result.tries[i].recurrence == recurrence; ++i) {
      const Try& t = result.tries[i];
      steps.push_back(fmt::format("{}@{:g}W{}", t.batch_size, t.power_limit_w, t.reached ? "" : " x"));
      energy_j += t.energy_j;
      time_s += t.time_s;
      cost += t.cost;
    }
    out +=
        fmt::format("  {:>4}  {:<44}  {:>11.1f}  {:>9.3f}  {:>10.1f}\n", recurrence,
                    fmt::format("{}", fmt::join(steps, " -> ")), energy_j / 1e3, time_s / 3600, cost / 1e3);
  }
  const Comparison comparison = compare(result);
  out += fmt::format("\n  {:<34}  {:>12}  {:>10}  {:>11}\n", "over all recurrences", "energy (MJ)",
                     "time (h)", "cost (MJ)");
  auto line = [&](const std::string& name, const Totals& totals) {
    out += fmt::format("  {:<34}  {:>12.3f}  {:>10.2f}  {:>11.3f}\n", name, totals.energy_j / 1e6,
                       totals.time_s / 3600, totals.cost / 1e6);
  };
  line("Zeus", comparison.zeus);
  line(fmt::format("baseline {} (b0, max limit)", config_name(result.baseline)), comparison.baseline);
  if (comparison.oracle) {
    line(fmt::format("oracle {}", config_name(*result.oracle)), *comparison.oracle);
  }
  out += fmt::format("\n  Zeus vs baseline: {} energy, {} time, {} cost saved\n",
                     percent(saving(comparison.zeus.energy_j, comparison.baseline.energy_j)),
                     percent(saving(comparison.zeus.time_s, comparison.baseline.time_s)),
                     percent(saving(comparison.zeus.cost, comparison.baseline.cost)));
  if (comparison.oracle) {
    out += fmt::format("  the oracle would save {} cost; Zeus spends {} more than the oracle (exploration)\n",
                       percent(saving(comparison.oracle->cost, comparison.baseline.cost)),
                       percent(comparison.zeus.cost / comparison.oracle->cost - 1));
  }
  return out;
}

std::string render_simulation_json(const std::string& gpu, const SimulationResult& result,
                                   const SimulationOptions& options) {
  const Job& job = result.job;
  nlohmann::json tries = nlohmann::json::array();
  for (const Try& t : result.tries) {
    tries.push_back({{"recurrence", t.recurrence},
                     {"try", t.attempt},
                     {"batch_size", t.batch_size},
                     {"power_limit_w", t.power_limit_w},
                     {"energy_j", t.energy_j},
                     {"time_s", t.time_s},
                     {"reached", t.reached},
                     {"cost", t.cost}});
  }
  const Comparison comparison = compare(result);
  auto config_json = [](const FixedConfiguration& config) { return nlohmann::json(to_json(config)); };
  nlohmann::json out = {
      {"gpu", gpu},
      {"job", nlohmann::json(to_json(job))},
      {"options",
       {{"seed", options.seed},
        {"eta", options.eta},
        {"beta", std::isinf(options.beta) ? nlohmann::json(nullptr) : nlohmann::json(options.beta)},
        {"recurrences", result.recurrences}}},
      {"max_power_w", result.max_power_w},
      {"tries", tries},
      {"totals", {{"zeus", totals_json(comparison.zeus)}, {"baseline", totals_json(comparison.baseline)}}},
      {"baseline", config_json(result.baseline)},
      {"savings", {{"vs_baseline", savings_json(comparison.zeus, comparison.baseline)}}}};
  if (result.oracle) {
    out["oracle"] = config_json(*result.oracle);
    out["totals"]["oracle"] = totals_json(*comparison.oracle);
    out["savings"]["oracle_vs_baseline"] = savings_json(*comparison.oracle, comparison.baseline);
  } else {
    out["oracle"] = nullptr;
  }
  return out.dump(2) + "\n";
}

std::string render_tries_csv(const SimulationResult& result) {
  std::ostringstream out;
  csv::write_row(
      out, {"recurrence", "try", "batch_size", "power_limit_w", "energy_j", "time_s", "reached", "cost"});
  for (const Try& t : result.tries) {
    csv::write_row(
        out, {std::to_string(t.recurrence), std::to_string(t.attempt), std::to_string(t.batch_size),
              csv::format_exact(t.power_limit_w), csv::format_exact(t.energy_j), csv::format_exact(t.time_s),
              t.reached ? "true" : "false", csv::format_exact(t.cost)});
  }
  return out.str();
}

Result<std::vector<SavingsRow>> simulate_groups(const Trace& trace, const std::string& gpu,
                                                const std::vector<std::vector<GroupSubmission>>& groups,
                                                const SimulationOptions& options) {
  std::vector<SavingsRow> rows;
  for (const auto& group : groups) {
    SimulationOptions group_options = options;
    group_options.seed = adler32(group.front().group);
    const Simulator simulator = zeus_group_simulator(trace, group_options);
    const Job job = JOULE_TRY(paper_job(trace, group.front().dataset));
    rows.push_back({gpu, fmt::format("{} (group {})", job.dataset, group.front().group),
                    JOULE_TRY(simulator.simulate_group(job, group))});
  }
  return rows;
}

Result<std::vector<SavingsRow>> simulate_paper_workloads(const SimulationOptions& options,
                                                         const std::optional<std::string>& trace_dir) {
  std::vector<SavingsRow> rows;
  for (const std::string& gpu : trace_gpus()) {
    const Trace trace = JOULE_TRY(gpu_trace(gpu, trace_dir));
    const Simulator simulator = zeus_simulator(trace, options);
    for (const std::string& workload : paper_workloads()) {
      const Job job = JOULE_TRY(paper_job(trace, workload));
      rows.push_back({gpu, workload, JOULE_TRY(simulator.simulate(job))});
    }
  }
  return rows;
}

std::string render_savings_json(const std::vector<SavingsRow>& rows, const SimulationOptions& options) {
  nlohmann::json table = nlohmann::json::array();
  for (const auto& row : rows) {
    const Comparison comparison = compare(row.result);
    nlohmann::json entry = {{"gpu", row.gpu},
                            {"workload", row.workload},
                            {"recurrences", row.result.recurrences},
                            {"zeus", totals_json(comparison.zeus)},
                            {"baseline", totals_json(comparison.baseline)},
                            {"savings_vs_baseline", savings_json(comparison.zeus, comparison.baseline)}};
    if (comparison.oracle) {
      entry["oracle"] = totals_json(*comparison.oracle);
      entry["oracle_savings_vs_baseline"] = savings_json(*comparison.oracle, comparison.baseline);
    }
    table.push_back(std::move(entry));
  }
  return nlohmann::json{
             {"eta", options.eta},
             {"beta", std::isinf(options.beta) ? nlohmann::json(nullptr) : nlohmann::json(options.beta)},
             {"seed", options.seed},
             {"rows", table}}
             .dump(2) +
         "\n";
}

std::string render_savings_csv(const std::vector<SavingsRow>& rows) {
  std::ostringstream out;
  csv::write_row(out, {"gpu", "workload", "recurrences", "energy_saved", "time_saved", "cost_saved",
                       "oracle_cost_saved"});
  for (const auto& row : rows) {
    const Comparison c = compare(row.result);
    csv::write_row(out,
                   {row.gpu, row.workload, std::to_string(row.result.recurrences),
                    csv::format_exact(saving(c.zeus.energy_j, c.baseline.energy_j)),
                    csv::format_exact(saving(c.zeus.time_s, c.baseline.time_s)),
                    csv::format_exact(saving(c.zeus.cost, c.baseline.cost)),
                    c.oracle ? csv::format_exact(saving(c.oracle->cost, c.baseline.cost)) : std::string()});
  }
  return out.str();
}

std::string render_savings_text(const std::vector<SavingsRow>& rows, const SimulationOptions& options) {
  std::string out = fmt::format(
      "Zeus against the baseline (b0 at the maximum power limit), over all recurrences; eta {:g}, beta {}, "
      "seed {}\n\n",
      options.eta, beta_text(options.beta), options.seed);
  out += fmt::format("  {:<8} {:<26} {:>6}  {:>12}  {:>10}  {:>10}  {:>14}\n", "gpu", "workload", "recur.",
                     "energy saved", "time saved", "cost saved", "oracle (cost)");
  for (const auto& row : rows) {
    const Comparison c = compare(row.result);
    out += fmt::format("  {:<8} {:<26} {:>6}  {:>12}  {:>10}  {:>10}  {:>14}\n", row.gpu, row.workload,
                       row.result.recurrences, percent(saving(c.zeus.energy_j, c.baseline.energy_j)),
                       percent(saving(c.zeus.time_s, c.baseline.time_s)),
                       percent(saving(c.zeus.cost, c.baseline.cost)),
                       c.oracle ? percent(saving(c.oracle->cost, c.baseline.cost)) : std::string("-"));
  }
  out += "\n  (negative = more than the baseline)\n";
  return out;
}

std::string simulation_plot_svg(const std::string& gpu, const SimulationResult& result) {
  const Job& job = result.job;
  auto name = [](int batch_size, double power_limit_w) {
    return fmt::format("{}@{:g}W", batch_size, power_limit_w);
  };
  viz::Plot plot(900, 600);
  plot.title(fmt::format("{} ({}) on {}: one recurrence to target {:g}", job.dataset, job.network, gpu,
                         job.target_metric))
      .x_label("Time per recurrence (h)")
      .y_label("Energy per recurrence (MJ)");
  // Every configuration, split by whether all its training runs reach the target.
  viz::Series always{.label = "configurations (always reach)",
                     .kind = viz::SeriesKind::kScatter,
                     .color = "#999999",
                     .marker = viz::Marker::kCircle,
                     .opacity = 0.6};
  viz::Series sometimes{.label = "configurations (sometimes miss)",
                        .kind = viz::SeriesKind::kScatter,
                        .color = "#bbbbbb",
                        .marker = viz::Marker::kCross,
                        .opacity = 0.6};
  std::vector<FrontierPoint<std::pair<int, double>>> reaching;
  for (const auto& config : result.configurations) {
    viz::Series& series = config.reach_rate == 1 ? always : sometimes;
    series.x.push_back(config.time_s / 3600);
    series.y.push_back(config.energy_j / 1e6);
    series.tooltips.push_back(fmt::format("{}: {:.3g} h, {:.3g} MJ, reaches the target in {:.0f}% of runs",
                                          name(config.batch_size, config.power_limit_w), config.time_s / 3600,
                                          config.energy_j / 1e6, config.reach_rate * 100));
    if (config.reach_rate == 1) {
      reaching.push_back({{config.batch_size, config.power_limit_w}, config.time_s, config.energy_j});
    }
  }
  plot.add(std::move(always));
  if (!sometimes.x.empty()) {
    plot.add(std::move(sometimes));
  }
  const auto frontier = Frontier<std::pair<int, double>>::from_points(reaching);
  viz::Series front{.label = "Pareto frontier", .kind = viz::SeriesKind::kLineMarkers, .color = "#0072b2"};
  for (const auto& point : frontier.points()) {
    front.x.push_back(point.time_s / 3600);
    front.y.push_back(point.energy_j / 1e6);
    front.tooltips.push_back(fmt::format("{} (frontier)", name(point.knob.first, point.knob.second)));
  }
  plot.add(std::move(front));
  // What the optimizer tried, with how often.
  std::map<std::pair<int, double>, int> tried;
  for (const Try& t : result.tries) {
    ++tried[{t.batch_size, t.power_limit_w}];
  }
  viz::Series tries{.label = "tried by Zeus",
                    .kind = viz::SeriesKind::kScatter,
                    .color = "#e69f00",
                    .marker = viz::Marker::kTriangle};
  for (const auto& config : result.configurations) {
    const auto found = tried.find({config.batch_size, config.power_limit_w});
    if (found != tried.end()) {
      tries.x.push_back(config.time_s / 3600);
      tries.y.push_back(config.energy_j / 1e6);
      tries.tooltips.push_back(fmt::format("{}: tried {} time{}",
                                           name(config.batch_size, config.power_limit_w), found->second,
                                           found->second == 1 ? "" : "s"));
    }
  }
  plot.add(std::move(tries));
  plot.highlight(
      {.x = result.baseline.time_s / 3600,
       .y = result.baseline.energy_j / 1e6,
       .label = fmt::format("baseline {}", name(result.baseline.batch_size, result.baseline.power_limit_w)),
       .color = "#222222",
       .marker = viz::Marker::kSquare});
  if (result.oracle) {
    plot.highlight(
        {.x = result.oracle->time_s / 3600,
         .y = result.oracle->energy_j / 1e6,
         .label = fmt::format("oracle {}", name(result.oracle->batch_size, result.oracle->power_limit_w)),
         .color = "#d55e00",
         .marker = viz::Marker::kDiamond});
  }
  zoom_on_what_matters(plot, result, tried);
  const double n = result.recurrences;
  plot.highlight({.x = result.optimizer.time_s / n / 3600,
                  .y = result.optimizer.energy_j / n / 1e6,
                  .label = "Zeus (mean per recurrence)",
                  .color = "#009e73",
                  .marker = viz::Marker::kCircle});
  return plot.svg();
}

}  // namespace joule::sim
