// SPDX-License-Identifier: Apache-2.0
// `joule infer govern`: the flags and the log of the serving-engine sidecar (joule/govern/sidecar.hpp),
// which scrapes vLLM, SGLang or TGI and turns its GPUs' clock or power limit to hold the SLO
// (docs/inference.md "With vLLM / SGLang / TGI").
#include "infer_govern.hpp"

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <signal.h>

#include "joule/core/file.hpp"
#include "joule/core/signals.hpp"
#include "joule/govern/sidecar.hpp"
#include "joule/metrics/endpoint.hpp"
#include "joule/metrics/registry.hpp"

#include "usage.hpp"

namespace joule::cli {

namespace {
namespace infer_govern {

struct GovernFlags {
  std::vector<std::string> engines;
  std::vector<std::string> gpus;
  std::vector<std::string> kinds;
  std::vector<int> tensor_parallel;
  std::vector<std::string> names;
  double slo_ttft_s = 0;
  double slo_tpot_s = 0;
  double attainment = 0.99;
  bool power_limit = false;
  double interval_s = 1;
  std::optional<double> scrape_timeout_s;
  std::optional<double> duration_s;
  std::string metrics_listen;
  std::string decisions_out;
  std::string lock_dir;
  std::string card;
  double prefill_token_weight = 1;
  bool quiet = false;
};

// Each per-engine flag is given once for every engine, or once for all (or, where optional, not at all).
template <typename T>
std::optional<T> per_engine(const std::vector<T>& values, size_t engine, size_t engines,
                            std::string_view flag) {
  if (values.empty()) {
    return std::nullopt;
  }
  if (values.size() == 1) {
    return values.front();
  }
  if (values.size() != engines) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("{} is given {} times for {} engines: give it once for all, or once per --engine, "
                    "in the same order",
                    flag, values.size(), engines));
  }
  return values[engine];
}

govern::GovernOptions options_of(const GovernFlags& flags) {
  govern::GovernOptions options;
  options.slo = {.ttft_s = flags.slo_ttft_s, .tpot_s = flags.slo_tpot_s, .attainment = flags.attainment};
  options.knob = flags.power_limit ? optimize::KnobKind::kPowerLimitW : optimize::KnobKind::kSmClockMhz;
  options.interval_s = flags.interval_s;
  options.scrape_timeout_s = flags.scrape_timeout_s.value_or(std::min(0.5 * flags.interval_s, 2.0));
  options.lock_dir = flags.lock_dir;
  options.card = flags.card;
  options.weights.prefill_token = flags.prefill_token_weight;
  value_or_throw(govern::validate(options));
  return options;
}

int run_govern(const GovernFlags& flags, const GlobalOptions& global) {
  const govern::GovernOptions options = options_of(flags);
  std::optional<OutputFile> decisions =
      open_output(flags.decisions_out, "--decisions-out", OutputMode::kAppend);
  // Stop signals are waited for, not handled: blocked before any thread exists (the scrapers' and metrics').
  BlockedSignals stop({SIGINT, SIGTERM, SIGHUP});
  const device::DeviceSet devices = open_devices(global, true, false);
  std::vector<govern::EngineTarget> targets;
  for (size_t i = 0; i < flags.engines.size(); ++i) {
    govern::EngineTarget target;
    target.metrics_url = flags.engines[i];
    target.name = per_engine(flags.names, i, flags.engines.size(), "--name").value_or("");
    if (flags.names.size() == 1 && flags.engines.size() > 1) {
      throw Exception(ErrorCode::kInvalidArgument, "--name names one engine: give it once per --engine");
    }
    const auto gpus = per_engine(flags.gpus, i, flags.engines.size(), "--gpus");
    if (!gpus && flags.engines.size() > 1) {
      throw Exception(ErrorCode::kInvalidArgument, "several engines: give --gpus once per --engine");
    }
    const auto indices =
        gpus ? std::optional(value_or_throw(parse_index_list(*gpus, "--gpus"))) : std::nullopt;
    target.gpus = value_or_throw(devices.select_gpus(indices));
    if (const auto kind = per_engine(flags.kinds, i, flags.engines.size(), "--engine-kind")) {
      target.kind = value_or_throw(govern::parse_engine_kind(*kind));
    }
    target.tensor_parallel = per_engine(flags.tensor_parallel, i, flags.engines.size(), "--tp");
    targets.push_back(std::move(target));
  }
  // Every engine is checked before any GPU is touched; one GPU in two engines is refused here.
  for (size_t a = 0; a < targets.size(); ++a) {
    for (size_t b = a + 1; b < targets.size(); ++b) {
      for (const device::Gpu* gpu : targets[a].gpus) {
        if (std::find(targets[b].gpus.begin(), targets[b].gpus.end(), gpu) != targets[b].gpus.end()) {
          throw Exception(ErrorCode::kInvalidArgument,
                          fmt::format("GPU {} is given to two engines ({} and {}): each GPU has one governor",
                                      gpu->info().index, targets[a].metrics_url, targets[b].metrics_url));
        }
      }
    }
  }
  std::vector<std::unique_ptr<govern::EngineGovernor>> governors;
  for (govern::EngineTarget& target : targets) {
    const std::string url = target.metrics_url;
    auto governor = govern::EngineGovernor::start(std::move(target), options, devices.clock);
    if (!governor) {
      std::cerr << fmt::format("joule: error: infer govern: {}\n", governor.error().message());
      return governor.error().code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    governors.push_back(std::move(*governor));
  }
  metrics::MetricsRegistry registry;
  govern::Sidecar sidecar(std::move(governors), options, devices.clock, registry);
  std::unique_ptr<metrics::MetricsEndpoint> endpoint;
  if (!flags.metrics_listen.empty()) {
    endpoint = value_or_throw(metrics::MetricsEndpoint::start(
        flags.metrics_listen, [&registry] { return registry.render(); }, "--metrics-listen"));
  }
  for (const auto& governor : sidecar.governors()) {
    std::cout << fmt::format(
        "governing {} ({} at {}) on GPU {}: p{:g} TTFT ≤ {} s, TPOT ≤ {} s, by the {}{}\n",
        governor->target().name, govern::engine_metric_names(governor->kind()).display_name,
        governor->target().metrics_url,
        fmt::join(
            [&] {
              std::vector<int> indices;
              for (const device::Gpu* gpu : governor->target().gpus) {
                indices.push_back(gpu->info().index);
              }
              return indices;
            }(),
            ","),
        options.slo.attainment * 100, options.slo.ttft_s, options.slo.tpot_s,
        optimize::knob_noun(options.knob), endpoint ? fmt::format("; metrics on {}", endpoint->url()) : "");
  }
  std::cout << std::flush;
  bool write_failed = false;
  sidecar.run(
      flags.duration_s.value_or(-1), [&stop](Nanos wait) { return stop.wait(wait).has_value(); },
      [&](const govern::TickReport& report) {
        if (!flags.quiet &&
            (report.decision.changed() || report.decision.state != govern::GovernState::kGoverning)) {
          std::cout << govern::describe(report.engine, report.decision) << "\n" << std::flush;
        }
        if (!flags.quiet && !report.decision.card.empty()) {
          std::cout << fmt::format("{}: {}\n", report.engine, report.decision.card) << std::flush;
        }
        if (decisions && !write_failed) {
          if (auto written = decisions->write(govern::to_json_line(report) + "\n"); !written) {
            std::cerr << fmt::format("joule: error: {}\n", written.error().message());
            write_failed = true;
          }
        }
      });
  if (auto restored = sidecar.restore(); !restored) {
    std::cerr << fmt::format("joule: error: infer govern: restoring the GPUs failed: {}\n",
                             restored.error().message());
    return kExitFailure;
  }
  return write_failed ? kExitFailure : kExitOk;
}

}  // namespace infer_govern
}  // namespace

void add_infer_govern_command(CLI::App& infer_command, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<infer_govern::GovernFlags>();
  auto* command = infer_command.add_subcommand(
      "govern",
      "Sidecar beside a serving engine (vLLM, SGLang, TGI): turn its GPUs' clock or power limit to hold "
      "the latency SLO at the least energy");
  command
      ->add_option(
          "--engine", flags->engines,
          "The engine's Prometheus endpoint, http://HOST:PORT[/metrics] (repeat for several engines)")
      ->option_text("URL")
      ->required();
  command
      ->add_option(
          "--gpus", flags->gpus,
          "The GPUs of the engine's tensor-parallel group, e.g. 0,1,2,3 (once per --engine; default: all)")
      ->option_text("LIST");
  command
      ->add_option("--engine-kind", flags->kinds, "vllm, sglang or tgi (default: detected from the metrics)")
      ->option_text("KIND");
  command
      ->add_option("--tp", flags->tensor_parallel,
                   "The engine's tensor-parallel size, checked against --gpus (once per --engine)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  command->add_option("--name", flags->names, "The engine's name in logs and metrics (default HOST:PORT)")
      ->option_text("NAME");
  command->add_option("--slo-ttft-s", flags->slo_ttft_s, "Time-to-first-token SLO, s")
      ->check(number(quantity::ttft_s()))
      ->option_text("X")
      ->required();
  command->add_option("--slo-tpot-s", flags->slo_tpot_s, "Time-per-output-token SLO, s")
      ->check(number(quantity::tpot_s()))
      ->option_text("Y")
      ->required();
  command
      ->add_option("--attainment", flags->attainment,
                   "Share of requests that must meet both SLOs (default 0.99)")
      ->check(number({.min = 0, .max = 1, .min_exclusive = true}))
      ->option_text("P");
  command->add_flag("--power-limit", flags->power_limit,
                    "Turn the power limit instead of locking the SM clock (GPUs without clock locks)");
  command
      ->add_option("--interval-s", flags->interval_s, "Control period: scrape, energy, decision (default 1)")
      ->check(number({.min = 0.05, .max = 3600}))
      ->option_text("S");
  command
      ->add_option("--scrape-timeout-s", flags->scrape_timeout_s,
                   "One scrape's deadline, at most the interval (default: half the interval, at most 2 s)")
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  command
      ->add_option("--duration-s", flags->duration_s, "Stop after this long (default: until SIGINT/SIGTERM)")
      ->check(number(NumberRule::positive()))
      ->option_text("S");
  command
      ->add_option("--metrics-listen", flags->metrics_listen, "Serve the sidecar's own /metrics on HOST:PORT")
      ->option_text("HOST:PORT");
  command
      ->add_option("--decisions-out", flags->decisions_out,
                   "Append every control period as one JSON line (knob, reason, latency, energy)")
      ->option_text("FILE.jsonl");
  command
      ->add_option("--lock-dir", flags->lock_dir,
                   "Where the per-GPU lock files live (default: $JOULE_GOVERN_LOCK_DIR, /run/joule or /tmp)")
      ->option_text("DIR");
  command
      ->add_option(
          "--prefill-token-weight", flags->prefill_token_weight,
          "A prompt token's share of work against an output token's, for the energy split (default 1)")
      ->check(number(NumberRule::positive()))
      ->option_text("W");
  command
      ->add_option("--card", flags->card,
                   "Start the controller from the GPUs' frontier card (joule probe; docs/inference.md)")
      ->option_text("FILE.json");
  command->add_flag("--quiet", flags->quiet, "Log only errors, not each change of the knob");
  set_examples(*command, {"joule infer govern --engine http://127.0.0.1:8000 --gpus 0,1,2,3 --tp 4 "
                          "--slo-ttft-s 2 --slo-tpot-s 0.15 --metrics-listen 127.0.0.1:9464",
                          "joule --daemon /run/joule/daemon.sock infer govern --engine http://127.0.0.1:8000 "
                          "--slo-ttft-s 1 --slo-tpot-s 0.1"});
  command->callback([&exit_code, flags, &global] { exit_code = infer_govern::run_govern(*flags, global); });
}

}  // namespace joule::cli
