// SPDX-License-Identifier: Apache-2.0
// joule/viz/gantt.hpp — a Gantt chart: rows (e.g. pipeline stages) of bars over time, each bar coloured by a
// number (e.g. its GPU frequency) through a colour scale shown as a colour bar.
//
//   viz::GanttChart chart;
//   chart.title("One pipeline iteration").rows({"stage 0", "stage 1"}).value_label("GPU frequency (MHz)");
//   chart.add({.row = 0, .start_s = 0, .end_s = 0.12, .value = 1410, .label = "F0"});
//   auto saved = chart.save("timeline.svg");
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::viz {

/// Maps numbers onto colours by linear interpolation (in sRGB) between evenly spaced colour stops.
class ColorScale {
 public:
  /// The default stops: from dark purple (min) through teal to yellow (max), like viridis.
  static const std::vector<std::string>& default_stops();

  /// @throws joule::Exception (kInvalidArgument) unless min ≤ max, both finite, and every stop (at least
  /// two) is written "#rrggbb".
  ColorScale(double min, double max, std::vector<std::string> stops = default_stops());

  double min() const { return min_; }
  double max() const { return max_; }
  const std::vector<std::string>& stops() const { return stops_; }

  /// @return the colour of `value` as "#rrggbb" (lower case); values outside [min, max] get the end colours,
  /// and if min == max every value gets the middle colour.
  std::string color(double value) const;

 private:
  double min_;
  double max_;
  std::vector<std::string> stops_;
};

/// One bar: a piece of work in a row from `start_s` to `end_s`.
struct GanttBar {
  size_t row = 0;         ///< index into the chart's rows
  double start_s = 0;     ///< seconds
  double end_s = 0;       ///< seconds, ≥ start_s
  double value = 0;       ///< the number the colour shows, e.g. a GPU frequency in MHz
  std::string label{};    ///< drawn inside the bar when it fits, e.g. "F3"
  std::string tooltip{};  ///< shown on hover; empty for "<row> <label>: <start>–<end> s, <value>"
};

/// Rows of bars over a time axis, with a colour bar for the bars' values.
class GanttChart {
 public:
  /// @throws joule::Exception (kInvalidArgument) unless the width is finite and at least 300 px. The height
  /// follows from the number of rows.
  explicit GanttChart(double width_px = 800);

  GanttChart& title(std::string title);
  /// Names the rows, top to bottom. Call before add().
  GanttChart& rows(std::vector<std::string> names);
  /// The time axis label (default "Time (s)").
  GanttChart& time_label(std::string label);
  /// The colour bar's caption, naming the unit, e.g. "GPU frequency (MHz)".
  GanttChart& value_label(std::string label);
  /// The colour scale; by default it spans the bars' values.
  GanttChart& scale(ColorScale scale);
  /// @throws joule::Exception (kInvalidArgument) for a row without a name, a non-finite number, or
  /// end_s < start_s.
  GanttChart& add(GanttBar bar);

  const std::vector<GanttBar>& bars() const { return bars_; }

  /// @return the SVG document. @throws joule::Exception (kState) if there are no rows.
  std::string svg() const;
  /// Writes svg() to `path` atomically. @return write_file_atomic()'s errors.
  Result<void> save(const std::string& path) const;

 private:
  double width_px_;
  std::string title_;
  std::vector<std::string> rows_;
  std::string time_label_ = "Time (s)";
  std::string value_label_;
  std::optional<ColorScale> scale_;
  std::vector<GanttBar> bars_;
};

}  // namespace joule::viz
