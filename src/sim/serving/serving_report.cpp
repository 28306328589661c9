// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/serving_report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/viz/plot.hpp"

namespace joule::sim {

namespace {

double saved_share(const ServingSummary& strategy, const ServingSummary& baseline) {
  return baseline.energy_j > 0 ? 1 - strategy.energy_j / baseline.energy_j : 0;
}

// Fields that carry a knob value name its kind and unit: "best_fixed_sm_clock_mhz" or
// "best_fixed_power_limit_w" (docs/inference.md).
std::string knob_key(std::string_view prefix, optimize::KnobKind kind) {
  return fmt::format("{}{}", prefix, optimize::knob_field(kind));
}

nlohmann::json summary_json(const ServingSummary& s, const ServingSummary& baseline) {
  return {{"name", s.name},
          {"energy_j", s.energy_j},
          {"j_per_token", s.j_per_token},
          {"p50_ttft_s", s.p50_ttft_s},
          {"p99_ttft_s", s.p99_ttft_s},
          {"p50_tpot_s", s.p50_tpot_s},
          {"p99_tpot_s", s.p99_tpot_s},
          {"slo_attainment", s.slo_attainment},
          {"mean_clock_mhz", s.mean_clock_mhz},
          {knob_key("mean_chosen_", s.knob_kind), s.mean_knob_value},
          {"energy_saved_vs_max_clock", saved_share(s, baseline)},
          {"idle_energy_j", s.idle_energy_j},
          {"duration_s", s.duration_s},
          {"requests", s.requests},
          {"output_tokens", s.output_tokens},
          {"iterations", s.iterations}};
}

}  // namespace

std::string render_serving_json(const ServingComparison& result, const ServingReportContext& context) {
  const LlmCostModel& cost = context.cost;
  const optimize::ServingSlo& slo = context.slo;
  nlohmann::json out;
  out["trace"] = context.trace;
  out["gpu"] = cost.gpu().key;
  out["model"] = cost.model().key;
  out["tensor_parallel"] = cost.tensor_parallel();
  out["rate_scale"] = context.rate_scale;
  out["slo"] = {{"ttft_s", slo.ttft_s}, {"tpot_s", slo.tpot_s}, {"attainment", slo.attainment}};
  out["knob"] = optimize::knob_field(result.best_fixed.kind);
  out[knob_key("best_fixed_", result.best_fixed.kind)] = result.best_fixed.value;
  out["slo_unattainable"] = result.slo_unattainable;
  out["note"] = result.note;
  nlohmann::json strategies = nlohmann::json::array();
  for (const auto& strategy : result.strategies) {
    strategies.push_back(summary_json(strategy.summary, result.strategies.front().summary));
  }
  out["strategies"] = std::move(strategies);
  if (result.exploration) {
    const ServingExploration& e = *result.exploration;
    out["joule_exploration"] = {{"seconds", e.seconds},
                                {"iterations", e.iterations},
                                {"energy_j", e.energy_j},
                                {knob_key("held_", e.held.kind), e.held.value}};
  }
  out["card"] = result.card;
  return out.dump(2) + "\n";
}

std::string render_serving_csv(const ServingComparison& result) {
  std::ostringstream out;
  csv::write_row(out, {"name", "energy_j", "j_per_token", "p50_ttft_s", "p99_ttft_s", "p50_tpot_s",
                       "p99_tpot_s", "slo_attainment", "mean_clock_mhz", "energy_saved_vs_max_clock"});
  for (const auto& strategy : result.strategies) {
    const auto& s = strategy.summary;
    csv::write_row(out, {s.name, fmt::format("{:.3f}", s.energy_j), fmt::format("{:.6f}", s.j_per_token),
                         fmt::format("{:.6f}", s.p50_ttft_s), fmt::format("{:.6f}", s.p99_ttft_s),
                         fmt::format("{:.6f}", s.p50_tpot_s), fmt::format("{:.6f}", s.p99_tpot_s),
                         fmt::format("{:.6f}", s.slo_attainment), fmt::format("{:.1f}", s.mean_clock_mhz),
                         fmt::format("{:.6f}", saved_share(s, result.strategies.front().summary))});
  }
  return out.str();
}

std::string render_serving_text(const ServingComparison& result, const ServingReportContext& context) {
  const LlmCostModel& cost = context.cost;
  const optimize::ServingSlo& slo = context.slo;
  std::string out = fmt::format(
      "{} requests over {:.0f} s ({}{}) on {} × {} serving {}; SLO: p{:g} TTFT ≤ {:g} s, TPOT ≤ {:g} s\n",
      context.requests, context.duration_s, context.trace,
      context.rate_scale != 1 ? fmt::format(", rate × {:g}", context.rate_scale) : "", cost.tensor_parallel(),
      cost.gpu().name, cost.model().name, slo.attainment * 100, slo.ttft_s, slo.tpot_s);
  if (!result.note.empty()) {
    out += "note: " + result.note + "\n";
  }
  out +=
      fmt::format("\n{:<22}{:>12}{:>10}{:>11}{:>11}{:>11}{:>11}{:>9}{:>10}{:>8}\n", "strategy", "energy (kJ)",
                  "J/token", "p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT", "SLO met", "mean MHz", "saved");
  for (const auto& strategy : result.strategies) {
    const auto& s = strategy.summary;
    out += fmt::format(
        "{:<22}{:>12.1f}{:>10.4f}{:>10.3f}s{:>10.3f}s{:>9.1f}ms{:>9.1f}ms{:>8.2f}%{:>10.0f}{:>7.1f}%\n",
        s.name, s.energy_j / 1e3, s.j_per_token, s.p50_ttft_s, s.p99_ttft_s, s.p50_tpot_s * 1e3,
        s.p99_tpot_s * 1e3, s.slo_attainment * 100, s.mean_clock_mhz,
        saved_share(s, result.strategies.front().summary) * 100);
  }
  out += fmt::format("\nbest fixed {} in hindsight: {} {}\n", optimize::knob_noun(result.best_fixed.kind),
                     result.best_fixed.value, optimize::knob_unit(result.best_fixed.kind));
  return out;
}

std::string serving_plot_svg(const ServingComparison& result, const optimize::ServingSlo& slo,
                             const std::string& title) {
  double end_s = 0;
  for (const auto& strategy : result.strategies) {
    if (!strategy.buckets.empty()) {
      end_s = std::max(end_s, strategy.buckets.back().start_s);
    }
  }
  const double bucket_s = result.strategies.front().buckets.size() > 1
                              ? result.strategies.front().buckets[1].start_s
                              : std::max(end_s, 1.0);
  end_s += bucket_s;
  const bool minutes = end_s > 600;
  const double scale = minutes ? 1.0 / 60 : 1.0;
  const std::string time_label = minutes ? "Time (min)" : "Time (s)";
  auto panel = [&](const std::string& panel_title, const std::string& y_label) {
    viz::Plot plot(960, 250);
    plot.title(panel_title).x_label(time_label).y_label(y_label).x_range(0, end_s * scale);
    return plot;
  };
  const auto series = [&](const ServingReplay& replay, auto value, bool skip_zero) {
    viz::Series s{.label = replay.summary.name, .kind = viz::SeriesKind::kLine, .marker = viz::Marker::kNone};
    for (const auto& bucket : replay.buckets) {
      const double y = value(bucket);
      if (skip_zero && y <= 0) {
        continue;
      }
      s.x.push_back((bucket.start_s + bucket_s / 2) * scale);
      s.y.push_back(y);
    }
    return s;
  };
  viz::Plot load = panel(title + ": load", "Arrivals (requests/s)");
  load.add(series(
      result.strategies.front(), [](const ServingBucket& b) { return b.arrivals_per_s; }, false));
  load.series();
  load.legend(false);
  viz::Plot clock = panel("SM clock chosen", "Clock (MHz)");
  viz::Plot power = panel("Power of the replica", "Power (W)");
  viz::Plot ttft = panel("p99 time to first token", "TTFT (s)");
  viz::Plot tpot = panel("p99 time per output token", "TPOT (s)");
  for (const auto& strategy : result.strategies) {
    clock.add(series(
        strategy, [](const ServingBucket& b) { return b.mean_clock_mhz; }, true));
    power.add(series(
        strategy, [](const ServingBucket& b) { return b.power_w; }, false));
    ttft.add(series(
        strategy, [](const ServingBucket& b) { return b.p99_ttft_s; }, true));
    tpot.add(series(
        strategy, [](const ServingBucket& b) { return b.p99_tpot_s; }, true));
  }
  ttft.reference({.orientation = viz::Orientation::kHorizontal, .value = slo.ttft_s, .label = "SLO"});
  tpot.reference({.orientation = viz::Orientation::kHorizontal, .value = slo.tpot_s, .label = "SLO"});
  for (viz::Plot* plot : {&clock, &power}) {
    viz::add_top_headroom(*plot);
  }
  return viz::stack_plots({&load, &clock, &power, &ttft, &tpot});
}

std::string render_requests_csv(const ServingReplay& replay) {
  std::ostringstream out;
  csv::write_row(out, {"request", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s",
                       "energy_j", "prefill_energy_j", "decode_energy_j", "j_per_output_token"});
  for (size_t i = 0; i < replay.requests.size(); ++i) {
    const auto& r = replay.requests[i];
    csv::write_row(out,
                   {std::to_string(i), fmt::format("{:.3f}", r.arrival_s), std::to_string(r.prompt_tokens),
                    std::to_string(r.output_tokens), fmt::format("{:.6f}", r.ttft_s()),
                    fmt::format("{:.6f}", r.tpot_s()), fmt::format("{:.6f}", r.energy_j),
                    fmt::format("{:.6f}", r.prefill_energy_j), fmt::format("{:.6f}", r.decode_energy_j),
                    fmt::format("{:.6f}", r.energy_j / static_cast<double>(r.output_tokens))});
  }
  return out.str();
}

void scale_arrival_rate(ServingTrace& trace, double rate_scale) {
  for (auto& request : trace.requests) {
    request.arrival_s /= rate_scale;
  }
}

double plot_bucket_s(double duration_s) {
  // About 240 points across the trace, on a round number of seconds.
  const double raw = std::max(duration_s / 240, 1.0);
  return raw < 10 ? std::ceil(raw) : std::ceil(raw / 5) * 5;
}

}  // namespace joule::sim
