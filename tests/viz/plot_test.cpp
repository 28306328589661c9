// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/plot.hpp"

#include <limits>
#include <regex>

#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/viz/frontier_plot.hpp"

#include "test_util.hpp"
#include "xml_check.hpp"

namespace joule::viz {
namespace {

using joule::test::kNan;

size_t count(const std::string& text, const std::string& part) {
  size_t found = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) {
    ++found;
  }
  return found;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The (x, y) of the legend's background: the only rect with this stroke.
std::pair<double, double> legend_position(const std::string& svg) {
  static const std::regex kLegend(R"re(<rect x="([0-9.]+)" y="([0-9.]+)"[^>]*stroke="#bbbbbb")re");
  std::smatch match;
  if (!std::regex_search(svg, match, kLegend)) {
    return {-1, -1};
  }
  return {std::stod(match[1]), std::stod(match[2])};
}

TEST(Plot, RendersAxesTitleLabelsAndSeries) {
  Plot plot;
  plot.title("Energy <vs> time").x_label("Time (s)").y_label("Energy (J)");
  plot.add({.label = "sweep", .x = {1, 2, 3}, .y = {30, 20, 15}});
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_TRUE(contains(svg, ">Energy &lt;vs&gt; time</text>"));
  EXPECT_TRUE(contains(svg, ">Time (s)</text>"));
  EXPECT_TRUE(contains(svg, "transform=\"rotate(-90 "));  // the y label
  EXPECT_TRUE(contains(svg, ">sweep</text>"));            // the legend
  EXPECT_TRUE(contains(svg, "<title>sweep: (2, 20)</title>"));
  EXPECT_EQ(count(svg, "<polyline "), 1u);
  EXPECT_EQ(count(svg, "<circle "), 4u);  // three points and the legend sample
  EXPECT_TRUE(contains(svg, "<clipPath id=\"plot-area\">"));
  EXPECT_EQ(svg, plot.svg()) << "rendering must be deterministic";
}

TEST(Plot, SeriesKinds) {
  Plot plot;
  plot.add({.label = "scatter",
            .x = {0, 1},
            .y = {0, 1},
            .kind = SeriesKind::kScatter,
            .marker = Marker::kSquare});
  plot.add({.label = "line", .x = {0, 1}, .y = {1, 0}, .kind = SeriesKind::kLine, .dash = "6 3"});
  plot.add({.label = "", .x = {0, 1, 2}, .y = {0, 1, 0}, .kind = SeriesKind::kStep, .marker = Marker::kNone});
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<polyline "), 2u);                // line and step; scatter has none
  EXPECT_EQ(count(svg, "stroke-dasharray=\"6 3\""), 2u);  // the line and its legend sample
  EXPECT_EQ(count(svg, "<title>"),
            2u);  // scatter markers only: the line has none, the step's marker is kNone
  // The step holds y until the next x: 5 vertices for 3 points.
  static const std::regex kPolyline(R"re(<polyline points="([^"]*)")re");
  std::vector<size_t> vertices;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kPolyline); it != std::sregex_iterator();
       ++it) {
    vertices.push_back(static_cast<size_t>(std::count((*it)[1].first, (*it)[1].second, ' ')) + 1);
  }
  EXPECT_EQ(vertices, (std::vector<size_t>{2, 5}));
  // Unlabelled series stay out of the legend; the palette gives each series its colour by position.
  EXPECT_EQ(count(svg, ">scatter</text>") + count(svg, ">line</text>"), 2u);
  EXPECT_TRUE(contains(svg, palette()[2]));
}

TEST(Plot, LegendAvoidsTheData) {
  // Points crowd the top right: the legend goes elsewhere.
  Plot crowded;
  crowded.add(
      {.label = "a", .x = {8, 9, 10, 9.5, 10}, .y = {8, 9, 10, 10, 9.5}, .kind = SeriesKind::kScatter});
  crowded.add({.label = "b", .x = {0}, .y = {0}, .kind = SeriesKind::kScatter});
  const auto [x, y] = legend_position(crowded.svg());
  EXPECT_LT(x, 360);
  EXPECT_LT(y, 240);  // the top left is free
  Plot hidden = crowded;
  hidden.legend(false);
  EXPECT_EQ(legend_position(hidden.svg()).first, -1);
}

TEST(Plot, Highlights) {
  Plot plot;
  plot.add({.label = "", .x = {1, 2, 3}, .y = {3, 2, 1}});
  plot.highlight({.x = 2, .y = 2, .label = "chosen 175 W", .color = "#d55e00"});
  plot.highlight({.x = 3, .y = 1, .label = "", .tooltip = "custom & tip"});
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_TRUE(contains(svg, ">chosen 175 W</text>"));
  EXPECT_TRUE(contains(svg, "<title>chosen 175 W: (2, 2)</title>"));
  EXPECT_TRUE(contains(svg, "<title>custom &amp; tip</title>"));
  EXPECT_EQ(count(svg, "<polygon "), 2u);  // two diamonds
  EXPECT_EQ(plot.highlights().size(), 2u);
}

TEST(Plot, HighlightLabelsStayInsideAndApart) {
  // Two highlights at the same corner point: both labels must be inside the plot area and not overlap.
  Plot plot(400, 300);
  plot.add({.label = "", .x = {0, 10}, .y = {0, 10}});
  plot.highlight({.x = 10, .y = 10, .label = "baseline"});
  plot.highlight({.x = 10, .y = 10, .label = "oracle"});
  const std::string svg = plot.svg();
  static const std::regex kLabel(
      R"re(<text x="([0-9.]+)" y="([0-9.]+)" font-size="12"( text-anchor="(\w+)")?)re");
  std::vector<std::pair<double, double>> positions;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kLabel); it != std::sregex_iterator(); ++it) {
    positions.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
    EXPECT_EQ((*it)[4], "end") << "a label at the right edge must extend to the left";
  }
  ASSERT_EQ(positions.size(), 2u);
  EXPECT_GT(std::abs(positions[0].second - positions[1].second), 12) << "labels overlap";
}

TEST(Plot, HighlightLabelsNeverHideAnotherHighlightsMarker) {
  // An unlabelled marker near a labelled one, at many places around where the label naturally goes: the
  // label must never cover any of the 14 px marker, not only its centre.
  const std::string text = "oracle 128@100W (a long label)";
  const double width = estimate_text_width_px(text, 12);
  int covered = 0;
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 9; ++j) {
      Plot plot(400, 300);
      plot.add({.label = "", .x = {0, 10}, .y = {0, 10}, .kind = SeriesKind::kScatter});
      plot.highlight({.x = 5, .y = 5, .label = text, .marker = Marker::kDiamond});
      plot.highlight({.x = 5.2 + 0.25 * i,
                      .y = 4.6 + 0.15 * j,
                      .label = "",
                      .marker = Marker::kCircle,
                      .tooltip = "zeus-marker"});
      const std::string svg = plot.svg();
      std::smatch label;
      ASSERT_TRUE(std::regex_search(
          svg, label,
          std::regex(
              R"re(<text x="([0-9.]+)" y="([0-9.]+)" font-size="12"( text-anchor="(\w+)")?[^>]*>oracle)re")));
      const double x = std::stod(label[1]);
      const double left = label[4] == "end" ? x - width : label[4] == "middle" ? x - width / 2 : x;
      const double baseline = std::stod(label[2]);
      std::smatch marker;
      ASSERT_TRUE(std::regex_search(
          svg, marker, std::regex(R"re(zeus-marker</title>\s*<circle cx="([0-9.]+)" cy="([0-9.]+)")re")));
      const double cx = std::stod(marker[1]);
      const double cy = std::stod(marker[2]);
      const bool overlaps =
          cx + 7 > left && cx - 7 < left + width && cy + 7 > baseline - 9 && cy - 7 < baseline + 3;
      covered += overlaps ? 1 : 0;
      EXPECT_FALSE(overlaps) << "marker at (" << cx << ", " << cy << "); label from (" << left << ", "
                             << baseline << "), " << width << " px wide";
    }
  }
  EXPECT_EQ(covered, 0);
}

TEST(Plot, ReferenceLines) {
  Plot plot;
  plot.add({.label = "", .x = {1, 2}, .y = {10, 20}});
  plot.reference({.orientation = Orientation::kVertical, .value = 5, .label = "deadline"});
  plot.reference({.orientation = Orientation::kHorizontal, .value = 0, .label = "", .color = "#009e73"});
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_TRUE(contains(svg, ">deadline</text>"));
  EXPECT_EQ(count(svg, "stroke-dasharray=\"6 4\""), 2u);
  // The ranges grow to show both lines: x up to 5, y down to 0.
  EXPECT_TRUE(contains(svg, ">5</text>"));
  EXPECT_TRUE(contains(svg, ">0</text>"));
}

TEST(Plot, ExplicitRanges) {
  Plot plot;
  plot.x_range(0, 100).y_range(-1, 1);
  plot.add({.label = "", .x = {50, 500}, .y = {0, 0}});
  const std::string svg = plot.svg();
  EXPECT_TRUE(contains(svg, ">100</text>"));
  EXPECT_FALSE(contains(svg, ">500</text>"));
  EXPECT_TRUE(contains(svg, ">-1.0</text>"));
  EXPECT_TRUE(contains(svg, "clip-path=\"url(#plot-area)\""));
}

TEST(Plot, EmptyPlotStillRenders) {
  const std::string svg = Plot().svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_TRUE(contains(svg, ">1.0</text>"));
  EXPECT_EQ(legend_position(svg).first, -1);
}

TEST(Plot, SinglePointAndEqualValues) {
  Plot plot;
  plot.add({.label = "one", .x = {2}, .y = {0}});
  plot.add({.label = "flat", .x = {1, 3}, .y = {0, 0}});
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_FALSE(contains(svg, "nan"));
  EXPECT_FALSE(contains(svg, "inf"));
}

TEST(Plot, InvalidInput) {
  const auto code = ErrorCode::kInvalidArgument;
  JOULE_EXPECT_THROW_MESSAGE(Plot(100, 480), code,
                             "a plot needs a finite size of at least 200 x 200 px, got 100 x 480");
  Plot plot;
  JOULE_EXPECT_THROW_MESSAGE(plot.add({.label = "s", .x = {1, 2}, .y = {1}}), code,
                             "series 's': x has 2 values but y has 1");
  JOULE_EXPECT_THROW_MESSAGE(plot.add({.label = "s", .x = {1, kNan}, .y = {1, 2}}), code,
                             "series 's': point 1 is (nan, 2): coordinates must be finite");
  JOULE_EXPECT_THROW_MESSAGE(plot.add({.label = "s", .x = {1}, .y = {1}, .tooltips = {"a", "b"}}), code,
                             "series 's': 2 tooltips for 1 points");
  JOULE_EXPECT_THROW_MESSAGE(plot.add({.label = "s", .x = {1}, .y = {1}, .opacity = 0}), code,
                             "series 's': opacity must be in (0, 1], got 0");
  JOULE_EXPECT_THROW_MESSAGE(plot.highlight({.x = kNan, .y = 1, .label = "h"}), code,
                             "highlight 'h' is at (nan, 1): coordinates must be finite");
  JOULE_EXPECT_THROW_MESSAGE(
      plot.reference({.orientation = Orientation::kVertical, .value = kNan, .label = "r"}), code,
      "reference line 'r' is at nan: the value must be finite");
  JOULE_EXPECT_THROW_MESSAGE(plot.x_range(1, 1), code,
                             "the x range must be finite with min < max, got [1, 1]");
  JOULE_EXPECT_THROW_MESSAGE(plot.y_range(0, kNan), code,
                             "the y range must be finite with min < max, got [0, nan]");
  EXPECT_TRUE(plot.series().empty());
}

TEST(Plot, SaveWritesTheDocument) {
  joule::test::TempDir dir;
  Plot plot;
  plot.add({.label = "a", .x = {1}, .y = {1}});
  ASSERT_TRUE(plot.save(dir.path() + "/a.svg"));
  EXPECT_EQ(*read_text_file(dir.path() + "/a.svg"), plot.svg());
  EXPECT_FALSE(plot.save(dir.path() + "/no/such/dir/a.svg"));
}

struct BatchAndPower {
  int batch_size = 0;
  int power_limit_w = 0;
};

TEST(FrontierPlot, DrawsFrontierOverMeasuredPoints) {
  const std::vector<FrontierPoint<BatchAndPower>> measured = {
      {{32, 300}, 1.0, 300}, {{32, 200}, 1.3, 240}, {{64, 200}, 1.2, 260}, {{64, 100}, 2.0, 250}};
  const auto frontier = Frontier<BatchAndPower>::from_points(measured);
  const auto knob = [](const BatchAndPower& k) {
    return fmt::format("bs {}, {} W", k.batch_size, k.power_limit_w);
  };
  Plot plot = frontier_plot(frontier, knob, {.title = "t", .x_label = "Time (s)"}, measured);
  ASSERT_EQ(plot.series().size(), 2u);
  EXPECT_EQ(plot.series()[0].label, "measured");
  EXPECT_EQ(plot.series()[0].kind, SeriesKind::kScatter);
  EXPECT_EQ(plot.series()[0].x.size(), 4u);
  EXPECT_EQ(plot.series()[1].label, "Pareto frontier");
  EXPECT_EQ(plot.series()[1].x, (std::vector<double>{1.0, 1.2, 1.3}));
  EXPECT_EQ(plot.series()[1].tooltips.front(), "bs 32, 300 W: 1 s, 300 J");
  plot.highlight(highlight_point(frontier.points()[2], "oracle", "#009e73", knob));
  EXPECT_EQ(plot.highlights().front().tooltip, "oracle — bs 32, 200 W: 1.3 s, 240 J");
  const std::string svg = plot.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_TRUE(contains(svg, ">oracle</text>"));
}

TEST(FrontierPlot, WithoutMeasuredPoints) {
  const auto frontier = Frontier<int>::from_points({{300, 1.0, 300}, {200, 1.3, 240}});
  const Plot plot = frontier_plot(frontier, [](const int& w) { return fmt::format("{} W", w); });
  ASSERT_EQ(plot.series().size(), 1u);
  EXPECT_EQ(plot.series()[0].tooltips.back(), "200 W: 1.3 s, 240 J");
  EXPECT_EQ(test::xml_problem(plot.svg()), "");
}

}  // namespace
}  // namespace joule::viz
