// SPDX-License-Identifier: Apache-2.0
#include "joule/govern/engine.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "joule/core/strings.hpp"

namespace joule::govern {

namespace {

using Source = MetricSpec::Source;

MetricSpec spec(std::vector<std::string> names, Source source, double scale = 1,
                std::vector<std::pair<std::string, std::string>> match = {}) {
  return MetricSpec{std::move(names), source, std::move(match), scale};
}

// vLLM (V1 engine): docs "Production Metrics" and vllm/v1/metrics/loggers.py. Older names after the newer.
EngineMetricNames make_vllm() {
  EngineMetricNames names;
  names.kind = EngineKind::kVllm;
  names.display_name = "vLLM";
  names.running = spec({"vllm:num_requests_running"}, Source::kGauge);
  names.waiting = spec({"vllm:num_requests_waiting"}, Source::kGauge);
  names.prompt_tokens = spec({"vllm:prompt_tokens_total", "vllm:prompt_tokens"}, Source::kCounter);
  names.generation_tokens =
      spec({"vllm:generation_tokens_total", "vllm:generation_tokens"}, Source::kCounter);
  names.ttft = spec({"vllm:time_to_first_token_seconds"}, Source::kHistogram);
  names.tpot = spec({"vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
                     "vllm:time_per_output_token_seconds"},
                    Source::kHistogram);
  names.queue_time = spec({"vllm:request_queue_time_seconds"}, Source::kHistogram);
  names.prefill_time = spec({"vllm:request_prefill_time_seconds"}, Source::kHistogram);
  names.step_time =
      spec({"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}, Source::kHistogram);
  names.finished = spec({"vllm:request_success_total", "vllm:request_success"}, Source::kCounter);
  names.steps = spec({"vllm:iteration_tokens_total"}, Source::kHistogramCount);
  names.kv_cache_usage = spec({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, Source::kGauge);
  names.identifying = {"vllm:num_requests_running", "vllm:num_requests_waiting"};
  return names;
}

// SGLang: docs "Production Metrics" (python/sglang/srt/metrics/collector.py).
EngineMetricNames make_sglang() {
  EngineMetricNames names;
  names.kind = EngineKind::kSglang;
  names.display_name = "SGLang";
  names.running = spec({"sglang:num_running_reqs"}, Source::kGauge);
  names.waiting = spec({"sglang:num_queue_reqs"}, Source::kGauge);
  names.prompt_tokens = spec({"sglang:prompt_tokens_total", "sglang:prompt_tokens"}, Source::kCounter);
  names.generation_tokens =
      spec({"sglang:generation_tokens_total", "sglang:generation_tokens"}, Source::kCounter);
  names.ttft = spec({"sglang:time_to_first_token_seconds"}, Source::kHistogram);
  names.tpot = spec({"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
                    Source::kHistogram);
  names.queue_time = spec({"sglang:queue_time_seconds"}, Source::kHistogram);
  names.step_time = spec({"sglang:inter_token_latency_seconds"}, Source::kHistogram);
  names.finished = spec({"sglang:num_requests_total", "sglang:num_requests"}, Source::kCounter);
  names.kv_cache_usage = spec({"sglang:token_usage"}, Source::kGauge);
  names.identifying = {"sglang:num_running_reqs", "sglang:num_queue_reqs"};
  return names;
}

// Text Generation Inference: docs "Metrics" (router/src/server.rs). TGI has no TTFT histogram: its queue
// time plus a prefill step's time stands in for it; its token counts are per-request histograms' sums.
EngineMetricNames make_tgi() {
  EngineMetricNames names;
  names.kind = EngineKind::kTgi;
  names.display_name = "TGI";
  names.running = spec({"tgi_batch_current_size"}, Source::kGauge);
  names.waiting = spec({"tgi_queue_size"}, Source::kGauge);
  names.prompt_tokens = spec({"tgi_request_input_length"}, Source::kHistogramSum);
  names.generation_tokens = spec({"tgi_request_generated_tokens"}, Source::kHistogramSum);
  names.tpot = spec({"tgi_request_mean_time_per_token_duration"}, Source::kHistogram);
  names.queue_time = spec({"tgi_request_queue_duration"}, Source::kHistogram);
  names.prefill_time = spec({"tgi_batch_inference_duration", "tgi_batch_forward_duration"},
                            Source::kHistogram, 1, {{"method", "prefill"}});
  names.step_time = spec({"tgi_batch_forward_duration"}, Source::kHistogram);
  names.finished = spec({"tgi_request_success", "tgi_request_success_total"}, Source::kCounter);
  names.steps = spec({"tgi_batch_inference_count", "tgi_batch_inference_count_total"}, Source::kCounter);
  names.identifying = {"tgi_queue_size", "tgi_batch_current_size"};
  return names;
}

const metrics::MetricFamily* find_first(const metrics::Exposition& exposition, const MetricSpec& spec,
                                        std::string* found_name) {
  for (const std::string& name : spec.names) {
    if (const metrics::MetricFamily* family = exposition.find(name)) {
      *found_name = name;
      return family;
    }
  }
  return nullptr;
}

std::string names_text(const MetricSpec& spec) {
  return fmt::format("{}", fmt::join(spec.names, " or "));
}

std::string first_name(const MetricSpec& spec) {
  return spec.names.empty() ? "a series" : spec.names.front();
}

Result<std::optional<double>> read_number(const metrics::Exposition& exposition, const MetricSpec& spec) {
  std::string name;
  const metrics::MetricFamily* family = find_first(exposition, spec, &name);
  if (family == nullptr) {
    return std::optional<double>();
  }
  std::optional<double> value;
  if (spec.source == Source::kHistogramSum || spec.source == Source::kHistogramCount) {
    const auto histogram = JOULE_TRY(metrics::read_histogram(*family, spec.match));
    if (histogram) {
      value = spec.source == Source::kHistogramSum ? histogram->sum : histogram->count;
    }
  } else {
    if (spec.source == Source::kCounter && family->type == metrics::MetricType::kGauge) {
      return fail(ErrorCode::kParse, "{}: expected a counter, got a gauge", name);
    }
    if (spec.source == Source::kGauge && family->type == metrics::MetricType::kCounter) {
      return fail(ErrorCode::kParse, "{}: expected a gauge, got a counter", name);
    }
    value = JOULE_TRY(metrics::read_sum(*family, spec.match));
  }
  if (value && (!std::isfinite(*value) || *value < 0)) {
    return fail(ErrorCode::kParse, "{}: {} is not a count (negative or not finite)", name, *value);
  }
  if (value) {
    *value *= spec.scale;
  }
  return value;
}

Result<std::optional<metrics::Histogram>> read_histogram(const metrics::Exposition& exposition,
                                                         const MetricSpec& spec) {
  std::string name;
  const metrics::MetricFamily* family = find_first(exposition, spec, &name);
  if (family == nullptr) {
    return std::optional<metrics::Histogram>();
  }
  auto histogram = JOULE_TRY(metrics::read_histogram(*family, spec.match));
  if (histogram && spec.scale != 1) {
    for (metrics::HistogramBucket& bucket : histogram->buckets) {
      bucket.upper_bound *= spec.scale;
    }
    histogram->sum *= spec.scale;
  }
  return histogram;
}

Result<double> required_number(const metrics::Exposition& exposition, const EngineMetricNames& names,
                               const MetricSpec& spec) {
  const auto value = JOULE_TRY(read_number(exposition, spec));
  if (!value) {
    return fail(ErrorCode::kParse, "the {} endpoint exports no {}", names.display_name, names_text(spec));
  }
  return *value;
}

// `current` − `previous` of a cumulative figure, named for the restart message.
Result<double> increase(double previous, double current, const MetricSpec& spec) {
  if (current < previous) {
    return fail(ErrorCode::kState, "the engine restarted: {} went backwards ({} → {})", first_name(spec),
                previous, current);
  }
  return current - previous;
}

Result<std::optional<double>> increase(const std::optional<double>& previous,
                                       const std::optional<double>& current, const MetricSpec& spec) {
  if (!previous || !current) {
    return std::optional<double>();
  }
  return std::optional<double>(JOULE_TRY(increase(*previous, *current, spec)));
}

Result<std::optional<metrics::Histogram>> increase(const std::optional<metrics::Histogram>& previous,
                                                   const std::optional<metrics::Histogram>& current,
                                                   const MetricSpec& spec) {
  if (!current) {
    return std::optional<metrics::Histogram>();
  }
  if (!previous) {
    return current;  // its first observations (a histogram appears with its first request)
  }
  if (previous->buckets.size() != current->buckets.size()) {
    return fail(ErrorCode::kState, "the engine restarted: {} changed its buckets", first_name(spec));
  }
  metrics::Histogram window = *current;
  window.count = JOULE_TRY(increase(previous->count, current->count, spec));
  window.sum = current->sum - previous->sum;
  for (size_t i = 0; i < window.buckets.size(); ++i) {
    if (previous->buckets[i].upper_bound != current->buckets[i].upper_bound) {
      return fail(ErrorCode::kState, "the engine restarted: {} changed its buckets", first_name(spec));
    }
    window.buckets[i].cumulative_count = JOULE_TRY(
        increase(previous->buckets[i].cumulative_count, current->buckets[i].cumulative_count, spec));
  }
  return std::optional<metrics::Histogram>(std::move(window));
}

}  // namespace

std::string_view to_string(EngineKind kind) {
  switch (kind) {
    case EngineKind::kVllm:
      return "vllm";
    case EngineKind::kSglang:
      return "sglang";
    case EngineKind::kTgi:
      break;
  }
  return "tgi";
}

Result<EngineKind> parse_engine_kind(std::string_view name) {
  const std::string lower = to_lower(name);
  for (const EngineKind kind : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kTgi}) {
    if (lower == to_string(kind)) {
      return kind;
    }
  }
  return fail(ErrorCode::kInvalidArgument, "unknown engine {}: expected vllm, sglang or tgi",
              quoted_excerpt(name, 40));
}

const EngineMetricNames& engine_metric_names(EngineKind kind) {
  static const EngineMetricNames vllm = make_vllm();
  static const EngineMetricNames sglang = make_sglang();
  static const EngineMetricNames tgi = make_tgi();
  switch (kind) {
    case EngineKind::kVllm:
      return vllm;
    case EngineKind::kSglang:
      return sglang;
    case EngineKind::kTgi:
      break;
  }
  return tgi;
}

Result<EngineKind> detect_engine(const metrics::Exposition& exposition, std::string_view source) {
  std::vector<EngineKind> found;
  std::vector<std::string> identifying;
  for (const EngineKind kind : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kTgi}) {
    const EngineMetricNames& names = engine_metric_names(kind);
    identifying.insert(identifying.end(), names.identifying.begin(), names.identifying.end());
    if (std::any_of(names.identifying.begin(), names.identifying.end(),
                    [&](const std::string& name) { return exposition.find(name) != nullptr; })) {
      found.push_back(kind);
    }
  }
  if (found.size() == 1) {
    return found.front();
  }
  if (found.size() > 1) {
    return fail(ErrorCode::kInvalidArgument,
                "{} exports the series of {} and {} at once: name the engine with --engine-kind", source,
                engine_metric_names(found[0]).display_name, engine_metric_names(found[1]).display_name);
  }
  std::vector<std::string> examples;
  for (const metrics::MetricFamily& family : exposition.families) {
    if (examples.size() == 3) {
      break;
    }
    examples.push_back(printable_excerpt(family.name, 60));
  }
  return fail(ErrorCode::kInvalidArgument,
              "{} is not a vLLM, SGLang or TGI metrics endpoint: none of {} is there ({})", source,
              fmt::join(identifying, ", "),
              examples.empty() ? std::string("it exports no series")
                               : fmt::format("it exports {} series, e.g. {}", exposition.families.size(),
                                             fmt::join(examples, ", ")));
}

Result<EngineSnapshot> read_snapshot(const metrics::Exposition& exposition, const EngineMetricNames& names,
                                     double time_s) {
  EngineSnapshot snapshot;
  snapshot.time_s = time_s;
  snapshot.running = JOULE_TRY(required_number(exposition, names, names.running));
  snapshot.waiting = JOULE_TRY(required_number(exposition, names, names.waiting));
  snapshot.prompt_tokens = JOULE_TRY(read_number(exposition, names.prompt_tokens)).value_or(0);
  snapshot.generation_tokens = JOULE_TRY(read_number(exposition, names.generation_tokens)).value_or(0);
  snapshot.finished = JOULE_TRY(read_number(exposition, names.finished));
  snapshot.steps = JOULE_TRY(read_number(exposition, names.steps));
  snapshot.kv_cache_usage = JOULE_TRY(read_number(exposition, names.kv_cache_usage));
  snapshot.ttft = JOULE_TRY(read_histogram(exposition, names.ttft));
  snapshot.tpot = JOULE_TRY(read_histogram(exposition, names.tpot));
  snapshot.queue_time = JOULE_TRY(read_histogram(exposition, names.queue_time));
  snapshot.prefill_time = JOULE_TRY(read_histogram(exposition, names.prefill_time));
  snapshot.step_time = JOULE_TRY(read_histogram(exposition, names.step_time));
  // Token counters and latency histograms appear with the first request on some engines (prometheus_client
  // exports a labelled series once it is used), so their absence is only an error when a sibling is there.
  std::string unused;
  const bool any_latency = find_first(exposition, names.tpot, &unused) != nullptr;
  const bool has_ttft = find_first(exposition, names.ttft, &unused) != nullptr ||
                        (find_first(exposition, names.queue_time, &unused) != nullptr &&
                         find_first(exposition, names.prefill_time, &unused) != nullptr);
  if (any_latency != has_ttft && !names.ttft.names.empty()) {
    return fail(ErrorCode::kParse, "the {} endpoint exports {} but no {}", names.display_name,
                any_latency ? names_text(names.tpot) : names_text(names.ttft),
                any_latency ? names_text(names.ttft) : names_text(names.tpot));
  }
  return snapshot;
}

std::optional<double> EngineWindow::ttft_quantile_s(double q) const {
  if (ttft) {
    return ttft->quantile(q);
  }
  if (queue_time && prefill_time) {
    const auto queued = queue_time->quantile(q);
    const auto prefill = prefill_time->quantile(q);
    if (queued || prefill) {
      return queued.value_or(0) + prefill.value_or(0);
    }
  }
  return std::nullopt;
}

std::optional<double> EngineWindow::tpot_quantile_s(double q) const {
  return tpot ? tpot->quantile(q) : std::nullopt;
}

std::vector<double> EngineWindow::ttft_values_s(size_t n) const {
  if (ttft) {
    return ttft->spread(n);
  }
  if (queue_time && prefill_time) {
    std::vector<double> queued = queue_time->spread(n);
    std::vector<double> prefill = prefill_time->spread(n);
    if (queued.empty()) {
      return prefill;
    }
    for (size_t k = 0; k < queued.size() && k < prefill.size(); ++k) {
      queued[k] += prefill[k];
    }
    return queued;
  }
  return {};
}

std::vector<double> EngineWindow::tpot_values_s(size_t n) const {
  return tpot ? tpot->spread(n) : std::vector<double>{};
}

Result<EngineWindow> difference(const EngineSnapshot& previous, const EngineSnapshot& current,
                                const EngineMetricNames& names) {
  if (!(current.time_s > previous.time_s)) {
    return fail(ErrorCode::kInvalidArgument, "a window must end after it starts ({} s, then {} s)",
                previous.time_s, current.time_s);
  }
  EngineWindow window;
  window.start_s = previous.time_s;
  window.end_s = current.time_s;
  window.running = (previous.running + current.running) / 2;
  window.waiting = current.waiting;
  window.prompt_tokens =
      JOULE_TRY(increase(previous.prompt_tokens, current.prompt_tokens, names.prompt_tokens));
  window.generation_tokens =
      JOULE_TRY(increase(previous.generation_tokens, current.generation_tokens, names.generation_tokens));
  window.finished = JOULE_TRY(increase(previous.finished, current.finished, names.finished));
  window.steps = JOULE_TRY(increase(previous.steps, current.steps, names.steps));
  window.kv_cache_usage = current.kv_cache_usage;
  window.ttft = JOULE_TRY(increase(previous.ttft, current.ttft, names.ttft));
  window.tpot = JOULE_TRY(increase(previous.tpot, current.tpot, names.tpot));
  window.queue_time = JOULE_TRY(increase(previous.queue_time, current.queue_time, names.queue_time));
  window.prefill_time = JOULE_TRY(increase(previous.prefill_time, current.prefill_time, names.prefill_time));
  window.step_time = JOULE_TRY(increase(previous.step_time, current.step_time, names.step_time));
  return window;
}

}  // namespace joule::govern
