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
#include "joule/sim/llm_replica.hpp"
#include "joule/sim/serving.hpp"
#include "joule/sim/serving_report.hpp"

#include "common.hpp"
#include "infer_bench.hpp"
#include "infer_govern.hpp"
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
  std::string card;
};

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
    sim::scale_arrival_rate(trace, flags.rate_scale);
  }
  const optimize::ServingSlo slo{*flags.slo_ttft_s, *flags.slo_tpot_s, flags.attainment};
  sim::ComparisonOptions options;
  options.replay.engine.max_batch = flags.max_batch;
  options.replay.engine.max_batch_tokens = flags.max_batch_tokens;
  options.replay.engine.knob =
      flags.power_limit ? optimize::KnobKind::kPowerLimitW : optimize::KnobKind::kSmClockMhz;
  if (!flags.plot.empty()) {
    options.replay.bucket_s = sim::plot_bucket_s(trace.duration_s());
  }
  if (!flags.card.empty()) {
    options.card = value_or_throw(
        optimize::read_card_prior(flags.card, sim::llm_gpu_identity(gpu), options.replay.engine.knob));
  }
  const sim::ServingComparison result =
      value_or_throw(sim::compare_serving_strategies(trace, cost, slo, options));
  const sim::ServingReportContext context{.trace = flags.trace,
                                          .rate_scale = flags.rate_scale,
                                          .cost = cost,
                                          .slo = slo,
                                          .requests = trace.requests.size(),
                                          .duration_s = trace.duration_s()};
  switch (flags.format) {
    case Format::kJson:
      std::cout << sim::render_serving_json(result, context);
      break;
    case Format::kCsv:
      std::cout << sim::render_serving_csv(result);
      break;
    case Format::kText:
      std::cout << sim::render_serving_text(result, context);
      break;
  }
  if (!result.card.empty()) {
    std::cerr << "joule: " << result.card << "\n";
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
          sim::serving_plot_svg(result, slo,
                                fmt::format("{} on {} × {}", model.name, cost.tensor_parallel(), gpu.name)),
          "plot");
  }
  if (metrics_out) {
    write(metrics_out, metrics_text(result.strategies.back(), model.key, gpu.key, slo, flags.power_limit),
          "metrics");
  }
  if (requests_out) {
    write(requests_out, sim::render_requests_csv(result.strategies.back()),
          "per-request energy of the joule strategy");
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
  replay_command
      ->add_option("--card", replay->card,
                   "Start the joule controller from this GPU's frontier card (joule --sim GPU probe; "
                   "docs/inference.md)")
      ->option_text("FILE.json");
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
  add_infer_govern_command(*command, global, exit_code);
}

}  // namespace joule::cli
