// SPDX-License-Identifier: Apache-2.0
#include "joule/metrics/inference_metrics.hpp"

#include <cmath>

#include "joule/core/log.hpp"

#include "metrics/buckets.hpp"

namespace joule::metrics {

namespace {

InferenceMetricsOptions checked(InferenceMetricsOptions options) {
  check_buckets(options.request_energy_buckets_j, "request energy");
  check_buckets(options.token_energy_buckets_j, "token energy");
  check_buckets(options.ttft_buckets_s, "TTFT");
  check_buckets(options.tpot_buckets_s, "TPOT");
  return options;
}

prometheus::Labels model_label(std::string_view model) {
  return {{"model", std::string(model)}};
}

bool usable(double value) {
  return std::isfinite(value) && value >= 0;
}

}  // namespace

InferenceMetrics::InferenceMetrics(prometheus::Registry& registry, InferenceMetricsOptions options)
    : options_(checked(std::move(options))),
      request_energy_(prometheus::BuildHistogram()
                          .Name("joule_inference_request_energy_joules")
                          .Help("GPU energy attributed to each finished request in joules, by model")
                          .Register(registry)),
      token_energy_(prometheus::BuildHistogram()
                        .Name("joule_inference_request_energy_per_token_joules")
                        .Help("Energy per output token of each finished request in joules, by model")
                        .Register(registry)),
      ttft_(prometheus::BuildHistogram()
                .Name("joule_inference_ttft_seconds")
                .Help("Time to first token of each finished request in seconds, by model")
                .Register(registry)),
      tpot_(prometheus::BuildHistogram()
                .Name("joule_inference_tpot_seconds")
                .Help("Time per output token after the first of each finished request in seconds, by model")
                .Register(registry)),
      energy_(
          prometheus::BuildCounter()
              .Name("joule_inference_energy_joules_total")
              .Help("GPU energy of the serving replica in joules, by model and phase (prefill, decode, idle)")
              .Register(registry)),
      tokens_(prometheus::BuildCounter()
                  .Name("joule_inference_output_tokens_total")
                  .Help("Output tokens of finished requests, by model")
                  .Register(registry)),
      requests_(
          prometheus::BuildCounter()
              .Name("joule_inference_requests_total")
              .Help("Finished requests, by model and whether they met the latency SLO (met, missed, none)")
              .Register(registry)),
      attainment_(prometheus::BuildGauge()
                      .Name("joule_inference_slo_attainment_ratio")
                      .Help("Share of recent requests meeting both latency SLOs, by model")
                      .Register(registry)),
      knob_(prometheus::BuildGauge()
                .Name("joule_inference_sm_clock_mhz")
                .Help("SM clock chosen for the serving replica in MHz (knob=\"power_limit_w\": the power "
                      "limit in "
                      "watts where clocks cannot be locked), by model")
                .Register(registry)) {}

void InferenceMetrics::observe_request(std::string_view model, const measure::RequestEnergy& request,
                                       std::optional<bool> slo_met) {
  if (!usable(request.energy_j) || !usable(request.prefill_energy_j) || !usable(request.decode_energy_j)) {
    log().debug("metrics: request '{}' skipped: energy {} J", request.request_id, request.energy_j);
    return;
  }
  const prometheus::Labels labels = model_label(model);
  request_energy_.Add(labels, options_.request_energy_buckets_j).Observe(request.energy_j);
  if (request.output_tokens > 0) {
    token_energy_.Add(labels, options_.token_energy_buckets_j).Observe(request.energy_per_output_token_j());
    tokens_.Add(labels).Increment(static_cast<double>(request.output_tokens));
  }
  if (const auto ttft = request.ttft_s(); ttft && usable(*ttft))
    ttft_.Add(labels, options_.ttft_buckets_s).Observe(*ttft);
  if (const auto tpot = request.tpot_s(); tpot && usable(*tpot))
    tpot_.Add(labels, options_.tpot_buckets_s).Observe(*tpot);
  energy_.Add({{"model", std::string(model)}, {"phase", "prefill"}}).Increment(request.prefill_energy_j);
  energy_.Add({{"model", std::string(model)}, {"phase", "decode"}}).Increment(request.decode_energy_j);
  const char* outcome = !slo_met ? "none" : (*slo_met ? "met" : "missed");
  requests_.Add({{"model", std::string(model)}, {"slo", outcome}}).Increment();
}

void InferenceMetrics::add_idle_energy(std::string_view model, double energy_j) {
  if (!usable(energy_j))
    return;
  energy_.Add({{"model", std::string(model)}, {"phase", "idle"}}).Increment(energy_j);
}

void InferenceMetrics::set_sm_clock_mhz(std::string_view model, double clock_mhz) {
  if (!usable(clock_mhz))
    return;
  knob_.Add({{"model", std::string(model)}, {"knob", "sm_clock_mhz"}}).Set(clock_mhz);
}

void InferenceMetrics::set_power_limit_w(std::string_view model, double power_limit_w) {
  if (!usable(power_limit_w))
    return;
  knob_.Add({{"model", std::string(model)}, {"knob", "power_limit_w"}}).Set(power_limit_w);
}

void InferenceMetrics::set_slo_attainment(std::string_view model, double ratio) {
  if (!(ratio >= 0 && ratio <= 1))
    return;
  attainment_.Add(model_label(model)).Set(ratio);
}

}  // namespace joule::metrics
