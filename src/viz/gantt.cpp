// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/gantt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "joule/core/strings.hpp"
#include "joule/viz/axis.hpp"
#include "joule/viz/svg.hpp"

#include "layout.hpp"

namespace joule::viz {

using detail::Box;

namespace {

constexpr double kRowNameSize = 12;
constexpr double kBarTextSize = 11;
constexpr double kMinRowHeight = 34;
constexpr double kMinPlotHeight = 130;  // so that a one-row chart still has a readable colour bar
constexpr double kColorBarGap = 24;
constexpr double kColorBarWidth = 14;
constexpr int kColorBarSlices = 48;
constexpr double kMinWidth = 300;

using Rgb = std::array<int, 3>;

std::optional<Rgb> parse_rgb(const std::string& color) {
  if (color.size() != 7 || color[0] != '#') {
    return std::nullopt;
  }
  Rgb rgb{};
  for (size_t channel = 0; channel < 3; ++channel) {
    const int high = hex_digit_value(color[1 + 2 * channel]);
    const int low = hex_digit_value(color[2 + 2 * channel]);
    if (high < 0 || low < 0) {
      return std::nullopt;
    }
    rgb[channel] = high * 16 + low;
  }
  return rgb;
}

std::string hex(const Rgb& rgb) {
  return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
}

// Dark text on light fills, white on dark ones (perceived brightness, ITU-R BT.601 weights).
std::string text_color_on(const std::string& fill) {
  const Rgb rgb = parse_rgb(fill).value_or(Rgb{255, 255, 255});
  return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 140 ? "#ffffff" : "#222222";
}

}  // namespace

const std::vector<std::string>& ColorScale::default_stops() {
  static const std::vector<std::string> kStops = {"#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"};
  return kStops;
}

ColorScale::ColorScale(double min, double max, std::vector<std::string> stops)
    : min_(min), max_(max), stops_(std::move(stops)) {
  if (!std::isfinite(min) || !std::isfinite(max) || min > max) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("a colour scale needs finite ends with min <= max, got [{}, {}]", min, max));
  }
  if (stops_.size() < 2) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("a colour scale needs at least 2 colour stops, got {}", stops_.size()));
  }
  for (std::string& stop : stops_) {
    const auto rgb = parse_rgb(stop);
    if (!rgb) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("colour stop '{}' is not written #rrggbb", stop));
    }
    stop = hex(*rgb);
  }
}

std::string ColorScale::color(double value) const {
  const double t = max_ == min_ ? 0.5 : std::clamp((value - min_) / (max_ - min_), 0.0, 1.0);
  const double position = t * static_cast<double>(stops_.size() - 1);
  const size_t index = std::min(static_cast<size_t>(position), stops_.size() - 2);
  const double fraction = position - static_cast<double>(index);
  const Rgb from = *parse_rgb(stops_[index]);
  const Rgb to = *parse_rgb(stops_[index + 1]);
  Rgb mixed{};
  for (size_t channel = 0; channel < 3; ++channel) {
    mixed[channel] = static_cast<int>(std::lround(from[channel] + (to[channel] - from[channel]) * fraction));
  }
  return hex(mixed);
}

GanttChart::GanttChart(double width_px) : width_px_(width_px) {
  if (!(width_px >= kMinWidth) || !std::isfinite(width_px)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("a Gantt chart needs a finite width of at least {} px, got {}", kMinWidth, width_px));
  }
}

GanttChart& GanttChart::title(std::string title) {
  title_ = std::move(title);
  return *this;
}

GanttChart& GanttChart::rows(std::vector<std::string> names) {
  rows_ = std::move(names);
  return *this;
}

GanttChart& GanttChart::time_label(std::string label) {
  time_label_ = std::move(label);
  return *this;
}

GanttChart& GanttChart::value_label(std::string label) {
  value_label_ = std::move(label);
  return *this;
}

GanttChart& GanttChart::scale(ColorScale scale) {
  scale_ = std::move(scale);
  return *this;
}

GanttChart& GanttChart::add(GanttBar bar) {
  if (bar.row >= rows_.size()) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("bar '{}' is in row {} but the chart has {} row(s)", bar.label, bar.row, rows_.size()));
  }
  if (!std::isfinite(bar.start_s) || !std::isfinite(bar.end_s) || !std::isfinite(bar.value)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("bar '{}' has a non-finite number: start {} s, end {} s, value {}", bar.label,
                                bar.start_s, bar.end_s, bar.value));
  }
  if (bar.end_s < bar.start_s) {
    throw Exception(ErrorCode::kInvalidArgument, fmt::format("bar '{}' ends ({} s) before it starts ({} s)",
                                                             bar.label, bar.end_s, bar.start_s));
  }
  bars_.push_back(std::move(bar));
  return *this;
}

std::string GanttChart::svg() const {
  if (rows_.empty()) {
    throw Exception(ErrorCode::kState, "a Gantt chart needs at least one row");
  }
  double start_s = 0;
  double end_s = bars_.empty() ? 1 : bars_.front().end_s;
  double min_value = bars_.empty() ? 0 : bars_.front().value;
  double max_value = min_value;
  for (const GanttBar& bar : bars_) {
    start_s = std::min(start_s, bar.start_s);
    end_s = std::max(end_s, bar.end_s);
    min_value = std::min(min_value, bar.value);
    max_value = std::max(max_value, bar.value);
  }
  const ColorScale scale = scale_.value_or(ColorScale(min_value, max_value));
  const Ticks value_ticks = ticks_within(scale.min(), scale.max(), 5);

  double widest_row = 0;
  for (const std::string& name : rows_) {
    widest_row = std::max(widest_row, estimate_text_width_px(name, kRowNameSize));
  }
  const double left = widest_row + 18;
  const double right = kColorBarGap + kColorBarWidth + detail::kTickLength + 4 +
                       detail::widest_tick_label_px(value_ticks) + (value_label_.empty() ? 8 : 30);
  const double top = title_.empty() ? 16 : 44;
  const double bottom = time_label_.empty() ? 28 : 52;
  const double row_height = std::max(kMinRowHeight, kMinPlotHeight / static_cast<double>(rows_.size()));
  const double plot_height = row_height * static_cast<double>(rows_.size());
  const double height = top + plot_height + bottom;
  const Box area{left, top, width_px_ - left - right, plot_height};
  const Ticks time_ticks = nice_ticks(start_s, end_s, std::clamp(static_cast<int>(area.width / 90), 2, 10));

  SvgDocument doc(width_px_, height);
  Style background;
  background.fill = "#ffffff";
  doc.rect(0, 0, width_px_, height, background);
  detail::draw_title(doc, title_, area.left + area.width / 2);

  // Every other row shaded so that the eye can follow a row across the chart.
  for (size_t row = 0; row < rows_.size(); ++row) {
    const double row_top = area.top + row_height * static_cast<double>(row);
    if (row % 2 == 1) {
      Style shade;
      shade.fill = "#f4f4f4";
      doc.rect(area.left, row_top, area.width, row_height, shade);
    }
    TextStyle name;
    name.size_px = kRowNameSize;
    name.anchor = TextAnchor::kEnd;
    doc.text(area.left - 8, row_top + row_height / 2 + 4, rows_[row], name);
  }
  detail::draw_x_axis(doc, time_ticks, area, time_label_, true);

  const double bar_height = std::min(24.0, row_height - 8);
  for (const GanttBar& bar : bars_) {
    const double x0 = detail::x_px(bar.start_s, time_ticks, area);
    const double x1 = detail::x_px(bar.end_s, time_ticks, area);
    const double y = area.top + row_height * static_cast<double>(bar.row) + (row_height - bar_height) / 2;
    const std::string fill = scale.color(bar.value);
    const std::string tooltip =
        bar.tooltip.empty()
            ? fmt::format("{} {}: {}–{} s, {}", rows_[bar.row], bar.label, format_significant(bar.start_s),
                          format_significant(bar.end_s), format_significant(bar.value))
            : bar.tooltip;
    doc.begin_group({.tooltip = tooltip});
    Style style;
    style.fill = fill;
    style.stroke = "#ffffff";  // keeps back-to-back bars apart
    doc.rect(x0, y, x1 - x0, bar_height, style);
    if (!bar.label.empty() && estimate_text_width_px(bar.label, kBarTextSize) + 6 <= x1 - x0) {
      TextStyle text;
      text.size_px = kBarTextSize;
      text.anchor = TextAnchor::kMiddle;
      text.color = text_color_on(fill);
      doc.text((x0 + x1) / 2, y + bar_height / 2 + 4, bar.label, text);
    }
    doc.end_group();
  }
  detail::draw_frame(doc, area);

  // The colour bar: thin slices, each a little taller than its share so that no seams show between them.
  const Box bar_box{area.right() + kColorBarGap, area.top, kColorBarWidth, area.height};
  const double slice_height = bar_box.height / kColorBarSlices;
  for (int slice = 0; slice < kColorBarSlices; ++slice) {
    const double value =
        value_ticks.min + (value_ticks.max - value_ticks.min) * (slice + 0.5) / kColorBarSlices;
    Style style;
    style.fill = scale.color(value);
    doc.rect(bar_box.left, bar_box.bottom() - slice_height * (slice + 1), bar_box.width,
             slice_height + (slice + 1 < kColorBarSlices ? 0.5 : 0), style);
  }
  detail::draw_frame(doc, bar_box);
  for (const double value : value_ticks.values) {
    const double y = detail::y_px(value, value_ticks, bar_box);
    Style tick;
    tick.stroke = detail::kFrameColor;
    doc.line(bar_box.right(), y, bar_box.right() + detail::kTickLength, y, tick);
    TextStyle text;
    text.size_px = detail::kTickSize;
    doc.text(bar_box.right() + detail::kTickLength + 4, y + 4, format_tick(value, value_ticks.step), text);
  }
  if (!value_label_.empty()) {
    TextStyle caption;
    caption.size_px = detail::kLabelSize;
    caption.anchor = TextAnchor::kMiddle;
    caption.rotation_deg = -90;
    doc.text(width_px_ - 10, bar_box.top + bar_box.height / 2, value_label_, caption);
  }
  return doc.str();
}

Result<void> GanttChart::save(const std::string& path) const {
  return save_svg(path, svg());
}

}  // namespace joule::viz
