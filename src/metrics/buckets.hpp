// SPDX-License-Identifier: Apache-2.0
// Histogram bucket bounds, checked once for every histogram family of joule::metrics.
#pragma once

#include <cmath>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "joule/core/error.hpp"

namespace joule::metrics {

/// @throws joule::Exception (kInvalidArgument) for no bound, or bounds not finite and strictly increasing.
inline void check_buckets(const std::vector<double>& buckets, std::string_view what) {
  if (buckets.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("{} buckets: at least one bound is needed", what));
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("{} buckets must be finite and strictly increasing (got {})", what,
                                  fmt::join(buckets, ", ")));
    }
  }
}

}  // namespace joule::metrics
