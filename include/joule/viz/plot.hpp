// SPDX-License-Identifier: Apache-2.0
// joule/viz/plot.hpp — a 2-D chart with linear axes: data series (scatter, line, line with markers, step),
// highlighted points with a text label, reference lines and a legend, rendered to SVG.
//
//   viz::Plot plot;
//   plot.title("ResNet-50 on A40").x_label("Time per iteration (s)").y_label("Energy per iteration (J)");
//   plot.add({.label = "measured", .x = times_s, .y = energies_j, .kind = viz::SeriesKind::kScatter});
//   plot.highlight({.x = 1.2, .y = 240, .label = "chosen 175 W"});
//   plot.reference({.orientation = viz::Orientation::kVertical, .value = 1.5, .label = "deadline"});
//   auto saved = plot.save("frontier.svg");
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/viz/svg.hpp"

namespace joule::viz {

/// How a series is drawn.
enum class SeriesKind {
  kScatter,      ///< markers only
  kLine,         ///< a line through the points in the order given
  kLineMarkers,  ///< a line and markers
  kStep,         ///< a staircase: each y holds until the next x (then markers)
};

/// A named set of (x, y) points in data units. (Every member of the option structs here has a default
/// initializer, so that designated initializers may leave any of them out without a g++ warning.)
struct Series {
  std::string label{};  ///< the legend entry; empty for none
  std::vector<double> x{};
  std::vector<double> y{};
  SeriesKind kind = SeriesKind::kLineMarkers;
  std::string color{};  ///< an SVG colour; empty for the palette colour of the series' position
  Marker marker = Marker::kCircle;
  std::string dash{};                   ///< stroke-dasharray of the line, e.g. "6 3"; empty for solid
  std::vector<std::string> tooltips{};  ///< one per point, shown on hover; empty for "label: (x, y)"
  double opacity = 1;                   ///< in (0, 1]; lower it for context drawn behind other series
};

/// One point drawn larger, with a text label beside it (e.g. "baseline", "oracle", "chosen 175 W").
struct Highlight {
  double x = 0;
  double y = 0;
  std::string label{};
  std::string color = "#222222";
  Marker marker = Marker::kDiamond;
  std::string tooltip{};  ///< empty for "label: (x, y)"
};

enum class Orientation { kHorizontal, kVertical };

/// A line across the whole plot at a data value, e.g. a deadline (vertical, at a time).
struct ReferenceLine {
  Orientation orientation = Orientation::kVertical;
  double value = 0;  ///< x of a vertical line, y of a horizontal one
  std::string label{};
  std::string color = "#555555";
  std::string dash = "6 4";
};

/// The default series colours (Okabe–Ito, readable by colour-blind viewers), used in turn.
const std::vector<std::string>& palette();

/// A chart with linear axes. Ranges not set explicitly cover every series point, highlight and reference
/// line with a 5% margin; ticks are "nice" (see nice_ticks()).
class Plot {
 public:
  /// @throws joule::Exception (kInvalidArgument) unless both sizes are at least 200 px and finite.
  explicit Plot(double width_px = 720, double height_px = 480);

  Plot& title(std::string title);
  /// Axis labels should name the unit, e.g. "Energy per iteration (J)".
  Plot& x_label(std::string label);
  Plot& y_label(std::string label);
  /// Fixes an axis range; data outside it is clipped. @throws joule::Exception (kInvalidArgument) unless
  /// min < max, both finite.
  Plot& x_range(double min, double max);
  Plot& y_range(double min, double max);
  /// @throws joule::Exception (kInvalidArgument) if x and y (or non-empty tooltips) differ in length, a value
  /// is not finite, or the opacity is outside (0, 1]; the message names the series and the point.
  Plot& add(Series series);
  /// @throws joule::Exception (kInvalidArgument) for a non-finite coordinate.
  Plot& highlight(Highlight highlight);
  /// @throws joule::Exception (kInvalidArgument) for a non-finite value.
  Plot& reference(ReferenceLine line);
  /// Shows or hides the legend (shown by default when a series has a label). It goes into the corner of the
  /// plot area where it covers the fewest points and lines.
  Plot& legend(bool shown);

  const std::vector<Series>& series() const { return series_; }
  double width_px() const { return width_px_; }
  double height_px() const { return height_px_; }
  const std::vector<Highlight>& highlights() const { return highlights_; }

  /// @return the SVG document.
  std::string svg() const;
  /// Writes svg() to `path` atomically. @return write_file_atomic()'s errors.
  Result<void> save(const std::string& path) const;

 private:
  // An explicit axis range, [min, max].
  using Range = std::optional<std::pair<double, double>>;

  double width_px_;
  double height_px_;
  std::string title_;
  std::string x_label_;
  std::string y_label_;
  Range x_range_;
  Range y_range_;
  std::vector<Series> series_;
  std::vector<Highlight> highlights_;
  std::vector<ReferenceLine> references_;
  bool legend_ = true;
};

/// Panels stacked top to bottom in one SVG document (as wide as the widest), e.g. several quantities over
/// one shared time axis (give the panels the same x_range()). Ids in the panels stay unique: each panel's
/// markup is nested in its own <svg> element.
/// @throws joule::Exception (kInvalidArgument) for no panel or a null one.
std::string stack_plots(const std::vector<const Plot*>& panels);

/// Gives `plot` a y range from its series' data with `top_headroom` × the span free above (room for the
/// legend in a top corner) and 5% below. Nothing if it has no finite point.
void add_top_headroom(Plot& plot, double top_headroom = 0.45);

}  // namespace joule::viz
