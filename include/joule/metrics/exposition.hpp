// SPDX-License-Identifier: Apache-2.0
// joule/metrics/exposition.hpp — reading what another program's /metrics says: the Prometheus text exposition
// format (version 0.0.4, and the OpenMetrics text that vLLM, SGLang and TGI also serve), parsed within bounds
// into families of samples. The text is untrusted: every error names the line, and what the parser keeps is
// bounded by ExpositionLimits whatever the text.
//
//   auto exposition = metrics::parse_exposition(body, "http://127.0.0.1:8000/metrics").value();
//   const metrics::MetricFamily* running = exposition.find("vllm:num_requests_running");
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::metrics {

/// What a family's `# TYPE` line says (kUntyped when it has none).
enum class MetricType { kCounter, kGauge, kHistogram, kSummary, kUntyped };

/// @return "counter", "gauge", "histogram", "summary" or "untyped".
std::string_view to_string(MetricType type);

/// One sample line: `name{label="value",…} value [timestamp]`.
struct ExpositionSample {
  std::string name;  ///< the sample's own name, e.g. "vllm:e2e_request_latency_seconds_bucket"
  std::vector<std::pair<std::string, std::string>> labels;  ///< in the order written, values unescaped
  double value = 0;                                         ///< may be ±Inf or NaN, as the format allows

  /// @return the value of label `key`, if the sample has it.
  std::optional<std::string_view> label(std::string_view key) const;
};

/// A metric family: its name, type and samples. A histogram's family holds its `_bucket`, `_sum` and
/// `_count` samples; a counter's its `_total` (OpenMetrics) or bare-named samples.
struct MetricFamily {
  std::string name;  ///< as in `# TYPE name …`, or the sample's name for an untyped sample
  MetricType type = MetricType::kUntyped;
  std::vector<ExpositionSample> samples;
};

/// A parsed /metrics text.
struct Exposition {
  std::vector<MetricFamily> families;  ///< in the order their first line appeared

  /// @return the family called `name` (its TYPE name; a counter is also found by its name + "_total"), or
  /// nullptr.
  const MetricFamily* find(std::string_view name) const;
  /// @return how many samples all families hold.
  size_t sample_count() const;
};

/// Bounds on what one parse keeps, whatever the text (the caller bounds the text's size).
struct ExpositionLimits {
  size_t max_samples = 200'000;    ///< samples in all
  size_t max_families = 20'000;    ///< families in all
  size_t max_labels = 64;          ///< labels on one sample
  size_t max_line_bytes = 65'536;  ///< one line
  size_t max_name_bytes = 1'024;   ///< a metric or label name
};

/// @return the families and samples of `text`, a /metrics body, or kParse "<source>:<line>: <why>" for a
/// line that is not a comment, a TYPE/HELP line or a sample (a bad name, an unterminated label value, an
/// unknown escape, a value that is not a number, a TYPE given twice or after the family's samples, a line or
/// a count over `limits`). `# EOF` (OpenMetrics) ends the text. Unknown `# ` comments are ignored.
Result<Exposition> parse_exposition(std::string_view text, std::string_view source,
                                    const ExpositionLimits& limits = {});

/// One bucket of a cumulative histogram: the count of observations ≤ upper_bound.
struct HistogramBucket {
  double upper_bound = 0;  ///< `le`, +Inf for the last
  double cumulative_count = 0;
};

/// A histogram's buckets, count and sum (one label set, or several summed bucket by bucket).
struct Histogram {
  std::vector<HistogramBucket> buckets;  ///< by upper_bound ascending, the last +Inf
  double count = 0;
  double sum = 0;

  /// @return the quantile `q` in [0, 1] as Prometheus's histogram_quantile() estimates it (linear within
  /// the bucket; the highest finite bound when it falls in the +Inf bucket); nullopt without observations.
  std::optional<double> quantile(double q) const;
  /// @return n values standing for the observations: the quantiles (k + 0.5) / n, k = 0 … n − 1, scaled
  /// together so that their mean comes as close to the exact mean (sum / count) as each one's bucket allows
  /// (interpolation alone puts the observations of a wide bucket evenly across it: vLLM's TPOT buckets are
  /// 25 ms wide); empty without observations or for n = 0.
  std::vector<double> spread(size_t n) const;
};

/// @return the histogram family `family`'s samples summed over every label set whose labels include
/// `match` (each pair must be present with that value; the `le` label aside), or kParse naming the family
/// for buckets that are not numbers, bound sets that differ between label sets, counts that decrease with
/// `le`, a missing +Inf bucket or a family that is not a histogram. nullopt: no sample matches.
Result<std::optional<Histogram>> read_histogram(
    const MetricFamily& family, const std::vector<std::pair<std::string, std::string>>& match = {});

/// @return the sum of the family's plain samples (a counter's or gauge's, not a histogram's) over every label
/// set matching `match`; nullopt when none matches. kParse naming the family for a value that is not finite.
Result<std::optional<double>> read_sum(const MetricFamily& family,
                                       const std::vector<std::pair<std::string, std::string>>& match = {});

}  // namespace joule::metrics
