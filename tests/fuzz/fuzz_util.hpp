// SPDX-License-Identifier: Apache-2.0
// What every fuzz target checks of a parser's failure: it is an Error with a message, never a crash.
#pragma once

#include <cstdlib>

#include "joule/core/error.hpp"

namespace joule::fuzz {

/// Aborts (a finding) if `result` failed without saying why.
template <typename T>
void require_message(const Result<T>& result) {
  if (!result && result.error().message().empty()) {
    std::abort();
  }
}

}  // namespace joule::fuzz
