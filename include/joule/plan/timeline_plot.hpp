// SPDX-License-Identifier: Apache-2.0
// joule/plan/timeline_plot.hpp — one pipeline iteration under a frequency plan as a Gantt chart: a row per
// stage, a bar per computation ("F3", "B3") coloured by its SM clock; gaps between bars are time the stage's
// GPU spends blocked on its neighbours.
#pragma once

#include <string>

#include "joule/plan/pipeline.hpp"
#include "joule/viz/gantt.hpp"

namespace joule::plan {

/// Builds the timeline of `plan` (ASAP start times from schedule_times() with the profiled times). Rows are
/// "stage 0" … "stage S−1" top to bottom; every bar is labelled short_label() and its tooltip gives the
/// computation, start and end (s), clock (MHz) and energy (J). The colour scale spans the profile's whole
/// frequency range, so charts of different plans of one profile compare directly.
/// @param width_px the chart width; 0 picks one wide enough that the shortest bar can show its label
/// (between 800 and 3200 px).
/// @throws joule::Exception: kInvalidArgument if the plan's size is not the DAG's or the profile has fewer
/// stages than the DAG, kNotFound for a frequency the profile lacks (option_at()'s message).
viz::GanttChart timeline_chart(const PipelineDag& dag, const Profile& profile, const FrequencyPlan& plan,
                               std::string title, double width_px = 0);

}  // namespace joule::plan
