// SPDX-License-Identifier: Apache-2.0
// Private helpers of the batch-size optimizer: Python-compatible number formatting (Zeus's messages embed
// Python reprs) and numpy-compatible sums (arm fits must equal numpy's to the bit).
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

/// @return numpy's `np.sum` of a 1-D float64 array: pairwise summation (8 accumulators, blocks of 128) over
/// chunks of 8192 elements (the reduction's buffer size), added left to right from 0.
double numpy_sum(std::span<const double> values);

/// @return numpy's `np.var` (ddof 0): numpy_sum((x − m)²)/n with m = numpy_sum(x)/n.
double numpy_var(std::span<const double> values);

}  // namespace joule::optimize::batch_size::detail
