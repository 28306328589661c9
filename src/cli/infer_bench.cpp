// SPDX-License-Identifier: Apache-2.0
// `joule infer bench`: the flags and the report of the load generator (joule/loadgen/bench.hpp), which sends
// a request trace open-loop to an OpenAI-compatible /v1/completions endpoint and attributes the selected
// GPUs' energy to the requests in flight; reported as J/request, J/output token, throughput and latency
// percentiles (docs/inference.md).
#include "infer_bench.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/http/connection.hpp"
#include "joule/loadgen/bench.hpp"
#include "joule/loadgen/openai.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/request_energy.hpp"
#include "joule/metrics/inference_metrics.hpp"
#include "joule/metrics/registry.hpp"
#include "joule/sim/llm.hpp"
#include "joule/sim/serving.hpp"

#include "usage.hpp"

namespace joule::cli {

namespace {
// A namespace of its own: in a unity build this file shares a translation unit with other commands.
namespace infer_bench {

constexpr double kBytesPerMib = 1024.0 * 1024.0;

struct BenchFlags {
  std::string endpoint;
  std::string trace;
  std::string gpus;  // empty: all
  std::string model;
  double rate_scale = 1;
  std::optional<double> duration_s;
  int64_t max_concurrency = 256;
  double timeout_s = 300;  // the whole request: connecting, sending, the whole response
  double max_response_mib = static_cast<double>(http::kDefaultMaxResponseBytes) / kBytesPerMib;
  std::string prompt_unit = "word";
  Format format = Format::kText;
  std::string requests_out;
  std::string metrics_out;
  bool no_stream = false;
  std::string attribution = "work";
  std::string cost_model;  // with cost_gpu: the work weights from the serving cost model
  std::string cost_gpu;
};

// The work weights of --cost-model on --cost-gpu by the serving cost model (sim::LlmCostModel, at the
// maximum clock, the model's default tensor parallelism): the energy per prompt token of a 1024-token
// prefill against the energy per output token of a decode step of 32 requests at 1024 tokens of context,
// as 1 per prompt token. Without them, 1:1 (the tokens rule).
measure::WorkWeights work_weights(const BenchFlags& flags) {
  if (flags.cost_model.empty() != flags.cost_gpu.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "infer bench: --cost-model and --cost-gpu go together");
  }
  if (flags.cost_model.empty()) {
    return {};
  }
  const sim::LlmModelSpec model = value_or_throw(sim::load_llm_model(flags.cost_model));
  const sim::LlmCostModel cost(value_or_throw(sim::load_llm_gpu(flags.cost_gpu)), model,
                               model.default_tensor_parallel);
  constexpr int64_t kPrompt = 1024, kBatch = 32, kContext = 1024;
  sim::IterationBatch prefill, decode;
  prefill.add_prefill(kPrompt, 0);
  for (int64_t i = 0; i < kBatch; ++i) {
    decode.add_decode(kContext);
  }
  const double clock_mhz = cost.gpu().max_sm_clock_mhz;
  const double prefill_j = cost.at_clock(prefill, clock_mhz).energy_j(cost.tensor_parallel()) / kPrompt;
  const double decode_j = cost.at_clock(decode, clock_mhz).energy_j(cost.tensor_parallel()) / kBatch;
  return {1.0, decode_j / prefill_j};
}

// The bounds of one request to the endpoint: --timeout-s for the whole of it, --max-response-mib.
http::RequestLimits request_limits(const BenchFlags& flags, double timeout_s) {
  http::RequestLimits limits;
  limits.timeout_s = timeout_s;
  limits.connect_timeout_s = std::min(timeout_s, 10.0);
  limits.max_response_bytes =
      static_cast<size_t>(std::max<long long>(1, std::llround(flags.max_response_mib * kBytesPerMib)));
  return limits;
}

// The flags that set a request's bounds, named in the failures that met them.
loadgen::LimitNames limit_names() {
  return {"--timeout-s", "--max-response-mib"};
}

struct Report {
  std::string endpoint;
  std::string model;
  std::string trace;
  bool simulated = false;
  loadgen::BenchRun run;
  loadgen::BenchSummary summary;
  measure::WorkWeights weights;
};

constexpr const char* kShareNames[3] = {"p50", "p90", "p99"};

double per(double value, double count) {
  return count > 0 ? value / count : 0.0;
}

nlohmann::ordered_json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

// The summary fields, in order (JSON object and CSV row alike).
std::vector<std::pair<std::string, nlohmann::ordered_json>> summary_fields(const Report& r,
                                                                           const BenchFlags& flags) {
  const loadgen::BenchRun& run = r.run;
  const loadgen::BenchSummary& sum = r.summary;
  const auto requests = static_cast<int64_t>(run.requests.size());
  std::vector<std::pair<std::string, nlohmann::ordered_json>> fields = {
      {"endpoint", r.endpoint},
      {"model", r.model},
      {"trace", r.trace},
      {"rate_scale", flags.rate_scale},
      {"simulated_gpus", r.simulated},
      {"requests", requests},
      {"requests_ok", sum.ok},
      {"requests_failed", requests - sum.ok},
      {"http_errors", sum.http_errors},
      {"timeouts", sum.timeouts},
      {"connection_errors", sum.connection_errors},
      {"bad_responses", sum.bad_responses},
      {"first_error",
       sum.first_error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(sum.first_error)},
      {"max_concurrency", flags.max_concurrency},
      {"workers", static_cast<int64_t>(run.workers)},
      {"started_late", sum.late},
      {"max_start_delay_s", sum.max_start_delay_s},
      {"duration_s", run.duration_s},
      {"energy_j", run.energy_j},
      {"energy_estimated", run.estimated},
      {"attributed_energy_j", run.attributed_energy_j},
      {"idle_energy_j", run.idle_energy_j},
      {"attribution", std::string(loadgen::to_string(run.attribution))},
      {"prefill_token_weight", r.weights.prefill_token},
      {"decode_token_weight", r.weights.decode_token},
      {"server_energy_j", optional_json(run.server_energy_j)},
      {"streamed", !flags.no_stream},
      {"timing", flags.no_stream ? "server" : "client"},
      {"tokens_counted", sum.tokens_counted},
      {"j_per_request", per(run.energy_j, static_cast<double>(sum.ok))},
      {"j_per_output_token", per(run.energy_j, static_cast<double>(sum.output_tokens))},
      {"requested_prompt_tokens", sum.requested_prompt_tokens},
      {"prompt_tokens", sum.prompt_tokens},
      {"output_tokens", sum.output_tokens},
      {"requests_per_s", per(static_cast<double>(sum.ok), run.duration_s)},
      {"output_tokens_per_s", per(static_cast<double>(sum.output_tokens), run.duration_s)},
  };
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_latency_s", kShareNames[i]), optional_json(sum.latency_s[i]));
  }
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_ttft_s", kShareNames[i]), optional_json(sum.ttft_s[i]));
  }
  for (size_t i = 0; i < 3; ++i) {
    fields.emplace_back(fmt::format("{}_tpot_s", kShareNames[i]), optional_json(sum.tpot_s[i]));
  }
  return fields;
}

nlohmann::ordered_json gpus_json(const Report& r) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const loadgen::GpuEnergy& gpu : r.run.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"energy_j", gpu.energy_j},
                    {"source", measure::to_string(gpu.source)},
                    {"estimated", gpu.source != measure::EnergySource::kCounter}});
  }
  return gpus;
}

std::string render_json(const Report& r, const BenchFlags& flags) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto& [name, value] : summary_fields(r, flags)) {
    out[name] = value;
  }
  out["gpus"] = gpus_json(r);
  return out.dump(2) + "\n";
}

std::string csv_value(const nlohmann::ordered_json& value) {
  if (value.is_null()) {
    return "";
  }
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_boolean()) {
    return value.get<bool>() ? "true" : "false";
  }
  if (value.is_number_float()) {
    return fmt::format("{:.6g}", value.get<double>());
  }
  return value.dump();
}

std::string render_csv(const Report& r, const BenchFlags& flags) {
  std::vector<std::string> header, row;
  for (auto& [name, value] : summary_fields(r, flags)) {
    header.push_back(name);
    row.push_back(csv_value(value));
  }
  std::ostringstream out;
  csv::write_row(out, header);
  csv::write_row(out, row);
  return out.str();
}

std::string seconds_text(const std::optional<double>& value) {
  if (!value) {
    return "n/a";
  }
  return *value < 1 ? fmt::format("{:.1f} ms", *value * 1e3) : fmt::format("{:.3f} s", *value);
}

std::string render_text(const Report& r, const BenchFlags& flags) {
  const loadgen::BenchRun& run = r.run;
  const loadgen::BenchSummary& sum = r.summary;
  std::string out =
      fmt::format("{} requests to {} (model {}) from {}{}\n", run.requests.size(), r.endpoint, r.model,
                  r.trace, flags.rate_scale != 1 ? fmt::format(", rate × {:g}", flags.rate_scale) : "");
  const auto failed = static_cast<int64_t>(run.requests.size()) - sum.ok;
  out += fmt::format("requests      {} ok, {} failed", sum.ok, failed);
  if (failed > 0) {
    out += fmt::format(" ({} HTTP errors, {} timeouts, {} connection errors, {} bad responses)",
                       sum.http_errors, sum.timeouts, sum.connection_errors, sum.bad_responses);
  }
  out += "\n";
  if (!sum.first_error.empty()) {
    out += fmt::format("first error   {}\n", sum.first_error);
  }
  out += fmt::format("started late  {} (arrived while all {} workers were busy); largest start delay {}\n",
                     sum.late, flags.max_concurrency, seconds_text(sum.max_start_delay_s));
  out += fmt::format("duration      {:.2f} s; {:.2f} requests/s, {:.1f} output tokens/s\n", run.duration_s,
                     per(static_cast<double>(sum.ok), run.duration_s),
                     per(static_cast<double>(sum.output_tokens), run.duration_s));
  out += fmt::format("tokens        {} prompt ({} asked for), {} output\n", sum.prompt_tokens,
                     sum.requested_prompt_tokens, sum.output_tokens);
  out +=
      fmt::format("energy        {:.1f} J{}: {:.1f} J to requests, {:.1f} J {}\n", run.energy_j,
                  run.estimated ? " (estimated)" : "", run.attributed_energy_j, run.idle_energy_j,
                  run.attribution == loadgen::Attribution::kServer ? "not in the server's figures" : "idle");
  for (const loadgen::GpuEnergy& gpu : run.gpus) {
    out += fmt::format("  GPU {} ({})  {:.1f} J ({})\n", gpu.index, gpu.name, gpu.energy_j,
                       measure::to_string(gpu.source));
  }
  out += fmt::format(
      "attribution   {} (weights per token: prefill {:.3g}, decode {:.3g}){}\n",
      loadgen::to_string(run.attribution), r.weights.prefill_token, r.weights.decode_token,
      run.server_energy_j ? fmt::format("; the server reports {:.1f} J", *run.server_energy_j) : "");
  out += fmt::format("J/request     {:.3f}\nJ/token       {:.4f} (per output token)\n",
                     per(run.energy_j, static_cast<double>(sum.ok)),
                     per(run.energy_j, static_cast<double>(sum.output_tokens)));
  out += fmt::format("\n{:<10}{:>12}{:>12}{:>12}\n", "", "p50", "p90", "p99");
  const auto row = [&](std::string_view name, const std::optional<double>(&values)[3]) {
    out += fmt::format("{:<10}{:>12}{:>12}{:>12}\n", name, seconds_text(values[0]), seconds_text(values[1]),
                       seconds_text(values[2]));
  };
  row("latency", sum.latency_s);
  row("TTFT", sum.ttft_s);
  row("TPOT", sum.tpot_s);
  if (!flags.no_stream) {
    out += "(TTFT and TPOT measured here, from the streamed chunks";
    out += sum.tokens_counted > 0
               ? fmt::format("; {} streams without usage: tokens counted as chunks)\n", sum.tokens_counted)
               : ")\n";
  } else if (!sum.ttft_s[0]) {
    out += "(TTFT and TPOT: the server does not report them in usage.energy)\n";
  }
  if (r.simulated) {
    out +=
        "note: the GPUs are simulated: they draw their own workload's power, so this energy is not the "
        "endpoint's\n";
  }
  return out;
}

bool write_requests(OutputFile& output, const Report& r) {
  std::ostringstream out;
  csv::write_row(out, {"request", "arrival_s", "start_s", "end_s", "latency_s", "outcome", "prompt_tokens",
                       "completion_tokens", "ttft_s", "tpot_s", "energy_j", "server_ttft_s", "server_tpot_s",
                       "server_energy_j", "tokens_counted", "late", "error"});
  const auto optional_text = [](const std::optional<double>& value) {
    return value ? fmt::format("{:.6f}", *value) : std::string();
  };
  for (size_t i = 0; i < r.run.requests.size(); ++i) {
    const loadgen::RequestRecord& s = r.run.requests[i];
    const loadgen::Completion& c = s.completion;
    csv::write_row(
        out,
        {std::to_string(i), fmt::format("{:.6f}", s.scheduled_s), fmt::format("{:.6f}", s.start_s),
         fmt::format("{:.6f}", s.end_s), fmt::format("{:.6f}", s.latency_s()),
         std::string(loadgen::to_string(c.outcome)), std::to_string(c.prompt_tokens),
         std::to_string(c.completion_tokens), optional_text(c.ttft_s), optional_text(c.tpot_s),
         fmt::format("{:.6f}", s.energy_j), optional_text(c.server_ttft_s), optional_text(c.server_tpot_s),
         optional_text(c.server_energy_j), c.tokens_counted ? "1" : "0", s.late ? "1" : "0", c.error});
  }
  return write_or_report(output, out.str(), true);
}

// The run as Prometheus would have scraped it at the end (docs/metrics.md): one model label. The endpoint
// does not say how a request's energy divides between prefill and decode: the phases are split by measure's
// tokens rule (each prompt and output token counts one), as RequestEnergyLedger's default does.
bool write_metrics(OutputFile& output, const Report& r) {
  metrics::MetricsRegistry registry;
  metrics::InferenceMetrics inference(registry.registry());
  for (size_t i = 0; i < r.run.requests.size(); ++i) {
    const loadgen::RequestRecord& record = r.run.requests[i];
    if (record.completion.outcome == loadgen::Outcome::kOk) {
      inference.observe_request(r.model, measure::to_request_energy(record.finished(), std::to_string(i)),
                                std::nullopt);
    }
  }
  inference.add_idle_energy(r.model, r.run.idle_energy_j);
  inference.set_requests(r.model, 0, 0);
  return write_or_report(output, registry.render(), true);
}

// The trace's requests as the load generator plans them.
std::vector<loadgen::TraceRequest> trace_requests(const sim::ServingTrace& trace) {
  std::vector<loadgen::TraceRequest> requests;
  requests.reserve(trace.requests.size());
  for (const sim::ServingRequest& request : trace.requests) {
    requests.push_back({request.arrival_s, request.prompt_tokens, request.output_tokens});
  }
  return requests;
}

// Prints the report and writes its files. @return the command's exit code.
int print_report(const Report& report, const BenchFlags& flags, std::optional<OutputFile>& requests_out,
                 std::optional<OutputFile>& metrics_out) {
  switch (flags.format) {
    case Format::kJson:
      std::cout << render_json(report, flags);
      break;
    case Format::kCsv:
      std::cout << render_csv(report, flags);
      break;
    case Format::kText:
      std::cout << render_text(report, flags);
      break;
  }
  // A file that cannot be written: its figures go to stderr, and the exit code is 1.
  const bool requests_written = !requests_out || write_requests(*requests_out, report);
  const bool metrics_written = !metrics_out || write_metrics(*metrics_out, report);
  if (requests_out && requests_written && flags.format == Format::kText) {
    std::cout << fmt::format("per-request figures written to {}\n", flags.requests_out);
  }
  if (metrics_out && metrics_written && flags.format == Format::kText) {
    std::cout << fmt::format("metrics written to {}\n", flags.metrics_out);
  }
  const auto requests = static_cast<int64_t>(report.run.requests.size());
  if (report.summary.ok == 0) {
    std::cerr << fmt::format("joule: error: infer bench: no request to {} succeeded: {}\n", report.endpoint,
                             report.summary.first_error);
    return 1;
  }
  if (report.summary.ok < requests && flags.format != Format::kText) {
    std::cerr << fmt::format("joule: note: {} of {} requests failed; the first: {}\n",
                             requests - report.summary.ok, requests, report.summary.first_error);
  }
  return requests_written && metrics_written ? 0 : 1;
}

int run_bench(const GlobalOptions& global, const BenchFlags& flags) {
  if (flags.endpoint.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "infer bench: --endpoint http://HOST:PORT is required");
  }
  if (flags.trace.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "infer bench: --trace FILE is required");
  }
  const auto parsed_endpoint = loadgen::parse_endpoint(flags.endpoint);
  if (!parsed_endpoint) {
    throw Exception(parsed_endpoint.error().code(), "--endpoint " + parsed_endpoint.error().message());
  }
  const loadgen::Endpoint& endpoint = *parsed_endpoint;
  Report report;
  report.weights = work_weights(flags);
  std::optional<std::vector<int>> gpu_indices;
  if (!flags.gpus.empty()) {
    gpu_indices = value_or_throw(parse_index_list(flags.gpus, "--gpus"));
  }
  const sim::ServingTrace trace = value_or_throw(sim::read_serving_trace(flags.trace));
  // Checked before the run.
  std::optional<OutputFile> requests_out = open_output(flags.requests_out, "--requests-out");
  std::optional<OutputFile> metrics_out = open_output(flags.metrics_out, "--metrics-out");
  auto plan = loadgen::plan_requests(trace_requests(trace), {flags.rate_scale, flags.duration_s});
  if (!plan) {
    throw Exception(plan.error().with_context(fmt::format("infer bench: {}", flags.trace)));
  }

  const device::DeviceSet devices = open_devices(global, true, false);
  const std::vector<device::Gpu*> gpus = value_or_throw(devices.select_gpus(gpu_indices));
  if (gpus.empty()) {
    throw Exception(ErrorCode::kNotFound,
                    fmt::format("infer bench: no GPU to measure: {}. For simulated GPUs, run joule --sim "
                                "v100 infer bench …",
                                devices.why_no_gpus()));
  }
  report.endpoint = endpoint.origin;
  report.trace = flags.trace;
  report.simulated = value_or_throw(discovery_options(global)).sim_spec.has_value();
  const auto model = loadgen::resolve_model(
      endpoint, flags.model, request_limits(flags, std::min(flags.timeout_s, 10.0)), limit_names());
  if (!model) {
    throw Exception(model.error().with_context("infer bench"));
  }
  report.model = *model;
  loadgen::BenchOptions options;
  options.max_concurrency = static_cast<size_t>(flags.max_concurrency);
  options.limits = request_limits(flags, flags.timeout_s);
  options.prompt_words = flags.prompt_unit == "word";
  options.limit_names = limit_names();
  options.stream = !flags.no_stream;
  options.attribution = value_or_throw(loadgen::parse_attribution(flags.attribution));
  options.weights = report.weights;
  report.run = value_or_throw(
      loadgen::run_bench(gpus, *devices.clock, endpoint, report.model, std::move(*plan), options));
  auto summary = loadgen::summarize(report.run.requests);
  if (!summary) {
    throw Exception(summary.error().with_context("infer bench"));
  }
  report.summary = std::move(*summary);
  return print_report(report, flags, requests_out, metrics_out);
}

}  // namespace infer_bench
}  // namespace

void add_infer_bench_command(CLI::App& infer_command, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<infer_bench::BenchFlags>();
  auto* command = infer_command.add_subcommand(
      "bench", "Benchmark the energy of an OpenAI-compatible endpoint: send a trace, measure the GPUs");
  command->add_option("--endpoint", flags->endpoint, "The server: http://HOST:PORT (POST /v1/completions)")
      ->option_text("URL")
      ->required();
  command->add_option("--trace", flags->trace, "Request trace CSV (arrival_s,prompt_tokens,output_tokens)")
      ->option_text("FILE.csv")
      ->required();
  command->add_option("--gpus", flags->gpus, "GPU indices to measure, e.g. 0,1 (default: all visible)")
      ->option_text("LIST");
  command->add_option("--model", flags->model, "Model name sent (default: the first GET /v1/models lists)")
      ->option_text("NAME");
  command->add_option("--rate-scale", flags->rate_scale, "Multiply the trace's request rate (default 1)")
      ->check(number(NumberRule::positive()))
      ->option_text("F");
  command->add_option("--duration-s", flags->duration_s, "Send only the requests arriving in the first S s")
      ->check(number(duration_rule()))
      ->option_text("S");
  command
      ->add_option("--max-concurrency", flags->max_concurrency,
                   "Requests in flight at most (worker threads; default 256)")
      ->check(number({.min = 1, .max = 4096, .integer = true}))
      ->option_text("N");
  command
      ->add_option("--timeout-s", flags->timeout_s,
                   "Give up on a request S s after sending it, whole response included (default 300)")
      ->check(number(duration_rule()))
      ->option_text("S");
  command
      ->add_option("--max-response-mib", flags->max_response_mib,
                   "Refuse a response larger than M MiB, while reading it (default 8)")
      ->check(number({.min = 0, .max = 4096, .min_exclusive = true}))
      ->option_text("M");
  command
      ->add_option("--prompt-unit", flags->prompt_unit,
                   "What one prompt token is in the synthetic prompts: word (BPE tokenizers) or char "
                   "(byte-level tokenizers) (default word)")
      ->check(CLI::IsMember({"word", "char"}))
      ->option_text("UNIT");
  command->add_flag("--no-stream", flags->no_stream,
                    "Ask for one JSON body per request, not a stream (TTFT and TPOT then only as the server "
                    "reports them)");
  command
      ->add_option("--attribution", flags->attribution,
                   "How energy is shared among requests: work (tokens in each interval), equal (per request "
                   "in flight) or server (usage.energy.energy_j) (default work)")
      ->check(CLI::IsMember({"work", "equal", "server"}))
      ->option_text("RULE");
  command
      ->add_option("--cost-model", flags->cost_model,
                   "Weigh prompt and output tokens by the serving cost model of this model (with --cost-gpu; "
                   "default 1:1)")
      ->option_text("MODEL");
  command->add_option("--cost-gpu", flags->cost_gpu, "The GPU of --cost-model, e.g. h100")
      ->option_text("GPU");
  add_format_option(*command, flags->format, {Format::kText, Format::kJson, Format::kCsv});
  command->add_option("--requests-out", flags->requests_out, "Write per-request figures (CSV)")
      ->option_text("FILE.csv");
  command
      ->add_option("--metrics-out", flags->metrics_out,
                   "Write the run's Prometheus metrics (text exposition)")
      ->option_text("FILE.prom");
  set_examples(*command, {"joule infer bench --endpoint http://127.0.0.1:8000 --trace "
                          "data/inference/bursty-1h.csv --duration-s 60 --requests-out requests.csv"});
  command->callback([&exit_code, &global, flags] { exit_code = infer_bench::run_bench(global, *flags); });
}

}  // namespace joule::cli
