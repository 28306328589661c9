// SPDX-License-Identifier: Apache-2.0
#include "store/contract_test.hpp"

namespace joule::store {

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContract, ::testing::Values("postgres"),
                         [](const auto& backend) { return backend.param; });
INSTANTIATE_TEST_SUITE_P(Postgres, DurableStoreContract, ::testing::Values("postgres"),
                         [](const auto& backend) { return backend.param; });

}  // namespace joule::store
