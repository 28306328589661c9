// SPDX-License-Identifier: Apache-2.0
#include "layout.hpp"

#include <algorithm>

namespace joule::viz::detail {

namespace {

Style grid_style() {
  Style style;
  style.stroke = kGridColor;
  return style;
}

Style tick_style() {
  Style style;
  style.stroke = kFrameColor;
  return style;
}

TextStyle text_style(double size_px, TextAnchor anchor) {
  TextStyle style;
  style.size_px = size_px;
  style.anchor = anchor;
  style.color = kTextColor;
  return style;
}

}  // namespace

double widest_tick_label_px(const Ticks& ticks) {
  double widest = 0;
  for (const double value : ticks.values) {
    widest = std::max(widest, estimate_text_width_px(format_tick(value, ticks.step), kTickSize));
  }
  return widest;
}

void draw_title(SvgDocument& doc, std::string_view title, double centre_x) {
  if (title.empty()) {
    return;
  }
  TextStyle style = text_style(kTitleSize, TextAnchor::kMiddle);
  style.bold = true;
  doc.text(centre_x, 26, title, style);
}

void draw_x_axis(SvgDocument& doc, const Ticks& ticks, const Box& area, std::string_view label, bool grid) {
  for (const double value : ticks.values) {
    const double x = x_px(value, ticks, area);
    if (grid) {
      doc.line(x, area.top, x, area.bottom(), grid_style());
    }
    doc.line(x, area.bottom(), x, area.bottom() + kTickLength, tick_style());
    doc.text(x, area.bottom() + kTickLength + kTickSize + 2, format_tick(value, ticks.step),
             text_style(kTickSize, TextAnchor::kMiddle));
  }
  if (!label.empty()) {
    doc.text(area.left + area.width / 2, area.bottom() + kTickLength + kTickSize + kLabelSize + 14, label,
             text_style(kLabelSize, TextAnchor::kMiddle));
  }
}

void draw_y_axis(SvgDocument& doc, const Ticks& ticks, const Box& area, std::string_view label) {
  for (const double value : ticks.values) {
    const double y = y_px(value, ticks, area);
    doc.line(area.left, y, area.right(), y, grid_style());
    doc.line(area.left - kTickLength, y, area.left, y, tick_style());
    // +4 puts the middle of digits (not the baseline) at the tick.
    doc.text(area.left - kTickLength - 4, y + 4, format_tick(value, ticks.step),
             text_style(kTickSize, TextAnchor::kEnd));
  }
  if (!label.empty()) {
    // Rotated by −90°, the text's baseline is vertical and its glyphs extend to the left of x.
    const double x = area.left - kTickLength - 4 - widest_tick_label_px(ticks) - 10;
    TextStyle style = text_style(kLabelSize, TextAnchor::kMiddle);
    style.rotation_deg = -90;
    doc.text(x, area.top + area.height / 2, label, style);
  }
}

void draw_frame(SvgDocument& doc, const Box& area) {
  Style style;
  style.stroke = kFrameColor;
  doc.rect(area.left, area.top, area.width, area.height, style);
}

}  // namespace joule::viz::detail
