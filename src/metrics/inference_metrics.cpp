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

bool usable(double value) {
  if (std::isfinite(value) && value >= 0) {
    return true;
  }
  log().debug("metrics: inference value {} skipped", value);
  return false;
}

template <class Metric>
prometheus::Family<Metric>& family(prometheus::Registry& registry, const char* name, const char* help) {
  if constexpr (std::is_same_v<Metric, prometheus::Histogram>) {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
  } else if constexpr (std::is_same_v<Metric, prometheus::Counter>) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  } else {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
  }
}

}  // namespace

InferenceMetrics::InferenceMetrics(prometheus::Registry& registry, InferenceMetricsOptions options)
    : options_(checked(std::move(options))),
      request_energy_(
          family<prometheus::Histogram>(registry, "joule_inference_request_energy_joules",
                                        "GPU energy attributed to each finished request in joules")),
      token_energy_(
          family<prometheus::Histogram>(registry, "joule_inference_energy_per_output_token_joules",
                                        "Energy per output token of each finished request in joules")),
      ttft_(family<prometheus::Histogram>(registry, "joule_inference_time_to_first_token_seconds",
                                          "Time to first token of each finished request in seconds")),
      tpot_(family<prometheus::Histogram>(
          registry, "joule_inference_time_per_output_token_seconds",
          "Time per output token after the first, per finished request, in seconds")),
      energy_(family<prometheus::Counter>(registry, "joule_inference_energy_joules_total",
                                          "GPU energy of the serving replica in joules by phase: finished "
                                          "requests' prefill and decode shares, and "
                                          "idle")),
      requests_(
          family<prometheus::Counter>(registry, "joule_inference_requests_total",
                                      "Finished requests, by whether they met the latency SLO (met, missed, "
                                      "none)")),
      prompt_tokens_(family<prometheus::Counter>(registry, "joule_inference_prompt_tokens_total",
                                                 "Prompt tokens of finished requests")),
      output_tokens_(family<prometheus::Counter>(registry, "joule_inference_output_tokens_total",
                                                 "Output tokens of finished requests")),
      iterations_(
          family<prometheus::Counter>(registry, "joule_inference_iterations_total", "Serving iterations")),
      running_(
          family<prometheus::Gauge>(registry, "joule_inference_requests_running", "Requests being served")),
      waiting_(family<prometheus::Gauge>(registry, "joule_inference_requests_waiting",
                                         "Requests waiting to be admitted")),
      slo_target_(
          family<prometheus::Gauge>(registry, "joule_inference_slo_target_seconds",
                                    "The latency SLO in seconds (slo=ttft: time to first token, slo=tpot: "
                                    "time per output token)")),
      attainment_(family<prometheus::Gauge>(registry, "joule_inference_slo_attainment_ratio",
                                            "Share of recent requests meeting both latency SLOs")),
      unattainable_(family<prometheus::Gauge>(registry, "joule_inference_slo_unattainable",
                                              "1 while even the highest clock misses the SLO")),
      clock_(family<prometheus::Gauge>(registry, "joule_inference_sm_clock_hertz",
                                       "SM clock chosen for the serving replica in hertz")),
      power_limit_(
          family<prometheus::Gauge>(registry, "joule_inference_power_limit_watts",
                                    "Power limit chosen for the serving replica in watts (GPUs whose "
                                    "clocks cannot be locked)")) {}

prometheus::Labels InferenceMetrics::labels(std::string_view model) const {
  prometheus::Labels result = {{"model", std::string(model)}};
  if (!options_.gpu.empty()) {
    result.emplace("gpu", options_.gpu);
  }
  return result;
}

prometheus::Labels InferenceMetrics::labels(std::string_view model, const char* key,
                                            const char* value) const {
  prometheus::Labels result = labels(model);
  result.emplace(key, value);
  return result;
}

void InferenceMetrics::observe_request(std::string_view model, const measure::RequestEnergy& request,
                                       std::optional<bool> slo_met) {
  if (!usable(request.energy_j) || !usable(request.prefill_energy_j) || !usable(request.decode_energy_j)) {
    return;
  }
  const prometheus::Labels base = labels(model);
  request_energy_.Add(base, options_.request_energy_buckets_j).Observe(request.energy_j);
  if (request.output_tokens > 0) {
    token_energy_.Add(base, options_.token_energy_buckets_j).Observe(request.energy_per_output_token_j());
    output_tokens_.Add(base).Increment(static_cast<double>(request.output_tokens));
  }
  if (request.prompt_tokens > 0) {
    prompt_tokens_.Add(base).Increment(static_cast<double>(request.prompt_tokens));
  }
  if (const auto ttft = request.ttft_s(); ttft && usable(*ttft)) {
    ttft_.Add(base, options_.ttft_buckets_s).Observe(*ttft);
  }
  if (const auto tpot = request.tpot_s(); tpot && usable(*tpot)) {
    tpot_.Add(base, options_.tpot_buckets_s).Observe(*tpot);
  }
  energy_.Add(labels(model, "phase", "prefill")).Increment(request.prefill_energy_j);
  energy_.Add(labels(model, "phase", "decode")).Increment(request.decode_energy_j);
  requests_.Add(labels(model, "slo", !slo_met ? "none" : (*slo_met ? "met" : "missed"))).Increment();
}

void InferenceMetrics::add_iterations(std::string_view model, int64_t iterations) {
  if (iterations > 0) {
    iterations_.Add(labels(model)).Increment(static_cast<double>(iterations));
  }
}

void InferenceMetrics::add_idle_energy(std::string_view model, double energy_j) {
  if (usable(energy_j)) {
    energy_.Add(labels(model, "phase", "idle")).Increment(energy_j);
  }
}

void InferenceMetrics::set_requests(std::string_view model, int64_t running, int64_t waiting) {
  if (running >= 0) {
    running_.Add(labels(model)).Set(static_cast<double>(running));
  }
  if (waiting >= 0) {
    waiting_.Add(labels(model)).Set(static_cast<double>(waiting));
  }
}

void InferenceMetrics::set_slo(std::string_view model, double ttft_s, double tpot_s) {
  if (usable(ttft_s)) {
    slo_target_.Add(labels(model, "slo", "ttft")).Set(ttft_s);
  }
  if (usable(tpot_s)) {
    slo_target_.Add(labels(model, "slo", "tpot")).Set(tpot_s);
  }
}

void InferenceMetrics::set_slo_attainment(std::string_view model, double ratio) {
  if (ratio >= 0 && ratio <= 1) {
    attainment_.Add(labels(model)).Set(ratio);
  }
}

void InferenceMetrics::set_slo_unattainable(std::string_view model, bool unattainable) {
  unattainable_.Add(labels(model)).Set(unattainable ? 1 : 0);
}

void InferenceMetrics::set_sm_clock_mhz(std::string_view model, double clock_mhz) {
  if (usable(clock_mhz)) {
    clock_.Add(labels(model)).Set(clock_mhz * 1e6);
  }
}

void InferenceMetrics::set_power_limit_w(std::string_view model, double power_limit_w) {
  if (usable(power_limit_w)) {
    power_limit_.Add(labels(model)).Set(power_limit_w);
  }
}

}  // namespace joule::metrics
