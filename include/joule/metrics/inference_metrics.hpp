// SPDX-License-Identifier: Apache-2.0
// joule/metrics/inference_metrics.hpp — Prometheus metrics of an LLM serving replica: energy per request and
// per output token, latency, SLO attainment and the GPU clock chosen (docs/metrics.md, docs/inference.md).
#pragma once

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
};

/// The metrics, all labelled by `model` (the served model's name; keep them few):
///
/// | metric | type | unit |
/// |---|---|---|
/// | `joule_inference_request_energy_joules` | histogram | J per finished request |
/// | `joule_inference_request_energy_per_token_joules` | histogram | J per output token, per request |
/// | `joule_inference_ttft_seconds`, `joule_inference_tpot_seconds` | histogram | s |
/// | `joule_inference_energy_joules_total{phase="prefill"/"decode"/"idle"}` | counter | J |
/// | `joule_inference_output_tokens_total` | counter | tokens |
/// | `joule_inference_requests_total{slo="met"/"missed"/"none"}` | counter | requests |
/// | `joule_inference_slo_attainment_ratio` | gauge | share of requests meeting the SLO (the controller's
/// window) | | `joule_inference_sm_clock_mhz` | gauge | the SM clock (or power limit, W, in
/// `knob="power_limit_w"`) chosen |
///
/// Thread-safe (prometheus-cpp's families and metrics are).
class InferenceMetrics {
 public:
  /// @throws joule::Exception (kInvalidArgument) for empty or unsorted buckets.
  explicit InferenceMetrics(prometheus::Registry& registry, InferenceMetricsOptions options = {});

  /// Observes a finished request. `slo_met`: whether it met the SLO (nullopt: no SLO set). Requests without
  /// output skip the per-token histogram; latencies absent from the request are not observed.
  void observe_request(std::string_view model, const measure::RequestEnergy& request,
                       std::optional<bool> slo_met);
  /// Energy with no request in flight, J (ignored if negative or not finite).
  void add_idle_energy(std::string_view model, double energy_j);
  /// The controller's current choice and attainment.
  void set_sm_clock_mhz(std::string_view model, double clock_mhz);
  void set_power_limit_w(std::string_view model, double power_limit_w);
  void set_slo_attainment(std::string_view model, double ratio);

 private:
  InferenceMetricsOptions options_;
  prometheus::Family<prometheus::Histogram>& request_energy_;
  prometheus::Family<prometheus::Histogram>& token_energy_;
  prometheus::Family<prometheus::Histogram>& ttft_;
  prometheus::Family<prometheus::Histogram>& tpot_;
  prometheus::Family<prometheus::Counter>& energy_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Gauge>& attainment_;
  prometheus::Family<prometheus::Gauge>& knob_;
};

}  // namespace joule::metrics
