// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "joule/viz/axis.hpp"

#include "layout.hpp"

namespace joule::viz {

using detail::Box;

namespace {

constexpr double kMarkerSize = 8;
constexpr double kHighlightSize = 14;
constexpr double kHighlightTextSize = 12;
constexpr double kLegendTextSize = 12;
constexpr double kLegendRow = 18;
constexpr double kLegendSample = 26;
constexpr double kLegendInset = 8;
constexpr double kLegendPadding = 5;
constexpr double kRangePadding = 0.05;
constexpr double kMinSize = 200;
constexpr char kClipId[] = "plot-area";

void check_range(double min, double max, const char* axis) {
  if (!std::isfinite(min) || !std::isfinite(max) || !(min < max)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("the {} range must be finite with min < max, got [{}, {}]", axis, min, max));
  }
}

std::string point_tooltip(const std::string& label, double x, double y) {
  const std::string point = fmt::format("({}, {})", format_significant(x), format_significant(y));
  return label.empty() ? point : fmt::format("{}: {}", label, point);
}

// Ticks of an axis: the explicit range if any, else all values with a margin.
Ticks axis_ticks(const std::vector<double>& values, const std::optional<std::pair<double, double>>& range,
                 int max_intervals) {
  if (range) {
    return ticks_within(range->first, range->second, max_intervals);
  }
  if (values.empty()) {
    return ticks_within(0, 1, max_intervals);
  }
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  const double padding = (*max - *min) * kRangePadding;
  return ticks_within(*min - padding, *max + padding, max_intervals);
}

// Where a series' line goes, in pixels (empty for markers only).
std::vector<Point> line_points(const std::vector<Point>& points, SeriesKind kind) {
  if (kind == SeriesKind::kScatter) {
    return {};
  }
  if (kind != SeriesKind::kStep) {
    return points;
  }
  std::vector<Point> steps;
  for (size_t i = 0; i < points.size(); ++i) {
    steps.push_back(points[i]);
    if (i + 1 < points.size()) {
      steps.push_back({points[i + 1].x, points[i].y});
    }
  }
  return steps;
}

// Points along a polyline every few pixels: what a legend or a label should not cover.
void sample_line(const std::vector<Point>& line, std::vector<Point>& out) {
  constexpr double kSpacingPx = 6;
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    const double length = std::hypot(line[i + 1].x - line[i].x, line[i + 1].y - line[i].y);
    const int steps = static_cast<int>(std::ceil(length / kSpacingPx));
    for (int step = 0; step < steps; ++step) {
      const double t = static_cast<double>(step) / steps;
      out.push_back(
          {line[i].x + t * (line[i + 1].x - line[i].x), line[i].y + t * (line[i + 1].y - line[i].y)});
    }
  }
}

size_t count_inside(const std::vector<Point>& points, const Box& box) {
  return static_cast<size_t>(
      std::count_if(points.begin(), points.end(), [&](const Point& p) { return box.contains(p.x, p.y); }));
}

std::string series_color(const Series& series, size_t index) {
  return series.color.empty() ? palette()[index % palette().size()] : series.color;
}

// Where a text label goes.
struct LabelPlacement {
  double x;
  double baseline_y;
  TextAnchor anchor;
};

// Places the legend and text labels inside the plot area where they cover the fewest data points and do not
// cover each other. Every choice is deterministic: the first best candidate wins.
class LabelPlacer {
 public:
  LabelPlacer(const Box& area, std::vector<Point> obstacles)
      : area_(area), obstacles_(std::move(obstacles)) {}

  // Keeps labels off `box` as if it were another label: for the highlighted markers, which a label must
  // never hide (a point obstacle alone would let a label cover most of a 14 px marker).
  void reserve(const Box& box) { taken_.push_back(box); }

  // The corner of the area (top right, top left, bottom right, bottom left) for a legend box.
  Box place_legend(double width, double height) {
    const double near_left = area_.left + kLegendInset;
    const double near_right = area_.right() - kLegendInset - width;
    const double near_top = area_.top + kLegendInset;
    const double near_bottom = area_.bottom() - kLegendInset - height;
    const std::array<Box, 4> corners = {{{near_right, near_top, width, height},
                                         {near_left, near_top, width, height},
                                         {near_right, near_bottom, width, height},
                                         {near_left, near_bottom, width, height}}};
    Box best = corners[0];
    size_t best_covered = std::numeric_limits<size_t>::max();
    for (const Box& corner : corners) {
      if (const size_t covered = count_inside(obstacles_, corner); covered < best_covered) {
        best_covered = covered;
        best = corner;
      }
    }
    taken_.push_back(best);
    return best;
  }

  // A label `gap_px` away from one of `anchors` (tried in order): beside, above or below it, or stacked
  // further away when those places are taken. Leaving the area or covering another label costs most,
  // covering data points less, each step away from the anchor a little.
  LabelPlacement place(const std::vector<Point>& anchors, double gap_px, const std::string& text,
                       double size_px) {
    const double width = estimate_text_width_px(text, size_px);
    const double ascent = size_px * 0.75;
    struct Candidate {
      double dx;
      double dy;  // of the baseline
      TextAnchor anchor;
      size_t level;
    };
    std::vector<Candidate> candidates = {
        {gap_px, -gap_px, TextAnchor::kStart, 0}, {gap_px, gap_px + ascent, TextAnchor::kStart, 0},
        {-gap_px, -gap_px, TextAnchor::kEnd, 0},  {-gap_px, gap_px + ascent, TextAnchor::kEnd, 0},
        {0, -gap_px - 4, TextAnchor::kMiddle, 0}, {0, gap_px + ascent + 4, TextAnchor::kMiddle, 0}};
    for (size_t level = 1; level <= 3; ++level) {
      const double extra = static_cast<double>(level) * (size_px + 4);
      candidates.push_back({gap_px, -gap_px - extra, TextAnchor::kStart, level});
      candidates.push_back({gap_px, gap_px + ascent + extra, TextAnchor::kStart, level});
      candidates.push_back({-gap_px, -gap_px - extra, TextAnchor::kEnd, level});
      candidates.push_back({-gap_px, gap_px + ascent + extra, TextAnchor::kEnd, level});
    }
    std::optional<LabelPlacement> best;
    Box best_box;
    size_t best_score = 0;
    for (size_t a = 0; a < anchors.size(); ++a) {
      for (const Candidate& candidate : candidates) {
        const double x = anchors[a].x + candidate.dx;
        const double left = candidate.anchor == TextAnchor::kStart    ? x
                            : candidate.anchor == TextAnchor::kMiddle ? x - width / 2
                                                                      : x - width;
        const Box box{left - 2, anchors[a].y + candidate.dy - ascent - 2, width + 4, size_px + 4};
        size_t score = count_inside(obstacles_, box) + 20 * candidate.level + 5 * a;
        score += box.inside(area_) ? 0 : 10000;
        for (const Box& other : taken_) {
          score += box.overlaps(other) ? 1000 : 0;
        }
        if (!best || score < best_score) {
          best = LabelPlacement{x, anchors[a].y + candidate.dy, candidate.anchor};
          best_box = box;
          best_score = score;
        }
      }
    }
    taken_.push_back(best_box);
    return *best;
  }

 private:
  Box area_;
  std::vector<Point> obstacles_;
  std::vector<Box> taken_;
};

void draw_series(SvgDocument& doc, const Series& series, const std::string& color,
                 const std::vector<Point>& points) {
  if (const auto line = line_points(points, series.kind); !line.empty()) {
    Style style;
    style.stroke = color;
    style.stroke_width_px = 2;
    style.dash = series.dash;
    style.opacity = series.opacity;
    doc.polyline(line, style);
  }
  if (series.kind == SeriesKind::kLine || series.marker == Marker::kNone) {
    return;
  }
  Style style;
  style.fill = color;
  style.stroke = "#ffffff";
  style.opacity = series.opacity;
  for (size_t i = 0; i < points.size(); ++i) {
    // One group per marker, so that hovering shows the point's own tooltip.
    doc.begin_group({.tooltip = series.tooltips.empty()
                                    ? point_tooltip(series.label, series.x[i], series.y[i])
                                    : series.tooltips[i]});
    doc.marker(series.marker, points[i].x, points[i].y, kMarkerSize, style);
    doc.end_group();
  }
}

void draw_legend(SvgDocument& doc, const Box& box, const std::vector<Series>& series,
                 const std::vector<size_t>& entries) {
  Style frame;
  frame.fill = "#ffffff";
  frame.stroke = "#bbbbbb";
  frame.opacity = 0.92;
  doc.rect(box.left, box.top, box.width, box.height, frame);
  for (size_t row = 0; row < entries.size(); ++row) {
    const Series& entry = series[entries[row]];
    const std::string color = series_color(entry, entries[row]);
    const double y = box.top + kLegendPadding + kLegendRow * (static_cast<double>(row) + 0.5);
    const double sample_left = box.left + kLegendInset;
    if (entry.kind != SeriesKind::kScatter) {
      Style style;
      style.stroke = color;
      style.stroke_width_px = 2;
      style.dash = entry.dash;
      style.opacity = entry.opacity;
      doc.line(sample_left, y, sample_left + kLegendSample, y, style);
    }
    if (entry.kind != SeriesKind::kLine) {
      Style style;
      style.fill = color;
      style.stroke = "#ffffff";
      style.opacity = entry.opacity;
      doc.marker(entry.marker, sample_left + kLegendSample / 2, y, kMarkerSize, style);
    }
    TextStyle text;
    text.size_px = kLegendTextSize;
    doc.text(sample_left + kLegendSample + 6, y + 4, entry.label, text);
  }
}

TextStyle label_style(double size_px, const LabelPlacement& placement, const std::string& color, bool bold) {
  TextStyle style;
  style.size_px = size_px;
  style.anchor = placement.anchor;
  style.color = color;
  style.bold = bold;
  style.halo = "#ffffff";
  return style;
}

}  // namespace

const std::vector<std::string>& palette() {
  static const std::vector<std::string> palette = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                                   "#e69f00", "#56b4e9", "#000000"};
  return palette;
}

Plot::Plot(double width_px, double height_px) : width_px_(width_px), height_px_(height_px) {
  if (!(width_px >= kMinSize) || !(height_px >= kMinSize) || !std::isfinite(width_px) ||
      !std::isfinite(height_px)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("a plot needs a finite size of at least {} x {} px, got {} x {}", kMinSize,
                                kMinSize, width_px, height_px));
  }
}

Plot& Plot::title(std::string title) {
  title_ = std::move(title);
  return *this;
}

Plot& Plot::x_label(std::string label) {
  x_label_ = std::move(label);
  return *this;
}

Plot& Plot::y_label(std::string label) {
  y_label_ = std::move(label);
  return *this;
}

Plot& Plot::x_range(double min, double max) {
  check_range(min, max, "x");
  x_range_ = {min, max};
  return *this;
}

Plot& Plot::y_range(double min, double max) {
  check_range(min, max, "y");
  y_range_ = {min, max};
  return *this;
}

Plot& Plot::add(Series series) {
  const auto fail_series = [&](const std::string& problem) {
    throw Exception(ErrorCode::kInvalidArgument, fmt::format("series '{}': {}", series.label, problem));
  };
  if (series.x.size() != series.y.size()) {
    fail_series(fmt::format("x has {} values but y has {}", series.x.size(), series.y.size()));
  }
  if (!series.tooltips.empty() && series.tooltips.size() != series.x.size()) {
    fail_series(fmt::format("{} tooltips for {} points", series.tooltips.size(), series.x.size()));
  }
  if (!(series.opacity > 0 && series.opacity <= 1)) {
    fail_series(fmt::format("opacity must be in (0, 1], got {}", series.opacity));
  }
  for (size_t i = 0; i < series.x.size(); ++i) {
    if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) {
      fail_series(
          fmt::format("point {} is ({}, {}): coordinates must be finite", i, series.x[i], series.y[i]));
    }
  }
  series_.push_back(std::move(series));
  return *this;
}

Plot& Plot::highlight(Highlight highlight) {
  if (!std::isfinite(highlight.x) || !std::isfinite(highlight.y)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("highlight '{}' is at ({}, {}): coordinates must be finite", highlight.label,
                                highlight.x, highlight.y));
  }
  highlights_.push_back(std::move(highlight));
  return *this;
}

Plot& Plot::reference(ReferenceLine line) {
  if (!std::isfinite(line.value)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("reference line '{}' is at {}: the value must be finite", line.label, line.value));
  }
  references_.push_back(std::move(line));
  return *this;
}

Plot& Plot::legend(bool shown) {
  legend_ = shown;
  return *this;
}

std::string Plot::svg() const {
  // Ranges and ticks first: the margins depend on the tick labels.
  std::vector<double> xs;
  std::vector<double> ys;
  for (const Series& series : series_) {
    xs.insert(xs.end(), series.x.begin(), series.x.end());
    ys.insert(ys.end(), series.y.begin(), series.y.end());
  }
  for (const Highlight& highlight : highlights_) {
    xs.push_back(highlight.x);
    ys.push_back(highlight.y);
  }
  for (const ReferenceLine& line : references_) {
    (line.orientation == Orientation::kVertical ? xs : ys).push_back(line.value);
  }
  const Ticks x_ticks = axis_ticks(xs, x_range_, std::clamp(static_cast<int>(width_px_ / 110), 2, 10));
  const Ticks y_ticks = axis_ticks(ys, y_range_, std::clamp(static_cast<int>(height_px_ / 60), 2, 10));

  const double left =
      detail::widest_tick_label_px(y_ticks) + detail::kTickLength + (y_label_.empty() ? 12 : 33);
  const double top = title_.empty() ? 16 : 44;
  const double bottom = x_label_.empty() ? 28 : 52;
  double right = 20;
  if (!x_ticks.values.empty()) {
    right = std::max(
        right,
        estimate_text_width_px(format_tick(x_ticks.values.back(), x_ticks.step), detail::kTickSize) / 2 + 6);
  }
  const Box area{left, top, width_px_ - left - right, height_px_ - top - bottom};
  const auto to_px = [&](double x, double y) {
    return Point{detail::x_px(x, x_ticks, area), detail::y_px(y, y_ticks, area)};
  };

  // Pixel positions of everything, and the obstacles a legend or label should not cover.
  std::vector<std::vector<Point>> series_px;
  std::vector<Point> obstacles;
  for (const Series& series : series_) {
    std::vector<Point> points;
    for (size_t i = 0; i < series.x.size(); ++i) {
      points.push_back(to_px(series.x[i], series.y[i]));
    }
    sample_line(line_points(points, series.kind), obstacles);
    obstacles.insert(obstacles.end(), points.begin(), points.end());
    series_px.push_back(std::move(points));
  }
  for (const Highlight& highlight : highlights_) {
    obstacles.push_back(to_px(highlight.x, highlight.y));
  }
  for (const ReferenceLine& line : references_) {
    const Point at = to_px(line.value, line.value);
    sample_line(line.orientation == Orientation::kVertical
                    ? std::vector<Point>{{at.x, area.top}, {at.x, area.bottom()}}
                    : std::vector<Point>{{area.left, at.y}, {area.right(), at.y}},
                obstacles);
  }

  SvgDocument doc(width_px_, height_px_);
  Style background;
  background.fill = "#ffffff";
  doc.rect(0, 0, width_px_, height_px_, background);
  detail::draw_title(doc, title_, area.left + area.width / 2);
  detail::draw_x_axis(doc, x_ticks, area, x_label_, true);
  detail::draw_y_axis(doc, y_ticks, area, y_label_);

  // The data, clipped to the plot area (explicit ranges may cut it).
  doc.clip_rect(kClipId, area.left, area.top, area.width, area.height);
  doc.begin_group({.clip_id = kClipId});
  for (const ReferenceLine& line : references_) {
    Style style;
    style.stroke = line.color;
    style.stroke_width_px = 1.5;
    style.dash = line.dash;
    const Point at = to_px(line.value, line.value);
    if (line.orientation == Orientation::kVertical) {
      doc.line(at.x, area.top, at.x, area.bottom(), style);
    } else {
      doc.line(area.left, at.y, area.right(), at.y, style);
    }
  }
  for (size_t s = 0; s < series_.size(); ++s) {
    draw_series(doc, series_[s], series_color(series_[s], s), series_px[s]);
  }
  for (const Highlight& highlight : highlights_) {
    const Point at = to_px(highlight.x, highlight.y);
    Style style;
    style.fill = highlight.color;
    style.stroke = "#ffffff";
    style.stroke_width_px = 1.5;
    doc.begin_group({.tooltip = highlight.tooltip.empty()
                                    ? point_tooltip(highlight.label, highlight.x, highlight.y)
                                    : highlight.tooltip});
    doc.marker(highlight.marker, at.x, at.y, kHighlightSize, style);
    doc.end_group();
  }
  doc.end_group();
  detail::draw_frame(doc, area);

  // The legend first, so that the labels keep clear of it.
  LabelPlacer placer(area, std::move(obstacles));
  std::vector<size_t> entries;
  double widest_entry = 0;
  for (size_t s = 0; s < series_.size(); ++s) {
    if (!series_[s].label.empty()) {
      entries.push_back(s);
      widest_entry = std::max(widest_entry, estimate_text_width_px(series_[s].label, kLegendTextSize));
    }
  }
  for (const Highlight& highlight : highlights_) {
    const Point at = to_px(highlight.x, highlight.y);
    placer.reserve({at.x - kHighlightSize / 2, at.y - kHighlightSize / 2, kHighlightSize, kHighlightSize});
  }
  if (legend_ && !entries.empty()) {
    const Box box =
        placer.place_legend(kLegendInset + kLegendSample + 6 + widest_entry + kLegendInset,
                            2 * kLegendPadding + kLegendRow * static_cast<double>(entries.size()));
    draw_legend(doc, box, series_, entries);
  }
  for (const ReferenceLine& line : references_) {
    if (line.label.empty()) {
      continue;
    }
    // At either end of the line, the top (or right) end first.
    const Point at = to_px(line.value, line.value);
    const std::vector<Point> ends =
        line.orientation == Orientation::kVertical
            ? std::vector<Point>{{at.x, area.top + 16}, {at.x, area.bottom() - 16}}
            : std::vector<Point>{{area.right() - 8, at.y}, {area.left + 8, at.y}};
    const LabelPlacement placement = placer.place(ends, 4, line.label, detail::kTickSize);
    doc.text(placement.x, placement.baseline_y, line.label,
             label_style(detail::kTickSize, placement, line.color, false));
  }
  for (const Highlight& highlight : highlights_) {
    if (highlight.label.empty()) {
      continue;
    }
    const LabelPlacement placement = placer.place({to_px(highlight.x, highlight.y)}, kHighlightSize / 2 + 3,
                                                  highlight.label, kHighlightTextSize);
    doc.text(placement.x, placement.baseline_y, highlight.label,
             label_style(kHighlightTextSize, placement, highlight.color, true));
  }
  return doc.str();
}

Result<void> Plot::save(const std::string& path) const {
  return save_svg(path, svg());
}

std::string stack_plots(const std::vector<const Plot*>& panels) {
  if (panels.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "stack_plots needs at least one panel");
  }
  double width_px = 0;
  double height_px = 0;
  for (const Plot* panel : panels) {
    if (panel == nullptr) {
      throw Exception(ErrorCode::kInvalidArgument, "stack_plots got a null panel");
    }
    width_px = std::max(width_px, panel->width_px());
    height_px += panel->height_px();
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\">\n",
      width_px, height_px);
  double y_px = 0;
  for (const Plot* panel : panels) {
    // Each panel's own document, without its XML declaration, placed at its offset.
    std::string body = panel->svg();
    const size_t start = body.find("<svg");
    if (start != std::string::npos) {
      body.erase(0, start);
    }
    body.insert(4, fmt::format(" y=\"{}\"", y_px));
    out += body;
    y_px += panel->height_px();
  }
  out += "</svg>\n";
  return out;
}

void add_top_headroom(Plot& plot, double top_headroom) {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  for (const Series& series : plot.series()) {
    for (const double y : series.y) {
      low = std::min(low, y);
      high = std::max(high, y);
    }
  }
  if (std::isfinite(low) && std::isfinite(high)) {
    const double span = std::max(high - low, std::max(1e-9, std::abs(high) * 0.05));
    plot.y_range(low - 0.05 * span, high + top_headroom * span);
  }
}

}  // namespace joule::viz
