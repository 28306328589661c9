// SPDX-License-Identifier: Apache-2.0
// joule/govern/sidecar.hpp — `joule infer govern`: several engines' governors (govern/governor.hpp) ticked
// together every interval on one thread, each decision logged with its reason and exported as Prometheus
// series (docs/inference.md "With vLLM / SGLang / TGI"):
//
//   joule_govern_knob{engine, knob="sm_clock_mhz"|"power_limit_w"}        the value in force (0: own
//   settings) joule_govern_state{engine, state="governing"|"unattainable"|"waiting"} 1 for the current state
//   joule_govern_slo_target_seconds{engine, slo="ttft"|"tpot"}
//   joule_govern_estimated_latency_seconds{engine, slo="ttft"|"tpot"}      the last window's p-th percentile
//   joule_govern_energy_joules_total{engine, phase="prefill"|"decode"|"idle"}
//   joule_govern_joules_per_output_token{engine}, joule_govern_joules_per_request{engine}  last window
//   joule_govern_tokens_total{engine, kind="prompt"|"output"}
//   joule_govern_decisions_total{engine, direction="up"|"down"|"hold"|"wait"}
//   joule_govern_decision_seconds{engine}                                  one tick's own time (histogram)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/govern/governor.hpp"
#include "joule/metrics/registry.hpp"

namespace joule::govern {

/// One tick of one engine, as the sidecar reports it.
struct TickReport {
  std::string engine;
  Decision decision;
  double tick_s = 0;  ///< the tick's own time (scrape, parse, energy, decision, setting), s
};

/// Runs governors together.
class Sidecar {
 public:
  /// @param governors at least one; their metrics register in `registry` (which must outlive the sidecar).
  Sidecar(std::vector<std::unique_ptr<EngineGovernor>> governors, const GovernOptions& options,
          std::shared_ptr<Clock> clock, metrics::MetricsRegistry& registry);
  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  /// Ticks every governor once, in order. @return their reports.
  std::vector<TickReport> tick();

  /// Waits up to the given time; @return true to stop the sidecar (e.g. a signal arrived).
  using Waiter = std::function<bool(Nanos)>;

  /// Ticks every interval until `wait` says stop or `duration_s` of the clock has passed (< 0: no limit),
  /// calling `on_tick` with each engine's report. Restores every engine's GPUs before returning.
  void run(double duration_s, const Waiter& wait, const std::function<void(const TickReport&)>& on_tick);

  /// Restores every engine's GPUs. @return the first error.
  Result<void> restore();

  const std::vector<std::unique_ptr<EngineGovernor>>& governors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// @return a report as one JSON object (one line of `--decisions-out`): time_s, engine, state, knob (kind and
/// value, or null), previous, changed, reason, p99_ttft_s, p99_tpot_s, energy_j, prefill/decode energy,
/// prompt and output tokens, finished requests, J per output token and per request, idle, tick_s.
std::string to_json_line(const TickReport& report);

}  // namespace joule::govern
