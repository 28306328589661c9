// SPDX-License-Identifier: Apache-2.0
#include "joule/metrics/exposition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "joule/core/strings.hpp"

namespace joule::metrics {

namespace {

constexpr std::string_view kFamilySuffixes[] = {"_bucket", "_sum", "_count", "_total", "_created", "_info"};

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

std::string_view skip_blanks(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && is_blank(text[i])) {
    ++i;
  }
  return text.substr(i);
}

// Reads a name (metric or label) at the start of `text`; empty if none.
std::string_view take_name(std::string_view& text, bool label) {
  size_t i = 0;
  if (text.empty() || !is_name_start(text[0]) || (label && text[0] == ':')) {
    return {};
  }
  while (i < text.size() && is_name_char(text[i]) && !(label && text[i] == ':')) {
    ++i;
  }
  const std::string_view name = text.substr(0, i);
  text.remove_prefix(i);
  return name;
}

std::optional<MetricType> parse_type(std::string_view word) {
  static constexpr std::pair<std::string_view, MetricType> kTypes[] = {
      {"counter", MetricType::kCounter},     {"gauge", MetricType::kGauge},
      {"info", MetricType::kGauge},          {"stateset", MetricType::kGauge},
      {"histogram", MetricType::kHistogram}, {"summary", MetricType::kSummary},
      {"untyped", MetricType::kUntyped},     {"unknown", MetricType::kUntyped}};
  for (const auto& [name, type] : kTypes) {
    if (word == name) {
      return type;
    }
  }
  return std::nullopt;
}

// A sample value or timestamp: Go's ParseFloat forms, including +Inf, -Inf and NaN in any case.
std::optional<double> parse_value(std::string_view word) {
  bool negative = false;
  std::string_view digits = word;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  const std::string lower = to_lower(std::string(digits));
  if (lower == "inf" || lower == "infinity") {
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (lower == "nan") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (digits.empty() || digits[0] == '+' || digits[0] == '-') {
    return std::nullopt;
  }
  double value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || lower.find('n') != std::string::npos) {
    return std::nullopt;  // from_chars takes "nan(…)" and "infinity" forms; the format does not
  }
  return negative ? -value : value;
}

class Parser {
 public:
  Parser(std::string_view source, const ExpositionLimits& limits) : source_(source), limits_(limits) {}

  Result<Exposition> run(std::string_view text) {
    size_t line_number = 0;
    while (!text.empty()) {
      ++line_number;
      const size_t end = text.find('\n');
      std::string_view line = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
      if (line.size() > limits_.max_line_bytes) {
        return error(line_number,
                     fmt::format("a line of more than {} bytes, the most accepted", limits_.max_line_bytes));
      }
      if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
      }
      line = skip_blanks(line);
      if (line.empty()) {
        continue;
      }
      if (line[0] == '#') {
        if (line == "# EOF") {
          break;
        }
        JOULE_TRY(comment(line, line_number));
        continue;
      }
      JOULE_TRY(sample(line, line_number));
    }
    return std::move(exposition_);
  }

 private:
  tl::unexpected<Error> error(size_t line, std::string_view why) const {
    return fail(ErrorCode::kParse, "{}:{}: {}", source_, line, why);
  }

  Result<size_t> family_index(std::string_view name, MetricType type, size_t line) {
    if (const auto found = index_.find(std::string(name)); found != index_.end()) {
      return found->second;
    }
    if (exposition_.families.size() >= limits_.max_families) {
      return error(line,
                   fmt::format("more than {} metric families, the most accepted", limits_.max_families));
    }
    exposition_.families.push_back({std::string(name), type, {}});
    index_.emplace(std::string(name), exposition_.families.size() - 1);
    return exposition_.families.size() - 1;
  }

  Result<void> comment(std::string_view line, size_t line_number) {
    std::string_view rest = skip_blanks(line.substr(1));
    const bool is_type = rest.starts_with("TYPE") && rest.size() > 4 && is_blank(rest[4]);
    if (!is_type) {
      return {};  // HELP, UNIT and free comments say nothing the parse keeps
    }
    rest = skip_blanks(rest.substr(4));
    const std::string_view name = take_name(rest, false);
    if (name.empty() || (!rest.empty() && !is_blank(rest[0]))) {
      return error(line_number, "a TYPE line without a valid metric name");
    }
    if (name.size() > limits_.max_name_bytes) {
      return error(line_number, fmt::format("a metric name of more than {} bytes", limits_.max_name_bytes));
    }
    rest = skip_blanks(rest);
    while (!rest.empty() && is_blank(rest.back())) {
      rest.remove_suffix(1);
    }
    const auto type = parse_type(rest);
    if (!type) {
      return error(line_number, fmt::format("{}: unknown metric type {}", name, quoted_excerpt(rest, 40)));
    }
    if (const auto found = index_.find(std::string(name)); found != index_.end()) {
      const MetricFamily& family = exposition_.families[found->second];
      return error(line_number, family.samples.empty()
                                    ? fmt::format("{}: a second TYPE line", name)
                                    : fmt::format("{}: a TYPE line after the family's samples", name));
    }
    const size_t index = JOULE_TRY(family_index(name, *type, line_number));
    current_ = index;
    return {};
  }

  // The family a sample named `name` belongs to: the TYPE'd family it extends with a suffix, else its own.
  std::optional<size_t> typed_family(std::string_view name) const {
    if (const auto found = index_.find(std::string(name)); found != index_.end()) {
      return found->second;
    }
    for (const std::string_view suffix : kFamilySuffixes) {
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        const std::string base(name.substr(0, name.size() - suffix.size()));
        // A counter's _created sample extends its family, named with _total in the 0.0.4 format.
        for (const std::string& family_name : {base, base + "_total"}) {
          const auto found = index_.find(family_name);
          if (found != index_.end() && exposition_.families[found->second].type != MetricType::kUntyped) {
            return found->second;
          }
        }
      }
    }
    return std::nullopt;
  }

  Result<void> labels(std::string_view& rest, ExpositionSample& sample, size_t line_number) const {
    rest.remove_prefix(1);  // '{'
    while (true) {
      rest = skip_blanks(rest);
      if (!rest.empty() && rest[0] == '}') {
        rest.remove_prefix(1);
        return {};
      }
      const std::string_view key = take_name(rest, true);
      if (key.empty()) {
        return error(line_number, fmt::format("{}: a label without a valid name", sample.name));
      }
      if (key.size() > limits_.max_name_bytes) {
        return error(line_number, fmt::format("a label name of more than {} bytes", limits_.max_name_bytes));
      }
      rest = skip_blanks(rest);
      if (rest.size() < 2 || rest[0] != '=' || skip_blanks(rest.substr(1)).empty() ||
          skip_blanks(rest.substr(1))[0] != '"') {
        return error(line_number, fmt::format("{}: label {} has no quoted value", sample.name, key));
      }
      rest = skip_blanks(rest.substr(1)).substr(1);
      std::string value;
      bool closed = false;
      while (!rest.empty()) {
        const char c = rest[0];
        rest.remove_prefix(1);
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (rest.empty()) {
          break;
        }
        const char escaped = rest[0];
        rest.remove_prefix(1);
        if (escaped == 'n') {
          value.push_back('\n');
        } else if (escaped == '\\' || escaped == '"') {
          value.push_back(escaped);
        } else {
          return error(line_number, fmt::format("{}: label {}: unknown escape \\{}", sample.name, key,
                                                printable_char(escaped)));
        }
      }
      if (!closed) {
        return error(line_number,
                     fmt::format("{}: label {}: the value has no closing quote", sample.name, key));
      }
      if (sample.labels.size() >= limits_.max_labels) {
        return error(line_number, fmt::format("{}: more than {} labels, the most accepted", sample.name,
                                              limits_.max_labels));
      }
      if (std::any_of(sample.labels.begin(), sample.labels.end(),
                      [&](const auto& l) { return l.first == key; })) {
        return error(line_number, fmt::format("{}: label {} given twice", sample.name, key));
      }
      sample.labels.emplace_back(std::string(key), std::move(value));
      rest = skip_blanks(rest);
      if (!rest.empty() && rest[0] == ',') {
        rest.remove_prefix(1);
      } else if (rest.empty() || rest[0] != '}') {
        return error(line_number, fmt::format("{}: the labels are not closed by }}", sample.name));
      }
    }
  }

  static std::string printable_char(char c) {
    return (c >= 0x20 && c < 0x7f) ? std::string(1, c)
                                   : fmt::format("x{:02x}", static_cast<unsigned char>(c));
  }

  Result<void> sample(std::string_view line, size_t line_number) {
    std::string_view rest = line;
    const std::string_view name = take_name(rest, false);
    if (name.empty()) {
      return error(line_number,
                   fmt::format("not a sample, comment or TYPE line: {}", quoted_excerpt(line, 60)));
    }
    if (name.size() > limits_.max_name_bytes) {
      return error(line_number, fmt::format("a metric name of more than {} bytes", limits_.max_name_bytes));
    }
    if (sample_count_ >= limits_.max_samples) {
      return error(line_number, fmt::format("more than {} samples, the most accepted", limits_.max_samples));
    }
    ExpositionSample sample;
    sample.name = std::string(name);
    if (!rest.empty() && rest[0] == '{') {
      JOULE_TRY(labels(rest, sample, line_number));
    }
    if (rest.empty() || !is_blank(rest[0])) {
      return error(line_number, fmt::format("{}: no value after the name", sample.name));
    }
    rest = skip_blanks(rest);
    if (const size_t exemplar = rest.find(" #"); exemplar != std::string_view::npos) {
      rest = rest.substr(0, exemplar);  // an OpenMetrics exemplar: not kept
    }
    const size_t value_end = std::min(rest.find_first_of(" \t"), rest.size());
    const std::string_view value_text = rest.substr(0, value_end);
    const auto value = parse_value(value_text);
    if (!value) {
      return error(line_number, fmt::format("{}: the value {} is not a number", sample.name,
                                            quoted_excerpt(value_text, 40)));
    }
    rest = skip_blanks(rest.substr(value_end));
    if (!rest.empty()) {
      const std::string_view timestamp = rest.substr(0, std::min(rest.find_first_of(" \t"), rest.size()));
      if (!parse_value(timestamp) || !skip_blanks(rest.substr(timestamp.size())).empty()) {
        return error(line_number, fmt::format("{}: unexpected text after the value: {}", sample.name,
                                              quoted_excerpt(rest, 40)));
      }
    }
    sample.value = *value;
    size_t index = 0;
    if (current_ && exposition_.families[*current_].samples.empty() == false &&
        typed_family(name) == current_) {
      index = *current_;
    } else if (const auto typed = typed_family(name)) {
      index = *typed;
    } else {
      index = JOULE_TRY(family_index(name, MetricType::kUntyped, line_number));
    }
    exposition_.families[index].samples.push_back(std::move(sample));
    ++sample_count_;
    return {};
  }

  std::string_view source_;
  const ExpositionLimits& limits_;
  Exposition exposition_;
  std::unordered_map<std::string, size_t> index_;
  std::optional<size_t> current_;
  size_t sample_count_ = 0;
};

bool matches(const ExpositionSample& sample, const std::vector<std::pair<std::string, std::string>>& match) {
  return std::all_of(match.begin(), match.end(), [&](const auto& wanted) {
    const auto value = sample.label(wanted.first);
    return value && *value == wanted.second;
  });
}

// The sample's labels without `le`, as one key.
std::string label_key(const ExpositionSample& sample) {
  std::vector<std::pair<std::string, std::string>> labels;
  for (const auto& label : sample.labels) {
    if (label.first != "le") {
      labels.push_back(label);
    }
  }
  std::sort(labels.begin(), labels.end());
  std::string key;
  for (const auto& [name, value] : labels) {
    key += name;
    key += '\x1f';
    key += value;
    key += '\x1e';
  }
  return key;
}

}  // namespace

std::string_view to_string(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kUntyped:
      break;
  }
  return "untyped";
}

std::optional<std::string_view> ExpositionSample::label(std::string_view key) const {
  for (const auto& [label_name, label_value] : labels) {
    if (label_name == key) {
      return std::string_view(label_value);
    }
  }
  return std::nullopt;
}

const MetricFamily* Exposition::find(std::string_view name) const {
  for (const MetricFamily& family : families) {
    if (family.name == name) {
      return &family;
    }
  }
  for (const MetricFamily& family : families) {
    if (family.type != MetricType::kCounter && family.type != MetricType::kUntyped) {
      continue;
    }
    if ((name.ends_with("_total") && family.name == name.substr(0, name.size() - 6)) ||
        (family.name.ends_with("_total") && family.name.substr(0, family.name.size() - 6) == name)) {
      return &family;
    }
  }
  return nullptr;
}

size_t Exposition::sample_count() const {
  size_t count = 0;
  for (const MetricFamily& family : families) {
    count += family.samples.size();
  }
  return count;
}

Result<Exposition> parse_exposition(std::string_view text, std::string_view source,
                                    const ExpositionLimits& limits) {
  return Parser(source, limits).run(text);
}

namespace {

// A quantile's estimate and the bounds of the bucket it falls in.
struct QuantileInBucket {
  double value = 0;
  double lower_bound = 0;
  double upper_bound = 0;
};

std::optional<QuantileInBucket> quantile_in_bucket(const Histogram& histogram, double q) {
  const std::vector<HistogramBucket>& buckets = histogram.buckets;
  if (buckets.empty() || histogram.count <= 0 || buckets.back().cumulative_count <= 0) {
    return std::nullopt;
  }
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * buckets.back().cumulative_count;
  double lower_bound = 0;
  double lower_count = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const HistogramBucket& bucket = buckets[i];
    if (bucket.cumulative_count >= rank) {
      if (std::isinf(bucket.upper_bound)) {
        const double highest = i == 0 ? 0.0 : buckets[i - 1].upper_bound;
        return QuantileInBucket{highest, highest, highest};
      }
      const double in_bucket = bucket.cumulative_count - lower_count;
      const double start = (i == 0 && bucket.upper_bound <= 0) ? bucket.upper_bound : lower_bound;
      if (in_bucket <= 0) {
        return QuantileInBucket{bucket.upper_bound, start, bucket.upper_bound};
      }
      return QuantileInBucket{start + (bucket.upper_bound - start) * (rank - lower_count) / in_bucket, start,
                              bucket.upper_bound};
    }
    lower_bound = bucket.upper_bound;
    lower_count = bucket.cumulative_count;
  }
  const double highest = buckets.back().upper_bound;
  return QuantileInBucket{highest, highest, highest};
}

}  // namespace

std::optional<double> Histogram::quantile(double q) const {
  const auto estimate = quantile_in_bucket(*this, q);
  return estimate ? std::optional<double>(estimate->value) : std::nullopt;
}

std::vector<double> Histogram::spread(size_t n) const {
  std::vector<QuantileInBucket> estimates;
  double interpolated_sum = 0;
  for (size_t k = 0; k < n; ++k) {
    const auto estimate = quantile_in_bucket(*this, (static_cast<double>(k) + 0.5) / static_cast<double>(n));
    if (!estimate) {
      return {};
    }
    estimates.push_back(*estimate);
    interpolated_sum += estimate->value;
  }
  const double exact_mean = count > 0 ? sum / count : 0;
  const double interpolated_mean = n > 0 ? interpolated_sum / static_cast<double>(n) : 0;
  const double scale = std::isfinite(exact_mean) && exact_mean > 0 && interpolated_mean > 0
                           ? exact_mean / interpolated_mean
                           : 1.0;
  std::vector<double> values;
  values.reserve(n);
  for (const QuantileInBucket& estimate : estimates) {
    values.push_back(std::clamp(estimate.value * scale, estimate.lower_bound, estimate.upper_bound));
  }
  return values;
}

Result<std::optional<Histogram>> read_histogram(
    const MetricFamily& family, const std::vector<std::pair<std::string, std::string>>& match) {
  if (family.type != MetricType::kHistogram) {
    return fail(ErrorCode::kParse, "{}: expected a histogram, got a {}", family.name, to_string(family.type));
  }
  struct Series {
    std::map<double, double> buckets;
    double count = 0;
    double sum = 0;
  };
  std::map<std::string, Series> series;
  const std::string bucket_name = family.name + "_bucket";
  const std::string count_name = family.name + "_count";
  const std::string sum_name = family.name + "_sum";
  for (const ExpositionSample& sample : family.samples) {
    if (!matches(sample, match)) {
      continue;
    }
    Series& one = series[label_key(sample)];
    if (!std::isfinite(sample.value) || sample.value < 0) {
      if (!(sample.name == sum_name && std::isfinite(sample.value))) {
        return fail(ErrorCode::kParse, "{}: {} is {}, not a count", family.name, sample.name, sample.value);
      }
    }
    if (sample.name == bucket_name) {
      const auto le = sample.label("le");
      const auto bound = le ? parse_value(*le) : std::nullopt;
      if (!bound || std::isnan(*bound)) {
        return fail(ErrorCode::kParse, "{}: a bucket without a numeric le label", family.name);
      }
      one.buckets[*bound] = sample.value;
    } else if (sample.name == count_name) {
      one.count = sample.value;
    } else if (sample.name == sum_name) {
      one.sum = sample.value;
    }
  }
  if (series.empty()) {
    return std::optional<Histogram>();
  }
  Histogram histogram;
  const std::map<double, double>* first_bounds = nullptr;
  for (const auto& [key, one] : series) {
    if (one.buckets.empty() || !std::isinf(one.buckets.rbegin()->first)) {
      return fail(ErrorCode::kParse, "{}: a label set without its le=\"+Inf\" bucket", family.name);
    }
    if (first_bounds == nullptr) {
      first_bounds = &one.buckets;
      for (const auto& [bound, count] : one.buckets) {
        histogram.buckets.push_back({bound, 0});
      }
    } else if (one.buckets.size() != first_bounds->size() ||
               !std::equal(one.buckets.begin(), one.buckets.end(), first_bounds->begin(),
                           [](const auto& a, const auto& b) { return a.first == b.first; })) {
      return fail(ErrorCode::kParse, "{}: label sets with different bucket bounds", family.name);
    }
    double previous = 0;
    size_t i = 0;
    for (const auto& [bound, count] : one.buckets) {
      if (count < previous) {
        return fail(ErrorCode::kParse, "{}: the bucket le={} counts {}, fewer than the bucket below it ({})",
                    family.name, bound, count, previous);
      }
      previous = count;
      histogram.buckets[i++].cumulative_count += count;
    }
    histogram.count += one.count;
    histogram.sum += one.sum;
  }
  return std::optional<Histogram>(std::move(histogram));
}

Result<std::optional<double>> read_sum(const MetricFamily& family,
                                       const std::vector<std::pair<std::string, std::string>>& match) {
  if (family.type == MetricType::kHistogram || family.type == MetricType::kSummary) {
    return fail(ErrorCode::kParse, "{}: expected a counter or gauge, got a {}", family.name,
                to_string(family.type));
  }
  std::optional<double> total;
  for (const ExpositionSample& sample : family.samples) {
    if (sample.name.ends_with("_created") || !matches(sample, match)) {
      continue;
    }
    if (!std::isfinite(sample.value)) {
      return fail(ErrorCode::kParse, "{}: the value {} is not finite", sample.name, sample.value);
    }
    total = total.value_or(0) + sample.value;
  }
  return total;
}

}  // namespace joule::metrics
