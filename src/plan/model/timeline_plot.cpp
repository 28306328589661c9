// SPDX-License-Identifier: Apache-2.0
// Pipeline timelines as Gantt charts.
#include "joule/plan/timeline_plot.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace joule::plan {

namespace {

constexpr double kAutoMinWidth = 800;
constexpr double kAutoMaxWidth = 3200;
constexpr double kLabelledBarPx = 24;    // "F12" at the chart's bar font size, with a little margin
constexpr double kChartMarginsPx = 200;  // row names on the left, the colour bar on the right

}  // namespace

viz::GanttChart timeline_chart(const PipelineDag& dag, const Profile& profile, const FrequencyPlan& plan,
                               std::string title, double width_px) {
  const size_t count = dag.computations.size();
  if (plan.size() != count) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("the plan has {} frequencies but the DAG has {} computations", plan.size(), count));
  }
  value_or_throw(check_inputs(dag, profile, 0));
  std::vector<ProfileOption> options;
  options.reserve(count);
  std::vector<double> times_s;
  times_s.reserve(count);
  for (size_t v = 0; v < count; ++v) {
    options.push_back(value_or_throw(option_at(profile, dag.computations[v], plan[v])));
    times_s.push_back(options.back().time_s);
  }
  const Timeline timeline = schedule_times(dag, times_s);

  if (width_px == 0) {
    const double shortest_s = times_s.empty() ? 1 : *std::min_element(times_s.begin(), times_s.end());
    const double wanted =
        timeline.time_s > 0 ? kLabelledBarPx * timeline.time_s / shortest_s + kChartMarginsPx : kAutoMinWidth;
    width_px = std::clamp(wanted, kAutoMinWidth, kAutoMaxWidth);
  }
  viz::GanttChart chart(width_px);
  std::vector<std::string> rows;
  for (int s = 0; s < dag.stages; ++s) {
    rows.push_back(fmt::format("stage {}", s));
  }
  const auto& frequencies = profile.frequencies_mhz();
  chart.title(std::move(title))
      .rows(std::move(rows))
      .value_label("SM clock (MHz)")
      .scale(viz::ColorScale(frequencies.back(), frequencies.front()));
  for (size_t v = 0; v < count; ++v) {
    const Computation& computation = dag.computations[v];
    chart.add({.row = static_cast<size_t>(computation.stage),
               .start_s = timeline.start_s[v],
               .end_s = timeline.end_s[v],
               .value = static_cast<double>(plan[v]),
               .label = short_label(computation),
               .tooltip = fmt::format("{}: {:.4f}–{:.4f} s at {} MHz, {:.3g} J", to_string(computation),
                                      timeline.start_s[v], timeline.end_s[v], plan[v], options[v].energy_j)});
  }
  return chart;
}

}  // namespace joule::plan
