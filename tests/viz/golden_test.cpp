// SPDX-License-Identifier: Apache-2.0
// Golden-file tests: representative charts rendered and compared byte for byte with tests/viz/golden/*.svg.
// After an intended change of the output, regenerate the files with
//   JOULE_UPDATE_GOLDEN=1 ctest --test-dir <build> -R VizGolden
// and look at them (e.g. rsvg-convert -o /tmp/x.png tests/viz/golden/x.svg) before committing.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/core/frontier.hpp"
#include "joule/viz/frontier_plot.hpp"
#include "joule/viz/gantt.hpp"
#include "joule/viz/plot.hpp"

#include "xml_check.hpp"

namespace joule::viz {
namespace {

const std::filesystem::path kGoldenDir = std::filesystem::path(__FILE__).parent_path() / "golden";

bool updating() {
  const char* update = std::getenv("JOULE_UPDATE_GOLDEN");
  return update != nullptr && std::string(update) == "1";
}

// Line `number` (1-based) of `text`, or "" past its end.
std::string line_of(const std::string& text, size_t number) {
  std::istringstream stream(text);
  std::string line;
  for (size_t i = 0; i < number && std::getline(stream, line); ++i) {
  }
  return line;
}

void expect_golden(const std::string& name, const std::string& svg) {
  EXPECT_EQ(test::xml_problem(svg), "") << name;
  const std::string path = (kGoldenDir / name).string();
  if (updating()) {
    ASSERT_TRUE(save_svg(path, svg)) << path;
    std::cout << "updated " << path << "\n";
  }
  const auto golden = read_text_file(path);
  ASSERT_TRUE(golden) << golden.error().message() << " (create it with JOULE_UPDATE_GOLDEN=1)";
  if (*golden != svg) {
    size_t line = 1;
    for (size_t i = 0; i < std::min(golden->size(), svg.size()) && (*golden)[i] == svg[i]; ++i) {
      line += svg[i] == '\n' ? 1 : 0;
    }
    const std::string actual = (std::filesystem::temp_directory_path() / ("joule-actual-" + name)).string();
    (void)save_svg(actual, svg);
    ADD_FAILURE() << name << " differs from the golden file at line " << line
                  << ":\n  golden: " << line_of(*golden, line) << "\n  actual: " << line_of(svg, line)
                  << "\nactual output written to " << actual
                  << "; if the change is intended, rerun with JOULE_UPDATE_GOLDEN=1";
  }
  // xmllint, where installed, checks more than the test's own parser.
  if (std::system("command -v xmllint >/dev/null 2>&1") == 0) {
    EXPECT_EQ(std::system(("xmllint --noout '" + path + "'").c_str()), 0) << path;
  }
}

std::string watts(const int& power_limit_w) {
  return fmt::format("{} W", power_limit_w);
}

// A power-limit sweep of one training iteration: 300 W down to 100 W; below 175 W the GPU gets slower without
// saving energy, so those points fall off the frontier.
TEST(VizGolden, PowerLimitFrontier) {
  const std::vector<FrontierPoint<int>> measured = {{300, 1.00, 262}, {275, 1.01, 250}, {250, 1.03, 238},
                                                    {225, 1.07, 229}, {200, 1.13, 221}, {175, 1.22, 214},
                                                    {150, 1.36, 216}, {125, 1.58, 225}, {100, 1.95, 240}};
  const auto frontier = Frontier<int>::from_points(measured);
  ASSERT_EQ(frontier.size(), 6u);
  const FrontierPlotOptions options{.title = "Power-limit sweep of one training iteration (A40)",
                                    .x_label = "Time per iteration (s)",
                                    .y_label = "Energy per iteration (J)"};
  Plot plot = frontier_plot(frontier, watts, options, measured);
  const size_t oracle = *select(frontier, ZeusCost{.eta = 0.9, .max_power_w = 300});
  ASSERT_EQ(frontier.points()[oracle].knob, 175);
  Highlight baseline = highlight_point(frontier.fastest(), "baseline 300 W", "#222222", watts, options);
  baseline.marker = Marker::kSquare;
  plot.highlight(baseline);
  plot.highlight(highlight_point(frontier.points()[oracle], "oracle 175 W", "#d55e00", watts, options));
  expect_golden("power_limit_frontier.svg", plot.svg());
}

struct BatchAndPower {
  int batch_size = 0;
  int power_limit_w = 0;
};

// Batch size × power limit for a whole training run, plotted in hours and megajoules, with a deadline.
TEST(VizGolden, TrainingRunFrontierWithDeadline) {
  const std::vector<FrontierPoint<BatchAndPower>> measured = {
      {{32, 300}, 9360, 2386800},  {{32, 250}, 9886, 2100822},  {{32, 200}, 10571, 1797017},
      {{32, 150}, 11524, 1469248}, {{64, 300}, 7920, 2019600},  {{64, 250}, 8365, 1777618},
      {{64, 200}, 8944, 1520553},  {{64, 150}, 9751, 1243210},  {{128, 300}, 8262, 2106810},
      {{128, 250}, 8726, 1854379}, {{128, 200}, 9331, 1586213}, {{128, 150}, 10172, 1296894}};
  const auto frontier = Frontier<BatchAndPower>::from_points(measured);
  const auto knob = [](const BatchAndPower& k) {
    return fmt::format("bs {}, {} W", k.batch_size, k.power_limit_w);
  };
  const FrontierPlotOptions options{.title = "ResNet-50 to 65% accuracy: batch size × power limit",
                                    .x_label = "Time to accuracy (h)",
                                    .y_label = "Energy to accuracy (MJ)",
                                    .frontier_label = "Pareto frontier (bs 64)",
                                    .measured_label = "all configurations",
                                    .time_scale = 1.0 / 3600,
                                    .energy_scale = 1e-6};
  Plot plot = frontier_plot(frontier, knob, options, measured);
  const double deadline_s = 2.5 * 3600;
  plot.reference(
      {.orientation = Orientation::kVertical, .value = deadline_s / 3600, .label = "deadline 2.5 h"});
  const size_t chosen = *select(frontier, Deadline{deadline_s});
  plot.highlight(highlight_point(frontier.points()[chosen], "chosen: " + knob(frontier.points()[chosen].knob),
                                 "#d55e00", knob, options));
  expect_golden("training_run_frontier.svg", plot.svg());
}

// Every series kind, several markers, a dashed step line, explicit ranges and both reference-line directions.
TEST(VizGolden, PowerTrace) {
  const std::vector<double> power_w = {298.0, 300.2, 291.6, 258.9, 298.7, 295.4, 280.3, 266.9,
                                       296.7, 292.5, 245.5, 248.5, 249.9, 245.0, 250.1, 248.2,
                                       245.7, 251.0, 246.4, 247.2, 175.7, 170.2, 174.0, 174.5,
                                       170.1, 175.4, 172.7, 171.0, 176.0, 171.0, 172.7};
  std::vector<double> time_s;
  for (size_t i = 0; i < power_w.size(); ++i) {
    time_s.push_back(2.0 * static_cast<double>(i));
  }
  Plot plot(800, 420);
  plot.title("JIT power-limit profiling")
      .x_label("Time (s)")
      .y_label("Power (W)")
      .y_range(0, 350)
      .x_range(0, 62);
  plot.add({.label = "GPU power", .x = time_s, .y = power_w, .kind = SeriesKind::kLine});
  plot.add({.label = "power limit",
            .x = {0, 20, 40, 62},
            .y = {300, 250, 175, 175},
            .kind = SeriesKind::kStep,
            .color = "#d55e00",
            .marker = Marker::kNone,
            .dash = "6 3"});
  plot.add({.label = "window ends",
            .x = {20, 40},
            .y = {250, 175},
            .kind = SeriesKind::kScatter,
            .color = "#009e73",
            .marker = Marker::kTriangle});
  plot.add({.label = "dropped samples",
            .x = {7, 33, 51},
            .y = {40, 40, 40},
            .kind = SeriesKind::kScatter,
            .color = "#cc79a7",
            .marker = Marker::kCross});
  plot.reference({.orientation = Orientation::kHorizontal, .value = 300, .label = "max limit 300 W"});
  plot.reference(
      {.orientation = Orientation::kVertical, .value = 40, .label = "optimum fixed", .color = "#009e73"});
  plot.highlight(
      {.x = 46, .y = 174.5, .label = "chosen 175 W", .color = "#d55e00", .marker = Marker::kCircle});
  expect_golden("power_trace.svg", plot.svg());
}

// One GPipe iteration of a 4-stage pipeline with 4 micro-batches, each computation at its own GPU frequency:
// the slowest stage (3) runs at the highest frequency, the others are slowed where they have slack.
TEST(VizGolden, PipelineGantt) {
  constexpr size_t kStages = 4;
  constexpr size_t kMicrobatches = 4;
  const double forward_s[kStages] = {0.040, 0.042, 0.038, 0.048};
  const double forward_mhz[kStages] = {1200, 1260, 1110, 1410};
  const double backward_mhz[kStages] = {1305, 1350, 1215, 1410};
  GanttChart chart;
  chart.title("One pipeline iteration (GPipe, 4 stages × 4 micro-batches)")
      .rows({"stage 0", "stage 1", "stage 2", "stage 3"})
      .value_label("GPU frequency (MHz)")
      .scale(ColorScale(1000, 1410));
  // Forward: a micro-batch enters a stage when the previous stage is done with it and the stage is free.
  double stage_free_s[kStages] = {};
  double forward_end_s[kMicrobatches][kStages] = {};
  for (size_t m = 0; m < kMicrobatches; ++m) {
    for (size_t s = 0; s < kStages; ++s) {
      const double start = std::max(stage_free_s[s], s == 0 ? 0.0 : forward_end_s[m][s - 1]);
      const double end = start + forward_s[s] * 1410 / forward_mhz[s];
      chart.add({.row = s,
                 .start_s = start,
                 .end_s = end,
                 .value = forward_mhz[s],
                 .label = fmt::format("F{}", m)});
      forward_end_s[m][s] = end;
      stage_free_s[s] = end;
    }
  }
  // Backward: twice the forward work, from the last stage to the first.
  double backward_end_s[kMicrobatches][kStages] = {};
  for (size_t m = 0; m < kMicrobatches; ++m) {
    for (size_t s = kStages; s-- > 0;) {
      const double start = std::max(stage_free_s[s], s + 1 == kStages ? 0.0 : backward_end_s[m][s + 1]);
      const double end = start + 2 * forward_s[s] * 1410 / backward_mhz[s];
      chart.add({.row = s,
                 .start_s = start,
                 .end_s = end,
                 .value = backward_mhz[s],
                 .label = fmt::format("B{}", m)});
      backward_end_s[m][s] = end;
      stage_free_s[s] = end;
    }
  }
  expect_golden("pipeline_gantt.svg", chart.svg());
}

}  // namespace
}  // namespace joule::viz
