// SPDX-License-Identifier: Apache-2.0
// Keeps joule_optimize non-empty until the optimizers land.
namespace joule::optimize {}
