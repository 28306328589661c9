// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/gantt.hpp"

#include <limits>

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "xml_check.hpp"

namespace joule::viz {
namespace {

size_t count(const std::string& text, const std::string& part) {
  size_t found = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) {
    ++found;
  }
  return found;
}

TEST(GanttColorScale, InterpolatesBetweenStops) {
  const ColorScale scale(0, 100, {"#000000", "#FF8000", "#ffffff"});
  EXPECT_EQ(scale.stops()[1], "#ff8000");  // stored in lower case
  EXPECT_EQ(scale.color(0), "#000000");
  EXPECT_EQ(scale.color(50), "#ff8000");
  EXPECT_EQ(scale.color(100), "#ffffff");
  EXPECT_EQ(scale.color(25), "#804000");  // 127.5 rounds away from zero
  EXPECT_EQ(scale.color(-5), "#000000");  // clamped
  EXPECT_EQ(scale.color(1e9), "#ffffff");
}

TEST(GanttColorScale, DefaultAndDegenerate) {
  const ColorScale scale(1000, 1000);
  EXPECT_EQ(scale.stops(), ColorScale::default_stops());
  EXPECT_EQ(scale.color(1000), "#21918c");  // the middle stop
  EXPECT_EQ(scale.color(5), "#21918c");
  EXPECT_EQ(ColorScale(0, 1).color(0), "#440154");
  EXPECT_EQ(ColorScale(0, 1).color(1), "#fde725");
}

TEST(GanttColorScale, Invalid) {
  const auto code = ErrorCode::kInvalidArgument;
  JOULE_EXPECT_THROW_MESSAGE(ColorScale(2, 1), code,
                             "a colour scale needs finite ends with min <= max, got [2, 1]");
  JOULE_EXPECT_THROW_MESSAGE(ColorScale(0, std::numeric_limits<double>::infinity()), code,
                             "a colour scale needs finite ends with min <= max, got [0, inf]");
  JOULE_EXPECT_THROW_MESSAGE(ColorScale(0, 1, {"#000000"}), code,
                             "a colour scale needs at least 2 colour stops, got 1");
  JOULE_EXPECT_THROW_MESSAGE(ColorScale(0, 1, {"#000000", "red"}), code,
                             "colour stop 'red' is not written #rrggbb");
  JOULE_EXPECT_THROW_MESSAGE(ColorScale(0, 1, {"#000000", "#00000g"}), code,
                             "colour stop '#00000g' is not written #rrggbb");
}

TEST(Gantt, RendersRowsBarsAndColorBar) {
  GanttChart chart;
  chart.title("iteration").rows({"stage 0", "stage 1"}).value_label("GPU frequency (MHz)");
  chart.add({.row = 0, .start_s = 0, .end_s = 0.5, .value = 1410, .label = "F0"});
  chart.add(
      {.row = 1, .start_s = 0.5, .end_s = 0.502, .value = 1005, .label = "F0"});  // too narrow for its label
  chart.add({.row = 1, .start_s = 0.6, .end_s = 1.0, .value = 1005, .label = "B0", .tooltip = "custom"});
  const std::string svg = chart.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_NE(svg.find(">stage 0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">GPU frequency (MHz)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">Time (s)</text>"), std::string::npos);
  EXPECT_EQ(count(svg, ">F0</text>"), 1u);
  EXPECT_EQ(count(svg, ">B0</text>"), 1u);
  EXPECT_NE(svg.find("<title>stage 0 F0: 0–0.5 s, 1410</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>custom</title>"), std::string::npos);
  // The highest value gets the last stop (yellow, dark text), the lowest the first (purple, white text).
  EXPECT_NE(svg.find("fill=\"#fde725\" stroke=\"#ffffff\""), std::string::npos);
  EXPECT_NE(svg.find("fill=\"#440154\" stroke=\"#ffffff\""), std::string::npos);
  EXPECT_NE(svg.find("fill=\"#222222\">F0</text>"), std::string::npos);
  EXPECT_NE(svg.find("fill=\"#ffffff\">B0</text>"), std::string::npos);
  EXPECT_EQ(chart.bars().size(), 3u);
  EXPECT_EQ(svg, chart.svg());
}

TEST(Gantt, ExplicitScaleAndOneRow) {
  GanttChart chart(400);
  chart.rows({"gpu"}).scale(ColorScale(0, 10, {"#000000", "#ffffff"})).time_label("");
  chart.add({.row = 0, .start_s = 1, .end_s = 2, .value = 5, .label = ""});
  const std::string svg = chart.svg();
  EXPECT_EQ(test::xml_problem(svg), "");
  EXPECT_NE(svg.find("fill=\"#808080\" stroke=\"#ffffff\""), std::string::npos);
  EXPECT_EQ(svg.find("Time (s)"), std::string::npos);
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);  // the colour bar spans the given scale
}

TEST(Gantt, EmptyChart) {
  GanttChart chart;
  JOULE_EXPECT_THROW_MESSAGE(chart.svg(), ErrorCode::kState, "a Gantt chart needs at least one row");
  chart.rows({"a", "b"});
  EXPECT_EQ(test::xml_problem(chart.svg()), "");
}

TEST(Gantt, InvalidInput) {
  const auto code = ErrorCode::kInvalidArgument;
  JOULE_EXPECT_THROW_MESSAGE(GanttChart(100), code,
                             "a Gantt chart needs a finite width of at least 300 px, got 100");
  GanttChart chart;
  chart.rows({"a"});
  JOULE_EXPECT_THROW_MESSAGE(chart.add({.row = 1, .start_s = 0, .end_s = 1, .value = 0, .label = "x"}), code,
                             "bar 'x' is in row 1 but the chart has 1 row(s)");
  JOULE_EXPECT_THROW_MESSAGE(chart.add({.row = 0, .start_s = 2, .end_s = 1, .value = 0, .label = "x"}), code,
                             "bar 'x' ends (1 s) before it starts (2 s)");
  JOULE_EXPECT_THROW_MESSAGE(chart.add({.row = 0,
                                        .start_s = 0,
                                        .end_s = 1,
                                        .value = std::numeric_limits<double>::quiet_NaN(),
                                        .label = "x"}),
                             code, "bar 'x' has a non-finite number: start 0 s, end 1 s, value nan");
  EXPECT_TRUE(chart.bars().empty());
}

}  // namespace
}  // namespace joule::viz
