// SPDX-License-Identifier: Apache-2.0
// The Prometheus text exposition parser: what vLLM, SGLang and TGI serve, and every malformed line refused
// with its line number.
#include "joule/metrics/exposition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace joule::metrics {
namespace {

constexpr const char* kVllmText =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} 1200.0
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B"} 1.7e9
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 8.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.5
)";

TEST(Exposition, ReadsFamiliesTypesLabelsAndValues) {
  const auto parsed = parse_exposition(kVllmText, "vllm").value();
  ASSERT_EQ(parsed.families.size(), 3u);
  const MetricFamily* running = parsed.find("vllm:num_requests_running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->type, MetricType::kGauge);
  ASSERT_EQ(running->samples.size(), 1u);
  EXPECT_EQ(running->samples[0].label("model_name").value(), "meta-llama/Llama-3.1-8B");
  EXPECT_DOUBLE_EQ(read_sum(*running).value().value(), 3);
  // A counter's _created sample is not part of its value.
  const MetricFamily* prompt = parsed.find("vllm:prompt_tokens_total");
  ASSERT_NE(prompt, nullptr);
  EXPECT_DOUBLE_EQ(read_sum(*prompt).value().value(), 1200);
  EXPECT_EQ(parsed.sample_count(), 8u);
}

TEST(Exposition, FindsACounterByEitherName) {
  // OpenMetrics names the family without _total, its sample with it; 0.0.4 names both with it.
  const auto open_metrics =
      parse_exposition("# TYPE a counter\na_total 5\n# EOF\nignored garbage {\n", "x").value();
  ASSERT_NE(open_metrics.find("a_total"), nullptr);
  EXPECT_DOUBLE_EQ(read_sum(*open_metrics.find("a_total")).value().value(), 5);
  const auto classic = parse_exposition("# TYPE a_total counter\na_total 5\n", "x").value();
  ASSERT_NE(classic.find("a"), nullptr);
}

TEST(Exposition, ReadsAHistogramAndItsQuantiles) {
  const auto parsed = parse_exposition(kVllmText, "vllm").value();
  const auto histogram = read_histogram(*parsed.find("vllm:time_to_first_token_seconds")).value().value();
  ASSERT_EQ(histogram.buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(histogram.count, 10);
  EXPECT_DOUBLE_EQ(histogram.sum, 2.5);
  // Linear within a bucket, as Prometheus's histogram_quantile(): rank 5 of 10 is 3/6 of the (0.1, 0.5]
  // bucket.
  EXPECT_NEAR(histogram.quantile(0.5).value(), 0.1 + 0.4 * 3.0 / 6.0, 1e-12);
  // In the +Inf bucket: the highest finite bound.
  EXPECT_DOUBLE_EQ(histogram.quantile(0.99).value(), 0.5);
  EXPECT_FALSE(Histogram{}.quantile(0.5).has_value());
}

// Four observations of 30 ms in vLLM's (25 ms, 50 ms] TPOT bucket: interpolation alone spreads them over the
// bucket (mean 37.5 ms); spread() pulls them towards the exact mean, each kept within its bucket.
TEST(Exposition, SpreadsAHistogramAroundItsExactMean) {
  Histogram histogram;
  histogram.buckets = {{0.01, 0}, {0.025, 0}, {0.05, 4}, {std::numeric_limits<double>::infinity(), 4}};
  histogram.count = 4;
  histogram.sum = 0.12;
  const std::vector<double> values = histogram.spread(4);
  ASSERT_EQ(values.size(), 4u);
  double total = 0;
  for (const double value : values) {
    EXPECT_GE(value, 0.025);
    EXPECT_LE(value, 0.05);
    total += value;
  }
  EXPECT_TRUE(std::is_sorted(values.begin(), values.end()));
  EXPECT_NEAR(total / 4, 0.030625, 1e-9);  // the lowest is held at the bucket's bound 25 ms
  // Where the interpolation is right already, nothing moves.
  histogram.sum = 4 * histogram.quantile(0.5).value();
  const std::vector<double> centred = histogram.spread(4);
  EXPECT_NEAR(centred.front(), histogram.quantile(0.125).value(), 1e-12);
  EXPECT_NEAR(centred.back(), histogram.quantile(0.875).value(), 1e-12);
  // In the +Inf bucket: the highest finite bound. Nothing observed, or nothing asked: nothing.
  histogram.buckets.back().cumulative_count = 8;
  histogram.count = 8;
  EXPECT_DOUBLE_EQ(histogram.spread(8).back(), 0.05);
  EXPECT_TRUE(Histogram{}.spread(3).empty());
  EXPECT_TRUE(histogram.spread(0).empty());
}

TEST(Exposition, SumsHistogramsOverLabelSetsAndFiltersByLabel) {
  const std::string text =
      "# TYPE h histogram\n"
      "h_bucket{engine=\"0\",le=\"1\"} 1\nh_bucket{engine=\"0\",le=\"+Inf\"} 2\nh_count{engine=\"0\"} 2\n"
      "h_sum{engine=\"0\"} 3\n"
      "h_bucket{engine=\"1\",le=\"1\"} 4\nh_bucket{engine=\"1\",le=\"+Inf\"} 4\nh_count{engine=\"1\"} 4\n"
      "h_sum{engine=\"1\"} 2\n";
  const auto parsed = parse_exposition(text, "x").value();
  const auto all = read_histogram(*parsed.find("h")).value().value();
  EXPECT_DOUBLE_EQ(all.buckets[0].cumulative_count, 5);
  EXPECT_DOUBLE_EQ(all.count, 6);
  const auto one = read_histogram(*parsed.find("h"), {{"engine", "1"}}).value().value();
  EXPECT_DOUBLE_EQ(one.count, 4);
  EXPECT_FALSE(read_histogram(*parsed.find("h"), {{"engine", "9"}}).value().has_value());
}

TEST(Exposition, TakesEscapesSpecialValuesTimestampsAndExemplars) {
  const auto parsed = parse_exposition(
                          "a{path=\"C:\\\\x\",q=\"say \\\"hi\\\"\",n=\"1\\n2\",} +Inf 1700000000000\n"
                          "b NaN\nc -Inf\nd 1e3 # {trace_id=\"x\"} 1.0\n",
                          "x")
                          .value();
  const ExpositionSample& a = parsed.find("a")->samples[0];
  EXPECT_EQ(a.label("path").value(), "C:\\x");
  EXPECT_EQ(a.label("q").value(), "say \"hi\"");
  EXPECT_EQ(a.label("n").value(), "1\n2");
  EXPECT_TRUE(std::isinf(a.value));
  EXPECT_TRUE(std::isnan(parsed.find("b")->samples[0].value));
  EXPECT_DOUBLE_EQ(parsed.find("d")->samples[0].value, 1000);
  // A value that is not finite is no count.
  const auto sum = read_sum(*parsed.find("a"));
  ASSERT_FALSE(sum.has_value());
  EXPECT_EQ(sum.error().message(), "a: the value inf is not finite");
}

struct BadText {
  const char* text;
  const char* message;
};

class ExpositionBadInput : public testing::TestWithParam<BadText> {};

TEST_P(ExpositionBadInput, IsRefusedNamingTheLine) {
  const auto parsed = parse_exposition(GetParam().text, "http://e/metrics");
  ASSERT_FALSE(parsed.has_value()) << GetParam().text;
  EXPECT_EQ(parsed.error().code(), ErrorCode::kParse);
  EXPECT_EQ(parsed.error().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Lines, ExpositionBadInput,
    testing::Values(
        BadText{"<html>hello</html>\n",
                "http://e/metrics:1: not a sample, comment or TYPE line: \"<html>hello</html>\""},
        BadText{"ok 1\nbad{a=\"1} 2\n", "http://e/metrics:2: bad: label a: the value has no closing quote"},
        BadText{"x{a=1} 2\n", "http://e/metrics:1: x: label a has no quoted value"},
        BadText{"x{a=\"\\t\"} 2\n", "http://e/metrics:1: x: label a: unknown escape \\t"},
        BadText{"x{a=\"1\",a=\"2\"} 2\n", "http://e/metrics:1: x: label a given twice"},
        BadText{"x{a=\"1\" 2\n", "http://e/metrics:1: x: the labels are not closed by }"},
        BadText{"x twelve\n", "http://e/metrics:1: x: the value \"twelve\" is not a number"},
        BadText{"x\n", "http://e/metrics:1: x: no value after the name"},
        BadText{"x 1 2 3\n", "http://e/metrics:1: x: unexpected text after the value: \"2 3\""},
        BadText{"# TYPE x gauge\n# TYPE x counter\n", "http://e/metrics:2: x: a second TYPE line"},
        BadText{"# TYPE x flux\n", "http://e/metrics:1: x: unknown metric type \"flux\""},
        BadText{"# TYPE 9x gauge\n", "http://e/metrics:1: a TYPE line without a valid metric name"},
        BadText{"x 0x1p3\n", "http://e/metrics:1: x: the value \"0x1p3\" is not a number"}));

TEST(Exposition, BoundsWhatOneParseKeeps) {
  ExpositionLimits limits;
  limits.max_samples = 2;
  auto parsed = parse_exposition("a 1\nb 2\nc 3\n", "x", limits);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().message(), "x:3: more than 2 samples, the most accepted");
  limits = {};
  limits.max_line_bytes = 10;
  parsed = parse_exposition("a 1\nbbbbbbbbbbbbbbbbbb 2\n", "x", limits);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().message(), "x:2: a line of more than 10 bytes, the most accepted");
  limits = {};
  limits.max_labels = 1;
  parsed = parse_exposition("a{x=\"1\",y=\"2\"} 1\n", "x", limits);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().message(), "x:1: a: more than 1 labels, the most accepted");
}

TEST(Exposition, RefusesHistogramsThatAreNotOnes) {
  auto parsed =
      parse_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n", "x").value();
  auto histogram = read_histogram(*parsed.find("h"));
  ASSERT_FALSE(histogram.has_value());
  EXPECT_EQ(histogram.error().message(), "h: the bucket le=inf counts 2, fewer than the bucket below it (3)");
  parsed = parse_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 3\n", "x").value();
  histogram = read_histogram(*parsed.find("h"));
  ASSERT_FALSE(histogram.has_value());
  EXPECT_EQ(histogram.error().message(), "h: a label set without its le=\"+Inf\" bucket");
  parsed = parse_exposition("# TYPE h gauge\nh 1\n", "x").value();
  histogram = read_histogram(*parsed.find("h"));
  ASSERT_FALSE(histogram.has_value());
  EXPECT_EQ(histogram.error().message(), "h: expected a histogram, got a gauge");
  parsed = parse_exposition("# TYPE h histogram\nh_bucket{le=\"x\"} 3\n", "x").value();
  EXPECT_EQ(read_histogram(*parsed.find("h")).error().message(), "h: a bucket without a numeric le label");
}

}  // namespace
}  // namespace joule::metrics
