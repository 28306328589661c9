// SPDX-License-Identifier: Apache-2.0
// `joule infer`: LLM inference serving — replay a request trace on a simulated GPU under four clock
// strategies (`replay`), and measure the energy of any OpenAI-compatible endpoint (`bench`).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/metrics/inference_metrics.hpp"
#include "joule/metrics/registry.hpp"
#include "joule/sim/serving.hpp"
#include "joule/viz/plot.hpp"

#include "common.hpp"
#include "infer_bench.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {
// A namespace of its own: in a unity build this file shares a translation unit with other commands.
namespace infer_replay {

struct ReplayFlags {
  std::string trace;
  std::string gpu = "h100";
  std::string model = "llama-3-8b";
  std::optional<int> tensor_parallel;
  std::optional<double> slo_ttft_s;
  std::optional<double> slo_tpot_s;
  double attainment = 0.99;
  int64_t max_batch = 256;
  int64_t max_batch_tokens = 8192;
  double rate_scale = 1;
  bool power_limit = false;
  Format format = Format::kText;
  std::string plot;
  std::string requests_out;
  std::string metrics_out;
};

double saved_share(const sim::ServingSummary& strategy, const sim::ServingSummary& baseline) {
  return baseline.energy_j > 0 ? 1 - strategy.energy_j / baseline.energy_j : 0;
}

// Fields that carry a knob value name its kind and unit: "best_fixed_sm_clock_mhz" or
// "best_fixed_power_limit_w" (docs/inference.md).
std::string knob_key(std::string_view prefix, optimize::KnobKind kind) {
  return fmt::format("{}{}", prefix, optimize::knob_field(kind));
}

nlohmann::json summary_json(const sim::ServingSummary& s, const sim::ServingSummary& baseline) {
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

std::string render_json(const sim::ServingComparison& result, const ReplayFlags& flags,
                        const sim::LlmCostModel& cost, const optimize::ServingSlo& slo) {
  nlohmann::json out;
  out["trace"] = flags.trace;
  out["gpu"] = cost.gpu().key;
  out["model"] = cost.model().key;
  out["tensor_parallel"] = cost.tensor_parallel();
  out["rate_scale"] = flags.rate_scale;
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
  return out.dump(2) + "\n";
}

std::string render_csv(const sim::ServingComparison& result) {
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

std::string render_text(const sim::ServingComparison& result, const ReplayFlags& flags,
                        const sim::LlmCostModel& cost, const optimize::ServingSlo& slo, size_t requests,
                        double duration_s) {
  std::string out = fmt::format(
      "{} requests over {:.0f} s ({}{}) on {} × {} serving {}; SLO: p{:g} TTFT ≤ {:g} s, TPOT ≤ {:g} s\n",
      requests, duration_s, flags.trace,
      flags.rate_scale != 1 ? fmt::format(", rate × {:g}", flags.rate_scale) : "", cost.tensor_parallel(),
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

// Load, clock, power and latency against the SLO over one time axis, one panel each.
std::string plot_svg(const sim::ServingComparison& result, const optimize::ServingSlo& slo,
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
  const auto series = [&](const sim::ServingReplay& replay, auto value, bool skip_zero) {
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
      result.strategies.front(), [](const sim::ServingBucket& b) { return b.arrivals_per_s; }, false));
  load.series();
  load.legend(false);
  viz::Plot clock = panel("SM clock chosen", "Clock (MHz)");
  viz::Plot power = panel("Power of the replica", "Power (W)");
  viz::Plot ttft = panel("p99 time to first token", "TTFT (s)");
  viz::Plot tpot = panel("p99 time per output token", "TPOT (s)");
  for (const auto& strategy : result.strategies) {
    clock.add(series(
        strategy, [](const sim::ServingBucket& b) { return b.mean_clock_mhz; }, true));
    power.add(series(
        strategy, [](const sim::ServingBucket& b) { return b.power_w; }, false));
    ttft.add(series(
        strategy, [](const sim::ServingBucket& b) { return b.p99_ttft_s; }, true));
    tpot.add(series(
        strategy, [](const sim::ServingBucket& b) { return b.p99_tpot_s; }, true));
  }
  ttft.reference({.orientation = viz::Orientation::kHorizontal, .value = slo.ttft_s, .label = "SLO"});
  tpot.reference({.orientation = viz::Orientation::kHorizontal, .value = slo.tpot_s, .label = "SLO"});
  for (viz::Plot* plot : {&clock, &power}) {
    viz::add_top_headroom(*plot);
  }
  return viz::stack_plots({&load, &clock, &power, &ttft, &tpot});
}

std::string requests_csv(const sim::ServingReplay& replay) {
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

// The joule strategy's run as Prometheus would have scraped it at the end (docs/metrics.md).
std::string metrics_text(const sim::ServingReplay& replay, const std::string& model,
                         const std::string& gpu_key, const optimize::ServingSlo& slo, bool power_limit) {
  metrics::MetricsRegistry registry;
  metrics::InferenceMetrics inference(registry.registry(), {.gpu = gpu_key});
  for (size_t i = 0; i < replay.requests.size(); ++i) {
    const sim::ServedRequest& served = replay.requests[i];
    const measure::RequestEnergy request = measure::to_request_energy(
        {served.arrival_s, served.first_token_s, served.finish_s, served.prompt_tokens, served.output_tokens,
         served.energy_j, measure::PhaseEnergy{served.prefill_energy_j, served.decode_energy_j}},
        std::to_string(i));
    inference.observe_request(model, request, slo.met(*request.ttft_s(), request.tpot_s()));
  }
  inference.add_idle_energy(model, replay.summary.idle_energy_j);
  inference.set_sm_clock_mhz(model, replay.summary.mean_clock_mhz);
  if (power_limit) {
    inference.set_power_limit_w(model, replay.summary.mean_knob_value);
  }
  inference.set_slo_attainment(model, replay.summary.slo_attainment);
  inference.set_slo(model, slo.ttft_s, slo.tpot_s);
  inference.add_iterations(model, replay.summary.iterations);
  inference.set_requests(model, 0, 0);
  return registry.render();
}

int run_replay(const ReplayFlags& flags) {
  // Checked before the replay runs.
  std::optional<OutputFile> plot = open_output(flags.plot, "--plot");
  std::optional<OutputFile> metrics_out = open_output(flags.metrics_out, "--metrics-out");
  std::optional<OutputFile> requests_out = open_output(flags.requests_out, "--requests-out");
  const sim::LlmGpuSpec gpu = name_or_throw(sim::load_llm_gpu(flags.gpu));
  const sim::LlmModelSpec model = name_or_throw(sim::load_llm_model(flags.model));
  const sim::LlmCostModel cost(gpu, model, flags.tensor_parallel.value_or(model.default_tensor_parallel));
  sim::ServingTrace trace = value_or_throw(sim::read_serving_trace(flags.trace));
  if (flags.rate_scale != 1) {
    for (auto& request : trace.requests) {
      request.arrival_s /= flags.rate_scale;
    }
  }
  const optimize::ServingSlo slo{*flags.slo_ttft_s, *flags.slo_tpot_s, flags.attainment};
  sim::ComparisonOptions options;
  options.replay.engine.max_batch = flags.max_batch;
  options.replay.engine.max_batch_tokens = flags.max_batch_tokens;
  options.replay.engine.knob =
      flags.power_limit ? optimize::KnobKind::kPowerLimitW : optimize::KnobKind::kSmClockMhz;
  if (!flags.plot.empty()) {
    // About 240 points across the trace, on a round number of seconds.
    const double raw = std::max(trace.duration_s() / 240, 1.0);
    options.replay.bucket_s = raw < 10 ? std::ceil(raw) : std::ceil(raw / 5) * 5;
  }
  const sim::ServingComparison result =
      value_or_throw(sim::compare_serving_strategies(trace, cost, slo, options));
  switch (flags.format) {
    case Format::kJson:
      std::cout << render_json(result, flags, cost, slo);
      break;
    case Format::kCsv:
      std::cout << render_csv(result);
      break;
    case Format::kText:
      std::cout << render_text(result, flags, cost, slo, trace.requests.size(), trace.duration_s());
      break;
  }
  if (!result.note.empty() && flags.format != Format::kText) {
    std::cerr << "joule: note: " << result.note << "\n";
  }
  // Every output is tried; one that fails is named on stderr and the exit code is 1.
  bool all_written = true;
  const auto write = [&](std::optional<OutputFile>& output, const std::string& content,
                         std::string_view what) {
    if (!write_or_report(*output, content, false)) {
      all_written = false;
    } else if (flags.format == Format::kText) {
      std::cout << fmt::format("{} written to {}\n", what, output->path());
    }
  };
  if (plot) {
    write(plot,
          plot_svg(result, slo, fmt::format("{} on {} × {}", model.name, cost.tensor_parallel(), gpu.name)),
          "plot");
  }
  if (metrics_out) {
    write(metrics_out, metrics_text(result.strategies.back(), model.key, gpu.key, slo, flags.power_limit),
          "metrics");
  }
  if (requests_out) {
    write(requests_out, requests_csv(result.strategies.back()), "per-request energy of the joule strategy");
  }
  return all_written ? kExitOk : kExitFailure;
}

}  // namespace infer_replay
}  // namespace

void add_infer_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* command =
      app.add_subcommand("infer", "LLM inference serving: energy per request and SLO-aware GPU clocks");
  command->require_subcommand(1);

  auto replay = std::make_shared<infer_replay::ReplayFlags>();
  set_examples(*command,
               {"joule infer replay --trace data/inference/diurnal-1h.csv --slo-ttft-s 1 --slo-tpot-s 0.1",
                "joule infer bench --endpoint http://127.0.0.1:8000 --trace data/inference/bursty-1h.csv "
                "--duration-s 60"});
  auto* replay_command = command->add_subcommand(
      "replay",
      "Replay a request trace on a simulated GPU: max clock, best fixed clock, utilisation governor, joule");
  replay_command
      ->add_option("--trace", replay->trace, "Request trace CSV (arrival_s,prompt_tokens,output_tokens)")
      ->option_text("FILE.csv")
      ->required();
  replay_command
      ->add_option("--gpu", replay->gpu, "GPU: a100-40gb, a100-80gb, h100, or a JSON file (default h100)")
      ->option_text("G");
  replay_command
      ->add_option("--model", replay->model, "Model: llama-3-8b, llama-3-70b, llama-2-70b, or a JSON file")
      ->option_text("M");
  replay_command->add_option("--tp", replay->tensor_parallel, "Tensor-parallel GPUs (default: the model's)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay_command->add_option("--slo-ttft-s", replay->slo_ttft_s, "Time-to-first-token SLO, s")
      ->check(number(quantity::ttft_s()))
      ->option_text("X")
      ->required();
  replay_command->add_option("--slo-tpot-s", replay->slo_tpot_s, "Time-per-output-token SLO, s")
      ->check(number(quantity::tpot_s()))
      ->option_text("Y")
      ->required();
  replay_command
      ->add_option("--attainment", replay->attainment,
                   "Share of requests that must meet both SLOs (default 0.99)")
      ->check(number({.min = 0, .max = 1, .min_exclusive = true}))
      ->option_text("P");
  replay_command->add_option("--max-batch", replay->max_batch, "Requests in flight at most (default 256)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay_command
      ->add_option("--max-batch-tokens", replay->max_batch_tokens,
                   "Tokens per iteration at most (default 8192)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay_command
      ->add_option("--rate-scale", replay->rate_scale, "Multiply the trace's request rate (default 1)")
      ->check(number(NumberRule::positive()))
      ->option_text("F");
  replay_command->add_flag("--power-limit", replay->power_limit,
                           "Control the power limit instead of locking clocks (GPUs without clock locks)");
  add_format_option(*replay_command, replay->format, {Format::kText, Format::kJson, Format::kCsv});
  replay_command
      ->add_option("--plot", replay->plot, "Write an SVG of load, clock, power and latency over time")
      ->option_text("FILE.svg");
  replay_command
      ->add_option("--requests-out", replay->requests_out,
                   "Write the joule strategy's per-request energy (CSV)")
      ->option_text("FILE.csv");
  replay_command
      ->add_option("--metrics-out", replay->metrics_out,
                   "Write the joule strategy's Prometheus metrics (text exposition) at the end of the run")
      ->option_text("FILE.prom");
  set_examples(*replay_command, {"joule infer replay --trace data/inference/diurnal-1h.csv --gpu h100 "
                                 "--model llama-3-8b --slo-ttft-s 1 --slo-tpot-s 0.1 --plot diurnal.svg"});
  replay_command->callback([&exit_code, replay] { exit_code = infer_replay::run_replay(*replay); });

  add_infer_bench_command(*command, global, exit_code);
}

}  // namespace joule::cli
