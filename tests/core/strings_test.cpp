// SPDX-License-Identifier: Apache-2.0
#include "joule/core/strings.hpp"

#include <gtest/gtest.h>

namespace joule {
namespace {

TEST(Strings, Trim) {
  EXPECT_EQ(trim("  a b \t\r\n"), "a b");
  EXPECT_EQ(trim(" \n\t"), "");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim("x"), "x");
}

TEST(Strings, LowerAndPrefix) {
  EXPECT_EQ(to_lower("V100-PCIe"), "v100-pcie");
  EXPECT_TRUE(starts_with_ignoring_case("GPU-abc", "gpu-"));
  EXPECT_TRUE(starts_with_ignoring_case("mig-1", "MIG-"));
  EXPECT_FALSE(starts_with_ignoring_case("GP", "GPU-"));
  EXPECT_TRUE(starts_with_ignoring_case("anything", ""));
}

}  // namespace
}  // namespace joule
