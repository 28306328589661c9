// SPDX-License-Identifier: Apache-2.0
#include "store/contract_test.hpp"

namespace joule::store {

INSTANTIATE_TEST_SUITE_P(Local, StoreContract, ::testing::Values("memory", "sqlite"),
                         [](const auto& backend) { return backend.param; });
INSTANTIATE_TEST_SUITE_P(Local, DurableStoreContract, ::testing::Values("sqlite"),
                         [](const auto& backend) { return backend.param; });

}  // namespace joule::store
