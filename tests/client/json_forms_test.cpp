// SPDX-License-Identifier: Apache-2.0
// The JSON form of a job registration's outcome (joule/client/json_forms.hpp).
#include "joule/client/json_forms.hpp"

#include <gtest/gtest.h>

namespace joule::client {
namespace {

TEST(ClientJsonForms, RegisteredJobMergesSpecGpuAndCreated) {
  RegisteredJob registered;
  registered.spec.job_id = "mnist-1";
  registered.spec.job_id_prefix = "mnist";
  registered.spec.batch_sizes = {32, 64};
  registered.spec.default_batch_size = 64;
  registered.gpu = {.max_power = 300, .number_of_gpus = 2, .gpu_model = "NVIDIA A40"};
  registered.created = true;
  const nlohmann::json json = to_json(registered);
  nlohmann::json expected = registered.spec.to_json();
  expected.update(registered.gpu.to_json());
  expected["created"] = true;
  EXPECT_EQ(json, expected);
  EXPECT_EQ(json["job_id"], "mnist-1");
  EXPECT_EQ(json["gpu_model"], "NVIDIA A40");
  EXPECT_EQ(json["number_of_gpus"], 2);
}

}  // namespace
}  // namespace joule::client
