// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

#include "test_util.hpp"

namespace joule::device::sim {
namespace {

TEST(SimSpec, ParsesEveryForm) {
  auto plain = parse_spec("v100");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->count, 1);
  EXPECT_EQ(plain->model->key, "v100");
  EXPECT_EQ(plain->workload->key, "imagenet");
  EXPECT_FALSE(plain->batch_size);

  auto full = parse_spec("4xA40:librispeech:192");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->count, 4);
  EXPECT_EQ(full->model->key, "a40");
  EXPECT_EQ(full->workload->key, "librispeech");
  EXPECT_EQ(*full->batch_size, 192);

  EXPECT_EQ(parse_spec("rtx6000:movielens")->workload->key, "movielens-1m");
  EXPECT_EQ(parse_spec("generic:cifar100:1024")->model->key, "generic");
}

TEST(SimSpec, ErrorsSayWhatIsValid) {
  JOULE_EXPECT_ERROR(
      parse_spec(""), ErrorCode::kInvalidArgument,
      "empty sim spec: expected [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]], e.g. v100 or 4xa40:imagenet:256");
  JOULE_EXPECT_ERROR(
      parse_spec("h200"), ErrorCode::kInvalidArgument,
      "sim spec 'h200': unknown simulated GPU 'h200' (known: v100, a40, p100, rtx6000, generic)");
  JOULE_EXPECT_ERROR(
      parse_spec("v100:mnist"), ErrorCode::kInvalidArgument,
      "sim spec 'v100:mnist': unknown workload 'mnist' (known: cifar100, imagenet, squad, librispeech, "
      "movielens-1m, sentiment140)");
  JOULE_EXPECT_ERROR(
      parse_spec("v100:imagenet:512"), ErrorCode::kInvalidArgument,
      "sim spec 'v100:imagenet:512': no power trace for imagenet at batch size 512 on v100 (available: "
      "8, 16, 32, 64, 128, 192, 256, 360)");
  JOULE_EXPECT_ERROR(parse_spec("v100:imagenet:big"), ErrorCode::kInvalidArgument,
                     "sim spec 'v100:imagenet:big': batch size 'big' is not a positive integer");
  JOULE_EXPECT_ERROR(parse_spec("0xv100"), ErrorCode::kInvalidArgument,
                     "sim spec '0xv100': GPU count '0' is not a positive integer");
  JOULE_EXPECT_ERROR(parse_spec("100xv100"), ErrorCode::kInvalidArgument,
                     "sim spec '100xv100': at most 64 simulated GPUs");
  JOULE_EXPECT_ERROR(
      parse_spec("v100:imagenet:256:x"), ErrorCode::kInvalidArgument,
      "sim spec 'v100:imagenet:256:x' has too many ':' parts: expected [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]], "
      "e.g. v100 or 4xa40:imagenet:256");
  JOULE_EXPECT_ERROR(parse_spec("2x"), ErrorCode::kInvalidArgument,
                     "sim spec '2x' names no GPU: expected [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]], e.g. v100 or "
                     "4xa40:imagenet:256");
}

}  // namespace
}  // namespace joule::device::sim
