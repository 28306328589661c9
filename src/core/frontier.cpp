// SPDX-License-Identifier: Apache-2.0
// Being written.
#include "joule/core/frontier.hpp"
