// SPDX-License-Identifier: Apache-2.0
// The fixture of the Store contract tests (contract_test.cpp), parameterized by backend name.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "store_test_util.hpp"

namespace joule::store {

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    database_ = test::make_test_database(GetParam());
    store_ = test::open_or_throw(database_->url());
  }
  void TearDown() override { store_.reset(); }

  std::unique_ptr<test::TestDatabase> database_;
  std::unique_ptr<Store> store_;
};

/// The contract of stores whose data outlives the Store object and can be shared by several (not memory:).
class DurableStoreContract : public StoreContract {};

}  // namespace joule::store
