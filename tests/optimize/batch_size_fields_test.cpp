// SPDX-License-Identifier: Apache-2.0
// RegistrationFields: the fields `joule job register` gives on top of a JobSpec body.
#include "joule/optimize/batch_size_fields.hpp"

#include <gtest/gtest.h>

#include "joule/optimize/batch_size.hpp"

namespace joule::optimize::batch_size {
namespace {

using nlohmann::json;

TEST(BatchSizeRegistrationFields, NothingSetLeavesTheBodyAsItIs) {
  json body = {{"job_id_prefix", "file"}, {"eta_knob", 0.25}, {"extra", "kept"}};
  const json before = body;
  RegistrationFields{}.write_to(body);
  EXPECT_EQ(body, before);
  json empty = json::object();
  RegistrationFields{}.write_to(empty);
  EXPECT_EQ(empty, json::object());
}

TEST(BatchSizeRegistrationFields, SetFieldsGoOnTopUnderZeusNames) {
  json body = {{"job_id_prefix", "file"}, {"eta_knob", 0.25}, {"max_epochs", 7}, {"extra", "kept"}};
  RegistrationFields fields;
  fields.job_id = "mnist-1";
  fields.job_id_prefix = "mnist";
  fields.batch_sizes = std::vector<int64_t>{32, 64};
  fields.default_batch_size = 64;
  fields.eta_knob = 0.5;
  fields.beta_knob = 3.0;
  fields.target_metric = 0.9;
  fields.higher_is_better_metric = false;
  fields.num_pruning_rounds = 3;
  fields.window_size = 4;
  fields.mab_prior_mean = 1.5;
  fields.mab_prior_precision = 2.5;
  fields.mab_num_explorations = 5;
  fields.mab_seed = 123;
  fields.max_power = 600.0;
  fields.number_of_gpus = 2;
  fields.gpu_model = "NVIDIA A40";
  fields.write_to(body);
  const json expected = {{"job_id", "mnist-1"},
                         {"job_id_prefix", "mnist"},
                         {"batch_sizes", {32, 64}},
                         {"default_batch_size", 64},
                         {"eta_knob", 0.5},
                         {"beta_knob", 3.0},
                         {"target_metric", 0.9},
                         {"higher_is_better_metric", false},
                         {"max_epochs", 7},
                         {"num_pruning_rounds", 3},
                         {"window_size", 4},
                         {"mab_prior_mean", 1.5},
                         {"mab_prior_precision", 2.5},
                         {"mab_num_explorations", 5},
                         {"mab_seed", 123},
                         {"max_power", 600.0},
                         {"number_of_gpus", 2},
                         {"gpu_model", "NVIDIA A40"},
                         {"extra", "kept"}};
  EXPECT_EQ(body, expected);
  // The body is a valid registration: the names are JobSpec's and GpuConfig's.
  const Result<JobSpec> spec = JobSpec::from_json(body);
  ASSERT_TRUE(spec) << spec.error().message();
  EXPECT_EQ(spec->beta_knob, 3.0);
  EXPECT_EQ(spec->max_epochs, 7);
  const Result<GpuConfig> gpu = GpuConfig::from_json(body);
  ASSERT_TRUE(gpu) << gpu.error().message();
  EXPECT_EQ(gpu->number_of_gpus, 2);
}

TEST(BatchSizeRegistrationFields, NoEarlyStopWritesANullBetaOverAGivenOne) {
  json body = {{"beta_knob", 2.0}};
  RegistrationFields fields;
  fields.beta_knob = 5.0;
  fields.no_early_stop = true;
  fields.write_to(body);
  EXPECT_TRUE(body.at("beta_knob").is_null());
}

}  // namespace
}  // namespace joule::optimize::batch_size
