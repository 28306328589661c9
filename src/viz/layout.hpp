// SPDX-License-Identifier: Apache-2.0
// Private to joule_viz: the look shared by every chart (fonts, colours) and the drawing of axes.
#pragma once

#include <string>
#include <string_view>

#include "joule/viz/axis.hpp"
#include "joule/viz/svg.hpp"

namespace joule::viz::detail {

inline constexpr double kTitleSize = 16;
inline constexpr double kLabelSize = 13;
inline constexpr double kTickSize = 11;
inline constexpr double kTickLength = 5;
inline constexpr char kTextColor[] = "#222222";
inline constexpr char kFrameColor[] = "#444444";
inline constexpr char kGridColor[] = "#e4e4e4";

/// A rectangle in pixels.
struct Box {
  double left = 0;
  double top = 0;
  double width = 0;
  double height = 0;

  double right() const { return left + width; }
  double bottom() const { return top + height; }
  bool contains(double x, double y) const { return x >= left && x <= right() && y >= top && y <= bottom(); }
  bool overlaps(const Box& other) const {
    return left < other.right() && other.left < right() && top < other.bottom() && other.top < bottom();
  }
  bool inside(const Box& other) const {
    return left >= other.left && right() <= other.right() && top >= other.top && bottom() <= other.bottom();
  }
};

/// Maps data values of a ticks' range onto pixels of a box.
inline double x_px(double x, const Ticks& ticks, const Box& area) {
  return area.left + (x - ticks.min) / (ticks.max - ticks.min) * area.width;
}
inline double y_px(double y, const Ticks& ticks, const Box& area) {
  return area.bottom() - (y - ticks.min) / (ticks.max - ticks.min) * area.height;
}

/// @return the widest tick label of `ticks`, in pixels.
double widest_tick_label_px(const Ticks& ticks);

/// Draws the title centred above `area` (nothing if empty).
void draw_title(SvgDocument& doc, std::string_view title, double centre_x);

/// Draws vertical grid lines (if `grid`), tick marks and labels below `area`, and `label` under them.
void draw_x_axis(SvgDocument& doc, const Ticks& ticks, const Box& area, std::string_view label, bool grid);

/// Draws horizontal grid lines, tick marks and labels left of `area`, and `label` rotated left of them.
void draw_y_axis(SvgDocument& doc, const Ticks& ticks, const Box& area, std::string_view label);

/// Draws the frame around `area`.
void draw_frame(SvgDocument& doc, const Box& area);

}  // namespace joule::viz::detail
