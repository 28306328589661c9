// SPDX-License-Identifier: Apache-2.0
// joule/metrics/inference_metrics.hpp — Prometheus metrics of an LLM serving replica: energy per request and
// per output token, latency, SLO attainment and the GPU clock chosen (docs/metrics.md, docs/inference.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "joule/measure/request_energy.hpp"

namespace joule::metrics {

/// Bucket upper bounds (strictly increasing; +Inf is implicit).
struct InferenceMetricsOptions {
  std::vector<double> request_energy_buckets_j = {0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
  std::vector<double> token_energy_buckets_j = {0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
  std::vector<double> ttft_buckets_s = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30};
  std::vector<double> tpot_buckets_s = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1};
  /// A `gpu` label on every series (e.g. "h100"); empty for none.
  std::string gpu{};
};

/// The metrics, all labelled by `model` (the served model's name; keep them few) and, if
/// InferenceMetricsOptions::gpu is set, `gpu`. Units are Prometheus's base units:
///
/// - histograms: `joule_inference_request_energy_joules` (J per finished request),
///   `joule_inference_energy_per_output_token_joules` (J per output token, per request),
///   `joule_inference_time_to_first_token_seconds`, `joule_inference_time_per_output_token_seconds` (s);
/// - counters: `joule_inference_energy_joules_total{phase="prefill"|"decode"|"idle"}` (J: finished
///   requests' shares, and idle; requests still running are counted when they finish),
///   `joule_inference_requests_total{slo="met"|"missed"|"none"}`, `joule_inference_prompt_tokens_total`,
///   `joule_inference_output_tokens_total`, `joule_inference_iterations_total`;
/// - gauges: `joule_inference_requests_running`, `joule_inference_requests_waiting`,
///   `joule_inference_slo_target_seconds{slo="ttft"|"tpot"}` (s), `joule_inference_slo_attainment_ratio`,
///   `joule_inference_slo_unattainable` (1 while even the top clock misses the SLO),
///   `joule_inference_sm_clock_hertz` (the SM clock chosen, Hz), `joule_inference_power_limit_watts` (the
///   power limit chosen where clocks cannot be locked, W).
///
/// A series appears with its first value (docs/metrics.md has the table).
///
/// Values that are negative or not finite are skipped (logged at debug level). Thread-safe (prometheus-cpp's
/// families and metrics are).
class InferenceMetrics {
 public:
  /// @throws joule::Exception (kInvalidArgument) for empty or unsorted buckets.
  explicit InferenceMetrics(prometheus::Registry& registry, InferenceMetricsOptions options = {});

  /// Observes a finished request. `slo_met`: whether it met the SLO (nullopt: no SLO set). Requests without
  /// output skip the per-token histogram; latencies the request lacks are not observed.
  void observe_request(std::string_view model, const measure::RequestEnergy& request,
                       std::optional<bool> slo_met);
  /// Counts serving iterations.
  void add_iterations(std::string_view model, int64_t iterations);
  /// Energy with no request in flight, J.
  void add_idle_energy(std::string_view model, double energy_j);
  /// The engine's queue now.
  void set_requests(std::string_view model, int64_t running, int64_t waiting);
  /// The SLO in force, s.
  void set_slo(std::string_view model, double ttft_s, double tpot_s);
  /// The controller's state: its window's attainment in [0, 1], and whether the SLO is out of reach.
  void set_slo_attainment(std::string_view model, double ratio);
  void set_slo_unattainable(std::string_view model, bool unattainable);
  /// The controller's choice: an SM clock in MHz (exported in Hz), or a power limit in W.
  void set_sm_clock_mhz(std::string_view model, double clock_mhz);
  void set_power_limit_w(std::string_view model, double power_limit_w);

 private:
  prometheus::Labels labels(std::string_view model) const;
  prometheus::Labels labels(std::string_view model, const char* key, const char* value) const;

  InferenceMetricsOptions options_;
  prometheus::Family<prometheus::Histogram>& request_energy_;
  prometheus::Family<prometheus::Histogram>& token_energy_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& tpot_;
  prometheus::Family<prometheus::Counter>& energy_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& prompt_tokens_;
  prometheus::Family<prometheus::Counter>& output_tokens_;
  prometheus::Family<prometheus::Counter>& iterations_;
  prometheus::Family<prometheus::Gauge>& running_;
  prometheus::Family<prometheus::Gauge>& waiting_;
  prometheus::Family<prometheus::Gauge>& slo_target_;
  prometheus::Family<prometheus::Gauge>& attainment_;
  prometheus::Family<prometheus::Gauge>& unattainable_;
  prometheus::Family<prometheus::Gauge>& clock_;
  prometheus::Family<prometheus::Gauge>& power_limit_;
};

}  // namespace joule::metrics
