// SPDX-License-Identifier: Apache-2.0
// Private helpers of the batch-size optimizer: Python-compatible number formatting (Zeus's messages embed
// Python reprs).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace joule::optimize::batch_size::detail {

/// @return Python's repr() of a float: shortest round-trip digits, "1.0" for integral values, exponent
/// form "1e-05" / "1.5e+16" outside [1e-4, 1e16), "inf", "-inf", "nan".
std::string python_float_repr(double value);

/// @return Python's repr() of a list of ints, e.g. "[8, 16, 32]".
std::string python_int_list(const std::vector<int64_t>& values);

/// @return Python's repr() of a str (single quotes unless the text holds a single quote and no double one).
std::string python_str_repr(std::string_view text);

}  // namespace joule::optimize::batch_size::detail
