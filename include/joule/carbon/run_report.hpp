// SPDX-License-Identifier: Apache-2.0
// joule/carbon/run_report.hpp — the report of a measured command (`joule measure`): per device energy and
// power, and carbon and cost when asked for; the statistics over repeated runs; and its forms (text, JSON,
// CSV, and the rows of an appended CSV history). Pure functions of the figures, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"
#include "joule/core/error.hpp"
#include "joule/measure/run_figures.hpp"

namespace joule::carbon {

/// One run of a measured command.
struct CommandRun {
  std::vector<std::string> command;  ///< the command and its arguments
  int exit_code = 0;                 ///< its exit status, or 128 + signal number if a signal ended it
  int signal = 0;                    ///< the signal that ended it, 0 if it exited
  int64_t started_unix_s = 0;        ///< when the run began (UTC), for the history rows
  double wall_time_s = 0;
  std::vector<measure::DeviceFigure> devices;
  /// Carbon, when asked for: a value, or the error that explains why there is none.
  std::optional<Result<CarbonReport>> carbon;
  /// Cost, when asked for.
  std::optional<PriceReport> price;
  /// @return the sum of the devices' energy, J; NaN if one is not measurable.
  double total_energy_j() const;
};

/// Every figure of every device over repeated runs (all runs measured the same devices in the same order).
struct RepeatStatistics {
  measure::Spread wall_time_s;
  measure::Spread total_energy_j;
  std::vector<measure::Spread> energy_j, average_power_w, peak_power_w;  ///< one per device
};

/// @return the statistics of `runs` (at least one).
RepeatStatistics statistics_of(const std::vector<CommandRun>& runs);

/// One run as a table a human reads (a figure not measurable is shown as such, never as a number).
std::string render_run_text(const CommandRun& run);
/// One run as a JSON document (2-space indent, final newline); NaN figures are null, with an "error".
std::string render_run_json(const CommandRun& run);
/// One run as CSV: a header and one row per device; carbon_g and cost_usd columns only when asked for.
std::string render_run_csv(const CommandRun& run);

/// Repeated runs: each figure's mean ± sample standard deviation. `asked` is the number of runs asked for
/// (more than ran when a run failed).
std::string render_repeat_text(const std::vector<CommandRun>& runs, int asked);
/// The same as JSON, with every run's own document under "runs".
std::string render_repeat_json(const std::vector<CommandRun>& runs, int asked);
/// Every run's CSV rows with its run number in front, under one header.
std::string render_repeat_csv(const std::vector<CommandRun>& runs);

/// The columns of an appended history file (timestamp, run, the device columns, carbon_g, cost_usd): fixed,
/// so that every row of a file has the same shape.
const std::vector<std::string>& history_header();
/// The history's CSV rows of `runs` (one per device per run), after the header if `write_header`.
std::string history_rows(const std::vector<CommandRun>& runs, bool write_header);

}  // namespace joule::carbon
