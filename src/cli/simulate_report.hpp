// SPDX-License-Identifier: Apache-2.0
// Formatting of simulation results: text story, CSV tries, JSON, the savings table and the SVG plot.
#pragma once

#include <string>
#include <vector>

#include "joule/sim/simulator.hpp"

#include "common.hpp"

namespace joule::cli {

/// Totals of the fixed baseline and oracle over a whole simulation (per-recurrence averages × recurrences).
struct Comparison {
  sim::Totals zeus;
  sim::Totals baseline;
  std::optional<sim::Totals> oracle;
};

Comparison compare(const sim::SimulationResult& result);

/// @return 1 − a/b: the share of b that a saves (negative if a is larger).
double saving(double a, double b);

std::string render_simulation_text(const std::string& gpu, const sim::SimulationResult& result,
                                   const sim::SimulationOptions& options);
std::string render_simulation_json(const std::string& gpu, const sim::SimulationResult& result,
                                   const sim::SimulationOptions& options);
/// One row per try: recurrence,try,batch_size,power_limit_w,energy_j,time_s,reached,cost (17 digits).
std::string render_tries_csv(const sim::SimulationResult& result);

struct SavingsRow {
  std::string gpu;
  std::string workload;
  sim::SimulationResult result;
};
/// The savings of each simulation against its baseline and oracle, as a table (text, CSV or JSON).
std::string render_savings_table(const std::vector<SavingsRow>& rows, const sim::SimulationOptions& options,
                                 Format format);

/// @return an SVG: every configuration's average (time, energy) per recurrence, their Pareto frontier, the
/// baseline, the oracle and the configurations the optimizer tried.
std::string simulation_plot_svg(const std::string& gpu, const sim::SimulationResult& result);

}  // namespace joule::cli
