// SPDX-License-Identifier: Apache-2.0
// Pipeline timelines: a smoke test of the chart and its SVG (no golden file). Set JOULE_TEST_PLOT_DIR to a
// folder to keep the example charts for a look.
#include "joule/plan/timeline_plot.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::plan {
namespace {

size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

class TimelinePlot : public ::testing::Test {
 protected:
  Profile profile_ = Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv").value();
  PipelineDag dag_ = build_pipeline(4, 8, Schedule::k1F1B).value();

  // The light stages slowed down (they would block anyway), the heavy last stage at full clock.
  FrequencyPlan mixed_plan() const {
    FrequencyPlan plan = uniform_plan(dag_, 1410);
    for (size_t v = 0; v < plan.size(); ++v) {
      const Computation& c = dag_.computations[v];
      if (c.stage < 3) {
        plan[v] = c.instruction == Instruction::kForward ? 1110 : 1260;
      }
    }
    return plan;
  }

  void keep(const viz::GanttChart& chart, const std::string& name) const {
    if (const char* dir = std::getenv("JOULE_TEST_PLOT_DIR")) {
      ASSERT_TRUE(chart.save(std::string(dir) + "/" + name).has_value());
    }
  }
};

TEST_F(TimelinePlot, OneBarPerComputation) {
  const viz::GanttChart chart = timeline_chart(dag_, profile_, uniform_plan(dag_, 1410), "All at 1410 MHz");
  ASSERT_EQ(chart.bars().size(), 64u);
  const Timeline timeline = schedule_times(dag_, [&] {
    std::vector<double> times;
    for (const Computation& c : dag_.computations) {
      times.push_back(option_at(profile_, c, 1410).value().time_s);
    }
    return times;
  }());
  for (size_t v = 0; v < 64; ++v) {
    const viz::GanttBar& bar = chart.bars()[v];
    const Computation& c = dag_.computations[v];
    EXPECT_EQ(bar.row, static_cast<size_t>(c.stage));
    EXPECT_EQ(bar.label, short_label(c));
    EXPECT_DOUBLE_EQ(bar.value, 1410);
    EXPECT_DOUBLE_EQ(bar.start_s, timeline.start_s[v]);
    EXPECT_DOUBLE_EQ(bar.end_s, timeline.end_s[v]);
  }
  const std::string svg = chart.svg();
  EXPECT_EQ(count_of(svg, "<title>stage "), 64u);  // one tooltip per bar
  EXPECT_NE(svg.find("<title>stage 3 backward of microbatch 7: "), std::string::npos);
  EXPECT_NE(svg.find("All at 1410 MHz"), std::string::npos);
  EXPECT_NE(svg.find("SM clock (MHz)"), std::string::npos);
  for (const std::string label : {">F0<", ">B7<", ">F7<", ">B0<"}) {
    EXPECT_GE(count_of(svg, label), 4u) << label;  // one per stage: the bars are wide enough for labels
  }
  keep(chart, "timeline_all_1410.svg");
}

TEST_F(TimelinePlot, MixedPlanColoursByClock) {
  const viz::GanttChart chart = timeline_chart(dag_, profile_, mixed_plan(), "Light stages slowed");
  ASSERT_EQ(chart.bars().size(), 64u);
  const std::string svg = chart.svg();
  // Three clocks, three fills (the scale spans 810–1410 MHz whatever the plan uses).
  const viz::ColorScale scale(810, 1410);
  for (const double f : {1110.0, 1260.0, 1410.0}) {
    EXPECT_NE(svg.find("fill=\"" + scale.color(f) + "\""), std::string::npos) << f;
  }
  keep(chart, "timeline_mixed.svg");
}

TEST_F(TimelinePlot, Errors) {
  JOULE_EXPECT_THROW_MESSAGE(timeline_chart(dag_, profile_, FrequencyPlan(2, 1410), "x"),
                             ErrorCode::kInvalidArgument,
                             "the plan has 2 frequencies but the DAG has 64 computations");
  JOULE_EXPECT_THROW_MESSAGE(
      timeline_chart(dag_, profile_, uniform_plan(dag_, 1400), "x"), ErrorCode::kNotFound,
      "the profile has no option at 1400 MHz for stage 0 forward of microbatch 0 (it has 41 "
      "frequencies from 810 to 1410 MHz)");
  const PipelineDag five = build_pipeline(5, 2, Schedule::k1F1B).value();
  JOULE_EXPECT_THROW_MESSAGE(timeline_chart(five, profile_, uniform_plan(five, 1410), "x"),
                             ErrorCode::kInvalidArgument, "the profile has 4 stages but the pipeline has 5");
}

}  // namespace
}  // namespace joule::plan
