// SPDX-License-Identifier: Apache-2.0
// joule/govern/engine.hpp — what a serving engine (vLLM, SGLang, TGI) says about its load and latency on its
// Prometheus endpoint, read by each engine's own metric names: requests running and waiting, prompt and
// generation tokens, time-to-first-token and time-per-output-token histograms, finished requests, KV-cache
// occupancy and engine steps where exported. A snapshot is one scrape; a window is the difference of two
// (a counter or histogram that goes backwards is the engine restarting, reported as such).
//
//   auto exposition = metrics::parse_exposition(body, url).value();
//   auto kind = govern::detect_engine(exposition, url).value();                 // or given by the user
//   auto snapshot = govern::read_snapshot(exposition, govern::engine_metric_names(kind), now_s).value();
//   auto window = govern::difference(previous, snapshot, names).value();
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/metrics/exposition.hpp"

namespace joule::govern {

/// The engines whose metrics joule reads.
enum class EngineKind { kVllm, kSglang, kTgi };

/// @return "vllm", "sglang" or "tgi" (as written on the command line).
std::string_view to_string(EngineKind kind);
/// @return the engine named `name` ("vllm", "sglang", "tgi"; case-insensitive), or kInvalidArgument listing
/// them.
Result<EngineKind> parse_engine_kind(std::string_view name);

/// How one figure is read from the exposition: the first of `names` present, as `source`.
struct MetricSpec {
  enum class Source {
    kGauge,           ///< the sum of a gauge's (or untyped) samples
    kCounter,         ///< the sum of a counter's samples
    kHistogram,       ///< a histogram, summed over label sets
    kHistogramSum,    ///< a histogram's _sum (e.g. TGI's tokens per request: their total)
    kHistogramCount,  ///< a histogram's _count (e.g. vLLM's tokens per step: the steps)
  };
  std::vector<std::string> names;  ///< alternatives, newest name first (engines rename series)
  Source source = Source::kGauge;
  std::vector<std::pair<std::string, std::string>> match;  ///< only samples with these labels
  double scale = 1;                                        ///< e.g. 0.01 for a percentage
};

/// The metric names of one engine, from its documentation (docs/inference.md lists them with sources).
struct EngineMetricNames {
  EngineKind kind = EngineKind::kVllm;
  std::string display_name;      ///< "vLLM"
  MetricSpec running;            ///< requests being processed (in the batch)
  MetricSpec waiting;            ///< requests queued
  MetricSpec prompt_tokens;      ///< prompt tokens processed, cumulative
  MetricSpec generation_tokens;  ///< output tokens generated, cumulative
  MetricSpec ttft;               ///< time to first token, s (histogram); no names: not exported
  MetricSpec tpot;               ///< time per output token after the first, s (histogram)
  MetricSpec queue_time;         ///< time queued before the first step, s (histogram); optional
  MetricSpec prefill_time;       ///< one prefill step's time, s (histogram); optional
  MetricSpec step_time;          ///< one engine step's time, s (histogram: per token or per step); optional
  MetricSpec finished;           ///< requests finished, cumulative; optional
  MetricSpec steps;              ///< engine steps (iterations), cumulative; optional
  MetricSpec kv_cache_usage;     ///< KV cache occupancy in [0, 1]; optional
  /// The series that identify the engine: an exposition is this engine's when one of them is present.
  std::vector<std::string> identifying;
};

/// @return the names `kind` exports.
const EngineMetricNames& engine_metric_names(EngineKind kind);

/// @return the engine whose identifying series `exposition` has, or kInvalidArgument "<source> is not a
/// vLLM, SGLang or TGI metrics endpoint: none of vllm:num_requests_running, … is there (it exports N
/// series, e.g. …)". Two engines' series at once is kInvalidArgument too (name the engine with
/// --engine-kind).
Result<EngineKind> detect_engine(const metrics::Exposition& exposition, std::string_view source);

/// One scrape of an engine, its cumulative figures as of `time_s`.
struct EngineSnapshot {
  double time_s = 0;  ///< when it was scraped, s on the caller's clock
  double running = 0;
  double waiting = 0;
  double prompt_tokens = 0;
  double generation_tokens = 0;
  std::optional<double> finished;
  std::optional<double> steps;
  std::optional<double> kv_cache_usage;
  std::optional<metrics::Histogram> ttft;
  std::optional<metrics::Histogram> tpot;
  std::optional<metrics::Histogram> queue_time;
  std::optional<metrics::Histogram> prefill_time;
  std::optional<metrics::Histogram> step_time;
};

/// @return the snapshot `exposition` gives by `names`, or kParse naming the metric: a required one
/// (running, waiting, prompt and generation tokens, and a TTFT histogram or queue and prefill times, a TPOT
/// histogram) absent ("… exports no vllm:num_requests_running"), one of the wrong type ("vllm:…: expected a
/// histogram, got a gauge"), a count that is negative or not finite.
Result<EngineSnapshot> read_snapshot(const metrics::Exposition& exposition, const EngineMetricNames& names,
                                     double time_s);

/// What happened between two snapshots.
struct EngineWindow {
  double start_s = 0;
  double end_s = 0;
  double running = 0;  ///< the mean of the two snapshots' gauges
  double waiting = 0;  ///< at the end
  double prompt_tokens = 0;
  double generation_tokens = 0;
  std::optional<double> finished;
  std::optional<double> steps;
  std::optional<double> kv_cache_usage;    ///< at the end
  std::optional<metrics::Histogram> ttft;  ///< the observations of the window only
  std::optional<metrics::Histogram> tpot;
  std::optional<metrics::Histogram> queue_time;
  std::optional<metrics::Histogram> prefill_time;
  std::optional<metrics::Histogram> step_time;

  /// @return the mean time of the window's engine steps, s (from the step-time histogram); nullopt without
  /// observations.
  std::optional<double> mean_step_s() const {
    return step_time && step_time->count > 0 ? std::optional<double>(step_time->sum / step_time->count)
                                             : std::nullopt;
  }
  /// @return whether the engine did anything in the window (tokens, or requests running or queued).
  bool busy() const { return prompt_tokens > 0 || generation_tokens > 0 || running > 0 || waiting > 0; }
  /// @return the window's p-quantile TTFT, s: the TTFT histogram's, else queue + prefill quantiles'
  /// sum (an upper estimate); nullopt without observations.
  std::optional<double> ttft_quantile_s(double q) const;
  /// @return the window's p-quantile TPOT, s; nullopt without observations.
  std::optional<double> tpot_quantile_s(double q) const;
  /// @return n values standing for the window's TTFTs, s (metrics::Histogram::spread of the TTFT histogram;
  /// else of the queue and prefill times, added: an upper estimate); empty without observations.
  std::vector<double> ttft_values_s(size_t n) const;
  /// @return n values standing for the window's TPOTs, s (metrics::Histogram::spread); empty without
  /// observations.
  std::vector<double> tpot_values_s(size_t n) const;
};

/// @return `current` − `previous` (both read by `names`), or kState "the engine restarted: <metric> went
/// backwards (A → B)" when a
/// counter or histogram decreased (or its buckets changed); kInvalidArgument when current is not later.
Result<EngineWindow> difference(const EngineSnapshot& previous, const EngineSnapshot& current,
                                const EngineMetricNames& names);

}  // namespace joule::govern
