// SPDX-License-Identifier: Apache-2.0
// joule/sim/report.hpp — the forms of a simulation's result: the text story, JSON, the tries as CSV, the
// savings table over many simulations (text, CSV, JSON) and the SVG plot. What `joule simulate` and
// `joule demo` print; pure functions of a result, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "joule/sim/simulator.hpp"

namespace joule::sim {

/// Totals of Zeus, the fixed baseline and the oracle over a whole simulation (per-recurrence averages ×
/// recurrences).
struct Comparison {
  Totals zeus;
  Totals baseline;
  std::optional<Totals> oracle;
};

Comparison compare(const SimulationResult& result);

/// @return 1 − a/b: the share of b that a saves (negative if a is larger; 0 when b is 0).
double saving(double a, double b);

/// The recurrences, tries and totals of one simulation on `gpu`, as a human reads them.
std::string render_simulation_text(const std::string& gpu, const SimulationResult& result,
                                   const SimulationOptions& options);
/// The same as a JSON document (2-space indent, final newline); beta +inf is null.
std::string render_simulation_json(const std::string& gpu, const SimulationResult& result,
                                   const SimulationOptions& options);
/// One row per try: recurrence,try,batch_size,power_limit_w,energy_j,time_s,reached,cost (17 digits).
std::string render_tries_csv(const SimulationResult& result);

/// One simulation of a savings table: a GPU and a workload (or group) and its result.
struct SavingsRow {
  std::string gpu;
  std::string workload;
  SimulationResult result;
};

/// Every trace GPU × every paper workload with Zeus's policies (`joule simulate --all`, `joule demo`).
/// @param trace_dir the traces' folder (default: the embedded traces). Errors: a trace that cannot be read.
Result<std::vector<SavingsRow>> simulate_paper_workloads(const SimulationOptions& options,
                                                         const std::optional<std::string>& trace_dir = {});

/// Each group of concurrent submissions (load_groups) on `trace` with Zeus's group simulator, seeded per
/// group (adler32 of the group's id), as rows named "DATASET (group ID)" under `gpu` (`joule simulate
/// --groups`). Errors: a group whose dataset is no paper workload (kNotFound), or a simulation's error.
Result<std::vector<SavingsRow>> simulate_groups(const Trace& trace, const std::string& gpu,
                                                const std::vector<std::vector<GroupSubmission>>& groups,
                                                const SimulationOptions& options);

/// The savings of each simulation against its baseline and oracle, as a text table.
std::string render_savings_text(const std::vector<SavingsRow>& rows, const SimulationOptions& options);
/// The same as CSV: gpu,workload,recurrences,energy_saved,time_saved,cost_saved,oracle_cost_saved
/// (fractions).
std::string render_savings_csv(const std::vector<SavingsRow>& rows);
/// The same as a JSON document: eta, beta (null for +inf), seed and one row per simulation.
std::string render_savings_json(const std::vector<SavingsRow>& rows, const SimulationOptions& options);

/// @return an SVG: every configuration's average (time, energy) per recurrence, their Pareto frontier, the
/// baseline, the oracle and the configurations the optimizer tried (slow outliers clipped off the chart).
std::string simulation_plot_svg(const std::string& gpu, const SimulationResult& result);

}  // namespace joule::sim
