// SPDX-License-Identifier: Apache-2.0
#include "joule/device/visible_devices.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::device {
namespace {

const std::vector<std::string> kUuids = {"GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-aaaa3333-0000"};

std::vector<int> resolve(const char* value) {
  auto visible = parse_visible_devices("CUDA_VISIBLE_DEVICES", value);
  EXPECT_TRUE(visible) << (visible ? "" : visible.error().message());
  auto order = resolve_visible_devices(*visible, kUuids);
  EXPECT_TRUE(order) << (order ? "" : order.error().message());
  return order ? *order : std::vector<int>{};
}

TEST(VisibleDevices, UnsetMeansAllInPhysicalOrder) {
  EXPECT_EQ(resolve(nullptr), (std::vector<int>{0, 1, 2}));
}

TEST(VisibleDevices, EmptyMeansNone) {
  EXPECT_TRUE(resolve("").empty());
}

TEST(VisibleDevices, IndicesReorder) {
  EXPECT_EQ(resolve("2,0"), (std::vector<int>{2, 0}));
  EXPECT_EQ(resolve(" 1 , 2 "), (std::vector<int>{1, 2}));
}

TEST(VisibleDevices, UuidsAndUniquePrefixes) {
  EXPECT_EQ(resolve("GPU-bbbb2222-0000"), (std::vector<int>{1}));
  EXPECT_EQ(resolve("gpu-aaaa3,0"), (std::vector<int>{2, 0}));
}

TEST(VisibleDevices, MalformedListsAreRejectedWithTheEntry) {
  JOULE_EXPECT_ERROR(
      parse_visible_devices("CUDA_VISIBLE_DEVICES", "0,,1"), ErrorCode::kInvalidArgument,
      "CUDA_VISIBLE_DEVICES='0,,1' is malformed: empty entry (expected comma-separated GPU indices or "
      "UUIDs)");
  JOULE_EXPECT_ERROR(
      parse_visible_devices("CUDA_VISIBLE_DEVICES", "0,abc"), ErrorCode::kInvalidArgument,
      "CUDA_VISIBLE_DEVICES='0,abc' is malformed: 'abc' is neither a GPU index (0, 1, …) nor a UUID "
      "(GPU-… or MIG-…)");
  JOULE_EXPECT_ERROR(
      parse_visible_devices("CUDA_VISIBLE_DEVICES", "-1"), ErrorCode::kInvalidArgument,
      "CUDA_VISIBLE_DEVICES='-1' is malformed: '-1' is neither a GPU index (0, 1, …) nor a UUID (GPU-… "
      "or MIG-…)");
  JOULE_EXPECT_ERROR(parse_visible_devices("CUDA_VISIBLE_DEVICES", "1,1"), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES='1,1' lists GPU 1 twice");
  JOULE_EXPECT_ERROR(parse_visible_devices("HIP_VISIBLE_DEVICES", "GPU-"), ErrorCode::kInvalidArgument,
                     "HIP_VISIBLE_DEVICES='GPU-' is malformed: 'GPU-' has no UUID after 'GPU-'");
  JOULE_EXPECT_ERROR(parse_visible_devices("CUDA_VISIBLE_DEVICES", "0,MIG-"), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES='0,MIG-' is malformed: 'MIG-' has no UUID after 'MIG-'");
}

const std::vector<std::string> kMigUuids = {"MIG-1111aaaa-0000", "MIG-2222bbbb-0000", "MIG-1111cccc-0000"};

TEST(VisibleDevices, MigInstancesAreSelectedByTheirUuid) {
  const auto visible = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "MIG-2222,0,mig-1111c");
  // A MIG instance i is index physical_uuids.size() + i.
  EXPECT_EQ(*resolve_visible_devices(visible, kUuids, kMigUuids), (std::vector<int>{4, 0, 5}));
  // Unset: every GPU, then every MIG instance.
  const auto unset = *parse_visible_devices("CUDA_VISIBLE_DEVICES", nullptr);
  EXPECT_EQ(*resolve_visible_devices(unset, kUuids, kMigUuids), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(is_mig_uuid("mig-abc"));
  EXPECT_FALSE(is_mig_uuid("GPU-abc"));
}

TEST(VisibleDevices, MigUuidThatMatchesNothingSaysWhy) {
  const auto unknown = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "MIG-ffff");
  JOULE_EXPECT_ERROR(resolve_visible_devices(unknown, kUuids, kMigUuids), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names MIG-ffff, which matches no MIG instance's UUID (this "
                     "machine has 3 MIG instances: MIG mode may be off, or the instance was destroyed; "
                     "`nvidia-smi -L` lists them)");
  // Without MIG instances (MIG off, or another vendor's backend) the same entry is refused the same way.
  JOULE_EXPECT_ERROR(resolve_visible_devices(unknown, kUuids), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names MIG-ffff, which matches no MIG instance's UUID (this "
                     "machine has 0 MIG instances: MIG mode may be off, or the instance was destroyed; "
                     "`nvidia-smi -L` lists them)");
  const auto ambiguous = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "MIG-1111");
  JOULE_EXPECT_ERROR(resolve_visible_devices(ambiguous, kUuids, kMigUuids), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES entry 'MIG-1111' matches more than one MIG instance "
                     "(MIG-1111aaaa-0000 and MIG-1111cccc-0000)");
  const auto twice = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "MIG-2222,MIG-2222b");
  JOULE_EXPECT_ERROR(resolve_visible_devices(twice, kUuids, kMigUuids), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES selects MIG-2222bbbb-0000 twice");
  // A numeric index never reaches a MIG instance.
  const auto index = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "3");
  JOULE_EXPECT_ERROR(resolve_visible_devices(index, kUuids, kMigUuids), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 3, but this machine has 3 GPUs (indices 0 to 2)");
}

TEST(VisibleDevices, ResolutionErrors) {
  const auto out_of_range = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "0,3");
  JOULE_EXPECT_ERROR(resolve_visible_devices(out_of_range, kUuids), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 3, but this machine has 3 GPUs (indices 0 to 2)");
  const auto unknown = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "GPU-ffff");
  JOULE_EXPECT_ERROR(resolve_visible_devices(unknown, kUuids), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU-ffff, which matches no GPU's UUID");
  const auto ambiguous = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "GPU-aaaa");
  JOULE_EXPECT_ERROR(resolve_visible_devices(ambiguous, kUuids), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES entry 'GPU-aaaa' matches more than one GPU (GPU 0 and GPU 2)");
  const auto twice = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "1,GPU-bbbb");
  JOULE_EXPECT_ERROR(resolve_visible_devices(twice, kUuids), ErrorCode::kInvalidArgument,
                     "CUDA_VISIBLE_DEVICES selects GPU 1 twice");
}

TEST(VisibleDevices, EnvironmentPerBackend) {
  test::ScopedEnv cuda("CUDA_VISIBLE_DEVICES", "1");
  {
    test::ScopedEnv hip("HIP_VISIBLE_DEVICES", "2");
    EXPECT_EQ(*visible_devices_from_environment("rocm")->entries->at(0).index, 2);
    EXPECT_EQ(*visible_devices_from_environment("amdsmi")->entries->at(0).index, 2);
    EXPECT_EQ(*visible_devices_from_environment("nvml")->entries->at(0).index, 1);
    // Intel GPUs: no CUDA or HIP list applies (ZE_AFFINITY_MASK is the driver's).
    const auto levelzero = visible_devices_from_environment("levelzero");
    EXPECT_EQ(levelzero->variable, "ZE_AFFINITY_MASK");
    EXPECT_FALSE(levelzero->entries.has_value());
  }
  const auto rocm = visible_devices_from_environment("rocm");
  EXPECT_EQ(rocm->variable, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(*rocm->entries->at(0).index, 1);
}

}  // namespace
}  // namespace joule::device

namespace joule::device {
namespace {
TEST(VisibleDevices, IndexWithoutAnyGpu) {
  const auto visible = *parse_visible_devices("CUDA_VISIBLE_DEVICES", "0");
  JOULE_EXPECT_ERROR(resolve_visible_devices(visible, {}), ErrorCode::kNotFound,
                     "CUDA_VISIBLE_DEVICES names GPU 0, but this machine has no GPU");
}
}  // namespace
}  // namespace joule::device
