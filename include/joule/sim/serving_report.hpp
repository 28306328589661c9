// SPDX-License-Identifier: Apache-2.0
// joule/sim/serving_report.hpp — the forms of a serving replay's result (`joule infer replay`): the
// strategies side by side as text, JSON and CSV, the per-request energies as CSV, and the
// load/clock/power/latency plot. Pure functions of a result, no I/O; the JSON's knob fields name their unit
// (docs/inference.md).
#pragma once

#include <cstddef>
#include <string>

#include "joule/optimize/inference_slo.hpp"
#include "joule/sim/llm.hpp"
#include "joule/sim/serving.hpp"

namespace joule::sim {

/// What a report says about the run besides the result: the trace, its rate scaling, the replica and the SLO.
struct ServingReportContext {
  std::string trace;      ///< the trace's name or path, as given
  double rate_scale = 1;  ///< arrival rate × this (1: as recorded)
  const LlmCostModel& cost;
  optimize::ServingSlo slo;
  size_t requests = 0;    ///< requests in the trace
  double duration_s = 0;  ///< the trace's last arrival, s
};

/// The comparison as a JSON document (2-space indent, final newline): trace, replica, SLO, the best fixed
/// knob under its unit's name (best_fixed_sm_clock_mhz | best_fixed_power_limit_w) and every strategy.
std::string render_serving_json(const ServingComparison& result, const ServingReportContext& context);
/// One row per strategy: name,energy_j,j_per_token,p50/p99 TTFT and TPOT (s),slo_attainment,mean_clock_mhz,
/// energy_saved_vs_max_clock.
std::string render_serving_csv(const ServingComparison& result);
/// The strategies as a table a human reads, with the run's header line and the best fixed knob.
std::string render_serving_text(const ServingComparison& result, const ServingReportContext& context);
/// Load, clock, power and p99 TTFT/TPOT against the SLO over one time axis, one panel each (SVG).
std::string serving_plot_svg(const ServingComparison& result, const optimize::ServingSlo& slo,
                             const std::string& title);
/// One row per request of `replay`: arrival, tokens, TTFT, TPOT and its energy split into prefill and decode.
std::string render_requests_csv(const ServingReplay& replay);

/// Replays `trace` `rate_scale` times as fast (arrival times ÷ rate_scale; > 0).
void scale_arrival_rate(ServingTrace& trace, double rate_scale);
/// @return the width of a plot's time bucket for a trace of `duration_s`: about 240 points, on a round
/// number of seconds (whole seconds under 10 s, else multiples of 5 s).
double plot_bucket_s(double duration_s);

}  // namespace joule::sim
