// SPDX-License-Identifier: Apache-2.0
// Workload identity labels: detection from an injected environment, NAME=VALUE parsing and its messages,
// manual labels over detected ones, and MetricsRegistry putting them on every sample of every family.
#include "joule/metrics/identity.hpp"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/metrics/gpu_metrics.hpp"
#include "joule/metrics/registry.hpp"

#include "metrics/metrics_text.hpp"

namespace joule::metrics {
namespace identity_test_detail {

// Restores the process default after each test: it is process-wide, and other tests expect none.
struct IdentityLabelsTest : ::testing::Test {
  void TearDown() override { set_default_identity_labels({}); }
};

std::string parse_error(std::string_view text) {
  const auto parsed = parse_identity_label(text);
  EXPECT_FALSE(parsed) << text;
  return parsed ? std::string() : parsed.error().message();
}

TEST_F(IdentityLabelsTest, DetectsSlurmAndKubernetesVariables) {
  const std::map<std::string, std::string> environment = {
      {"SLURM_JOB_ID", "4242"},
      {"SLURM_JOB_USER", "alice"},
      {"SLURM_JOB_PARTITION", "gpu"},
      {"JOULE_POD_NAME", "llm-0"},
      {"JOULE_POD_NAMESPACE", "serving"},
      {"JOULE_CONTAINER_NAME", "vllm"},
      {"JOULE_NODE_NAME", "node7"},
      // Unprefixed names are other tools' (container runtimes set CONTAINER_NAME): not read.
      {"POD_NAME", "other"},
      {"CONTAINER_NAME", "other"},
      {"NODE_NAME", "other"},
      {"HOME", "/root"},
      {"SLURM_JOB_NAME", "train"}};
  const IdentityLabels expected = {
      {"slurm_job_id", "4242"}, {"slurm_user", "alice"}, {"slurm_partition", "gpu"}, {"pod", "llm-0"},
      {"namespace", "serving"}, {"container", "vllm"},   {"node", "node7"}};
  EXPECT_EQ(detect_identity_labels(environment), expected);
  EXPECT_EQ(identity_sources().size(), expected.size());
}

TEST_F(IdentityLabelsTest, DetectionSkipsEmptyAndInvalidValues) {
  const std::map<std::string, std::string> environment = {
      {"SLURM_JOB_ID", ""}, {"JOULE_POD_NAME", std::string("a\xff", 2)}, {"JOULE_POD_NAMESPACE", "ns-ü"}};
  EXPECT_EQ(detect_identity_labels(environment), (IdentityLabels{{"namespace", "ns-ü"}}));
  EXPECT_TRUE(detect_identity_labels({}).empty());
}

TEST_F(IdentityLabelsTest, ParsesNameEqualsValue) {
  auto parsed = parse_identity_label("team=vision");
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->first, "team");
  EXPECT_EQ(parsed->second, "vision");
  // Only the first '=' splits: the value may hold more.
  parsed = parse_identity_label("_run_2=a=b c");
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->first, "_run_2");
  EXPECT_EQ(parsed->second, "a=b c");
}

TEST_F(IdentityLabelsTest, RefusesBadLabelsWithReasons) {
  EXPECT_EQ(parse_error("team"), "label \"team\" is not NAME=VALUE (e.g. team=vision)");
  EXPECT_EQ(parse_error("1team=a"),
            "label name \"1team\" is not a Prometheus label name: it must match [a-zA-Z_][a-zA-Z0-9_]*");
  EXPECT_EQ(parse_error("te-am=a"),
            "label name \"te-am\" is not a Prometheus label name: it must match [a-zA-Z_][a-zA-Z0-9_]*");
  EXPECT_EQ(parse_error("=a"),
            "label name \"\" is not a Prometheus label name: it must match [a-zA-Z_][a-zA-Z0-9_]*");
  EXPECT_EQ(parse_error("__name__=x"),
            "label name '__name__' starts with '__', which Prometheus reserves for its own use");
  EXPECT_EQ(parse_error("team="),
            "label 'team' has an empty value (Prometheus treats an empty label as absent); give a value");
  EXPECT_EQ(parse_error(std::string("team=\xc3", 6)),
            "label 'team' has a value that is not valid UTF-8: \"\\xc3\"");
  EXPECT_EQ(
      parse_error("job=train"),
      "label name 'job' is set by Prometheus on every scraped sample; choose another name, e.g. 'job_name'");
  EXPECT_EQ(parse_error("instance=a"),
            "label name 'instance' is set by Prometheus on every scraped sample; choose another name, e.g. "
            "'instance_name'");
  for (const char* own : {"gpu", "uuid", "name", "reason", "cpu", "model", "le"}) {
    const std::string message = parse_error(std::string(own) + "=x");
    EXPECT_TRUE(message.starts_with(
        fmt::format("label name '{}' is one of the exporters' own labels (backend, cpu, ", own)))
        << message;
    EXPECT_TRUE(message.ends_with("); choose another name")) << message;
  }
}

TEST_F(IdentityLabelsTest, ManualLabelsOverrideDetectedOnes) {
  const IdentityLabels detected = {{"slurm_job_id", "1"}, {"slurm_user", "alice"}};
  const auto merged = merge_identity_labels(detected, {"slurm_job_id=2", "team=a", "team=b"});
  ASSERT_TRUE(merged) << merged.error().message();
  EXPECT_EQ(*merged, (IdentityLabels{{"slurm_job_id", "2"}, {"slurm_user", "alice"}, {"team", "b"}}));
  const auto bad = merge_identity_labels(detected, {"team=a", "gpu=0"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(bad.error().message().starts_with("label name 'gpu' is one of")) << bad.error().message();
}

TEST_F(IdentityLabelsTest, RegistryLabelsEverySampleOfEveryFamily) {
  auto clock = std::make_shared<VirtualClock>();
  auto sims = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100"), clock));
  std::vector<device::Gpu*> gpus = {sims[0].get(), sims[1].get()};
  MetricsRegistry registry;
  registry.add_collector(std::make_shared<GpuMetrics>(gpus, *clock));
  auto& counter_family =
      prometheus::BuildCounter().Name("joule_test_things_total").Help("things").Register(registry.registry());
  counter_family.Add({}).Increment(3);
  // A sample that has a label of the identity's name keeps its own value.
  auto& gauge_family =
      prometheus::BuildGauge().Name("joule_test_team").Help("team").Register(registry.registry());
  gauge_family.Add({{"team", "own"}}).Set(1);
  clock->advance(std::chrono::seconds(10));

  set_default_identity_labels({{"slurm_job_id", "4242"}, {"team", "vision"}});
  const auto exposition = test::parse_exposition(registry.render());
  size_t samples = 0;
  for (const auto& sample : exposition.samples) {
    ++samples;
    EXPECT_EQ(sample.labels.at("slurm_job_id"), "4242") << sample.name;
    EXPECT_EQ(sample.labels.at("team"), sample.name == "joule_test_team" ? "own" : "vision") << sample.name;
  }
  EXPECT_GT(samples, 8u);
  EXPECT_TRUE(exposition.value("joule_gpu_energy_joules_total", {{"gpu", "1"}, {"slurm_job_id", "4242"}}));
  EXPECT_EQ(exposition.value("joule_test_things_total", {{"team", "vision"}}), 3.0);

  // The registry's own labels replace the default; an empty set turns them off.
  registry.set_identity_labels({{"pod", "llm-0"}});
  auto labelled = test::parse_exposition(registry.render());
  EXPECT_TRUE(labelled.value("joule_test_things_total", {{"pod", "llm-0"}}));
  EXPECT_FALSE(labelled.value("joule_test_things_total", {{"slurm_job_id", "4242"}}));
  registry.set_identity_labels({});
  EXPECT_EQ(registry.render().find("slurm_job_id"), std::string::npos);
  EXPECT_EQ(registry.render().find("pod="), std::string::npos);
}

TEST_F(IdentityLabelsTest, NoLabelsByDefault) {
  MetricsRegistry registry;
  prometheus::BuildCounter()
      .Name("joule_test_plain_total")
      .Help("plain")
      .Register(registry.registry())
      .Add({});
  EXPECT_TRUE(registry.identity_labels().empty());
  EXPECT_NE(registry.render().find("joule_test_plain_total 0"), std::string::npos) << registry.render();
}

}  // namespace identity_test_detail
}  // namespace joule::metrics
