// SPDX-License-Identifier: Apache-2.0
// The service's LRU container (the caches of parsed jobs, succeeded trials and planned frontiers).
#include "server/lru_map.hpp"

#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace joule::server::detail {
namespace {

TEST(LruMap, FindsWhatWasPut) {
  LruMap<std::string, int> map(2);
  EXPECT_EQ(map.find("a"), nullptr);
  map.put("a", 1);
  ASSERT_NE(map.find("a"), nullptr);
  EXPECT_EQ(*map.find("a"), 1);
  map.put("a", 2);  // replaces
  EXPECT_EQ(*map.find("a"), 2);
  EXPECT_EQ(map.size(), 1U);
}

TEST(LruMap, DropsTheLeastRecentlyUsedBeyondCapacity) {
  LruMap<std::string, int> map(2);
  map.put("a", 1);
  map.put("b", 2);
  ASSERT_NE(map.find("a"), nullptr);  // a is now more recent than b
  map.put("c", 3);
  EXPECT_EQ(map.find("b"), nullptr);
  EXPECT_NE(map.find("a"), nullptr);
  EXPECT_NE(map.find("c"), nullptr);
  EXPECT_EQ(map.size(), 2U);
}

TEST(LruMap, ReplacingCountsAsAUse) {
  LruMap<std::string, int> map(2);
  map.put("a", 1);
  map.put("b", 2);
  map.put("a", 10);
  map.put("c", 3);
  EXPECT_EQ(map.find("b"), nullptr);
  ASSERT_NE(map.find("a"), nullptr);
  EXPECT_EQ(*map.find("a"), 10);
}

TEST(LruMap, CapacityZeroKeepsNothing) {
  LruMap<std::string, int> map(0);
  map.put("a", 1);
  EXPECT_EQ(map.find("a"), nullptr);
  EXPECT_EQ(map.size(), 0U);
}

TEST(LruMap, ErasesByKeyAndByPredicate) {
  LruMap<std::pair<std::string, int>, int> map(8);
  map.put({"job-1", 8}, 1);
  map.put({"job-1", 16}, 2);
  map.put({"job-2", 8}, 3);
  map.erase({"job-2", 8});
  map.erase({"job-3", 8});  // absent: nothing happens
  EXPECT_EQ(map.find({"job-2", 8}), nullptr);
  map.erase_if([](const std::pair<std::string, int>& key) { return key.first == "job-1"; });
  EXPECT_EQ(map.size(), 0U);
  map.put({"job-1", 8}, 4);  // the order list and the index stayed consistent
  map.put({"job-4", 8}, 5);
  EXPECT_EQ(map.size(), 2U);
  EXPECT_EQ(*map.find({"job-1", 8}), 4);
}

}  // namespace
}  // namespace joule::server::detail
