// SPDX-License-Identifier: Apache-2.0
// joule/viz/frontier_plot.hpp — a time–energy frontier as a chart: time on x, energy on y, the frontier as a
// line with markers (fastest → least energy), measured points behind it, chosen points highlighted.
//
//   const auto watts = [](const int& power_limit_w) { return fmt::format("{} W", power_limit_w); };
//   viz::Plot plot = viz::frontier_plot(frontier, watts, {.title = "ResNet-50, A40"}, measured);
//   plot.highlight(viz::highlight_point(frontier.points()[chosen], "chosen", "#d55e00", watts));
//   auto saved = plot.save("frontier.svg");
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "joule/core/frontier.hpp"
#include "joule/viz/axis.hpp"
#include "joule/viz/plot.hpp"

namespace joule::viz {

/// Names a knob setting for tooltips and labels, e.g. 175 → "175 W".
template <class Knob>
using KnobLabel = std::function<std::string(const Knob&)>;

/// Titles, labels and size of a frontier plot.
struct FrontierPlotOptions {
  std::string title{};
  std::string x_label = "Time (s)";
  std::string y_label = "Energy (J)";
  std::string frontier_label = "Pareto frontier";
  std::string measured_label = "measured";
  double width_px = 720;
  double height_px = 480;
  /// Multiply times and energies before they are drawn, to plot in other units (name them in the axis
  /// labels): e.g. time_scale = 1.0 / 3600 with "Time (h)", energy_scale = 1e-6 with "Energy (MJ)".
  /// Tooltips keep seconds and joules.
  double time_scale = 1;
  double energy_scale = 1;
};

/// @return "<knob>: <time> s, <energy> J", e.g. "175 W: 1.23 s, 245.6 J".
template <class Knob>
std::string point_tooltip(const FrontierPoint<Knob>& point,
                          const std::type_identity_t<KnobLabel<Knob>>& knob_label) {
  return fmt::format("{}: {} s, {} J", knob_label(point.knob), format_significant(point.time_s),
                     format_significant(point.energy_j));
}

/// @return a Plot of `frontier` (a line with markers, each point's tooltip naming its knob) drawn over the
/// `measured` points (a light scatter; left out if empty). Add highlights or reference lines to the result.
/// @throws joule::Exception (kInvalidArgument) for invalid options (see Plot).
template <class Knob>
Plot frontier_plot(const Frontier<Knob>& frontier, const std::type_identity_t<KnobLabel<Knob>>& knob_label,
                   const FrontierPlotOptions& options = {},
                   const std::vector<FrontierPoint<Knob>>& measured = {}) {
  Plot plot(options.width_px, options.height_px);
  plot.title(options.title).x_label(options.x_label).y_label(options.y_label);
  const auto to_series = [&](const std::vector<FrontierPoint<Knob>>& points, Series series) {
    for (const auto& point : points) {
      series.x.push_back(point.time_s * options.time_scale);
      series.y.push_back(point.energy_j * options.energy_scale);
      series.tooltips.push_back(point_tooltip<Knob>(point, knob_label));
    }
    return series;
  };
  if (!measured.empty()) {
    plot.add(to_series(measured, {.label = options.measured_label,
                                  .kind = SeriesKind::kScatter,
                                  .color = "#8c8c8c",
                                  .marker = Marker::kCircle,
                                  .opacity = 0.6}));
  }
  plot.add(to_series(frontier.points(), {.label = options.frontier_label,
                                         .kind = SeriesKind::kLineMarkers,
                                         .color = palette().front(),
                                         .marker = Marker::kCircle}));
  return plot;
}

/// @return a Highlight of `point` labelled `label`, with a tooltip naming its knob, placed with the scales of
/// `options` (pass the options given to frontier_plot()).
template <class Knob>
Highlight highlight_point(const FrontierPoint<Knob>& point, const std::string& label, const std::string& color,
                          const std::type_identity_t<KnobLabel<Knob>>& knob_label,
                          const FrontierPlotOptions& options = {}) {
  Highlight highlight{.x = point.time_s * options.time_scale,
                      .y = point.energy_j * options.energy_scale,
                      .label = label,
                      .color = color,
                      .marker = Marker::kDiamond,
                      .tooltip = ""};
  highlight.tooltip = fmt::format("{} — {}", highlight.label, point_tooltip<Knob>(point, knob_label));
  return highlight;
}

}  // namespace joule::viz
